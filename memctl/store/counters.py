"""Access counts (G4): how often search has returned each memory; and the count of layered
searches (G3: every 5th searches the query layer), in search_state.json.

Counting is its own small step, not a rewrite under the store's exclusive
lock: a search appends one line to access.log and goes on, so searches never
queue behind each other to count. The log is folded into access.json, the
compacted counts, by the lifecycle (`memctl review lifecycle`, in its own
transaction). Both sit at the store root, outside .index/, so rebuilding the
index never loses them:

    access.json   {"<memory id>": {"count": N, "last": "<ISO time>"}}
    access.log    {"at": "<ISO time>", "ids": ["<memory id>", ...]}   one line a search

A count written by hand into MEMORY.md (`access_count`) is a base the counted
accesses add to.

A store on PostgreSQL keeps those two files as it keeps any (a copy from a folder brings them),
and counts its own searches in a table (store/postgres.py, memctl_access: one row an id, its count
raised in place by each search), which the counts read here add to the files'. Its layered
searches are counted the same way (memctl_turns), not by a locked write of search_state.json.
"""

from __future__ import annotations

import os
from datetime import datetime

import orjson

from memctl import clock
from memctl.errors import StoreError
from memctl.store import jsonl
from memctl.store.store import NotRegularFile, Store, open_file, read_file

FILE_NAME = "access.json"
LOG_NAME = "access.log"
TURNS_FILE = "search_state.json"  # {"layered_turns": N}


def load(store: Store) -> dict[str, dict]:
    """The compacted counts plus every access logged since (and, on PostgreSQL, counted in its table)."""
    if not store.is_folder:
        return fold(*store.accesses())
    return fold(_file(store, FILE_NAME), _file(store, LOG_NAME))


def _file(store: Store, name: str) -> bytes | None:
    try:
        return read_file(store.path(name))
    except FileNotFoundError:
        return None


def fold(compacted: bytes | None, log: bytes | None, counted=()) -> dict[str, dict]:
    """access.json's counts (`compacted`), plus one for each id of each line of access.log (`log`),
    plus each (id, count, last) of `counted` (a PostgreSQL store's table)."""
    try:
        data = orjson.loads(compacted) if compacted is not None else {}
    except orjson.JSONDecodeError:
        data = {}  # a damaged counter file costs counts, never a search; the store check reports it
    counts = data if isinstance(data, dict) else {}

    def add(memory_id: str, more: int, last: str) -> None:
        entry = counts.get(memory_id)
        count = entry.get("count", 0) if isinstance(entry, dict) else 0
        counts[memory_id] = {"count": (count if isinstance(count, int) else 0) + more, "last": last}

    for line in jsonl.parse(log or b"", unterminated=False):
        record = line.value
        if record is None or not isinstance(record.get("ids"), list) or not isinstance(record.get("at"), str):
            continue  # torn or edited by hand: that search goes uncounted; the store check names the line
        for memory_id in record["ids"]:
            if isinstance(memory_id, str):
                add(memory_id, 1, record["at"])
    for memory_id, more, last in counted:
        add(memory_id, more, last)
    return counts


def count(store: Store, memory_id: str, base: int = 0) -> int:
    entry = load(store).get(memory_id)
    return base + (entry.get("count", 0) if isinstance(entry, dict) else 0)


def record(store: Store, memory_ids: list[str], now: datetime) -> None:
    """Count one access for each id at `now`: one line appended to access.log. The store lock is held
    shared, only so that a compaction (exclusive) never folds the log while a line is added. On
    PostgreSQL, each id's row of its table raised by one, in a transaction of its own that takes no
    write lock (PostgresStore.count_accesses)."""
    if not memory_ids:
        return
    if not store.is_folder:
        try:
            store.count_accesses(list(dict.fromkeys(memory_ids)), clock.format_ts(now))
        except StoreError:
            pass  # a read-only database (a replica) or a lost connection: the read goes on uncounted
        return
    if not store.exists():
        return
    line = orjson.dumps({"at": clock.format_ts(now), "ids": list(dict.fromkeys(memory_ids))}) + b"\n"
    try:
        with store.reading():
            fd = open_file(store.path(LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                os.write(fd, line)  # one write of a short line: appended whole, never interleaved
            finally:
                os.close(fd)
    except NotRegularFile:
        raise  # a FIFO, or a hard link that would carry the count elsewhere: named, as every command names it
    except (StoreError, OSError):
        return  # a disk that refuses: the read goes on uncounted


def compact(store: Store, tx) -> None:
    """Fold access.log into access.json, inside the caller's transaction (its exclusive lock). A
    PostgreSQL store's table is left as it is: its rows are compact already, and searches raise
    them meanwhile without this lock."""
    log = store.path(LOG_NAME)
    if not log.exists():
        return
    folded = fold(_file(store, FILE_NAME), _file(store, LOG_NAME))
    tx.replace(store.path(FILE_NAME), orjson.dumps(folded, option=orjson.OPT_SORT_KEYS))
    tx.delete(log)


def turns(store: Store) -> int:
    """The layered searches counted so far: search_state.json's count, plus, on PostgreSQL, its table's."""
    if not store.is_folder:
        data, counted = store.turns()
        return _turns_of(data) + counted
    return _turns_of(_file(store, TURNS_FILE))


def _turns_of(data: bytes | None) -> int:
    try:
        state = orjson.loads(data) if data is not None else {}
    except orjson.JSONDecodeError:
        return 0
    found = state.get("layered_turns", 0) if isinstance(state, dict) else 0
    return found if isinstance(found, int) and not isinstance(found, bool) and found >= 0 else 0


def turns_file(data: bytes | None, counted: int) -> bytes:
    """search_state.json as a folder keeps it, holding its count (`data`) and `counted` more."""
    return orjson.dumps({"layered_turns": _turns_of(data) + counted})


def count_turn(store: Store) -> None:
    """One layered search more. On a folder, search_state.json rewritten in a transaction; on
    PostgreSQL, its table's row raised by one without the write lock and without moving `written`
    (PostgresStore.count_turn): a layered search neither waits for a writer nor makes what a
    process keeps for the store's `written` stale."""
    if not store.is_folder:
        try:
            store.count_turn()
        except StoreError:
            pass  # a read-only database (a replica) or a lost connection: the turn goes uncounted
        return
    if not store.exists():
        return
    try:
        with store.transaction() as tx:
            tx.replace(store.path(TURNS_FILE), turns_file(_file(store, TURNS_FILE), 1))
    except StoreError:
        return  # as record: a wedged store is read on, uncounted
