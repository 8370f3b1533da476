"""Claude Code's hooks: its events in, memory's context out, its transcript into a session.

The protocol (Claude Code's hooks reference, code.claude.com/docs/en/hooks, read 2026-11; the
fixtures in tests/fixtures/claude-code/ are written from it): a hook is a command given one
event as a JSON object on stdin, with `session_id`, `transcript_path`, `cwd`, `hook_event_name`
and the event's own fields (`prompt` for UserPromptSubmit, `trigger` for PreCompact, `reason`
for SessionEnd, `stop_hook_active` for Stop). Exit 0 and stdout is read: for UserPromptSubmit,
`{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": TEXT}}` puts
TEXT in front of the prompt. Exit 2 blocks the prompt (or the stop), so this module never asks
for it: whatever fails, the caller prints nothing on stdout and exits 0. Text a hook adds to the
context is capped at 10,000 characters (longer is saved to a file and replaced by a preview and
its path): CONTEXT_CHARS.

The transcript (`transcript_path`, ~/.claude/projects/<project>/<session>.jsonl) is JSON lines,
one a line, appended as the session goes: `type` "user" or "assistant" with `uuid`, `timestamp`
and `message` {`role`, `content`}: a string, or blocks ("text", "image", "tool_use",
"tool_result", "thinking"); other types ("summary", "system", "file-history-snapshot", ...) are
not messages. A user line whose blocks are tool results is the tool's output, not the user's;
`isMeta` lines are Claude Code's own notes, `isSidechain` ones a sub-agent's, and
`isCompactSummary` the summary a compaction wrote: none is a message of the conversation.
"""

from __future__ import annotations

import json
import shlex
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import orjson

from memctl.configfiles import json_object, json_text, memctl_argv, read_text, replace
from memctl.errors import InputError, MemctlError
from memctl.store.store import Store, check_name
from memctl.text.shape import Shape, hidden, shown

CLIENT = "claude-code"
CONTEXT_CHARS = 10_000  # Claude Code's cap on the text one hook adds to the context
PROMPT_EVENT = "UserPromptSubmit"
STORE_EVENTS = ("Stop", "PreCompact", "SessionEnd")  # the transcript's new messages are stored
EVENTS = (PROMPT_EVENT, *STORE_EVENTS)
# Seconds Claude Code gives the command before it ends it (its default is 60). The hook gives up
# sooner by itself ([hooks] timeout_seconds); this is the ceiling should memctl hang regardless.
CLIENT_TIMEOUT = 30
# What the client holds itself: the conversation so far. The prompt is given what it does not.
LEFT_OUT = ("recent", "unsplit")
HEADER = "Memory (memctl) for this prompt:\n\n"


class HookTimeout(MemctlError):
    """The hook ran out of its time ([hooks] timeout_seconds)."""


@dataclass
class Event:
    name: str
    session: str
    transcript: Path | None
    prompt: str = ""


@dataclass
class Answer(Shape):
    """What `memctl hooks run` prints: `stdout` for the client ("" for nothing), `note` one line on stderr."""

    event: str = shown("The hook event handled.")
    session: str = shown()
    stdout: str = hidden(default="")
    note: str = shown("What was done, one line.", default="")
    stored: int = shown("Messages of the transcript stored.", default=0)
    context_chars: int = shown("Characters of context given to the prompt.", default=0)

    key_order = ("event", "session", "stored", "context_chars", "note")


