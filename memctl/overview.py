"""What a store holds: one record by id (`memctl show`) and the whole store at a glance (`memctl status`).

Both only read, under the store's shared lock; neither opens the embedding model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal


from memctl import clock
from memctl import config
from memctl.errors import NotFound
from memctl.governance.governance import chain, chain_seen_from
from memctl.governance.lifecycle import DELETED_DIR, load_deleted
from memctl.store import memoryfile, topicfile
from memctl.store.memoryfile import note_scope
from memctl.store.sessions import LOG_HEADING, iter_messages, iter_pending, log_scope, message_scope
from memctl.store.status import status_of
from memctl.store.store import Store, bytes_under, check_name, check_scope, read_file
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:
    from memctl.runtime import Runtime


@dataclass
class Shown(Shape):
    """One record: its kind (message, memory, pending, log or topic), text, fields, where it lives,
    and what it belongs to (a memory's version chain, the topics holding a message)."""

    id: str = shown()
    kind: Literal["message", "memory", "pending", "log", "topic"] = shown()
    text: str = shown()
    file: str = shown("The store file it is in.")
    line: int | None = shown("Its line there.")
    scope: str | None = shown()
    fields: dict[str, Any] = shown("Its fields (a memory's schema fields, a message's role, ...).",
                                   default_factory=dict)
    chain: list[dict] | None = shown("Memories: every version, oldest first.", omit="none", default=None)
    topics: list[dict] | None = shown('Messages: the topics holding it, {"id", "name", "state", "file"}.',
                                      omit="none", default=None)

    key_order = ("id", "kind", "scope", "file", "line", "text", "fields", "chain", "topics")


def show(store: Store, record_id: str, scope: str | None = None) -> Shown:
    """The record with this id; InputError for an id no record could have, NotFound for none. With a
    `scope`, as search and `history` see it (its own records and global ones), a record of another
    scope is not there (said as of a missing one), nor are the versions and topics of other scopes it
    links to: scopes are walls for reads by id too."""
    check_name(record_id, "id", source="ID")
    check_scope(scope)
    store.require()
    with store.reading():
        found = _message(store, record_id, scope) or _memory(store, record_id, scope) \
            or _pending(store, record_id) or _log_entry(store, record_id) or _topic(store, record_id)
    if found is None or (scope is not None and found.scope not in (scope, "global")):
        raise NotFound(f"no message, memory, pending note, log entry or topic '{record_id}'"
                       + (f" in scope {scope}" if scope is not None else ""))
    return found


def _message(store: Store, record_id: str, scope: str | None) -> Shown | None:
    for path, line, message in iter_messages(store, store.sessions_with({record_id})):
        if message["id"] == record_id:
            fields = {k: v for k, v in message.items() if k not in ("id", "text")}
            return Shown(record_id, "message", str(message.get("text", "")), store.relative(path), line,
                         message_scope(message), fields, topics=_topics_holding(store, record_id, scope))
    return None


def _topics_holding(store: Store, message_id: str, scope: str | None) -> list[dict]:
    out = [{"id": t.id, "name": t.header.get("name", ""), "state": t.state,
            "file": store.relative(topicfile.topic_path(store, t.id))}
           for t in topicfile.load_topics(store).values()
           if any(m.get("id") == message_id for m in t.messages) and scope in (None, t.scope, "global")]
    out += [{"id": h["id"], "name": h.get("name", ""), "state": "archived",
             "file": store.relative(topicfile.archived_path(store, h))}
            for h in topicfile.archived_topics(store)
            if message_id in h.get("message_ids", []) and scope in (None, "global", topicfile.archived_scope(store, h))]
    return out


def _memory(store: Store, record_id: str, scope: str | None) -> Shown | None:
    doc = memoryfile.load(store.memory_md)
    places = [(store.memory_md, doc)] + [(p, memoryfile.load(p))
                                        for p in store.listing(store.path(DELETED_DIR), "*.md")]
    for path, held in places:
        entry = held.find(record_id)
        if entry is not None:
            fields = {"section": entry.section, "status": "deleted" if path != store.memory_md else status_of(entry),
                      **{k: v for k, v in entry.fields.items() if k != "id"}}
            versions = chain(doc, record_id, load_deleted(store))
            if scope is not None:
                if note_scope(entry.fields) not in (scope, "global"):
                    return None
                versions = chain_seen_from(versions, record_id, scope)
            return Shown(record_id, "memory", entry.text, store.relative(path), entry.line,
                         str(entry.get("scope", "global")), fields, chain=[v.as_dict() for v in versions.links])
    return None


def _pending(store: Store, record_id: str) -> Shown | None:
    for line, item in iter_pending(store):
        if item["id"] == record_id:
            fields = {k: v for k, v in item.items() if k not in ("id", "text")}
            scope = (item.get("fields") or {}).get("scope", "global")
            return Shown(record_id, "pending", str(item.get("text", "")), store.relative(store.pending_file),
                         line, scope, fields)
    return None


def _log_entry(store: Store, record_id: str) -> Shown | None:
    for path in store.daily_logs():
        lines = read_file(path).decode("utf-8", errors="replace").split("\n")
        for number, line in enumerate(lines, 1):
            match = LOG_HEADING.match(line) if line.startswith("### ") else None
            if match and match.group(4) == record_id:
                body = []
                for rest in lines[number:]:
                    if rest.startswith("### "):
                        break
                    body.append(rest)
                text = memoryfile.unescape_body("\n".join(body).strip("\n"))
                return Shown(record_id, "log", text, store.relative(path), number,
                             log_scope(store, match.group(5), match.group(3), {}),
                             {"time": f"{path.stem}T{match.group(1)}", "speaker": match.group(2),
                              "session": match.group(3)})
    return None


def _topic(store: Store, record_id: str) -> Shown | None:
    from memctl.topics.daily import merged_into

    path = topicfile.topic_path(store, record_id)
    topic = topicfile.load_topic(path, source=store.relative(path))
    if topic is None and merged_into(store, record_id):
        path = topicfile.topic_path(store, merged_into(store, record_id))
        topic = topicfile.load_topic(path, source=store.relative(path))
    if topic is not None:
        fields = {k: v for k, v in topic.header.items() if k not in ("type", "id", "summary")}
        fields["message_ids"] = [m["id"] for m in topic.messages]
        return Shown(topic.id, "topic", str(topic.header.get("summary", "")), store.relative(path), 1,
                     topic.scope, fields)
    for header in topicfile.archived_topics(store):
        if header["id"] == record_id:
            fields = {k: v for k, v in header.items() if k not in ("type", "id", "summary")}
            return Shown(record_id, "topic", str(header.get("summary", "")),
                         store.relative(topicfile.archived_path(store, header)), 1,
                         topicfile.archived_scope(store, header), fields)
    return None


# -- status ------------------------------------------------------------------------------------------
@dataclass
class Status(Shape):
    """The store at a glance: `memctl status --json`."""

    store: str = shown("The store: its folder, or its URL without the password.")
    counts: dict[str, Any] = shown('{"messages", "sessions", "memories": {"current", "superseded", "archived", '
                                   '"deleted"}, "pending": {"waiting", "expired"}, "topics": {state: count}, '
                                   '"cache_entries" (null on a backend that is not files)}')
    scopes: dict[str, dict[str, int]] = shown('Per scope: {"messages", "memories", "topics"}.')
    sizes: dict[str, int] = shown('{"total_bytes", "index_bytes"}')
    index: dict[str, Any] = shown("The index's manifest: last update, units, model, fresh.")
    model: str = shown("The [embedding] model a search and the next update use.")


def status(rt: Runtime) -> Status:
    """Counts by kind and scope, sizes on disk, the index (last update, units, model, fresh) and the
    tool cache."""
    store, settings = rt.store, rt.settings
    store.require()
    with store.reading():
        messages, sessions = Counter(), set()
        for path, _, message in iter_messages(store):
            messages[message_scope(message)] += 1
            sessions.add(path.stem)
        doc = memoryfile.load(store.memory_md)
        memories = {"current": 0, "superseded": 0, "archived": 0, "deleted": len(load_deleted(store))}
        memory_scopes: Counter = Counter()
        for entry in doc.entries:
            memory_status = status_of(entry)
            memories["superseded" if memory_status == "deprecated"
                     else "archived" if memory_status == "archived" else "current"] += 1
            memory_scopes[str(entry.get("scope", "global"))] += 1
        now = rt.clock.now()
        pending = Counter("expired" if _expired(item, now) else "waiting" for _, item in iter_pending(store))
        topics: Counter = Counter()
        topic_scopes: Counter = Counter()
        for topic in topicfile.load_topics(store).values():
            topics[topic.state] += 1
            topic_scopes[topic.scope or "none"] += 1
        for header in topicfile.archived_topics(store):
            topics["archived"] += 1
            topic_scopes[topicfile.archived_scope(store, header) or "none"] += 1
    scopes = sorted(set(messages) | set(memory_scopes) | set(topic_scopes))
    return Status(**{
        "store": store.shown,
        "counts": {"messages": sum(messages.values()), "sessions": len(sessions), "memories": memories,
                   "pending": {"waiting": pending["waiting"], "expired": pending["expired"]},
                   "topics": {state: topics[state] for state in topicfile.STATES},
                   "cache_entries": _cache_entries(store, settings)},
        "scopes": {scope: {"messages": messages[scope], "memories": memory_scopes[scope],
                           "topics": topic_scopes[scope]} for scope in scopes},
        "sizes": _sizes(rt),
        "index": _index(rt),
        "model": _model_name(settings),
    })


def _model_name(settings: config.Settings) -> str:
    """The [embedding] model a search and the next update use: the setting, or the default's name."""
    from memctl.index.embedders import DEFAULT

    return settings.embedding.model or DEFAULT


def _expired(item: dict, now) -> bool:
    try:
        return isinstance(item.get("expires_at"), str) and clock.parse_ts(item["expires_at"]) <= now
    except ValueError:
        return False


def _cache_entries(store: Store, settings: config.Settings) -> int | None:
    """Entries of the files cache; None on another backend (`memctl cache stats` asks it)."""
    from memctl.cache import files_of

    if settings.cache.backend != "files":
        return None
    store = files_of(store)
    return sum(len(store.listing(scope / "entries", "*.json"))
               for scope in store.listing(store.path("cache"), "*") if scope.is_dir())


def _sizes(rt: Runtime) -> dict[str, int]:
    """Bytes on disk: everything, and the derived index within it (.index/, or its tables)."""
    from memctl.index import open_index

    index_bytes = open_index(rt).size()
    return {"total_bytes": bytes_under(rt.store.root, leave_out=".index") + index_bytes, "index_bytes": index_bytes}


def _index(rt: Runtime) -> dict[str, Any]:
    """The index as status shows it."""
    from memctl.index import open_index

    return open_index(rt).summary()
