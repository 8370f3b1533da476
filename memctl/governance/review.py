"""Pending memories (P5): list, confirm into MEMORY.md, reject, drop expired.

`memctl ingest --pending` holds notes in pending.jsonl, one a line:

    {"id", "section", "text", "fields": {...}, "pending_since", "expires_at"}

Confirming writes the note to MEMORY.md exactly as `ingest --kind memory`
would (supersedes links applied, canonical_topic conflicts refused unless
allowed) and removes its line from pending.jsonl, in one transaction. Every
other line of pending.jsonl is kept byte for byte, hand edits included.

A pending note is in a scope, its `fields.scope` (written at ingest from
--scope or the note's own; global without one), as it will be in MEMORY.md.
Given a scope, each step sees only that scope's notes (global ones too belong
to nobody in particular, so they are not one user's to confirm): another
scope's id is unknown there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from memctl import clock
from memctl import config
from memctl.governance import governance
from memctl.governance.governance import NoteReport
from memctl.store import status
from memctl.store import memoryfile
from memctl.errors import InputError
from memctl.store import jsonl
from memctl.store.store import Store
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:
    from memctl.runtime import Runtime

SOURCE = "pending.jsonl"


@dataclass
class Pending:
    line: int
    raw: bytes                  # the line as stored, without its newline
    item: dict[str, Any] | None  # None: not a JSON object with a text id

    @property
    def id(self) -> str | None:
        return self.item["id"] if self.item else None

    def expires(self) -> datetime | None:
        value = self.item.get("expires_at") if self.item else None
        try:
            return clock.parse_ts(value) if isinstance(value, str) else None
        except ValueError:
            return None

    def expired(self, now: datetime) -> bool:
        expires = self.expires()
        return expires is not None and expires <= now

    def row(self, now: datetime) -> "PendingRow":
        item = self.item or {}
        fields = item.get("fields") if isinstance(item.get("fields"), dict) else {}
        since, expires = item.get("pending_since"), self.expires()
        try:
            age = clock.age_days(since, now) * 24 if isinstance(since, str) else None
        except ValueError:
            age = None
        left = None if expires is None else (expires - now).total_seconds() / 3600
        return PendingRow(self.id, self.line, item.get("section"), fields.get("summary"), item.get("text"), since,
                          item.get("expires_at"), age, left)


@dataclass
class PendingRow(Shape):
    """A pending memory, waiting for the user's confirmation."""
    id: str = shown()
    line: int = shown("Its line in pending.jsonl.")
    section: str | None = shown()
    summary: str | None = shown()
    text: str | None = shown()
    pending_since: str | None = shown()
    expires_at: str | None = shown()
    age_hours: float | None = shown(digits=2)
    left_hours: float | None = shown("Hours until it expires.", digits=2)


@dataclass
class ExpiredRow(Shape):
    """A pending memory whose time ran out, dropped."""
    id: str = shown()
    line: int = shown("Its line in pending.jsonl.")
    expires_at: str = shown()


@dataclass
class RejectedRow(Shape):
    """A pending memory dropped at the user's word."""
    id: str = shown()
    status: Literal["rejected"] = shown(default="rejected")


@dataclass
class ConfirmedRow(Shape):
    """A pending memory written to MEMORY.md."""
    id: str = shown()
    status: Literal["confirmed", "duplicate"] = shown("duplicate: MEMORY.md already had it.")
    file: str = shown()
    governance: NoteReport | None = shown(flatten=True, default=None)


def pending_scope(item: dict[str, Any]) -> str:
    """The scope of a pending note (a line of pending.jsonl, parsed)."""
    fields = item.get("fields")
    return memoryfile.note_scope(fields if isinstance(fields, dict) else {})


def _in_scope(p: Pending, scope: str | None) -> bool:
    return scope is None or (p.item is not None and pending_scope(p.item) == scope)


def read(store: Store) -> list[Pending]:
    """Every non-blank line of pending.jsonl, parsed where possible (a last line without newline too)."""
    return [Pending(line.number, line.raw, line.value if line.value is not None
                    and isinstance(line.value.get("id"), str) else None)
            for line in jsonl.read(store.pending_file, unterminated=True)]


def _rewrite(store: Store, tx, items: list[Pending], drop: set[int]) -> None:
    """pending.jsonl without the lines numbered in `drop`; the rest unchanged."""
    kept = [p.raw + b"\n" for p in items if p.line not in drop]
    tx.replace(store.pending_file, b"".join(kept))


def drop_expired(rt: Runtime, *, dry_run: bool = False, scope: str | None = None) -> list[dict]:
    """Remove every expired pending memory (of `scope`, if given), in one transaction; returns what was
    (or would be) dropped."""
    store, now = rt.store, rt.clock.now()
    if not store.pending_file.exists():
        return []
    with store.transaction(dry_run=dry_run) as tx:
        items = read(store)
        gone = [p for p in items if p.expired(now) and _in_scope(p, scope)]
        if gone:
            _rewrite(store, tx, items, {p.line for p in gone})
            stamp = clock.format_ts(now)
            tx.append(governance.log_path(store), governance.log_records(
                [{"ts": stamp, "action": "expire", "id": p.id, "expires_at": p.item["expires_at"]} for p in gone]))
    return [ExpiredRow(p.id, p.line, p.item["expires_at"]).as_dict() for p in gone]


def listing(rt: Runtime, scope: str | None = None) -> list[dict]:
    """Pending memories (of `scope`, if given) that have not expired, in file order, with age and time
    left (hours)."""
    store, now = rt.store, rt.clock.now()
    store.require()
    with store.reading():
        items = read(store)
    return [p.row(now).as_dict() for p in items
            if p.item is not None and not p.expired(now) and _in_scope(p, scope)]


