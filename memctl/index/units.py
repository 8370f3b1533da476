"""What the index holds: the store's files cut into searchable units.

A memory entry, a message and a daily-log entry are each a unit; a long one
is cut into overlapping chunks (P9 token counts). Each unit carries what
search filters and ranks on, and a content hash, so that re-indexing touches
only what changed (P2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Container, Iterator

import orjson

from memctl.clock import epoch_or_none
from memctl.store import memoryfile
from memctl.store.sessions import LOG_HEADING, iter_messages, log_scope, message_scope
from memctl.store.store import Store, read_file
from memctl.text.tokens import count_tokens, estimate_tokens, last_tokens, truncate_tokens

CHUNK_TOKENS = 200    # the embedding model reads 256 word pieces; cl100k tokens run a little longer
CHUNK_OVERLAP = 40
# The turn before a message is read with it (the model and BM25) only as far as its last this many
# tokens: the model reads 256 word pieces of "turn before + message", so after a long reply (an
# assistant's: median 391 tokens on LongMemEval) the user's own words were cut off and its vector
# was the reply's. LoCoMo's longest turn is 93 tokens, so no LoCoMo unit changes.
CONTEXT_TOKENS = 100
# A message is read with the turn before it only when that turn was said at most this long before:
# later, it is another conversation (P8 ends a session idle an hour), and a person's notes of one
# day, hours apart, are each their own thought. Read with the one before, a fact was half its
# vector: one person's facts asked in other words, gate off, hit@3 dev .487 -> .525, held out
# .600 -> .700 (bench/README.md, "Issue 33, fourth pass"). Chats' turns come seconds to minutes
# apart: LoCoMo's and LongMemEval's units do not change.
TURN_GAP_SECONDS = 3600.0


@dataclass
class Unit:
    id: str                 # the record's id; chunks of a long record add "#2", "#3", ...
    record_id: str          # the message or memory id the unit came from
    kind: str               # memory | message | log | topic
    text: str
    source: str             # file relative to the store
    line_start: int
    line_end: int
    section: str | None = None
    session: str | None = None
    speaker: str | None = None
    ts: str | None = None
    scope: str = "global"
    fields: dict[str, Any] = field(default_factory=dict)  # a memory's schema fields
    context: str | None = None  # the turn before a message, read with it by the model and BM25
    context_id: str | None = None  # that turn's record id: its search credits it with this one's vector

    def as_record(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    @property
    def digest(self) -> str:
        """Changes whenever anything search depends on changes."""
        return hashlib.sha1(orjson.dumps(self.as_record(), option=orjson.OPT_SORT_KEYS)).hexdigest()


def collect(store: Store, skipped: list[str] | None = None) -> Iterator[Unit]:
    """Every unit of the store, memories first, in file order; lines of session files passed
    over go to `skipped` (see iter_messages)."""
    yield from memory_units(store)
    message_ids = set()
    for unit in message_units(store, skipped=skipped):
        message_ids.add(unit.record_id)
        yield unit
    # A daily log repeats what users said; only its entries that are not also
    # a stored message (written by hand, or from elsewhere) are units of their own.
    yield from log_units(store, skip=message_ids)
    yield from topic_units(store)


def topic_units(store: Store, paths: list[Path] | None = None) -> Iterator[Unit]:
    """A topic is found by its name and summary (T1), in its scope; its messages are units already.
    A topic in no one scope (an old one holding several scopes' messages) is found by none."""
    from memctl.store.topicfile import load_topic, load_topics

    topics = load_topics(store).values() if paths is None else filter(None, map(load_topic, paths))
    for topic in topics:
        header = topic.header
        text = f"{header.get('name', '')}\n{header.get('summary', '')}".strip()
        if text and topic.scope is not None:
            yield from _chunks(Unit(
                id=topic.id, record_id=topic.id, kind="topic", text=text,
                source=store.relative(store.topics_dir / f"{topic.id}.jsonl"), line_start=1, line_end=1,
                ts=_text_or_none(header.get("updated")), scope=topic.scope,
                fields={"state": header.get("state"), "messages": header.get("messages")}))


def memory_units(store: Store) -> Iterator[Unit]:
    from memctl.store.status import active_tails, is_current

    doc = memoryfile.load(store.memory_md)
    source = store.relative(store.memory_md)
    tails = set(active_tails(doc))
    for entry in doc.entries:
        if not entry.text.strip():
            continue
        end = entry.line + len((entry.raw or "").rstrip("\n").split("\n")) - 1
        scope = entry.get("scope")
        fields = {k: v for k, v in entry.fields.items() if k != "id"}
        # A current entry that a current one supersedes (a chain edited by hand, say) is
        # searched as superseded: search returns only the tails of chains (G6).
        if is_current(entry) and entry.id not in tails:
            fields["status"] = "superseded"
        base = Unit(id=entry.id, record_id=entry.id, kind="memory", text=entry.text, source=source,
                    line_start=entry.text_line, line_end=max(end, entry.text_line), section=entry.section,
                    ts=entry.get("created_at"), scope=scope if isinstance(scope, str) else "global",
                    fields=fields)
        yield from _chunks(base)


def message_units(store: Store, paths: list[Path] | None = None, *,
                  skipped: list[str] | None = None) -> Iterator[Unit]:
    """The units of the session files (all of them, or the given ones); lines passed over go to
    `skipped` (see iter_messages)."""
    previous: dict[Path, tuple[str, str, float | None]] = {}  # path -> (id, text, epoch) of the last message read
    relative: dict[Path, str] = {}
    for path, number, message in iter_messages(store, paths, skipped=skipped):
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            continue
        speaker = _text_or_none(message.get("speaker")) or _text_or_none(message.get("role"))
        said = epoch_or_none(_text_or_none(message.get("ts")))  # as the index reads the unit's ts
        context_id, context, before = previous.get(path, (None, None, None))
        if said is not None and before is not None and said - before > TURN_GAP_SECONDS:
            context_id = context = None
        previous[path] = (message["id"], last_tokens(f"{speaker}: {text}" if speaker else text, CONTEXT_TOKENS), said)
        yield from _chunks(Unit(
            id=message["id"], record_id=message["id"], kind="message", text=text,
            source=relative.get(path) or relative.setdefault(path, store.relative(path)),
            line_start=number, line_end=number,
            session=_text_or_none(message.get("session")), speaker=_text_or_none(message.get("speaker")),
            ts=_text_or_none(message.get("ts")), scope=message_scope(message), context=context,
            context_id=context_id, fields={"role": message.get("role")}))


def log_units(store: Store, skip: Container[str], paths: list[Path] | None = None,
              entries: dict[Path, list[LogEntry]] | None = None) -> Iterator[Unit]:
    """The units of the daily logs (all, or the given ones; `entries`: those read_logs read already).

    A daily log repeats what users said; only its entries whose id is not in
    `skip`, the stored messages, (written by hand, or from elsewhere) are units of their own.
    """
    session_scopes: dict[str, str] = {}
    for path in store.daily_logs() if paths is None else paths:
        day = path.stem
        read = entries[path] if entries is not None and path in entries else _log_entries(read_file(path))
        for start, (clock, speaker, session, record_id, scope), body in read:
            if record_id not in skip and "\n".join(body).strip():
                text = memoryfile.unescape_body("\n".join(body).strip("\n"))
                yield from _chunks(Unit(
                    id=record_id, record_id=record_id, kind="log", text=text, source=store.relative(path),
                    line_start=start, line_end=start + len(body), session=session, speaker=speaker,
                    ts=f"{day}T{clock}", scope=log_scope(store, scope, session, session_scopes)))


# heading's line, (clock, speaker, session, id, scope or None: written before scopes), body
LogEntry = tuple[int, tuple[str, str, str, str, str | None], list[str]]
# Where a daily log's last entry begins: its byte offset, its line number, and the sha1 of the
# bytes before it. A log only appended to since is read from there (read_logs).
LogTail = tuple[int, int, str]


@dataclass
class LogsRead:
    entries: dict[Path, list[LogEntry]]  # each log's entries, from its first line or from its tail
    first_line: dict[Path, int]          # the line each was read from: 1, or its tail's
    tails: dict[Path, LogTail]           # where each now ends, for the next read


def read_logs(paths: list[Path], tails: dict[Path, LogTail] | None = None) -> LogsRead:
    """The entries of these daily logs, read once for log_ids and log_units (an update read
    today's log twice: 2,000 lines, ~8 ms of a 50k store's update; bench/README.md "Cited measurements").

    A log whose bytes before its known tail (`tails`) are those of the last read, their sha1
    says, is parsed from the tail on: the day's log an agent appends to grows all day (7,900
    lines, 13.5 ms to parse; bench/README.md "Cited measurements"), and an edit anywhere before the tail
    changes the sha1,
    so that the log is read whole. The tail is the last entry's heading, since an append may
    continue that entry's body."""
    read = LogsRead({}, {}, {})
    for path in paths:
        data = read_file(path)
        offset, line, digest = _tail((tails or {}).get(path))
        if not (0 < offset <= len(data) and hashlib.sha1(data[:offset]).hexdigest() == digest):
            offset, line = 0, 1
        read.entries[path] = list(_log_entries(data[offset:], line))
        read.first_line[path] = line
        last = data.rfind(b"\n### ", offset) + 1  # 0: no heading after the tail's first line
        if last:
            read.tails[path] = (last, line + data.count(b"\n", offset, last), hashlib.sha1(data[:last]).hexdigest())
        elif offset:
            read.tails[path] = (offset, line, digest)
    return read


def _tail(known) -> LogTail:
    """A kept tail as read back from the manifest, or none (0, 1, "") when it is not one."""
    if isinstance(known, (list, tuple)) and len(known) == 3 and all(map(isinstance, known, (int, int, str))):
        return tuple(known)
    return 0, 1, ""


def log_ids(entries: dict[Path, list[LogEntry]]) -> list[str]:
    """The record ids the entries of these daily logs name in their headings."""
    return [record_id for found in entries.values() for _, (_, _, _, record_id, _), _ in found]


def _log_entries(data: bytes, first_line: int = 1) -> Iterator[LogEntry]:
    """Each entry of a daily log (`data`: its bytes from line `first_line` on, a line's start):
    a line matching LOG_HEADING and the lines up to the next "### " line."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    heading = None
    body: list[str] = []
    for number, line in enumerate(lines + ["### end"], first_line):
        if line.startswith("### "):
            if heading is not None:
                yield heading[0], heading[1], body
            match = LOG_HEADING.match(line)
            heading = (number, match.groups()) if match else None
            body = []
        elif heading is not None:
            body.append(line)


def _chunks(unit: Unit) -> Iterator[Unit]:
    """The unit itself, or overlapping chunks of it when its text is long."""
    # No more UTF-8 bytes than tokens allowed means it fits: a token is at least a byte.
    if (len(unit.text.encode()) <= CHUNK_TOKENS or estimate_tokens(unit.text) <= CHUNK_TOKENS
            or count_tokens(unit.text) <= CHUNK_TOKENS):
        yield unit
        return
    rest, part = unit.text, 1
    while rest:
        piece = truncate_tokens(rest, CHUNK_TOKENS)
        cut = _soft_cut(piece) if len(piece) < len(rest) else len(piece)
        piece = rest[:cut]
        chunk = Unit(**{**unit.__dict__, "text": piece.strip(), "fields": dict(unit.fields)})
        if part > 1:
            chunk.id = f"{unit.id}#{part}"
        yield chunk
        if cut >= len(rest):
            break
        overlap = cut * CHUNK_OVERLAP // CHUNK_TOKENS  # characters, in proportion to the tokens
        rest = rest[max(1, cut - overlap):]
        part += 1


def _soft_cut(piece: str) -> int:
    """Cut at the last sentence or line end of the piece's second half, if any."""
    for mark in ("\n\n", "\n", "。", ". ", "！", "？", "! ", "? "):
        at = piece.rfind(mark, len(piece) // 2)
        if at > 0:
            return at + len(mark)
    return len(piece)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
