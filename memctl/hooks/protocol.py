"""What every client's hooks share: an event in, memory's context out, the conversation stored.

A client (claude_code.py, codex.py, gemini_cli.py) is a `Client`: its event names, the limits of
the text a hook may add, where its settings file is, and how its messages are read: from the
transcript file the event names (each line once, known by a stable id) or from the event itself.
Everything else is here, once: the event checked, the context built within the budget and the
client's cap, the messages stored, the deadline, and the settings entries added and removed.

A hook never blocks the agent: each client reads some exit code (2 for all three) as "stop the
prompt", so whatever fails raises here and the caller prints nothing on stdout and exits 0.
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

# What the client holds itself: the conversation so far. The prompt is given what it does not.
LEFT_OUT = ("recent", "unsplit")
HEADER = "Memory (memctl) for this prompt:\n\n"


@dataclass
class Event:
    name: str
    session: str
    transcript: Path | None
    prompt: str = ""
    fields: dict | None = None  # the whole event, for a client that reads its messages from it


@dataclass(frozen=True)
class Client:
    """One agent client's hook protocol (each module's CLIENT says where each fact comes from)."""

    name: str
    prompt_event: str  # its prompt is given memory's context
    store_events: tuple[str, ...]  # the conversation's new messages are stored
    settings_path: Callable[..., Path]  # (settings=, project=, home=, environ=) -> the settings file
    timeout: int  # the "timeout" each settings entry gets, in the client's unit
    cap_chars: int | None = None  # the most text one hook may add, as the client counts it
    cap_bytes: int | None = None
    # A message of the conversation from one transcript line ({"id", "role", "text", "ts"?}), or None;
    # (line, max_text_bytes) -> record.
    transcript_message: Callable[[bytes, int], dict | None] | None = None
    # Or the messages an event carries itself: (event, max_text_bytes) -> records.
    event_messages: Callable[[Event, int], list[dict]] | None = None
    # The field an event fired inside a sub-agent carries: its turns are the sub-agent's, not the
    # conversation's, and are not stored (as Claude Code's isSidechain lines are not).
    subagent_field: str | None = None
    quiet_stdout: str = ""  # what a handled event prints when it adds nothing
    install_note: str = ""  # one line `install` says after writing

    @property
    def events(self) -> tuple[str, ...]:
        return (self.prompt_event, *self.store_events)


class HookTimeout(MemctlError):
    """The hook ran out of its time ([hooks] timeout_seconds)."""


@dataclass
class Answer(Shape):
    """What `memctl hooks run` prints: `stdout` for the client ("" for nothing), `note` one line on stderr."""

    event: str = shown("The hook event handled.")
    session: str = shown()
    stdout: str = hidden(default="")
    note: str = shown("What was done, one line.", default="")
    stored: int = shown("Messages of the conversation stored.", default=0)
    context_chars: int = shown("Characters of context given to the prompt.", default=0)

    key_order = ("event", "session", "stored", "context_chars", "note")


def parse_event(client: Client, data: bytes) -> Event:
    """The event on stdin, checked: InputError naming the field otherwise."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"the hook event is not JSON ({exc})", source="<stdin>") from None
    if not isinstance(value, dict):
        raise InputError("the hook event is not a JSON object", source="<stdin>")
    name = value.get("hook_event_name")
    if name not in client.events:
        raise InputError(f"not a {client.name} event memctl handles ({', '.join(client.events)}), got {name!r:.60}",
                         source="<stdin>", field="hook_event_name")
    session = check_name(value.get("session_id"), "session", source="<stdin>")
    transcript = value.get("transcript_path")
    if transcript is not None and not isinstance(transcript, str):
        raise InputError("must be a path", source="<stdin>", field="transcript_path")
    prompt = value.get("prompt", "")
    if name == client.prompt_event and not isinstance(prompt, str):
        raise InputError("must be text", source="<stdin>", field="prompt")
    return Event(name, session, Path(transcript) if transcript else None,
                 prompt if isinstance(prompt, str) else "", value)


def run(client: Client, data: bytes, *, store: Store, budget: int, timeout: float, max_text_bytes: int,
        context: Callable[..., Any], ingest: Callable[..., Any]) -> Answer:
    """Handle one event of `client` within `timeout` seconds: its prompt event gets memory's context
    for the prompt (`context`: Memory.context), the others store the conversation's new messages
    (`ingest`: Memory.ingest). Raises MemctlError (HookTimeout too) or OSError on failure."""
    event = parse_event(client, data)
    with deadline(timeout):
        if event.name == client.prompt_event:
            return _prompt_context(client, event, store, budget, context)
        return _store_messages(client, event, store, max_text_bytes, ingest)


def _prompt_context(client: Client, event: Event, store: Store, budget: int, context: Callable[..., Any]) -> Answer:
    answer = Answer(event.name, event.session, stdout=client.quiet_stdout)
    if not event.prompt.strip():
        answer.note = "memctl: an empty prompt; no context"
        return answer
    store.require()
    built = context(event.session, event.prompt, budget=budget, new_session=True, leave_out=LEFT_OUT)
    text = built.text.strip()
    if not text:
        answer.note = "memctl: memory holds nothing for this prompt"
        return answer
    text = clipped(HEADER + text, chars=client.cap_chars, size=client.cap_bytes)
    answer.context_chars = len(text)
    answer.stdout = json.dumps({"hookSpecificOutput": {"hookEventName": client.prompt_event,
                                                       "additionalContext": text}}, ensure_ascii=False) + "\n"
    answer.note = f"memctl: {built.tokens} tokens of memory for the prompt"
    return answer


