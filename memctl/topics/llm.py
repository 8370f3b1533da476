"""Any LLM command (T10): a prompt on stdin, a strictly checked answer on stdout.

The command is run without a shell (split like a shell would). Every prompt
is a template shipped in memctl/topics/prompts/ that a store may override
with prompts/<name>.md; `{name}` placeholders are filled in one pass, so a
message that happens to contain "{summary}" stays as it was written.

- Split (design 001 §6.4, prompts/split.md): long inputs go in batches of
  [topics] llm_batch messages, each with the current topic list (new topics
  of earlier batches included, their id "new:<name>"). Every message of the
  batch exactly once, known ids only, one of the three kinds of assignment.
- Summary (prompts/summary.md): after a split, each topic it touched gets its
  name and summary from the LLM (shown its current name and summary and the
  messages the split added), [topics] llm_parallel at once; the answer is
  one <topic> with one non-empty <name> (one line, at most NAME_CHARS) and one
  non-empty <summary> within [topics] summary_bytes.
- Routing (design 001 §6.3, prompts/route.md) for `topics activate`: one
  <topic_routing> with one <matched_topics> of <topic id relevance> elements,
  listed ids only, each once, relevance high | medium | low.
- Daily review (prompts/review.md, prompts/compress.md): one <topic_review>
  of <merge topic_id into> and <related topic_id with> elements; per topic to
  compress, one <topic> with a <summary> within the compressed budget and an
  <importance> from 0 to 1.

Anything else raises LLMAnswerError naming the call and what was wrong.
The commands that write what the LLM said (split, the daily review) then
write nothing; `topics activate` (like the §6.1 evaluation in evaluate.py)
falls back to the built-in method and reports why.

The same holds for a command that outruns [topics] llm_timeout (its whole
process group is killed), prints more than programs.OUTPUT_LIMIT (1 MiB) or
answers with a DOCTYPE or an entity declaration. Answers are read in linear
time: the finders below scan left to right once, and the <topic_split> XML
goes through expat with no DTD, so no entity is declared, let alone expanded.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, Callable, NamedTuple
from xml.sax.saxutils import escape, quoteattr, unescape

from memctl.errors import MemctlError
from memctl.programs import ProgramFailed, program_argv, run_program
from memctl.store.store import Store, read_file
from memctl.store.topicfile import Topic

KINDS = ("existing_active", "existing_inactive", "new")
NAME_CHARS = 80


class LLMAnswerError(MemctlError):
    """The LLM command failed or answered something that cannot be applied; nothing was written."""


def command_argv(command: str) -> list[str]:
    return program_argv(command, "the LLM command (--llm or [topics] llm_command)")


def template(store: Store, name: str) -> str:
    override = store.path("prompts", f"{name}.md")
    if override.exists():
        return read_file(override).decode("utf-8")
    return resources.files(__package__).joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")


def fill(prompt_template: str, values: dict[str, str]) -> str:
    """The template with each `{key}` of `values` replaced, in one pass (inserted text is not rescanned)."""
    pattern = re.compile("|".join(re.escape("{" + key + "}") for key in values))
    return pattern.sub(lambda match: values[match.group()[1:-1]], prompt_template)


def elements(text: str, tag: str) -> list[str]:
    """The contents of every <tag>…</tag> in `text` (not nested). One pass: each search starts where
    the last one ended (the regex `<tag>(.*?)</tag>` rescanned the rest from every unclosed <tag>,
    so an answer of 84 KB took half a minute)."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    found = []
    start = text.find(opening)
    while start >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            break  # no later <tag> is closed either
        found.append(text[start + len(opening):end])
        start = text.find(opening, end + len(closing))
    return found


