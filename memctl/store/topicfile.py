"""Topic files (T1, T9): topics/<topic-id>.jsonl, the time index and the links.

A topic file is JSON lines. The first line is the topic's header, so a person
opening the file sees the topic first; then its messages, copied whole with
their ids, in the order they were split:

    {"type": "topic", "id": "t-…", "name": "…", "summary": "…", "parent": null,
     "children": [], "state": "active", "scope": "user:alice", "created": "…", "updated": "…",
     "messages": 12, "tokens": 830}
    {"type": "message", "id": "m-…", "session": "s1", "scope": "user:alice", "role": "user", "ts": "…", "text": "…"}
    …

A topic is in one scope, its sessions' (SPEC X3): only their split writes to
it, and only their context, activation and review see it. A topic written
before scopes has no `scope` field: it is in the one scope its messages carry
(global, for messages that name none); one whose messages carry several is in
no scope's view (Topic.scope is None).

A split appends its messages and then a new header: appends are cheap and,
through the store's Transaction, atomic; the latest header wins. Once a file
holds COMPACT_AFTER headers it is rewritten with one header at the top.

    topics/time_index.jsonl  one line a split: {"from", "to", "topics": [ids], "at"}
    topics/links.jsonl       one line a link: {"from", "to", "kind": "parent" | "related" | "merged-into", "at"}
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from memctl import clock
from memctl.errors import InputError
from memctl.store import jsonl
from memctl.store.memoryfile import check_field
from memctl.store.sessions import message_scope, stored_session_scope
from memctl.store.store import Store, check_name, is_name

COMPACT_AFTER = 8
STATES = ("active", "dormant", "archived")
TIME_INDEX, LINKS = "time_index.jsonl", "links.jsonl"


@dataclass
class Topic:
    header: dict
    messages: list[dict] = field(default_factory=list)
    headers_in_file: int = 1

    @property
    def id(self) -> str:
        return self.header["id"]

    @property
    def state(self) -> str:
        return self.header.get("state", "active")

    @property
    def scope(self) -> str | None:
        """The scope the topic is in; None: in none (see the module doc)."""
        if "scope" in self.header:
            named = self.header["scope"]
            return named if check_field("scope", named) is None else None
        carried = {message_scope(m) for m in self.messages}
        return carried.pop() if len(carried) == 1 else (None if carried else "global")


def in_scope(topics: dict[str, Topic], scope: str | None) -> dict[str, Topic]:
    """The topics of one scope; every topic when `scope` is None (a look at the whole store)."""
    return topics if scope is None else {tid: t for tid, t in topics.items() if t.scope == scope}


def topic_id(first_message_id: str) -> str:
    """Named after the message that opened it: the same split run twice names its topics alike."""
    return "t-" + hashlib.sha1(first_message_id.encode()).hexdigest()[:12]


def topic_path(store: Store, identifier: str) -> Path:
    return store.path("topics", f"{check_name(identifier, 'id')}.jsonl")


# What a header's and a message's fields must be: a topic file is data anyone may have edited.
_TEXT, _TIME, _NUMBER, _IDS = "text", "an ISO 8601 time", "a whole number", "a list of ids"
_HEADER_FIELDS = {"name": _TEXT, "summary": _TEXT, "state": _TEXT, "created": _TIME, "updated": _TIME,
                  "parent": _TEXT, "children": _IDS, "messages": _NUMBER, "tokens": _NUMBER,
                  "message_ids": _IDS, "sessions": _IDS, "archived_at": _TIME}
_MESSAGE_FIELDS = {"text": _TEXT, "session": _TEXT, "role": _TEXT, "ts": _TIME, "speaker": _TEXT}
# A summary is written within [topics] summary_bytes (~1 KB); one far over it was not written by
# memctl, and reading it into every context costs seconds (a 10 MB one: 45 s).
MAX_SUMMARY_BYTES = 64 << 10


def _field_problem(value, kind: str) -> bool:
    if kind == _TEXT:
        return not isinstance(value, str)
    if kind == _TIME:
        try:
            return not isinstance(value, str) or clock.parse_ts(value) is None
        except (ValueError, TypeError, OverflowError):
            return True
    if kind == _NUMBER:
        return type(value) is not int or value < 0
    return not (isinstance(value, list) and all(is_name(v) for v in value))


def check_record(record: dict, source: str, line: int, *, file_id: str | None = None) -> None:
    """A topic file's header or message as memctl writes it, else InputError naming the line and
    field: an id is a name (it becomes a path), a header's id is its file's, every field its type."""
    kind = record.get("type")
    if kind not in ("topic", "message"):
        raise InputError(f"'type' must be topic or message, got {record.get('type')!r:.40}", source=source,
                         line=line, field="type")
    check_name(record.get("id"), "id", source=source, line=line)
    fields = _HEADER_FIELDS if kind == "topic" else _MESSAGE_FIELDS
    for name, expected in fields.items():
        if record.get(name) is not None and _field_problem(record[name], expected):
            raise InputError(f"must be {expected}", source=source, line=line, field=name)
    if kind == "message":
        return
    if file_id is not None and record["id"] != file_id:
        # a header naming another topic's id would have its messages split again into that topic
        raise InputError(f"'{record['id']}' is not this file's topic ({file_id}); a topic file holds one topic",
                         source=source, line=line, field="id")
    if record.get("state", "active") not in STATES:
        raise InputError(f"must be one of {', '.join(STATES)}", source=source, line=line, field="state")
    if "scope" in record and check_field("scope", record["scope"]) is not None:
        # a topic in no valid scope would be in nobody's view: say so rather than hide it
        raise InputError(check_field("scope", record["scope"]), source=source, line=line, field="scope")
    if len(record.get("summary", "")) > MAX_SUMMARY_BYTES:
        raise InputError(f"longer than {MAX_SUMMARY_BYTES} characters (memctl writes ~[topics] summary_bytes)",
                         source=source, line=line, field="summary")


def load_topic(path: Path, *, source: str | None = None) -> Topic | None:
    """The topic of a topic file (None if it has no header); a line memctl would not have
    written is an InputError naming it (the store check reports every one)."""
    header, messages, headers = None, [], 0
    source = source or str(path)
    for line in jsonl.read(path):
        record = line.value
        if record is None:
            if line.problem == jsonl.UNTERMINATED:
                continue  # an append under way, or cut short and rolled back by the next writer
            raise InputError(f"{line.problem}; fix or remove the line", source=source, line=line.number)
        check_record(record, source, line.number, file_id=path.stem)
        if record["type"] == "topic":
            header, headers = record, headers + 1
        else:
            messages.append(record)
    if header is None:
        return None
    return Topic(header, messages, headers)


def load_topics(store: Store) -> dict[str, Topic]:
    """Every topic of the store, by id, oldest first."""
    topics: dict[str, Topic] = {}
    for path in store.listing(store.topics_dir, "t-*.jsonl"):
        topic = load_topic(path, source=store.relative(path))
        if topic is not None:
            topics[topic.id] = topic
    return dict(sorted(topics.items(), key=lambda item: (item[1].header.get("created", ""), item[0])))


def record(message: dict) -> dict:
    return {"type": "message", **{k: v for k, v in message.items() if k != "type"}}


def write_topic(tx, store: Store, topic: Topic, new_messages: list[dict], *, fresh: bool) -> None:
    """Write a topic whose header and messages (new ones included) are up to date.

    Fresh: header first, then messages. Otherwise append the new messages and
    the new header, or rewrite the file once it holds COMPACT_AFTER headers."""
    body = b"".join(orjson.dumps(record(m)) + b"\n" for m in new_messages)
    if fresh:
        tx.append(topic_path(store, topic.id), orjson.dumps(topic.header) + b"\n" + body)
    elif topic.headers_in_file + 1 >= COMPACT_AFTER:
        rewrite_topic(tx, store, topic)
    else:
        tx.append(topic_path(store, topic.id), body + orjson.dumps(topic.header) + b"\n")
        topic.headers_in_file += 1


def rewrite_topic(tx, store: Store, topic: Topic) -> None:
    topic.headers_in_file = 1
    tx.replace(topic_path(store, topic.id),
               orjson.dumps(topic.header) + b"\n" + b"".join(orjson.dumps(record(m)) + b"\n" for m in topic.messages))


def append_index(tx, store: Store, name: str, records: list[dict]) -> None:
    if records:
        tx.append(store.path("topics", name), b"".join(orjson.dumps(r) + b"\n" for r in records))


def read_index(store: Store, name: str) -> list[dict]:
    """The lines of links.jsonl or time_index.jsonl, each checked (check_index_line)."""
    path = store.path("topics", name)
    records = []
    for line in jsonl.read(path):
        if line.problem == jsonl.UNTERMINATED:
            continue  # an append under way, or cut short: the next append cuts it
        problem = line.problem or check_index_line(name, line.value)
        if problem:
            field, message = problem if isinstance(problem, tuple) else (None, problem)
            raise InputError(message, source=store.relative(path), line=line.number, field=field)
        records.append(line.value)
    return records


def check_index_line(name: str, record: dict) -> tuple[str, str] | None:
    """(field, what is wrong) with a line of links.jsonl or time_index.jsonl, or None."""
    if name == LINKS:
        for key in ("from", "to"):
            if not is_name(record.get(key)):
                return key, "must be a topic id"
        if record.get("kind") not in _SEEN_FROM:
            return "kind", f"must be one of {', '.join(_SEEN_FROM)}"
    else:
        for key in ("from", "to"):
            if record.get(key) is not None and not isinstance(record[key], str):
                return key, "must be a time (text) or null"
        topics = record.get("topics")
        if not (isinstance(topics, list) and all(is_name(t) for t in topics)):
            return "topics", "must be a list of topic ids"
    return None


# A link as seen from each end: links.jsonl says {"from": A, "to": B, "kind": K}.
_SEEN_FROM = {"parent": ("child", "parent"), "related": ("related", "related"),
              "merged-into": ("merged-into", "merged-from")}


def links_of(store: Store, topic_id: str) -> list[dict]:
    """The topic's links, oldest first, each named from its side: {"kind", "topic_id", "at"} -
    a parent's link to its sub-topic is "child" at the parent and "parent" at the sub-topic."""
    found = []
    for link in read_index(store, LINKS):
        forward, backward = _SEEN_FROM.get(link.get("kind"), (link.get("kind"), link.get("kind")))
        if link.get("from") == topic_id:
            found.append({"kind": forward, "topic_id": link.get("to"), "at": link.get("at")})
        elif link.get("to") == topic_id:
            found.append({"kind": backward, "topic_id": link.get("from"), "at": link.get("at")})
    return found


