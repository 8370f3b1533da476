"""`ingest`: messages into sessions and daily logs, notes into MEMORY.md or pending.

An invocation is all or nothing: the whole input is read and checked before
the store is touched, and the writes happen in one store transaction.

Scopes (G7, SPEC X3): a session is in one scope, and so is every message of
it. A new session takes `--scope`, else the scope its records name (all alike),
else [ingest] default_scope; a stored session keeps its own. A record naming
another scope than its session's, or than --scope, is refused (exit 2): one
person's messages filed under another's session would be shown to the wrong
person. `--scope` also scopes the notes that name none.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

import orjson

from memctl import clock
from memctl import config
from memctl.ingest import inputs
from memctl.store import jsonl
from memctl.store.jsonl import json_type
from memctl.store.notes import complete_note, derived_id, normal_ts
from memctl.store import memoryfile
from memctl.errors import InputError
from memctl.store.memoryfile import check_field
from memctl.text.noise import noise_reason
from memctl.text.shape import Shape, shown
from memctl.store.sessions import append_daily_log, item_scope, load_ids, message_line, stored_session_scope
from memctl.store.store import Store, check_name, check_scope

if TYPE_CHECKING:
    from memctl.governance.governance import NoteReport
    from memctl.runtime import Runtime

_MESSAGE_KEYS = ("id", "session", "scope", "role", "speaker", "ts", "text")
_NOTE_KEYS = {"id", "text", "content", "section", "ts"} | set(memoryfile.FIELD_ORDER)
_LOGGED_ROLES = (None, "user", "human")


@dataclass
class Outcome(Shape):
    """What became of one input record (a line of `memctl ingest --json`)."""
    id: str = shown("The record's id.")
    kind: Literal["message", "memory", "pending"] = shown("pending: a note waiting for the user's confirmation.")
    status: Literal["stored", "duplicate", "noise"] = shown("noise: dropped by the noise filter.")
    line: int = shown("Its line in the input.")
    file: str = shown("The store file it went to.", omit="empty", default="")
    reason: str = shown("For noise: which kind (greeting, ...).", omit="empty", default="")
    governance: NoteReport | None = shown("For notes: what governance found.", flatten=True, default=None)


@dataclass
class IngestResult:
    outcomes: list[Outcome] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # kept, but worth a look: "file:line: what"

    @property
    def stored(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "stored"]


def ingest(rt: Runtime, data: bytes, *, source: str = "<stdin>", fmt: str = "auto", kind: str = "auto",
           session: str | None = None, pending: bool = False, keep_noise: bool | None = None,
           ttl_hours: float | None = None, section: str | None = None, dry_run: bool = False,
           on_noise: Callable[[Outcome, str], None] | None = None, supersedes: list[str] | None = None,
           allow_conflict: bool = False, scope: str | None = None) -> IngestResult:
    """Read `data` (the bytes of `source`) and store it in `rt`'s store; see the module doc.

    Raises InputError, with the store unchanged, for any bad record. With
    dry_run, everything is checked and reported but nothing is written.

    Notes go through governance (G6, memctl/governance/governance.py): `supersedes`
    (the one note of the input replaces these ids, which become deprecated)
    and a note's own `supersedes` field are applied in the same transaction;
    a note whose canonical_topic already has a current memory is refused
    unless `allow_conflict` (pending notes are only reported: confirming
    them decides).
    """
    store, settings, now = rt.store, rt.settings, rt.clock.now()
    ingest_settings = settings.ingest
    if ttl_hours is not None:
        ttl_hours = config.check("ingest", "pending_ttl_hours", float(ttl_hours), "--ttl")
    if keep_noise is None:
        keep_noise = not ingest_settings.filter_noise
    if session is not None:
        check_name(session, "session", source="--session")
    check_scope(scope)
    text = jsonl.decode(data, source)
    if fmt == "auto":
        fmt = inputs.detect_format(text, source)
    if kind == "auto":
        kind = "memory" if (fmt == "md" or pending) else "message"
    result = IngestResult()
    items = _items(text, source, fmt, kind, session, scope, section, ingest_settings, now, result.warnings)
    if supersedes:
        _add_supersedes(items, kind, supersedes)
    item_kind = "message" if kind == "message" else ("pending" if pending else "memory")
    for line, item, _ in items:
        if len(item["text"].encode("utf-8", "surrogatepass")) > ingest_settings.max_text_bytes:
            raise InputError(f"longer than [ingest] max_text_bytes ({ingest_settings.max_text_bytes} bytes); "
                             "nothing was stored", source=source, line=line, field="text")

    kept = []
    for line, item, role in items:
        reason = None if keep_noise else noise_reason(item["text"], role)
        if reason:
            outcome = Outcome(item["id"], item_kind, "noise", line, reason=reason)
            result.outcomes.append(outcome)
            if on_noise:
                on_noise(outcome, item["text"])
        else:
            kept.append((line, item))
    with store.transaction(dry_run=dry_run) as tx:
        if kind == "message":  # under the lock: a session's stored scope is read as it stands
            _scope_messages(store, [(line, item) for line, item, _ in items], ingest_settings.default_scope, source)
        _store_items(store, tx, kept, item_kind, result, source=source, ingest_settings=ingest_settings,
                     ttl_hours=ttl_hours, allow_conflict=allow_conflict, governance_settings=settings.governance,
                     now=now)
    result.outcomes.sort(key=lambda o: o.line)
    return result


def _items(text: str, source: str, fmt: str, kind: str, session: str | None, scope: str | None,
           section: str | None, ingest_settings: config.Ingest, now: datetime,
           warnings: list[str]) -> list[tuple[int, dict, str | None]]:
    """(line, message or note, role) for every record of the input, each checked."""
    if fmt in ("chatgpt", "claude") and kind != "message":
        raise InputError(f"a {fmt} export holds messages; ingest it without --kind memory or --pending",
                         source=source)
    if kind == "message":
        if fmt == "md":
            raise InputError("a Markdown file holds notes; use --kind memory (or no --kind)", source=source)
        default_session = session or _session_from_source(source)
        equals: Counter = Counter()
        return [_message(r, source, default_session, forced=session, forced_scope=scope, equals=equals, now=now)
                for r in _records(text, source, fmt, by="line")]
    if fmt == "md":
        return _notes_from_markdown(text, source, ingest_settings, section, scope, now, warnings)
    return [_note(r, source, ingest_settings, section, scope, now, warnings)
            for r in _records(text, source, fmt, by="paragraph")]


def _named_scope(value: dict, forced: str | None, source: str, line: int) -> str | None:
    """The scope a record names (checked), else --scope's; a record naming another than --scope is refused."""
    if "scope" not in value:
        return forced
    problem = check_field("scope", value["scope"])
    if problem:
        raise InputError(problem, source=source, line=line, field="scope")
    if forced is not None and value["scope"] != forced:
        raise InputError(f"is {value['scope']}, but --scope is {forced}", source=source, line=line, field="scope")
    return value["scope"]