def parse_event(data: bytes) -> Event:
    """The event on stdin, checked: InputError naming the field otherwise."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"the hook event is not JSON ({exc})", source="<stdin>") from None
    if not isinstance(value, dict):
        raise InputError("the hook event is not a JSON object", source="<stdin>")
    name = value.get("hook_event_name")
    if name not in EVENTS:
        raise InputError(f"not an event memctl handles ({', '.join(EVENTS)}), got {name!r:.60}",
                         source="<stdin>", field="hook_event_name")
    session = check_name(value.get("session_id"), "session", source="<stdin>")
    transcript = value.get("transcript_path")
    if transcript is not None and not isinstance(transcript, str):
        raise InputError("must be a path", source="<stdin>", field="transcript_path")
    prompt = value.get("prompt", "")
    if name == PROMPT_EVENT and not isinstance(prompt, str):
        raise InputError("must be text", source="<stdin>", field="prompt")
    return Event(name, session, Path(transcript) if transcript else None, prompt if isinstance(prompt, str) else "")


def run(data: bytes, *, store: Store, budget: int, timeout: float, max_text_bytes: int,
        context: Callable[..., Any], ingest: Callable[..., Any]) -> Answer:
    """Handle one event within `timeout` seconds: UserPromptSubmit gets memory's context for its
    prompt (`context`: Memory.context), the others store the transcript's new messages
    (`ingest`: Memory.ingest). Raises MemctlError (HookTimeout too) or OSError on failure."""
    event = parse_event(data)
    with deadline(timeout):
        if event.name == PROMPT_EVENT:
            return _prompt_context(event, store, budget, context)
        return _store_transcript(event, store, max_text_bytes, ingest)


def _prompt_context(event: Event, store: Store, budget: int, context: Callable[..., Any]) -> Answer:
    answer = Answer(event.name, event.session)
    if not event.prompt.strip():
        answer.note = "memctl: an empty prompt; no context"
        return answer
    store.require()
    built = context(event.session, event.prompt, budget=budget, new_session=True, leave_out=LEFT_OUT)
    text = built.text.strip()
    if not text:
        answer.note = "memctl: memory holds nothing for this prompt"
        return answer
    text = clipped(HEADER + text, CONTEXT_CHARS)
    answer.context_chars = len(text)
    answer.stdout = json.dumps({"hookSpecificOutput": {"hookEventName": PROMPT_EVENT, "additionalContext": text}},
                               ensure_ascii=False) + "\n"
    answer.note = f"memctl: {built.tokens} tokens of memory for the prompt"
    return answer


def clipped(text: str, most: int) -> str:
    """`text` if it has at most `most` characters, else its whole lines that fit: the context is
    rendered most important first, so what goes is at its end."""
    if len(text) <= most:
        return text
    cut = text.rfind("\n", 0, most)
    return text[:cut if cut > 0 else most].rstrip() + "\n"


# -- the transcript ------------------------------------------------------------------------
def progress_file(store: Store, session: str) -> Path:
    """Where the store keeps how far a session's transcript has been read."""
    return store.path("hooks", CLIENT, f"{check_name(session, 'session')}.json")


def _store_transcript(event: Event, store: Store, max_text_bytes: int, ingest: Callable[..., Any]) -> Answer:
    answer = Answer(event.name, event.session)
    if event.transcript is None:
        answer.note = "memctl: the event names no transcript; nothing stored"
        return answer
    place = progress_file(store, event.session)
    offset = _offset(place, event.transcript)
    lines, end = new_lines(event.transcript, offset)
    records = [message for line in lines if (message := transcript_message(line, max_text_bytes)) is not None]
    if records:
        data = b"".join(orjson.dumps(r) + b"\n" for r in records)
        result = ingest(data, source=str(event.transcript), fmt="jsonl", kind="message", session=event.session)
        answer.stored = len(result.stored)
    if end != offset:
        with store.transaction() as tx:
            tx.replace(place, orjson.dumps({"transcript": str(event.transcript), "offset": end}) + b"\n")
    answer.note = f"memctl: stored {answer.stored} new message(s) of session {event.session}"
    return answer


def _offset(place: Path, transcript: Path) -> int:
    """Bytes of `transcript` read by the last run; 0 for another transcript or a shorter one (it
    was rewritten: every line is read again, and each stored one is known by its id)."""
    try:
        kept = orjson.loads(place.read_bytes())
        offset = int(kept["offset"]) if kept.get("transcript") == str(transcript) else 0
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return 0
    try:
        return offset if 0 <= offset <= transcript.stat().st_size else 0
    except OSError:
        return 0


def new_lines(transcript: Path, offset: int) -> tuple[list[bytes], int]:
    """The whole lines of `transcript` after byte `offset`, and where they end: a line still being
    written (no newline yet) is left for the next run."""
    with open(transcript, "rb") as file:
        file.seek(offset)
        data = file.read()
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(), offset + end


