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
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from memctl.errors import StoreError
from memctl.store import jsonl
from memctl.store.memoryfile import check_field
from memctl.store.sessions import message_scope
from memctl.store.store import Store, check_name

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


def load_topic(path: Path) -> Topic | None:
    header, messages, headers = None, [], 0
    for line in jsonl.read(path):
        record = line.value
        if record is None:
            if line.problem == jsonl.UNTERMINATED:
                continue  # an append under way, or cut short and rolled back by the next writer
            raise StoreError(f"{path}:{line.number}: {line.problem}; fix or remove the line")
        if record.get("type") == "topic":
            header, headers = record, headers + 1
        elif record.get("type") == "message":
            messages.append(record)
    if header is None:
        return None
    return Topic(header, messages, headers)


def load_topics(store: Store) -> dict[str, Topic]:
    """Every topic of the store, by id, oldest first."""
    topics: dict[str, Topic] = {}
    for path in store.listing(store.topics_dir, "t-*.jsonl"):
        topic = load_topic(path)
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
    return [line.value for line in jsonl.read(store.path("topics", name)) if line.value is not None]


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