def _scope_messages(store: Store, items: list[tuple[int, dict]], default_scope: str, source: str) -> None:
    """Give every message its session's one scope (see the module doc): the stored session's,
    else the one its records name, else default_scope. Global is written as no field, as
    messages stored before scopes have none."""
    stored: dict[str, str | None] = {}
    named: dict[str, tuple[str, int]] = {}  # a new session -> the scope its records name, and the first line naming it
    for line, message in items:
        session = message["session"]
        if session not in stored:
            stored[session] = stored_session_scope(store, session)
        own = message["scope"]
        if own is None:
            continue
        if stored[session] is not None and own != stored[session]:
            raise InputError(f"is {own}, but session '{session}' is in scope {stored[session]}", source=source,
                             line=line, field="scope")
        first, first_line = named.setdefault(session, (own, line))
        if own != first:
            raise InputError(f"is {own}, but line {first_line} put session '{session}' in scope {first}",
                             source=source, line=line, field="scope")
    for _, message in items:
        session = message["session"]
        scope = stored[session] or named.get(session, (default_scope,))[0]
        if scope == "global":
            del message["scope"]
        else:
            message["scope"] = scope


def _add_supersedes(items: list[tuple[int, dict, str | None]], kind: str, supersedes: list[str]) -> None:
    """--supersedes: the input's one note replaces these ids (G6)."""
    if kind != "memory":
        raise InputError("applies to notes (--kind memory)", source="--supersedes")
    if len(items) != 1:
        raise InputError(f"names what one note replaces; the input has {len(items)} notes", source="--supersedes")
    fields = items[0][1]["fields"]
    fields["supersedes"] = list(dict.fromkeys([*fields.get("supersedes", []), *supersedes]))
    problem = check_field("supersedes", fields["supersedes"])
    if problem:
        raise InputError(problem, source="--supersedes")


