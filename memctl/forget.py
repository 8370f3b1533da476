"""Forget: take messages, memories and notes out of every file of the store and out of .index/.

What is forgotten is chosen by id (a message, a memory in MEMORY.md or deleted/, a pending
note, a daily-log entry, a topic: its messages), by session (all its messages) or by a text
match. The text then leaves, in one Transaction:

    sessions/<id>.jsonl          the message's line (a session left empty is removed)
    memory/YYYY-MM-DD.md         the message's or entry's block (a log left empty is removed)
    MEMORY.md, deleted/*.md      the entry; an entry that superseded it now supersedes what it
                                 superseded (the chain stays linked), or nothing
    pending.jsonl                the note's line
    topics/t-*.jsonl             the message; the topic's name and summary written anew by the
                                 built-in method (an LLM's may have quoted it); a topic left
                                 with no message is removed
    topics/archived/*/t-*.jsonl  the message's id; name and summary written anew from the rest
    auto_summaries.jsonl         the session's summaries written anew from the messages left
    governance.log.jsonl         a lifecycle record's copy of the memory's summary
    .index/                      every file written anew (Index.scrub): a patch would leave the
                                 text in SQLite's free pages and Tantivy's segments

and the governance log gains one line a record: {"ts", "action": "forget", "id", "kind"},
never the text. Before the transaction commits, every other file of the store is read for
the forgotten texts: where one still is (a tool output in cache/, MEMORY_TOPIC.md, a message
that repeats a forgotten memory), the report names the file rather than claim it is gone.

A selection that can reach many records (a topic, a session, a text match) only lists what
it would forget unless `yes` is given: nobody wipes a store by a typo. Scopes are walls:
with `scope`, a record of another scope is neither listed nor touched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import orjson

from memctl import clock
from memctl import config
from memctl.errors import InputError, NotFound
from memctl.governance import governance, review
from memctl.governance.lifecycle import DELETED_DIR
from memctl.store import jsonl, memoryfile, topicfile
from memctl.store.memoryfile import Document
from memctl.store.sessions import LOG_HEADING, iter_messages, iter_pending, log_scope, message_scope
from memctl.store.status import supersedes_of
from memctl.store.store import Store, check_name, check_scope, read_file
from memctl.text.clip import clip
from memctl.text.shape import Shape, derived, hidden, shown

if TYPE_CHECKING:
    from memctl.runtime import Runtime

KINDS = ("message", "memory", "pending", "log")
MIN_MATCH_CHARS = 2     # a shorter match would reach nearly every record
RESIDUE_MIN_CHARS = 8   # a forgotten text shorter than this is looked for nowhere else: it would be found by chance
PREVIEW_CHARS = 80
_NOT_SEARCHED = (".index", ".journal", ".lock", ".server")  # derived (scrubbed), the transaction's own, the locks


@dataclass
class Record(Shape):
    """One thing forgotten (or that would be): where it was, and in which scope."""

    id: str = shown()
    kind: Literal["message", "memory", "pending", "log"] = shown()
    scope: str = shown()
    file: str = shown()
    line: int | None = shown()
    text: str = hidden()
    summary: str = hidden(default="")  # a memory's summary field: a match looks in it too

    @derived("The start of its text: only when nothing was written, so a person can judge.", when="preview")
    def preview(self) -> str:
        return clip(" ".join(self.text.split()), PREVIEW_CHARS)


@dataclass
class Forgotten(Shape):
    """What a forget did, or would do. `applied` False: nothing was written (a dry run, or a selection
    that needs `yes`); then each record carries a preview of its text so a person can judge."""

    records: list[Record] = hidden()
    applied: bool = shown("Something was written.")
    dry_run: bool = shown()
    needs_yes: bool = shown("Listed only: the selection may reach many records; call again with yes.",
                            default=False)
    files: list[str] = shown("Store files rewritten or removed.", default_factory=list)
    regenerated: list[str] = shown("Topics and auto-summary sessions summarised anew.", default_factory=list)
    repointed: list[dict] = shown('Chains relinked: {"id", "supersedes": [...]}.', default_factory=list)
    remaining: list[str] = shown("Files that still hold a forgotten text.", default_factory=list)
    index: str = shown("What happened to .index/.", default="")

    key_order = ("applied", "dry_run", "needs_yes", "forgotten", "files", "regenerated", "repointed", "remaining",
                 "index")

    def __len__(self) -> int:
        return len(self.records)

    @derived("What was (or would be) forgotten.")
    def forgotten(self) -> list[Record]:
        return [r.as_dict(preview=not self.applied) for r in self.records]


def forget(rt: Runtime, ids: list[str] = (), *, session: str | None = None, match: str | None = None,
           scope: str | None = None, dry_run: bool = False, yes: bool = False) -> Forgotten:
    """Forget what `ids`, `session` or `match` select (see the module doc); InputError for a usage
    mistake, NotFound for an id that is not in the store (or not in `scope`): then nothing is written."""
    store = rt.store
    ids = list(dict.fromkeys(ids))
    for one in ids:
        check_name(one, "id")
    if session is not None:
        check_name(session, "session")
    check_scope(scope)
    if match is not None and len(match.strip()) < MIN_MATCH_CHARS:
        raise InputError(f"must be at least {MIN_MATCH_CHARS} characters: a shorter text would match nearly "
                         "everything", source="--match")
    if ids and (match is not None or session is not None):
        raise InputError("give ids, or --session / --match, not both", source="--match" if match else "--session")
    if not ids and match is None and session is None:
        raise InputError("name what to forget: ids, --session ID or --match TEXT", source="<arguments>")
    store.require()
    settings = rt.settings
    with store.reading():
        found = _Found.read(store)
    chosen, broad = found.select(ids, session, match, scope)
    listing = dry_run or (broad and not yes)
    if not chosen or listing:
        return Forgotten(chosen, applied=False, dry_run=dry_run, needs_yes=broad and not yes and not dry_run)
    with store.transaction() as tx:
        found = _Found.read(store)  # again, under the lock: what a writer did meanwhile counts
        chosen, _ = found.select(ids, session, match, scope)
        report = Forgotten(chosen, applied=True, dry_run=False)
        if chosen:
            _Forgetting(store, tx, found, chosen, report, settings, clock.format_ts(rt.clock.now())).run()
            texts = [r.text for r in chosen] + ([match] if match else [])
            report.remaining = residue(store, texts)
            report.index = _scrub_index(rt)
    if report.records:
        store.settle_forgotten()  # once committed: no copy of a forgotten text kept beside the store's
    return report


# -- what the store holds ------------------------------------------------------------------------
@dataclass
class _LogEntry:
    id: str
    session: str
    scope: str | None  # as its heading names it; None: written before scopes
    path: Path
    line: int
    text: str


class _Found:
    """Every forgettable record of the store, read once."""

    def __init__(self, store: Store):
        self.store = store
        self.messages: dict[str, tuple[Path, int, dict]] = {}
        self.memory = Document()
        self.deleted: dict[Path, Document] = {}
        self.pending: list[tuple[int, dict]] = []
        self.logs: list[_LogEntry] = []
        self.session_scopes: dict[str, str] = {}

    @classmethod
    def read(cls, store: Store) -> "_Found":
        found = cls(store)
        for path, line, message in iter_messages(store):
            found.messages.setdefault(message["id"], (path, line, message))
            found.session_scopes.setdefault(path.stem, message_scope(message))
        found.memory = memoryfile.load(store.memory_md)
        found.deleted = {path: memoryfile.load(path) for path in store.listing(store.path(DELETED_DIR), "*.md")}
        found.pending = list(iter_pending(store))
        for path in store.daily_logs():
            found.logs += _log_entries(path)
        return found

    def records(self) -> list[Record]:
        """Every record, messages first: a log entry of a stored message is part of that message."""
        out = [Record(mid, "message", message_scope(m), self.store.relative(p), line, str(m.get("text", "")))
               for mid, (p, line, m) in self.messages.items()]
        for path, doc in [(self.store.memory_md, self.memory), *self.deleted.items()]:
            out += [Record(e.id, "memory", memoryfile.note_scope(e.fields), self.store.relative(path), e.line, e.text,
                           str(e.get("summary") or "")) for e in doc.entries]
        out += [Record(item["id"], "pending", review.pending_scope(item), "pending.jsonl", line,
                       str(item.get("text", ""))) for line, item in self.pending]
        known = dict(self.session_scopes)
        out += [Record(e.id, "log", log_scope(self.store, e.scope, e.session, known), self.store.relative(e.path),
                       e.line, e.text) for e in self.logs if e.id not in self.messages]
        return out

    def select(self, ids: list[str], session: str | None, match: str | None,
               scope: str | None) -> tuple[list[Record], bool]:
        """The records chosen, and whether the choice was broad (a topic, a session, a match)."""
        every = [r for r in self.records() if scope is None or r.scope == scope]
        if ids:
            by_id: dict[str, list[Record]] = {}
            for record in every:
                by_id.setdefault(record.id, []).append(record)
            chosen, broad = [], False
            for one in ids:
                if one in by_id:
                    chosen += by_id[one]
                    continue
                topic_messages = self._topic_messages(one, scope)
                if topic_messages is None:
                    where = f" in scope {scope}" if scope else ""
                    raise NotFound(f"no message, memory, pending note, log entry or topic '{one}'{where}; "
                                   "nothing was forgotten")
                chosen += [r for mid in topic_messages for r in by_id.get(mid, [])]
                broad = True
            return _unique(chosen), broad
        chosen = every
        if session is not None:
            chosen = [r for r in chosen if r.kind in ("message", "log") and self._session_of(r) == session]
        if match is not None:
            folded = match.casefold()
            chosen = [r for r in chosen if folded in r.text.casefold() or folded in r.summary.casefold()]
        return _unique(chosen), True

    def _session_of(self, record: Record) -> str | None:
        if record.kind == "message":
            return self.messages[record.id][0].stem
        return next((e.session for e in self.logs if e.id == record.id), None)

    def _topic_messages(self, topic_id: str, scope: str | None) -> list[str] | None:
        """The message ids of a live or archived topic in the scope, or None when there is none."""
        path = topicfile.topic_path(self.store, topic_id)
        topic = topicfile.load_topic(path, source=self.store.relative(path))
        if topic is not None:
            return [m["id"] for m in topic.messages] if scope is None or topic.scope == scope else None
        for header in topicfile.archived_topics(self.store, scope=scope):
            if header["id"] == topic_id:
                return list(header.get("message_ids", []))
        return None


def _unique(records: list[Record]) -> list[Record]:
    seen: dict[tuple[str, str, str], Record] = {}
    for record in records:
        seen.setdefault((record.kind, record.id, record.file), record)
    return list(seen.values())


def _log_entries(path: Path) -> list[_LogEntry]:
    """The entries of a daily log, as the index reads them (memctl/index/units.py log_units)."""
    lines = read_file(path).decode("utf-8", errors="replace").split("\n")
    out, heading, body = [], None, []
    for number, line in enumerate(lines + ["### end"], 1):
        if line.startswith("### ") or number == len(lines) + 1:
            if heading is not None:
                start, (_, _, session, record_id, scope) = heading
                out.append(_LogEntry(record_id, session, scope, path, start,
                                     memoryfile.unescape_body("\n".join(body).strip("\n"))))
            match = LOG_HEADING.match(line) if line.startswith("### ") else None
            heading, body = ((number, match.groups()) if match else None), []
        elif heading is not None:
            body.append(line)
    return out


def _without_log_entries(path: Path, ids: set[str]) -> bytes | None:
    """A daily log without the entries of `ids` (heading to the next heading), None if it holds none;
    b"" when nothing but its title would be left."""
    lines = read_file(path).decode("utf-8", errors="replace").split("\n")
    kept, dropping, dropped, entries_left = [], False, False, 0
    for line in lines:
        if line.startswith("### "):
            match = LOG_HEADING.match(line)
            dropping = bool(match and match.group(4) in ids)
            dropped = dropped or dropping
            entries_left += not dropping
        if not dropping:
            kept.append(line)
    if not dropped:
        return None
    return "\n".join(kept).encode("utf-8") if entries_left else b""


# -- forgetting ------------------------------------------------------------------------------------
class _Forgetting:
    """The edits of one forget, file by file, inside its transaction."""

    def __init__(self, store: Store, tx, found: _Found, chosen: list[Record], report: Forgotten,
                 settings: config.Settings, now: str):
        self.store, self.tx, self.found, self.report, self.settings = store, tx, found, report, settings
        self.message_ids = {r.id for r in chosen if r.kind in ("message", "log")}
        self.memory_ids = {r.id for r in chosen if r.kind == "memory"}
        self.pending_ids = {r.id for r in chosen if r.kind == "pending"}
        self.chosen = chosen
        self.replaced: dict[str, list[str]] = {}  # forgotten memory id -> what it superseded
        self.now = now  # the stamp of every change this forget logs

    def run(self) -> None:
        self._sessions()
        self._daily_logs()
        self._memories()
        self._pending()
        topics = self._topics()
        self._archived(topics)
        self._auto_summaries(topics)
        self._governance_log()

    def _write(self, path: Path, data: bytes | None) -> None:
        """Replace a file, or remove it when `data` is empty (None: unchanged)."""
        if data is None:
            return
        if data:
            self.tx.replace(path, data)
        else:
            self.tx.delete(path)
        self.report.files.append(self.store.relative(path))

    def _sessions(self) -> None:
        paths = {self.found.messages[m][0] for m in self.message_ids if m in self.found.messages}
        for path in sorted(paths):
            kept = [line.raw for line in jsonl.read(path, unterminated=True)
                    if line.value is None or line.value.get("id") not in self.message_ids]
            self._write(path, b"".join(_bytes(raw) + b"\n" for raw in kept))

    def _daily_logs(self) -> None:
        for path in self.store.daily_logs():
            self._write(path, _without_log_entries(path, self.message_ids))

    def _memories(self) -> None:
        """Entries out of MEMORY.md and deleted/*.md; the links to them relinked (G6 chains)."""
        docs = [(self.store.memory_md, self.found.memory), *self.found.deleted.items()]
        replaced = self.replaced
        replaced.update({e.id: supersedes_of(e) for _, doc in docs for e in doc.entries if e.id in self.memory_ids})
        for path, doc in docs:
            changed = False
            for entry in list(doc.entries):
                if entry.id in self.memory_ids:
                    doc.remove(entry)
                    changed = True
                elif any(old in replaced for old in supersedes_of(entry)):
                    linked = _relinked(supersedes_of(entry), replaced)
                    if linked:
                        entry.set("supersedes", linked)
                    else:
                        entry.fields.pop("supersedes", None)
                        entry.raw = None
                    self.report.repointed.append({"id": entry.id, "supersedes": linked})
                    changed = True
            if changed:
                text = doc.render()
                self._write(path, text.encode("utf-8") if text.strip() or path == self.store.memory_md else b"")

    def _pending(self) -> None:
        replaced = self.replaced
        lines, changed = [], False
        for line in jsonl.read(self.store.pending_file, unterminated=True):
            item = line.value
            if item is not None and item.get("id") in self.pending_ids:
                changed = True
                continue
            fields = item.get("fields") if item is not None else None
            if isinstance(fields, dict) and any(old in replaced for old in supersedes_of(fields)):
                linked = _relinked(supersedes_of(fields), replaced)
                fields = {k: v for k, v in fields.items() if k != "supersedes"} | (
                    {"supersedes": linked} if linked else {})
                item = {**item, "fields": fields}
                self.report.repointed.append({"id": item["id"], "supersedes": linked})
                changed = True
                lines.append(orjson.dumps(item))
            else:
                lines.append(_bytes(line.raw))
        if changed:
            self._write(self.store.pending_file, b"".join(raw + b"\n" for raw in lines))

    def _topics(self) -> dict[str, topicfile.Topic]:
        """Forgotten messages out of the topic files; the touched topics named and summarised anew."""
        from memctl.text.tokens import count_tokens
        from memctl.topics.summary import summarise

        topics = topicfile.load_topics(self.store)
        touched = []
        for topic in topics.values():
            kept = [m for m in topic.messages if m.get("id") not in self.message_ids]
            if len(kept) != len(topic.messages):
                topic.messages = kept
                touched.append(topic)
        for topic in touched:
            path = topicfile.topic_path(self.store, topic.id)
            if not topic.messages:
                del topics[topic.id]
                self._write(path, b"")
        for topic in touched:
            if topic.id not in topics:
                continue
            name, summary = summarise(topic.messages, self._background(topics, topic.scope),
                                      self.settings.topics.summary_bytes)
            topic.header.update(name=name, summary=summary, messages=len(topic.messages),
                                tokens=sum(count_tokens(m.get("text", "")) for m in topic.messages))
            topicfile.rewrite_topic(self.tx, self.store, topic)
            self.report.files.append(self.store.relative(topicfile.topic_path(self.store, topic.id)))
            self.report.regenerated.append(topic.id)
        return topics

    def _archived(self, topics: dict[str, topicfile.Topic]) -> None:
        from memctl.topics.summary import summarise

        for header in topicfile.archived_topics(self.store):
            ids = header.get("message_ids", [])
            if not any(mid in self.message_ids for mid in ids):
                continue
            path = topicfile.archived_path(self.store, header)
            kept = [mid for mid in ids if mid not in self.message_ids]
            messages = [self.found.messages[mid][2] for mid in kept if mid in self.found.messages]
            if not kept:
                self._write(path, b"")
                continue
            name, summary = summarise(messages, self._background(topics, topicfile.archived_scope(self.store, header)),
                                      self.settings.topics.summary_bytes) if messages else ("", "")
            header = {**header, "message_ids": kept, "name": name, "summary": summary}
            self._write(path, orjson.dumps(header) + b"\n")
            self.report.regenerated.append(header["id"])

    def _auto_summaries(self, topics: dict[str, topicfile.Topic]) -> None:
        """An idle session's summary that covered a forgotten message, summarised anew from the rest."""
        from memctl.topics.daily import AUTO_SUMMARIES, session_summary

        path = self.store.path(AUTO_SUMMARIES)
        by_session: dict[str, list[dict]] = {}
        for session_path, _, message in self.found.messages.values():
            by_session.setdefault(session_path.stem, []).append(message)
        touched = {self.found.messages[m][0].stem for m in self.message_ids if m in self.found.messages}
        out, changed = [], False
        for line in jsonl.read(path, unterminated=True):
            summary = line.value
            if summary is None or summary.get("session") not in touched:
                out.append(_bytes(line.raw))
                continue
            changed = True
            messages = by_session.get(summary["session"], [])
            order = [m["id"] for m in messages]
            until = order.index(summary["until"]) if summary.get("until") in order else len(order) - 1
            covered = [m for m in messages[:until + 1] if m["id"] not in self.message_ids]
            if not covered:
                continue
            scope = self.found.session_scopes.get(summary["session"])
            keywords, text = session_summary(covered, self._background(topics, scope))
            out.append(orjson.dumps({**summary, "until": covered[-1]["id"], "keywords": keywords, "summary": text}))
            self.report.regenerated.append(f"{AUTO_SUMMARIES}:{summary['session']}")
        if changed:
            self._write(path, b"".join(raw + b"\n" for raw in out))

    def _governance_log(self) -> None:
        """Old lines keep their ids but lose a copy of a forgotten memory's summary; one line a record."""
        path = governance.log_path(self.store)
        out, changed = [], False
        for line in jsonl.read(path, unterminated=True):
            record = line.value
            if record is not None and "summary" in record and record.get("id") in self.memory_ids:
                out.append(orjson.dumps({k: v for k, v in record.items() if k != "summary"}))
                changed = True
            else:
                out.append(_bytes(line.raw))
        if changed:
            self._write(path, b"".join(raw + b"\n" for raw in out))
        self.tx.append(path, governance.log_records(
            [{"ts": self.now, "action": "forget", "id": r.id, "kind": r.kind} for r in self.chosen]))

    def _background(self, topics: dict[str, topicfile.Topic], scope: str | None):
        from memctl.topics.summary import background_of

        return background_of(t.messages for t in topics.values() if t.scope == scope)


def _relinked(olds: list[str], replaced: dict[str, list[str]]) -> list[str]:
    """A supersedes list with each forgotten id replaced by what it superseded, followed through
    forgotten ids in turn (a loop written by hand ends where it closes)."""
    out: list[str] = []

    def follow(ids: list[str], seen: frozenset[str]) -> None:
        for old in ids:
            if old not in replaced:
                out.append(old)
            elif old not in seen:
                follow(replaced[old], seen | {old})

    follow(olds, frozenset())
    return list(dict.fromkeys(out))


def _bytes(raw: bytes | str) -> bytes:
    return raw.encode("utf-8") if isinstance(raw, str) else raw


def residue(store: Store, texts: list[str]) -> list[str]:
    """Files of the store (not .index/) that still hold one of `texts`, case folded. A text shorter
    than RESIDUE_MIN_CHARS is not looked for: found by chance, it would say nothing."""
    wanted = {t.casefold() for t in texts if len(t.strip()) >= RESIDUE_MIN_CHARS}
    if not wanted:
        return []
    found = []
    for folder, folders, files in os.walk(store.root):
        here = Path(folder)
        folders[:] = sorted(d for d in folders if not (here == store.root and d in _NOT_SEARCHED))
        for name in sorted(files):
            path = here / name
            # a link or a FIFO (a handed-over store may hold one) is not read: a FIFO would block
            if here == store.root and name in _NOT_SEARCHED or path.is_symlink() or not path.is_file():
                continue
            try:
                content = path.read_bytes().decode("utf-8", errors="replace").casefold()
            except OSError:
                continue
            # JSON files hold a text with its quotes and non-ASCII escaped: look for that form too
            if any(t in content or orjson.dumps(t).decode()[1:-1].casefold() in content for t in wanted):
                found.append(store.relative(path))
    return found


def _scrub_index(rt: Runtime) -> str:
    from memctl.index import open_index

    index = open_index(rt)
    if not index.summary()["built"]:
        return "none yet"
    report = index.scrub()
    return report.reason or f"written anew: {report.units} units, {report.removed} removed, {report.changed} changed"