def _pick(items: list[Pending], ids: list[str], now: datetime, scope: str | None = None) -> list[Pending]:
    by_id: dict[str, Pending] = {}
    for p in items:
        if p.id is not None and _in_scope(p, scope):  # another scope's note is not there for this one
            by_id.setdefault(p.id, p)
    picked = []
    for memory_id in dict.fromkeys(ids):
        p = by_id.get(memory_id)
        if p is None:
            where = f" in scope {scope}" if scope is not None else ""
            raise InputError(f"no pending memory with id '{memory_id}'{where} (see: memctl review pending)",
                             source=SOURCE)
        if p.expired(now):
            raise InputError(f"pending memory '{memory_id}' expired at {p.item['expires_at']}",
                             source=SOURCE, line=p.line)
        picked.append(p)
    return picked


def confirm(rt: Runtime, ids: list[str], *, dry_run: bool = False, allow_conflict: bool = False,
            supersedes: list[str] | None = None, scope: str | None = None) -> list[dict]:
    """Write pending memories to MEMORY.md and remove them from pending.jsonl, all in one transaction.

    Raises InputError (nothing written) for an unknown or expired id, a bad
    field, or a governance refusal (see governance.apply_notes).
    Returns one record a memory: {"id", "status": "confirmed"|"duplicate", "file", ...governance}.
    """
    store, settings, now = rt.store, rt.settings, rt.clock.now()
    if supersedes and len(set(ids)) != 1:
        raise InputError("names what one memory replaces; confirm one id with it", source="--supersedes")
    if not store.pending_file.exists():
        _pick([], ids, now, scope)  # raises: nothing is pending (and no store is created to say so)
    with store.transaction(dry_run=dry_run) as tx:
        items = read(store)
        picked = _pick(items, ids, now, scope)
        doc = memoryfile.load(store.memory_md)
        notes, out = [], []
        for p in picked:
            note = note_of(p, settings.ingest, now, supersedes)
            existing = doc.find(p.id)
            if existing is not None:
                if existing.text != note["text"]:
                    raise InputError(f"id '{p.id}' is already in MEMORY.md with different text",
                                     source=SOURCE, line=p.line, field="id")
                out.append(ConfirmedRow(p.id, "duplicate", store.relative(store.memory_md)).as_dict())
                continue
            notes.append((p.line, note))
        reports, log = governance.apply_notes(doc, notes, source=SOURCE, allow_conflict=allow_conflict,
                                              now=now, governance_settings=settings.governance)
        if notes:
            tx.replace(store.memory_md, doc.render().encode("utf-8"))
        names = {p.id for p in picked}
        _rewrite(store, tx, items, {p.line for p in items if p.id in names and _in_scope(p, scope)})
        stamp = clock.format_ts(now)
        log += [{"ts": stamp, "action": "confirm", "id": p.id} for p in picked]
        tx.append(governance.log_path(store), governance.log_records(log))
        for _, note in notes:
            out.append(ConfirmedRow(note["id"], "confirmed", store.relative(store.memory_md),
                                    reports[note["id"]]).as_dict())
    order = {memory_id: n for n, memory_id in enumerate(dict.fromkeys(ids))}
    out.sort(key=lambda r: order[r["id"]])
    return out


def note_of(p: Pending, ingest_settings: config.Ingest, now: datetime, supersedes: list[str] | tuple = ()) -> dict:
    """The note a pending line would write to MEMORY.md (made `now` if it names no time), checked as
    `ingest` checks one; InputError names the line and field. `memctl health` calls this too, so it
    reports exactly what confirm would refuse."""
    from memctl.store.notes import complete_note

    item = p.item
    fields = item.get("fields", {})
    if not isinstance(fields, dict):
        raise InputError("must be an object of schema fields", source=SOURCE, line=p.line, field="fields")
    bad_names = sorted(name for name in fields if not memoryfile.FIELD_NAME.fullmatch(name))
    if bad_names:  # unknown fields are kept, as in MEMORY.md; a name a metadata block cannot hold is not
        raise InputError("not a field name", source=SOURCE, line=p.line, field=f"fields.{bad_names[0]}")
    text, section = item.get("text"), item.get("section", ingest_settings.default_section)
    if not isinstance(text, str) or not text.strip():
        raise InputError("must be non-empty text", source=SOURCE, line=p.line, field="text")
    if not isinstance(section, str) or not section.strip() or "\n" in section:
        raise InputError("must be one line of text", source=SOURCE, line=p.line, field="section")
    fields = dict(fields, id=p.id)
    if supersedes:
        fields["supersedes"] = list(dict.fromkeys([*status.supersedes_of(fields), *supersedes]))
    return complete_note(fields, text.strip(), section.strip(), ingest_settings, SOURCE, p.line, now)


def reject(rt: Runtime, ids: list[str], *, dry_run: bool = False, scope: str | None = None) -> list[dict]:
    """Remove pending memories without writing them anywhere (logged). Unknown or expired id, or one of
    another scope than `scope`: InputError."""
    store, now = rt.store, rt.clock.now()
    if not store.pending_file.exists():
        _pick([], ids, now, scope)
    with store.transaction(dry_run=dry_run) as tx:
        items = read(store)
        picked = _pick(items, ids, now, scope)
        names = {p.id for p in picked}
        _rewrite(store, tx, items, {p.line for p in items if p.id in names and _in_scope(p, scope)})
        stamp = clock.format_ts(now)
        tx.append(governance.log_path(store), governance.log_records(
            [{"ts": stamp, "action": "reject", "id": p.id} for p in picked]))
    return [RejectedRow(p.id).as_dict() for p in picked]