def _store_items(store: Store, tx, kept: list[tuple[int, dict]], item_kind: str, result: IngestResult, *,
                 source: str, ingest_settings: config.Ingest, ttl_hours: float | None, allow_conflict: bool,
                 governance_settings: config.Governance, now: datetime) -> None:
    """Write what is new under the store lock; an id already stored with other text is an error."""
    memory = memoryfile.load(store.memory_md)  # parsed once: for the ids and for the notes' write
    existing = load_ids(store, memory, {item["id"] for _, item in kept})
    new: dict[str, tuple[int, dict]] = {}
    for line, item in kept:
        known = existing.get(item["id"]) or ((new[item["id"]][1]["text"], item_scope(new[item["id"]][1]))
                                             if item["id"] in new else None)
        if known is None:
            new[item["id"]] = (line, item)
            continue
        if known[1] != item_scope(item):  # ids are one namespace; say nothing of the other scope's text
            raise InputError(f"id '{item['id']}' is taken in another scope; give this one another id",
                             source=source, line=line, field="id")
        if known[0] != item["text"]:
            raise InputError(f"duplicate id '{item['id']}' with different text", source=source,
                             line=line, field="id")
        result.outcomes.append(Outcome(item["id"], item_kind, "duplicate", line))
    fresh = list(new.values())
    reports: dict[str, Any] = {}
    if item_kind == "message":
        files = _write_messages(store, tx, [item for _, item in fresh])
    elif item_kind == "pending":
        reports = _check_notes(memory, fresh, source, governance_settings, now)
        files = _write_pending(store, tx, [item for _, item in fresh], ingest_settings, ttl_hours, now)
    else:
        files, reports = _write_notes(store, tx, memory, fresh, source=source, allow_conflict=allow_conflict,
                                      governance_settings=governance_settings, now=now)
    for line, item in fresh:
        report = reports.get(item["id"])
        if report is not None and report.duplicate_of:  # the same text as a current memory: not written
            result.outcomes.append(Outcome(item["id"], item_kind, "duplicate", line, governance=report))
            continue
        result.outcomes.append(Outcome(item["id"], item_kind, "stored", line, files[item["id"]],
                                       governance=report))


def _records(text: str, source: str, fmt: str, by: str) -> list[jsonl.Record]:
    if fmt == "jsonl":
        return jsonl.read_input(text, source)
    if fmt == "json":
        return inputs.read_json(text, source)
    if fmt == "text":
        return inputs.read_text(text, by)
    if fmt == "chatgpt":
        return inputs.read_chatgpt(text, source)
    if fmt == "claude":
        return inputs.read_claude(text, source)
    raise InputError(f"unknown format '{fmt}'; use one of {', '.join(inputs.FORMATS)}", source=source)


def _session_from_source(source: str) -> str:
    if source in ("<stdin>", "-", ""):
        return "default"
    stem = Path(source).name.split(".")[0]
    cleaned = re.sub(r"[^\w.:@+-]", "_", stem)[:128]
    return cleaned or "default"


def _text_of(value: dict[str, Any], source: str, line: int) -> str:
    """The text of a JSON record: 'text', else 'content' (a string or OpenAI-style parts)."""
    name = "text" if "text" in value else "content"
    if name not in value:
        raise InputError("missing (a record needs 'text' or 'content')", source=source, line=line, field="text")
    text = value[name]
    if isinstance(text, list):  # OpenAI content parts: keep the text parts
        parts = [p.get("text") for p in text if isinstance(p, dict) and p.get("type") == "text"]
        if len(parts) != len(text) or not all(isinstance(p, str) for p in parts):
            raise InputError("content parts must all be {\"type\": \"text\", \"text\": ...}",
                             source=source, line=line, field=name)
        text = "\n".join(parts)
    if not isinstance(text, str):
        raise InputError(f"must be text, got {json_type(text)}", source=source, line=line, field=name)
    if not text.strip():
        raise InputError("is empty", source=source, line=line, field=name)
    return text.strip()