def transcript_message(line: bytes, max_text_bytes: int) -> dict | None:
    """One transcript line as a message to store ({"id": its uuid, "role", "ts", "text"}), or None
    for a line that is no message of the conversation (see the module doc). Images and documents
    are named ("[image: image/png]"), not stored; a text over [ingest] max_text_bytes is cut there."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None  # a torn or foreign line: the transcript is the client's, not ours to judge
    if not isinstance(value, dict) or value.get("type") not in ("user", "assistant"):
        return None
    if value.get("isMeta") or value.get("isSidechain") or value.get("isCompactSummary"):
        return None
    uuid, message = value.get("uuid"), value.get("message")
    if not isinstance(uuid, str) or not isinstance(message, dict):
        return None
    text = _text_of(message.get("content"))
    if not text.strip():
        return None
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) > max_text_bytes:
        text = encoded[:max_text_bytes - 8].decode("utf-8", "ignore") + " […]"
    record = {"id": uuid, "role": value["type"], "text": text}
    if isinstance(value.get("timestamp"), str):
        record["ts"] = value["timestamp"]
    return record


def _text_of(content: Any) -> str:
    """The said text of a message's content: its text blocks; an image or document is named;
    tool calls, tool results and thinking are not what was said."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind in ("image", "document"):
            source = block.get("source") if isinstance(block.get("source"), dict) else {}
            parts.append(f"[{kind}: {source.get('media_type') or 'attached'}]")
    return "\n\n".join(p for p in parts if p.strip())


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise HookTimeout in the body after `seconds` (a store lock held by a long rebuild is waited
    for no longer). On the main thread only, where signals arrive (the command line and the
    resident server run calls there); elsewhere the body runs unbounded. An interrupted write is
    rolled back by the store's journal, as after a kill."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(_signum, _frame):
        raise HookTimeout(f"no answer within [hooks] timeout_seconds ({seconds:g} s); the prompt goes on "
                          "without memory")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- settings.json --------------------------------------------------------------------------
@dataclass
class Setup(Shape):
    """What `install` or `uninstall` did (or, dry, would do) to a settings file."""

    client: str = shown()
    path: Path = shown("The settings file.")
    command: str = shown("The hook command.")
    status: Literal["added", "removed", "unchanged"] = shown()
    events: list[str] = shown("The events whose entries were added or removed.", default_factory=list)
    backup: Path | None = shown("The copy of the file before the change, or null.", default=None)


def settings_path(*, settings: str | None = None, project: bool = False, home: Path | None = None,
                  environ: dict[str, str] | None = None) -> Path:
    """The settings file hooks go in: `settings`, else the project's .claude/settings.json (the
    working directory's) with `project`, else the user's: $CLAUDE_CONFIG_DIR/settings.json,
    ~/.claude/settings.json by default."""
    import os

    if settings:
        return Path(settings)
    if project:
        return Path(".claude") / "settings.json"
    environ = os.environ if environ is None else environ
    base = environ.get("CLAUDE_CONFIG_DIR") or (home or Path.home()) / ".claude"
    return Path(base) / "settings.json"


def hook_command(store: Path) -> str:
    """The command each event runs: this memctl, by absolute paths, on `store`."""
    return shlex.join(memctl_argv(store, "hooks", "run", CLIENT))


def _ours(handler: Any, command: str) -> bool:
    return isinstance(handler, dict) and handler.get("type") == "command" and handler.get("command") == command


def install(path: Path, store: Path, *, dry_run: bool = False, remove: bool = False) -> Setup:
    """Add memctl's hook for `store` to every event of EVENTS in the settings file at `path`
    (`remove`: take exactly those entries out again), keeping every other key and hook. Each
    entry is a group of its own, {"hooks": [{"type": "command", "command", "timeout"}]}, so
    removing it leaves the user's groups as they were. Idempotent; a file that is not a JSON
    object with an object "hooks" is refused (InputError), nothing written."""
    command = hook_command(store)
    old = read_text(path)
    document = json_object(old, str(path), container="hooks")
    hooks = document.get("hooks", {})
    for event in EVENTS:
        if not isinstance(hooks.get(event, []), list):
            raise InputError(f"expected \"hooks\".\"{event}\" to be a list; nothing was written", source=str(path))
    setup = Setup(CLIENT, path, command, "unchanged")
    for event in EVENTS:
        groups = hooks.get(event, [])
        has = any(isinstance(g, dict) and any(_ours(h, command) for h in g.get("hooks", []) or [])
                  for g in groups)
        if remove and has:
            kept = []
            for group in groups:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                if isinstance(handlers, list) and any(_ours(h, command) for h in handlers):
                    handlers = [h for h in handlers if not _ours(h, command)]
                    if not handlers and set(group) <= {"hooks", "matcher"}:
                        continue  # the group was ours alone
                    group = {**group, "hooks": handlers}
                kept.append(group)
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
            setup.events.append(event)
        elif not remove and not has:
            hooks.setdefault(event, []).append({"hooks": [{"type": "command", "command": command,
                                                           "timeout": CLIENT_TIMEOUT}]})
            setup.events.append(event)
    if not setup.events:
        return setup
    setup.status = "removed" if remove else "added"
    if remove and not hooks:
        document.pop("hooks", None)
    elif not remove:
        document["hooks"] = hooks
    if not dry_run:
        setup.backup = replace(path, json_text(document))
    return setup