def attributed_elements(text: str, tags: tuple[str, ...]) -> tuple[list[tuple[str, str, str]], str]:
    """(tag, attributes, content) of every <tag attributes>content</tag> in `text` whose tag is one
    of `tags`, in order, and the text outside them. One pass, as in `elements`."""
    opening = re.compile("<(" + "|".join(map(re.escape, tags)) + r")\s")
    found: list[tuple[str, str, str]] = []
    outside: list[str] = []
    unclosed: set[str] = set()
    done = position = 0
    while match := opening.search(text, position):
        tag = match.group(1)
        position = match.start() + 1
        if tag in unclosed:
            continue
        head_end = text.find(">", match.end())
        if head_end < 0:
            break  # no later opening tag ends either
        end = text.find(f"</{tag}>", head_end + 1)
        if end < 0:
            unclosed.add(tag)  # nor is any later <tag> closed
            continue
        outside.append(text[done:match.start()])
        found.append((tag, text[match.end():head_end], text[head_end + 1:end]))
        done = position = end + len(f"</{tag}>")
    outside.append(text[done:])
    return found, "".join(outside)


def only_element(answer: str, tag: str, where: str) -> str:
    """The content of the answer's one <tag>…</tag>; LLMAnswerError when it has none or several."""
    found = elements(answer, tag)
    if len(found) != 1:
        raise LLMAnswerError(f"{where}: " + (f"the answer has {len(found)} <{tag}> elements, not one" if found else
                             f"the answer has no <{tag}>…</{tag}> element"
                             + (" (it was empty)" if not answer.strip() else "")))
    return found[0]


def only_fraction(body: str, tag: str, where: str) -> float:
    """The number in the body's one <tag>, from 0 to 1; LLMAnswerError otherwise."""
    found = elements(body, tag)
    try:
        value = float(found[0].strip()) if len(found) == 1 else None
    except ValueError:
        value = None
    if value is None or not 0 <= value <= 1:
        raise LLMAnswerError(f"{where}: <{tag}> must be one number from 0 to 1, got {found!r}")
    return value


def chooser(store: Store, command: str, timeout: float, batch: int):
    argv = command_argv(command)
    prompt_template = template(store, "split")

    def choose(messages: list[dict], topics: dict[str, Topic]) -> list[tuple[str, str | None, str | None]]:
        listed = {tid: (t.header.get("name", ""), t.header.get("summary", ""), t.state)
                  for tid, t in topics.items() if t.state != "archived"}
        chosen: list[tuple[str, str | None, str | None]] = []
        for first in range(0, len(messages), batch):
            part = messages[first:first + batch]
            where = f"LLM batch {first // batch + 1} (messages {first + 1}-{first + len(part)})"
            prompt = fill(prompt_template, {"topics": topic_list(listed), "messages": message_list(part)})
            answer = ask(argv, prompt, timeout, where)
            picked = parse(answer, [m["id"] for m in part], listed, where)
            for key, name, summary in picked:
                if key.startswith("new:") and key not in listed:
                    listed[key] = (name or "", summary or "", "active")
            chosen += picked
        return chosen

    return choose


def topic_list(listed: dict) -> str:
    """id -> (name, summary, state) as the prompts list topics."""
    if not listed:
        return "(none)"
    lines = []
    for tid, (name, summary, state) in listed.items():
        lines.append(f'<topic id={quoteattr(tid)} state={quoteattr(state)} name={quoteattr(name)}>\n'
                     f'{escape(summary)}\n</topic>')
    return "\n".join(lines)


def message_list(messages: list[dict]) -> str:
    return "\n".join(f'<message id={quoteattr(m["id"])} role={quoteattr(m.get("role") or "")} '
                     f'speaker={quoteattr(m.get("speaker") or "")} ts={quoteattr(m.get("ts") or "")}>\n'
                     f'{escape(m.get("text", ""))}\n</message>' for m in messages)


# DOCTYPE and entity declarations: nothing memctl asks for, and the way to entity expansion.
_DECLARATION = re.compile(r"<!\s*(?:DOCTYPE|ENTITY)", re.I)


