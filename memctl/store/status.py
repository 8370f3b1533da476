"""What a MEMORY.md entry's fields say of it, leniently (hand edits happen): its status, what it
supersedes, and which versions of a chain are its tails (G6). The index and search need this as
much as governance does, so it lives with the file format.

Statuses: `active` (or none) and `low_priority` are *current*: search returns
them. `deprecated` (superseded) and `archived` (by the lifecycle) are not.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from memctl.store import memoryfile
from memctl.store.memoryfile import Document, Entry

CURRENT = ("active", "low_priority")


def fields_of(entry: Entry | Mapping[str, Any]) -> Mapping[str, Any]:
    """Schema fields of a MEMORY.md entry, or of anything that is a field dict (an index unit's)."""
    return entry.fields if hasattr(entry, "fields") else entry


def status_of(entry: Entry | Mapping[str, Any]) -> str:
    """The entry's status; missing or malformed counts as active (health check reports the latter)."""
    status = fields_of(entry).get("status")
    return status if status in memoryfile.STATUSES else "active"


def is_current(entry: Entry | Mapping[str, Any]) -> bool:
    return status_of(entry) in CURRENT


def supersedes_of(entry: Entry | Mapping[str, Any]) -> list[str]:
    """Ids an entry supersedes; a single id written by hand as plain text counts too."""
    value = fields_of(entry).get("supersedes")
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def chain_tails(versions: Iterable[tuple[str, bool, list[str]]]) -> list[str]:
    """Ids of the current versions that no current version supersedes, in order (G6).

    `versions` are (id, is current, ids it supersedes). This is the one rule of
    what a chain shows: search returns only these, and only these conflict.
    """
    versions = list(versions)
    replaced = {old for _, current, olds in versions if current for old in olds}
    return list(dict.fromkeys(i for i, current, _ in versions if current and i not in replaced))


def active_tails(doc: Document) -> list[str]:
    """Ids search may return: current (active or low_priority) and not superseded by a current entry."""
    return chain_tails((e.id, is_current(e), supersedes_of(e)) for e in doc.entries)
