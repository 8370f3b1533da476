"""The memory lifecycle (G5): demote, archive, and in the end delete what is not used.

For every memory in MEMORY.md, from its health score (memctl.search.scores.health_score):

    active        health < 0.3  -> low_priority   (still searched)
    active/low    health < 0.15 -> archived       (not searched by default)
    low_priority  health >= 0.3 -> active         (used again: searches raised its access count)
    archived      for over 60 days (status_changed_at) -> deleted

Core memories (is_core, or user_weight >= 9) are never demoted or deleted; a
core memory marked low_priority is made active again. Deprecated memories
(superseded versions) are history for `chain` and are left alone. An
archived memory is not restored automatically: set its status by hand.

Deleting is soft by default: the entry moves out of MEMORY.md into
deleted/YYYY-MM.md (the month of deletion), in the same entry format with a
`deleted_at` field, where a person can read it or move it back. `hard`
deletes it outright. Every change is stamped in the entry
(`status_changed_at`) and logged to governance.log.jsonl.

Memories without a readable created_at have recency 1.0 (age unknown), so
the lifecycle never demotes them for age: hand-written notes are safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from memctl import clock
from memctl import config
from memctl.governance import governance
from memctl.search import scores
from memctl.store import counters
from memctl.store.status import status_of
from memctl.store import memoryfile
from memctl.store.memoryfile import Entry, summary_of
from memctl.store.store import Store
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:
    from memctl.runtime import Runtime

DELETED_DIR = "deleted"


@dataclass
class Change(Shape):
    """What the lifecycle did (or, dry, would do) to one memory by its health score (G5)."""
    id: str = shown()
    action: Literal["status", "delete", "stamp"] = shown("stamp: archived without a date, the 60-day clock "
                                                         "starts now.")
    before: str = shown("Its status before.", name="from")
    after: str = shown('Its status after, or "deleted".', name="to")
    health: float | None = shown("Its health score.", digits=6, default=None)
    mode: Literal["soft", "hard"] | None = shown("A delete: soft (to deleted/) or hard.", omit="empty", default=None)
    file: str | None = shown("A soft delete: where the entry went.", omit="empty", default=None)
    line: int = shown("Its line in MEMORY.md before the run.", default=0)

    key_order = ("id", "action", "before", "after", "health", "line", "mode", "file")


def deleted_file(store: Store, moment: datetime) -> Path:
    return store.path(DELETED_DIR, f"{moment:%Y-%m}.md")


def load_deleted(store: Store) -> list[Entry]:
    """Every soft-deleted entry (deleted/*.md), oldest file first; unreadable files are skipped."""
    entries: list[Entry] = []
    for path in store.listing(store.path(DELETED_DIR), "*.md"):
        try:
            entries += memoryfile.load(path).entries
        except memoryfile.StoreError:
            continue  # health check reports it
    return entries


def run(rt: Runtime, *, dry_run: bool = False, hard: bool = False) -> list[Change]:
    """Apply the lifecycle to MEMORY.md in one transaction; returns the changes (made, or that would be)."""
    store, governance_settings, now = rt.store, rt.settings.governance, rt.clock.now()
    stamp = clock.format_ts(now)
    changes: list[Change] = []
    if not store.memory_md.exists():
        return changes  # nothing to review, and no store to create
    with store.transaction(dry_run=dry_run) as tx:
        counters.compact(store, tx)  # searches only log their accesses; the nightly pass folds them
        doc = memoryfile.load(store.memory_md)
        scorer = scores.Scorer(store, now, governance_settings)
        doomed: list[Entry] = []
        for entry in doc.entries:
            change = _decide(entry, scorer, governance_settings, now)
            if change is None:
                continue
            change.line = entry.line
            changes.append(change)
            if change.action == "delete":
                change.mode = "hard" if hard else "soft"
                doomed.append(entry)
            elif change.action == "stamp":
                entry.set("status_changed_at", stamp)
            else:
                governance.set_status(entry, change.after, stamp)
        if not changes:
            return changes
        if doomed and not hard:
            target = deleted_file(store, now)
            archive = memoryfile.load(target)
            if not archive.blocks:
                archive = memoryfile.parse(f"# Deleted memories, {now:%Y-%m} (memctl review lifecycle)\n\n")
            for entry in doomed:
                fields = dict(entry.fields) if entry.annotated else {"id": entry.id}
                fields["deleted_at"] = stamp
                archive.add(Entry(text=entry.text, fields=fields, section=entry.section))
            tx.replace(target, archive.render().encode("utf-8"))
            for change in changes:
                if change.action == "delete":
                    change.file = store.relative(target)
        for entry in doomed:
            doc.remove(entry)
        tx.replace(store.memory_md, doc.render().encode("utf-8"))
        log = []
        for change in changes:
            record = change.as_dict()
            record = {"ts": stamp, "action": "lifecycle", "change": record.pop("action"), **record}
            record.pop("line", None)
            if change.action == "delete":
                record["summary"] = doc_summary(doomed, change.id)
            log.append(record)
        tx.append(governance.log_path(store), governance.log_records(log))
    return changes


def doc_summary(entries: list[Entry], memory_id: str) -> str | None:
    for entry in entries:
        if entry.id == memory_id:
            return summary_of(entry)
    return None


def _decide(entry: Entry, scorer: scores.Scorer, governance_settings: config.Governance,
            now: datetime) -> Change | None:
    raw_status = entry.get("status")
    if raw_status is not None and raw_status not in memoryfile.STATUSES:
        return None  # a status we cannot read is left for a person (health check reports it)
    status = status_of(entry)
    if status == "deprecated":
        return None
    core = scores.is_core(entry, governance_settings)
    if status == "archived":
        if core:
            return None
        changed = scores.parse_time(entry.get("status_changed_at"))
        if changed is None:
            return Change(entry.id, "stamp", "archived", "archived")
        if clock.age_days(changed, now) > governance_settings.delete_archived_after_days:
            return Change(entry.id, "delete", "archived", "deleted", scorer.health(entry).total)
        return None
    health = scorer.health(entry).total
    if core:
        target = "active"
    elif health < governance_settings.archive_below:
        target = "archived"
    elif health < governance_settings.low_priority_below:
        target = "low_priority"
    else:
        target = "active"
    if target == status:
        return None
    return Change(entry.id, "status", status, target, health)