def ask(argv: list[str], prompt: str, timeout: float, where: str) -> str:
    """The command's answer to `prompt`; LLMAnswerError if it fails, takes longer than `timeout`
    (its whole process group is killed), prints more than programs.OUTPUT_LIMIT bytes or answers
    with a DOCTYPE or entity declaration."""
    try:
        answer = run_program(argv, prompt.encode(), timeout).decode("utf-8", errors="replace")
    except ProgramFailed as exc:
        raise LLMAnswerError(f"{where}: {exc}" + (" ([topics] llm_timeout)" if exc.timed_out else "")) from None
    if _DECLARATION.search(answer):
        raise LLMAnswerError(f"{where}: the answer declares a DOCTYPE or an entity, which memctl refuses")
    return answer


def parse(answer: str, message_ids: list[str], listed: dict, where: str) -> list[tuple[str, str | None, str | None]]:
    """(topic key, name, summary) per message, in message order: an existing id or "new:<name>"."""
    start, end = answer.find("<topic_split"), answer.rfind("</topic_split>")
    if start < 0 or end < 0:
        raise LLMAnswerError(f"{where}: the answer has no <topic_split>…</topic_split> element"
                             + (" (it was empty)" if not answer.strip() else "") + "")
    try:
        root = ElementTree.fromstring(answer[start:end + len("</topic_split>")])
    except ElementTree.ParseError as exc:
        raise LLMAnswerError(f"{where}: the <topic_split> XML is malformed ({exc})") from None
    wanted = set(message_ids)
    found: dict[str, tuple[str, str | None, str | None]] = {}
    for number, item in enumerate(root, 1):
        what = f"{where}: assignment {number}"
        if item.tag != "assignment":
            raise LLMAnswerError(f"{what}: unexpected element <{item.tag}>")
        message_id, kind = item.get("msg_id"), item.get("topic")
        if message_id not in wanted:
            raise LLMAnswerError(f"{what}: msg_id {message_id!r} is not a message of this batch")
        if message_id in found:
            raise LLMAnswerError(f"{what}: message {message_id} is assigned twice")
        if kind not in KINDS:
            raise LLMAnswerError(f"{what}: topic={kind!r} must be one of {', '.join(KINDS)}")
        if kind == "new":
            name = (item.get("topic_name") or "").strip()
            if not name:
                raise LLMAnswerError(f"{what}: a new topic needs topic_name")
            summary = item.find("summary")
            found[message_id] = (f"new:{name}", name, (summary.text or "").strip() if summary is not None else None)
        else:
            topic_id = item.get("topic_id")
            if topic_id not in listed:
                raise LLMAnswerError(f"{what}: topic_id {topic_id!r} is not a known topic")
            found[message_id] = (topic_id, None, None)
    missing = [m for m in message_ids if m not in found]
    if missing:
        raise LLMAnswerError(f"{where}: the answer assigns {len(found)} of {len(message_ids)} messages; "
                             f"missing {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}")
    return [found[m] for m in message_ids]


# -- the summary prompt ---------------------------------------------------------------------

class Draft(NamedTuple):
    """A topic to describe or compress."""
    label: str            # names it in errors: its id
    messages: list[dict]  # all its messages
    added: list[dict]     # the ones added since `summary` was written (all, for a new topic)
    name: str
    summary: str


Describer = Callable[[list[Draft]], list[tuple[str, str]]]


def in_parallel(one: Callable[[Draft], Any], drafts: list[Draft], parallel: int) -> list[Any]:
    """`one` of each draft, `parallel` at once, in draft order; the first failure in that order raises."""
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(drafts)))) as pool:
        futures = [pool.submit(one, draft) for draft in drafts]
    return [future.result() for future in futures]


def describer(store: Store, command: str, timeout: float, parallel: int, budget: int) -> Describer:
    """(name, summary) for each draft from the summary prompt: the current name and summary and the
    messages added since (a topic's summary carries the earlier ones, so a call costs what the split
    added, not the whole topic). The first bad answer, in draft order, raises LLMAnswerError."""
    argv = command_argv(command)
    prompt_template = template(store, "summary")

    def one(draft: Draft) -> tuple[str, str]:
        where = f"LLM summary of topic {draft.label}"
        prompt = fill(prompt_template, {"name": draft.name or "(none yet)", "summary": draft.summary or "(none yet)",
                                        "budget": str(budget), "messages": message_list(draft.added)})
        return parse_summary(ask(argv, prompt, timeout, where), budget, where)

    return lambda drafts: in_parallel(one, drafts, parallel)