def clipped(text: str, *, chars: int | None = None, size: int | None = None) -> str:
    """`text` if it has at most `chars` characters and `size` UTF-8 bytes, else its whole lines that
    fit: the context is rendered most important first, so what goes is at its end."""
    if size is not None and len(text.encode("utf-8", "surrogatepass")) > size:
        # A character is 1 to 4 bytes: cut where the encoded prefix first passes `size`.
        fits = len(text.encode("utf-8", "surrogatepass")[:size].decode("utf-8", "ignore"))
        chars = fits if chars is None else min(chars, fits)
    if chars is None or len(text) <= chars:
        return text
    cut = text.rfind("\n", 0, chars)
    return text[:cut if cut > 0 else chars].rstrip() + "\n"


def cut_text(text: str, max_text_bytes: int) -> str:
    """`text`, cut at [ingest] max_text_bytes (a message longer than memctl stores)."""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) > max_text_bytes:
        return encoded[:max_text_bytes - 8].decode("utf-8", "ignore") + " […]"
    return text


# -- the conversation ------------------------------------------------------------------------
def progress_file(store: Store, client: Client, session: str) -> Path:
    """Where the store keeps how far a session's transcript has been read."""
    return store.path("hooks", client.name, f"{check_name(session, 'session')}.json")


def _store_messages(client: Client, event: Event, store: Store, max_text_bytes: int,
                    ingest: Callable[..., Any]) -> Answer:
    answer = Answer(event.name, event.session, stdout=client.quiet_stdout)
    if client.subagent_field and (event.fields or {}).get(client.subagent_field):
        answer.note = "memctl: a sub-agent's turn; nothing stored"
        return answer
    if client.event_messages is not None:
        _ingest(answer, client.event_messages(event, max_text_bytes), f"{client.name} {event.name} event", ingest)
        answer.note = f"memctl: stored {answer.stored} new message(s) of session {event.session}"
        return answer
    if event.transcript is None:
        answer.note = "memctl: the event names no transcript; nothing stored"
        return answer
    place = progress_file(store, client, event.session)
    offset = _offset(place, event.transcript)
    lines, end = new_lines(event.transcript, offset)
    records = [message for line in lines if (message := client.transcript_message(line, max_text_bytes)) is not None]
    _ingest(answer, records, str(event.transcript), ingest)
    if end != offset:
        with store.transaction() as tx:
            tx.replace(place, orjson.dumps({"transcript": str(event.transcript), "offset": end}) + b"\n")
    answer.note = f"memctl: stored {answer.stored} new message(s) of session {event.session}"
    return answer


def _ingest(answer: Answer, records: list[dict], source: str, ingest: Callable[..., Any]) -> None:
    """Store `records` in the answer's session; each id once (a record read again is skipped)."""
    if not records:
        return
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    result = ingest(data, source=source, fmt="jsonl", kind="message", session=answer.session)
    answer.stored = len(result.stored)


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


def json_line(line: bytes) -> dict | None:
    """One transcript line as a JSON object, or None for a torn or foreign line: the transcript is
    the client's, not ours to judge."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


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


# -- the settings file ------------------------------------------------------------------------
@dataclass
class Setup(Shape):
    """What `install` or `uninstall` did (or, dry, would do) to a settings file."""

    client: str = shown()
    path: Path = shown("The settings file.")
    command: str = shown("The hook command.")
    status: Literal["added", "removed", "unchanged"] = shown()
    events: list[str] = shown("The events whose entries were added or removed.", default_factory=list)
    backup: Path | None = shown("The copy of the file before the change, or null.", default=None)


def hook_command(client: Client, store: str) -> str:
    """The command each event runs: this memctl, by absolute paths, on `store`."""
    return shlex.join(memctl_argv(store, "hooks", "run", client.name))


def _ours(handler: Any, command: str) -> bool:
    return isinstance(handler, dict) and handler.get("type") == "command" and handler.get("command") == command


def install(client: Client, path: Path, store: str, *, dry_run: bool = False, remove: bool = False) -> Setup:
    """Add memctl's hook for `store` to every event of the client in the settings file at `path`
    (`remove`: take exactly those entries out again), keeping every other key and hook. The three
    clients read the same shape, {"hooks": {EVENT: [{"matcher"?, "hooks": [{"type": "command",
    "command", "timeout"}]}]}}; each entry is a group of its own, so removing it leaves the user's
    groups as they were. Idempotent; a file that is not a JSON object with an object "hooks" is
    refused (InputError), nothing written."""
    command = hook_command(client, store)
    old = read_text(path)
    document = json_object(old, str(path), container="hooks")
    hooks = document.get("hooks", {})
    for event in client.events:
        if not isinstance(hooks.get(event, []), list):
            raise InputError(f"expected \"hooks\".\"{event}\" to be a list; nothing was written", source=str(path))
    setup = Setup(client.name, path, command, "unchanged")
    for event in client.events:
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
                                                           "timeout": client.timeout}]})
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


def home_settings(settings: str | None, project: bool, project_file: str, user_file: Path) -> Path:
    """`settings` when given, else the project's file (`project_file`, relative to the working
    directory) with `project`, else the user's."""
    if settings:
        return Path(settings)
    if project:
        return Path(project_file)
    return user_file
