"""Messages on disk: sessions/<id>.jsonl and the daily logs memory/YYYY-MM-DD.md (P4).

A session file holds one message a line, `id` first:
    {"id": "m-…", "session": "s1", "role": "user", "ts": "2026-11-20T10:03:12Z", "text": "…", …}

A daily log holds what users said that day (the day of the message's own
time), one heading a message, so a person can read a day at a glance and the
index can cite a line range:

    ### 10:03:12 Caroline · conv-26 · m-3f2a9c0d1e2f4a5b · user:alice
    I moved to Taipei last month.

A session is in one scope (SPEC X3: a user's or a project's conversation),
written on each of its messages as `"scope": "user:alice"`; a message without
it, as every message stored before scopes, is global.

A log entry carries its message's scope at the end of its heading (global too),
so that it stays in that scope when its session file is gone. An entry written
before scopes names none: it is in its stored session's scope, and, with that
session gone, in NO_SCOPE, which no scoped look asks for (only a look at the
whole store sees it): whose words it holds can no longer be told, and taking
them for global showed one person's words to everyone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import orjson

from memctl.store import memoryfile
from memctl.store import jsonl
from memctl.errors import MemctlError, StoreError
from memctl.store.store import Store

# time, speaker, session, id and (written since scopes) scope; the speaker may hold " · " itself
LOG_HEADING = re.compile(r"^### (\d\d:\d\d:\d\d) (.*?) · (\S+) · (\S+)(?: · (global|(?:project|lang|user):\S+))?$")
NO_SCOPE = "none"  # not a scope name (memoryfile.check_field): no scope filter admits it


def message_line(message: dict) -> bytes:
    return orjson.dumps(message) + b"\n"


def iter_messages(store: Store, paths: list[Path] | None = None, *,
                  skipped: list[str] | None = None) -> Iterator[tuple[Path, int, dict]]:
    """(file, line, message) for every parseable message of every session (or of the given files);
    each line passed over goes to `skipped` as "FILE:LINE: why", when it is given."""
    if paths is None:
        paths = store.listing(store.sessions_dir, "*.jsonl")
    for path in paths:
        for line in jsonl.read(path):
            if line.value is not None and isinstance(line.value.get("id"), str):
                yield path, line.number, line.value
            elif skipped is not None:
                skipped.append(f"{store.relative(path)}:{line.number}: {line.problem or 'a message without an id'}")


def message_scope(message: dict) -> str:
    """A message's scope: its `scope` field; without one it is global, and so is a field that is no
    scope (before scopes, ingest kept any field as it was given, meaning nothing)."""
    scope = message.get("scope")
    return scope if memoryfile.check_field("scope", scope) is None else "global"


def session_scope(messages: list[dict], source: str) -> str | None:
    """The one scope of a session's messages, None while it has none. A session whose messages name
    two scopes (edited by hand) is refused, naming the first that differs: whose conversation it
    is cannot be guessed, and a guess would show one person's messages to another."""
    if not messages:
        return None
    scope = message_scope(messages[0])
    for message in messages:
        if message_scope(message) != scope:
            raise StoreError(f"{source}: message '{message['id']}' is in scope {message_scope(message)}, the "
                             f"session's first in {scope}; a session is in one scope: correct its 'scope' fields")
    return scope


def stored_session_scope(store: Store, session: str) -> str | None:
    """The scope of a stored session (None: no message stored yet)."""
    path = store.session_file(session)
    return session_scope([message for _, _, message in iter_messages(store, [path])], store.relative(path))


def log_scope(store: Store, named: str | None, session: str, known: dict[str, str]) -> str:
    """The scope of a daily-log entry: the one its heading names; for an entry written before scopes,
    its stored session's (`known`: session -> scope, filled as sessions are read), and NO_SCOPE
    when that session is gone or is in no one scope."""
    if named is not None:
        return named
    if session not in known:
        try:
            path = store.session_file(session)
            scope = stored_session_scope(store, session) if path.is_file() else None
        except (MemctlError, OSError):
            scope = None  # not a session name, unreadable, or in two scopes: whose it is cannot be told
        known[session] = scope or NO_SCOPE
    return known[session]


def iter_pending(store: Store) -> Iterator[tuple[int, dict]]:
    for line in jsonl.read(store.pending_file):
        if line.value is not None and isinstance(line.value.get("id"), str):
            yield line.number, line.value


def load_ids(store: Store, memory: memoryfile.Document, wanted: set[str]) -> dict[str, tuple[str, str]]:
    """The ids of `wanted` the store holds (messages, pending, and the given parse of MEMORY.md),
    each mapped to its text and its scope."""
    ids: dict[str, tuple[str, str]] = {}
    for _, _, message in iter_messages(store, store.sessions_with(wanted)):
        ids[message["id"]] = (message.get("text", ""), message_scope(message))
    for _, item in iter_pending(store):
        ids[item["id"]] = (item.get("text", ""), item_scope(item))
    for entry in memory.entries:
        ids[entry.id] = (entry.text, message_scope(entry.fields))
    return {key: found for key, found in ids.items() if key in wanted}


def item_scope(item: dict) -> str:
    """The scope of an ingested or pending item: a note's `fields.scope`, a message's `scope`."""
    fields = item.get("fields")
    return message_scope(fields if isinstance(fields, dict) else item)


def append_daily_log(store: Store, tx, messages: list[dict]) -> None:
    """Append messages to the daily log of the day each was said."""
    by_day: dict[str, list[str]] = defaultdict(list)
    for message in messages:
        day, clock_time = message["ts"][:10], message["ts"][11:19]
        speaker = " ".join(str(message.get("speaker") or message.get("role") or "user").split())
        body = memoryfile.escape_body(message["text"])
        by_day[day].append(f"### {clock_time} {speaker} · {message['session']} · {message['id']} · "
                           f"{message_scope(message)}\n{body}\n\n")
    for day, chunks in sorted(by_day.items()):
        path = store.daily_log(day)
        header = "" if path.exists() else f"# {day}\n\n"
        tx.append(path, (header + "".join(chunks)).encode("utf-8"))