def parse_summary(answer: str, budget: int, where: str) -> tuple[str, str]:
    """(name, summary) from `<topic><name>…</name><summary>…</summary></topic>`."""
    body = only_element(answer, "topic", where)
    names, summaries = elements(body, "name"), elements(body, "summary")
    if len(names) != 1 or not names[0].strip() or "\n" in names[0].strip():
        raise LLMAnswerError(f"{where}: <topic> needs exactly one <name> of one non-empty line")
    name = unescape(names[0].strip())
    if len(name) > NAME_CHARS:
        raise LLMAnswerError(f"{where}: <name> has {len(name)} characters, over {NAME_CHARS}")
    if len(summaries) != 1 or not summaries[0].strip():
        raise LLMAnswerError(f"{where}: <topic> needs exactly one non-empty <summary>")
    summary = unescape(summaries[0].strip())
    size = len(summary.encode())
    if size > budget:
        raise LLMAnswerError(f"{where}: <summary> has {size} bytes, over [topics] summary_bytes ({budget})")
    return name, summary


# -- the routing prompt (design 001 §6.3) ---------------------------------------------------------

RELEVANCE = {"high": 0.7, "medium": 0.5, "low": 0.3}   # design §4.2: clearly, moderately, maybe weakly related
# \b: a match starts only where a word does (else every letter of a long word is tried, in
# quadratic time).
_ATTRIBUTE = re.compile(r'\b(\w+)\s*=\s*"([^"]*)"')


def route(store: Store, command: str, timeout: float, request: str,
          candidates: dict[str, Topic]) -> tuple[list[tuple[str, str, str]], str]:
    """The §6.3 routing prompt over `candidates`: ([(topic id, relevance, reason)] in the answer's
    order, the no-match reason); LLMAnswerError when the answer is not exactly that."""
    where = "LLM routing"
    prompt = fill(template(store, "route"), {"request": escape(request),
                                             "topics": _listed(candidates, sizes=False) or "(none)"})
    return parse_routing(ask(command_argv(command), prompt, timeout, where), set(candidates), where)


def _listed(topics: dict[str, Topic], sizes: bool) -> str:
    """The topics as the routing and review prompts show them: a <topic> with its summary each."""
    return "\n".join(
        f'<topic id={quoteattr(tid)} name={quoteattr(t.header.get("name", ""))} state={quoteattr(t.state)} '
        f'updated={quoteattr(t.header.get("updated", ""))}' + (f' messages="{len(t.messages)}"' if sizes else "")
        + f'>\n{escape(t.header.get("summary", ""))}\n</topic>' for tid, t in topics.items())


def parse_routing(answer: str, known: set[str], where: str) -> tuple[list[tuple[str, str, str]], str]:
    body = only_element(answer, "topic_routing", where)
    lists = elements(body, "matched_topics")
    if len(lists) != 1:
        raise LLMAnswerError(f"{where}: <topic_routing> needs exactly one <matched_topics>, found {len(lists)}")
    routed, left = attributed_elements(lists[0], ("topic",))
    if left.strip():
        raise LLMAnswerError(f"{where}: <matched_topics> holds something other than <topic> elements: "
                             f"{left.strip()[:60]!r}")
    matches: list[tuple[str, str, str]] = []
    for number, (_, attributes, reason) in enumerate(routed, 1):
        values = dict(_ATTRIBUTE.findall(attributes))
        topic_id, relevance = values.get("id"), values.get("relevance")
        if topic_id not in known:
            raise LLMAnswerError(f"{where}: match {number}: id {topic_id!r} is not one of the listed topics")
        if relevance not in RELEVANCE:
            raise LLMAnswerError(f"{where}: match {number}: relevance={relevance!r} must be one of high, medium, low")
        if any(topic_id == m[0] for m in matches):
            raise LLMAnswerError(f"{where}: match {number}: topic {topic_id} is matched twice")
        matches.append((topic_id, relevance, unescape(reason.strip())))
    reasons = elements(body, "no_match_reason")
    return matches, unescape(reasons[0].strip()) if reasons else ""