def _message(record: jsonl.Record, source: str, default_session: str, forced: str | None,
             forced_scope: str | None, equals: Counter, now: datetime) -> tuple[int, dict, str | None]:
    """A checked message of the input; `equals` counts the input's messages without a time or
    id by their content so far (see _message_id)."""
    line, value = record.line, record.value
    if isinstance(value, str):
        value = {"text": value, "role": "user"}
    value = {_canonical_key(k): v for k, v in value.items()}
    text = _text_of(value, source, line)
    for name in ("id", "session", "role", "speaker"):
        if name in value and not isinstance(value[name], str):
            raise InputError(f"must be text, got {json_type(value[name])}",
                             source=source, line=line, field=name)
    if "id" in value:
        check_name(value["id"], "id", source=source, line=line)
    defaults = record.defaults or {}
    session = forced or value.get("session") or defaults.get("session") or default_session
    check_name(session, "session", source=source, line=line)
    raw_ts = value.get("ts", defaults.get("ts"))
    ts = normal_ts(raw_ts, source, line, "ts") if raw_ts is not None else clock.format_ts(now)
    role = value.get("role")
    message = {
        "id": value.get("id") or _message_id(session, role or "", value.get("speaker") or "", text,
                                             ts if raw_ts is not None else None, equals),
        "session": session,
        "scope": _named_scope(value, forced_scope, source, line),  # settled with the session's (_scope_messages)
    }
    if role is not None:
        message["role"] = role
    if "speaker" in value:
        message["speaker"] = value["speaker"]
    message["ts"] = ts
    message["text"] = text
    for key, extra in value.items():
        if key not in _MESSAGE_KEYS and key != "content":
            message[key] = extra
    return line, message, role


def _message_id(session: str, role: str, speaker: str, text: str, ts: str | None, equals: Counter) -> str:
    """The id of a message its input gave none: from its content and its time, or, with no
    time either, from its content and its place among the equal messages (same session,
    role, speaker and text) of the input: the first "ok" of a session is #0, the second #1.
    So importing one export twice stores nothing new, an export that grew adds only what
    is new, and a changed message is a new one. (The time the message is stored at cannot
    count: it differs between the two imports.) The cost: an export without times that
    drops its old messages and repeats a line gives the repeat the id of the one dropped."""
    if ts is not None:
        return derived_id("m", session, role, speaker, ts, text, "")
    ordinal = equals[session, role, speaker, text]
    equals[session, role, speaker, text] += 1
    return derived_id("m", session, role, speaker, "", text, f"#{ordinal}")


def _canonical_key(key: str) -> str:
    """Keys of Go-style session files (Role, Content) as the lower-case names."""
    lowered = key.lower()
    return lowered if lowered in ("id", "role", "content", "text", "speaker", "session", "scope", "ts") else key


def _note(record: jsonl.Record, source: str, ingest_settings: config.Ingest, section: str | None,
          scope: str | None, now: datetime, warnings: list[str]) -> tuple[int, dict, None]:
    line, value = record.line, record.value
    if isinstance(value, str):
        value = {"text": value}
    # Unknown fields are kept, as in MEMORY.md itself, and reported: a typo shows, nothing is lost.
    for name in sorted(set(value) - _NOTE_KEYS):
        if not memoryfile.FIELD_NAME.fullmatch(name):
            raise InputError("not a field name (letters, digits, _ and -, not first a digit)",
                             source=source, line=line, field=name)
        warnings.append(f"{source}:{line}: field '{name}': unknown field (kept as written)")
    text = _text_of(value, source, line)
    fields = {k: v for k, v in value.items() if k not in _NOTE_KEYS or k in memoryfile.FIELD_ORDER}
    _scope_note(fields, scope, source, line)
    if "ts" in value and "created_at" not in fields:
        fields["created_at"] = value["ts"]
    note_section = value.get("section", section or ingest_settings.default_section)
    if not isinstance(note_section, str) or not note_section.strip() or "\n" in note_section:
        raise InputError("must be one line of text", source=source, line=line, field="section")
    return line, complete_note(fields, text, note_section.strip(), ingest_settings, source, line, now), None


