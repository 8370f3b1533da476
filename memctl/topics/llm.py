"""Split with any LLM command (T10): the prompt on stdin, the design 001 §6.4 XML on stdout.

The command is run without a shell (split like a shell would); long inputs go
in batches of [topics] llm_batch messages, each with the current topic list
(new topics of earlier batches included, their id "new:<name>"). Answers are checked strictly:
every message of the batch exactly once, known ids only, one of the three
kinds of assignment. Anything else raises LLMAnswerError naming the batch
and what was wrong, before anything is written.

The prompt template ships as memctl/topics/prompts/split.md; a store may
override it with prompts/split.md in the store. `{topics}` and `{messages}`
are filled in.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import xml.etree.ElementTree as ElementTree
from importlib import resources

from memctl.errors import MemctlError
from memctl.store.store import Store
from memctl.topics.files import Topic

KINDS = ("existing_active", "existing_inactive", "new")


class LLMAnswerError(MemctlError):
    """The LLM command failed or answered something that cannot be applied; nothing was written."""


def template(store: Store, name: str) -> str:
    override = store.root / "prompts" / f"{name}.md"
    if override.exists():
        return override.read_text(encoding="utf-8")
    return resources.files(__package__).joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")


def chooser(store: Store, command: str, timeout: float, batch: int):
    argv = shlex.split(command)
    if not argv:
        raise MemctlError("the LLM command is empty; give --llm CMD or [topics] llm_command")
    prompt_template = template(store, "split")

    def choose(messages: list[dict], topics: dict[str, Topic]) -> list[tuple[str, str | None, str | None]]:
        listed = {tid: (t.header.get("name", ""), t.header.get("summary", ""), t.state)
                  for tid, t in topics.items() if t.state != "archived"}
        chosen: list[tuple[str, str | None, str | None]] = []
        for first in range(0, len(messages), batch):
            part = messages[first:first + batch]
            where = f"LLM batch {first // batch + 1} (messages {first + 1}-{first + len(part)})"
            fill = {"{topics}": _topic_list(listed), "{messages}": _message_list(part)}
            prompt = re.sub(r"\{topics\}|\{messages\}", lambda match: fill[match.group()], prompt_template)
            answer = _ask(argv, prompt, timeout, where)
            picked = parse(answer, [m["id"] for m in part], listed, where)
            for key, name, summary in picked:
                if key.startswith("new:") and key not in listed:
                    listed[key] = (name or "", summary or "", "active")
            chosen += picked
        return chosen

    return choose


def _topic_list(listed: dict) -> str:
    if not listed:
        return "(none)"
    lines = []
    for tid, (name, summary, state) in listed.items():
        lines.append(f'<topic id="{tid}" state="{state}" name="{name}">\n{summary}\n</topic>')
    return "\n".join(lines)


def _message_list(messages: list[dict]) -> str:
    return "\n".join(f'<message id="{m["id"]}" role="{m.get("role", "")}" speaker="{m.get("speaker", "")}" '
                     f'ts="{m.get("ts", "")}">\n{m.get("text", "")}\n</message>' for m in messages)


def _ask(argv: list[str], prompt: str, timeout: float, where: str) -> str:
    try:
        done = subprocess.run(argv, input=prompt.encode(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LLMAnswerError(f"{where}: '{argv[0]}' gave no answer within {timeout:g} s "
                             "([topics] llm_timeout); nothing was split") from None
    except OSError as exc:
        raise LLMAnswerError(f"{where}: cannot run '{argv[0]}': {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise LLMAnswerError(f"{where}: '{argv[0]}' exited with status {done.returncode}"
                             + (f": {said[-1]}" if said else "") + "; nothing was split")
    return done.stdout.decode("utf-8", errors="replace")


def parse(answer: str, message_ids: list[str], listed: dict, where: str) -> list[tuple[str, str | None, str | None]]:
    """(topic key, name, summary) per message, in message order: an existing id or "new:<name>"."""
    start, end = answer.find("<topic_split"), answer.rfind("</topic_split>")
    if start < 0 or end < 0:
        raise LLMAnswerError(f"{where}: the answer has no <topic_split>…</topic_split> element"
                             + (" (it was empty)" if not answer.strip() else "") + "; nothing was split")
    try:
        root = ElementTree.fromstring(answer[start:end + len("</topic_split>")])
    except ElementTree.ParseError as exc:
        raise LLMAnswerError(f"{where}: the <topic_split> XML is malformed ({exc}); nothing was split") from None
    wanted = set(message_ids)
    found: dict[str, tuple[str, str | None, str | None]] = {}
    for number, item in enumerate(root, 1):
        what = f"{where}: assignment {number}"
        if item.tag != "assignment":
            raise LLMAnswerError(f"{what}: unexpected element <{item.tag}>; nothing was split")
        message_id, kind = item.get("msg_id"), item.get("topic")
        if message_id not in wanted:
            raise LLMAnswerError(f"{what}: msg_id {message_id!r} is not a message of this batch; nothing was split")
        if message_id in found:
            raise LLMAnswerError(f"{what}: message {message_id} is assigned twice; nothing was split")
        if kind not in KINDS:
            raise LLMAnswerError(f"{what}: topic={kind!r} must be one of {', '.join(KINDS)}; nothing was split")
        if kind == "new":
            name = (item.get("topic_name") or "").strip()
            if not name:
                raise LLMAnswerError(f"{what}: a new topic needs topic_name; nothing was split")
            summary = item.find("summary")
            found[message_id] = (f"new:{name}", name, (summary.text or "").strip() if summary is not None else None)
        else:
            topic_id = item.get("topic_id")
            if topic_id not in listed:
                raise LLMAnswerError(f"{what}: topic_id {topic_id!r} is not a known topic; nothing was split")
            found[message_id] = (topic_id, None, None)
    missing = [m for m in message_ids if m not in found]
    if missing:
        raise LLMAnswerError(f"{where}: the answer assigns {len(found)} of {len(message_ids)} messages; "
                             f"missing {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}; nothing was split")
    return [found[m] for m in message_ids]