# -- the daily review: merges, related topics, compressed summaries ------------------------------

def review_links(store: Store, command: str, timeout: float,
                 topics: dict[str, Topic]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The review prompt over `topics`: ([(merged id, kept id, reason)], [(id, related id, reason)])."""
    where = "LLM review of the topics"
    prompt = fill(template(store, "review"), {"topics": _listed(topics, sizes=True)})
    return parse_review(ask(command_argv(command), prompt, timeout, where), set(topics), where)


def parse_review(answer: str, known: set[str], where: str):
    body = only_element(answer, "topic_review", where)
    reviewed, left = attributed_elements(body, ("merge", "related"))
    if left.strip():
        raise LLMAnswerError(f"{where}: <topic_review> holds something other than <merge> and <related>: "
                             f"{left.strip()[:60]!r}")
    merges: list[tuple[str, str, str]] = []
    related: list[tuple[str, str, str]] = []
    # What was merged and linked so far, as sets: a 1 MiB answer holds tens of thousands of elements.
    merged_away: set[str] = set()
    kept: set[str] = set()
    pairs: set[frozenset[str]] = set()
    for number, (kind, attributes, reason) in enumerate(reviewed, 1):
        values = dict(_ATTRIBUTE.findall(attributes))
        other_key = "into" if kind == "merge" else "with"
        one, other = values.get("topic_id"), values.get(other_key)
        what = f"{where}: <{kind}> {number}"
        for key, value in (("topic_id", one), (other_key, other)):
            if value not in known:
                raise LLMAnswerError(f"{what}: {key}={value!r} is not one of the listed topics")
        if one == other:
            raise LLMAnswerError(f"{what}: a topic cannot be {'merged into' if kind == 'merge' else 'related to'} itself")
        if kind == "merge":
            if one in merged_away:
                raise LLMAnswerError(f"{what}: {one} is merged away twice")
            if other in merged_away or one in kept:
                raise LLMAnswerError(f"{what}: a topic merged away cannot take another topic's messages")
            merged_away.add(one)
            kept.add(other)
            merges.append((one, other, unescape(reason.strip())))
        else:
            if frozenset((one, other)) in pairs:
                raise LLMAnswerError(f"{what}: {one} and {other} are related twice")
            pairs.add(frozenset((one, other)))
            related.append((one, other, unescape(reason.strip())))
    return merges, related


def compressor(store: Store, command: str, timeout: float, parallel: int,
               budget: int) -> Callable[[list[Draft]], list[tuple[str, float]]]:
    """(compressed summary, importance) for each draft from the compress prompt, `parallel` at once."""
    argv = command_argv(command)
    prompt_template = template(store, "compress")

    def one(draft: Draft) -> tuple[str, float]:
        where = f"LLM compression of topic {draft.label}"
        prompt = fill(prompt_template, {"name": draft.name, "summary": draft.summary, "budget": str(budget),
                                        "messages": message_list(draft.messages)})
        return parse_compressed(ask(argv, prompt, timeout, where), budget, where)

    return lambda drafts: in_parallel(one, drafts, parallel)


def parse_compressed(answer: str, budget: int, where: str) -> tuple[str, float]:
    body = only_element(answer, "topic", where)
    summaries = elements(body, "summary")
    if len(summaries) != 1 or not summaries[0].strip():
        raise LLMAnswerError(f"{where}: <topic> needs exactly one non-empty <summary>")
    summary = unescape(summaries[0].strip())
    if len(summary.encode()) > budget:
        raise LLMAnswerError(f"{where}: <summary> has {len(summary.encode())} bytes, over the compressed "
                             f"budget ({budget})")
    return summary, only_fraction(body, "importance", where)
