"""Access counts (G4): how often search has returned each memory.

Kept in access.json at the store root, outside .index/, so rebuilding the
index never loses them: {"<memory id>": {"count": N, "last": "<ISO time>"}}.
A count written by hand into MEMORY.md (`access_count`) is a base the
counted accesses add to.
"""

from __future__ import annotations

import orjson

from memctl.errors import StoreError

from memctl import clock
from memctl.store.store import Store, atomic_write

FILE_NAME = "access.json"


def load(store: Store) -> dict[str, dict]:
    try:
        data = orjson.loads(store.path(FILE_NAME).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}  # a damaged counter file costs counts, never a search; health reports it
    return data if isinstance(data, dict) else {}


def count(store: Store, memory_id: str, base: int = 0) -> int:
    entry = load(store).get(memory_id)
    return base + (entry.get("count", 0) if isinstance(entry, dict) else 0)


def record(store: Store, memory_ids: list[str]) -> None:
    """Count one access for each id; one small atomic write under the store lock."""
    if not memory_ids or not store.exists():
        return
    try:
        with store.lock():
            counts = load(store)
            stamp = clock.format_ts(clock.now())
            for memory_id in dict.fromkeys(memory_ids):
                entry = counts.get(memory_id)
                entry = entry if isinstance(entry, dict) else {}
                counts[memory_id] = {"count": int(entry.get("count", 0)) + 1, "last": stamp}
            atomic_write(store.path(FILE_NAME), orjson.dumps(counts, option=orjson.OPT_SORT_KEYS))
    except StoreError:
        return  # a journal nobody can undo, or a link: the read goes on uncounted (Store.reading said why)