def _notes_from_markdown(text: str, source: str, ingest_settings: config.Ingest, section: str | None,
                         scope: str | None, now: datetime, warnings: list[str]) -> list[tuple[int, dict, None]]:
    doc = memoryfile.parse(text)
    for issue in doc.issues:
        if issue.severity == "error":
            raise InputError(issue.message, source=source, line=issue.line)
        warnings.append(f"{source}:{issue.line}: {issue.message}")
    notes = []
    for entry in doc.entries:
        if not entry.text.strip():
            raise InputError("entry has no text", source=source, line=entry.line)
        fields = dict(entry.fields)
        _scope_note(fields, scope, source, entry.line)
        note = complete_note(fields, entry.text, section or entry.section, ingest_settings, source, entry.line, now)
        note["list_item"] = entry.list_item
        if section is None:
            note["headings"] = entry.headings  # the new section keeps its level and parents (memoryfile.add)
        notes.append((entry.line, note, None))
    return notes


def _scope_note(fields: dict, scope: str | None, source: str, line: int) -> None:
    """--scope is the scope of a note that names none; one naming another is refused."""
    if scope is not None:
        fields["scope"] = _named_scope(fields, scope, source, line)


def _write_messages(store: Store, tx, messages: list[dict]) -> dict[str, str]:
    by_session: dict[str, list[bytes]] = defaultdict(list)
    files = {}
    for message in messages:
        path = store.session_file(message["session"])
        by_session[message["session"]].append(message_line(message))
        files[message["id"]] = store.relative(path)
    for session, lines in by_session.items():
        tx.append(store.session_file(session), b"".join(lines))
    append_daily_log(store, tx, [m for m in messages if m.get("role") in _LOGGED_ROLES])
    return files


def _write_notes(store: Store, tx, doc: memoryfile.Document, notes: list[tuple[int, dict]], *, source: str,
                 allow_conflict: bool = False, governance_settings: config.Governance,
                 now: datetime) -> tuple[dict[str, str], dict[str, Any]]:
    """Add notes to `doc` (MEMORY.md as read inside the transaction), applying their supersedes links."""
    from memctl.governance import governance

    if not notes:
        return {}, {}
    path = store.memory_md
    reports, log = governance.apply_notes(doc, notes, source=source, allow_conflict=allow_conflict,
                                          now=now, governance_settings=governance_settings)
    tx.replace(path, doc.render().encode("utf-8"))
    tx.append(governance.log_path(store), governance.log_records(log))
    return {note["id"]: store.relative(path) for _, note in notes}, reports


def _check_notes(doc: memoryfile.Document, notes: list[tuple[int, dict]], source: str,
                 governance_settings: config.Governance, now: datetime) -> dict[str, Any]:
    """Governance of notes held as pending: links must resolve; conflicts are reported, decided on confirm."""
    from memctl.governance import governance

    if not notes:
        return {}
    reports, _ = governance.apply_notes(doc, notes, source=source, allow_conflict=True, hold=True,
                                        now=now, governance_settings=governance_settings)
    return reports


def _write_pending(store: Store, tx, notes: list[dict], ingest_settings: config.Ingest, ttl_hours: float | None,
                   now: datetime) -> dict[str, str]:
    ttl = ingest_settings.pending_ttl_hours if ttl_hours is None else ttl_hours
    created = now
    expires = clock.format_ts(created + timedelta(hours=ttl))
    lines = []
    for note in notes:
        item = {"id": note["id"], "section": note["section"], "text": note["text"],
                "fields": note["fields"], "pending_since": clock.format_ts(created), "expires_at": expires}
        lines.append(orjson.dumps(item) + b"\n")
    tx.append(store.pending_file, b"".join(lines))
    return {note["id"]: store.relative(store.pending_file) for note in notes}