# -- the archive (T12): topics/archived/YYYY-MM/<topic id>.jsonl -------------------------------
ARCHIVED = "archived"
_MONTH = re.compile(r"\d{4}-\d{2}")  # an archive folder, YYYY-MM of the topic's last update


def archive_dir(store: Store) -> Path:
    return store.path("topics", ARCHIVED)


def archived_topics(store: Store, since: str | None = None, scope: str | None = None) -> list[dict]:
    """Headers of archived topics, oldest month first; `since` (YYYY-MM or a date) keeps later months,
    `scope` only that scope's."""
    if since:
        try:
            clock.parse_ts(since if len(since) > 7 else f"{since}-01")
        except (ValueError, TypeError):
            raise InputError(f"not a month (YYYY-MM) or an ISO 8601 date: {since!r}", source="--since") from None
    headers = []
    for month in store.listing(archive_dir(store), "[0-9][0-9][0-9][0-9]-[0-9][0-9]"):
        if since and month.name < since[:7]:
            continue
        for path in store.listing(month, "t-*.jsonl"):
            topic = load_topic(path, source=store.relative(path))
            if topic is None:
                continue
            if str(topic.header.get("updated", ""))[:7] != month.name:  # where restore looks for it
                raise InputError(f"must fall in {month.name}, the archive folder holding it",
                                 source=store.relative(path), field="updated")
            if scope is None or archived_scope(store, topic.header) == scope:
                headers.append(topic.header)
    return headers


def archived_scope(store: Store, header: dict) -> str | None:
    """An archived topic's scope: its header's, else (archived before scopes) the one scope of the
    sessions it names; None when that is not one scope."""
    if "scope" in header:
        return header["scope"] if check_field("scope", header["scope"]) is None else None
    sessions = {stored_session_scope(store, s) or "global" for s in header.get("sessions", [])}
    return sessions.pop() if len(sessions) == 1 else (None if sessions else "global")


def archived_path(store: Store, header: dict) -> Path:
    month = str(header.get("updated", "0000-00"))[:7]
    return store.path("topics", ARCHIVED, month if _MONTH.fullmatch(month) else "0000-00",
                      f"{check_name(header['id'], 'id')}.jsonl")


def archived_message_ids(store: Store) -> set[str]:
    """Messages of archived topics stay placed: archiving keeps their ids, not their text."""
    return {mid for header in archived_topics(store) for mid in header.get("message_ids", [])}
