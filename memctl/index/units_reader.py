"""Reading units.db for searches: the units by id, by row or by record, the rows a filter
allows, and the messages read with each record as their turn before (index.py writes the
table; lexical.Reader is Tantivy's side of the same open index).

What is read is kept while the index stays open (a server's searches): a unit's row does not
change until the index does, and the candidates of one search are mostly the last one's.
Once every row is read (a resident server learns the table ahead), `Links` holds the same
relations as arrays.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from memctl.index.filters import Filters
from memctl.index.index import CHUNK, select_in

# The columns a search reads of each unit, as the keys of its dict; "row" first (UnitsReader.kept).
FIELDS = ("row", "id", "record_id", "kind", "text", "source", "line_start", "line_end", "section", "session",
          "speaker", "ts", "scope", "status", "fields", "context_id")
_COLUMNS = ", ".join(FIELDS)


class UnitsReader:
    """units.db opened read-only, and the units read from it so far (dicts of FIELDS, read-only:
    a caller may not change them), by row and by id."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.by_row: dict[int, dict | None] = {}  # None: no unit (a hole's row)
        self.by_id: dict[str, dict | None] = {}
        self.row_of: dict[str, int] = {}  # unit id -> row, of the units kept
        self._replies_of: dict[str, tuple[int, ...]] = {}
        self._units_of: dict[str, tuple[dict, ...]] = {}  # record id -> its units, in row order
        self._masks: dict[tuple, Any] = {}

    @classmethod
    def open(cls, path: Path) -> UnitsReader:
        """units.db at `path`, read-only."""
        return cls(sqlite3.connect(f"file:{path}?mode=ro", uri=True))

    @classmethod
    def of_rows(cls, rows: list[tuple], columns: tuple[str, ...]) -> UnitsReader:
        """Units given as rows of `columns` (FIELDS and the columns filters compare), in a table of
        their own in memory, to which `add` adds more: a PostgreSQL store's searches read the units
        they gathered with their candidates as a folder's reads units.db (search/postgres.py)."""
        db = sqlite3.connect(":memory:")
        db.execute(f"CREATE TABLE units ({', '.join(columns)})")
        for column in ("row", "id", "record_id", "context_id"):
            db.execute(f"CREATE INDEX units_{column} ON units ({column})")
        reader = cls(db)
        reader.add(rows)
        return reader

    def add(self, rows: list[tuple]) -> None:
        """More rows into a table of_rows made (rows it does not hold yet, below the kept masks'
        size); the kept mask allows those of them its filter allows (SQLite numbers the rows it
        inserts after those it holds)."""
        if not rows:
            return
        (last,) = self.db.execute("SELECT coalesce(max(rowid), 0) FROM units").fetchone()
        self.db.executemany(f"INSERT INTO units VALUES ({', '.join('?' * len(rows[0]))})", rows)
        for (where, params, _), mask in self._masks.items():
            mask[[row for (row,) in self.db.execute(f"SELECT row FROM units WHERE rowid > ? AND {' AND '.join(where)}",
                                                    (last, *params))]] = 0

    def units(self, column: str, keys: list) -> list[dict]:
        """The units whose `column`, "id" or "row", is among `keys`, in the order select_in gives
        them: a chunk of keys at a time, each in key order (SQLite walks an IN list sorted, on the
        id index or the row key). A warm search read its ~400 candidates from SQLite in ~2 ms of
        ~26 (6k store) before they were kept."""
        cache = self.by_row if column == "row" else self.by_id
        missing = [key for key in keys if key not in cache]
        if missing:
            for values in select_in(self.db, _COLUMNS, column, missing):
                self.kept(values)
            for key in missing:
                cache.setdefault(key, None)  # not in the table: a hole's row
        return [cache[key] for start in range(0, len(keys), CHUNK) for key in sorted(set(keys[start:start + CHUNK]))
                if cache[key] is not None]

    def kept(self, values: tuple) -> dict:
        """The unit of a table row read as FIELDS, kept by row and id (the one kept already, if any)."""
        unit = self.by_row.get(values[0])
        if unit is None:
            unit = dict(zip(FIELDS, values))
            self.by_row[unit["row"]] = self.by_id[unit["id"]] = unit
            self.row_of[unit["id"]] = unit["row"]
        return unit

    def rows_from(self, start: int, count: int) -> list[dict]:
        """The units of rows start .. start + count - 1, in row order, kept."""
        return [self.kept(values) for values in self.db.execute(
            f"SELECT {_COLUMNS} FROM units WHERE row >= ? AND row < ? ORDER BY row", (start, start + count))]

    def count(self) -> int:
        (count,) = self.db.execute("SELECT COUNT(*) FROM units").fetchone()
        return count

    def mask(self, filters: Filters, rows: int):
        """0 for each row the filters allow, -inf for the others; None when nothing is filtered.
        The last filter's is kept (a server's calls mostly repeat one): reading the allowed rows
        of the default filter (not archived, not superseded) cost 2.2 ms a search at 6k."""
        import numpy as np

        where, params = filters.sql_where()
        if not where:
            return None
        key = (tuple(where), tuple(params), rows)
        if key not in self._masks:
            sql = f"SELECT row FROM units WHERE {' AND '.join(where)}"
            mask = np.full(rows, -np.inf, dtype=np.float32)
            mask[[row for (row,) in self.db.execute(sql, params)]] = 0
            self._masks = {key: mask}
        return self._masks[key]

    def units_of_records(self, record_ids: list[str]) -> list[dict]:
        """The units of these records, a record after another, each's in row order (kept: SQLite's
        walk of its record_id index took 0.8 ms of a warm 6k search)."""
        missing = [record_id for record_id in record_ids if record_id not in self._units_of]
        found: dict[str, list[dict]] = {}
        for values in select_in(self.db, _COLUMNS, "record_id", missing):
            unit = self.kept(values)
            found.setdefault(unit["record_id"], []).append(unit)
        for record_id in missing:
            self._units_of[record_id] = tuple(sorted(found.get(record_id, ()), key=lambda unit: unit["row"]))
        return [unit for record_id in record_ids for unit in self._units_of[record_id]]

    def units_of_records_where(self, record_ids: list[str], filters: Filters) -> list[dict]:
        """The units of these records the filters allow, in the order SQLite gives them (with a
        source filter it may walk its source index)."""
        where, params = filters.sql_where()
        return [self.kept(values) for values in select_in(self.db, _COLUMNS, "record_id", record_ids, where, params)]

    def replies_of(self, record_ids: list[str]) -> list[tuple[int, ...]]:
        """The rows of the messages read with each record as their turn before, each's in row order."""
        missing = sorted({record_id for record_id in record_ids if record_id not in self._replies_of})
        found: dict[str, list[int]] = {}
        for context_id, row in select_in(self.db, "context_id, row", "context_id", missing):
            found.setdefault(context_id, []).append(row)
        for record_id in missing:
            self._replies_of[record_id] = tuple(sorted(found.get(record_id, ())))
        return [self._replies_of[record_id] for record_id in record_ids]


class Links:
    """Which rows a search reads together, for every row of the table: each record's units and the
    messages read with each record as their turn before (each in row order), by record number.
    Made once every row of the table is read (a resident server): the candidates, their turns
    before and their replies are then read on arrays. Asking SQLite for the records first seen
    and walking ~430 candidates' dicts took 1.7-1.9 ms of a warm 6k search after learning ahead,
    on arrays 0.5-0.55 (bench/README.md, "Learning the index ahead"); making these takes ~2 ms
    at 6k and ~9 ms at 50k.

    `records`: record id -> its number; `record`, `turn_before`: each row's record's number and its
    turn before's (-1: none); `by_row`: each row's unit."""

    def __init__(self, records: dict[str, int], record, turn_before, by_row: dict[int, dict | None]):
        self.unit_of = [by_row.get(row) for row in range(len(record))]  # row -> its unit: a list reads faster
        count = len(records)
        self.names = [""] * count  # record number -> record id
        for name, number in records.items():
            self.names[number] = name
        self._units_start, self._units = _grouped(record, count)
        self._replies_start, self._replies = _grouped(turn_before, count)

    def units_of(self, records):
        """The rows of these records' units (record numbers), a record after another, each's in row order."""
        starts = self._units_start[records]
        return self._units[ranges(starts, self._units_start[records + 1] - starts)]

    def reply_counts(self, records):
        """How many messages each of these records is the turn before of."""
        return self._replies_start[records + 1] - self._replies_start[records]

    def replies_of(self, records, counts):
        """The rows of the messages that answer these records (`counts`: reply_counts'), one record after another."""
        return self._replies[ranges(self._replies_start[records], counts)]


def _grouped(keys, count: int):
    """The rows of each key (a number below `count`; -1: none) in row order, as one array and where each key's begin."""
    import numpy as np

    rows = np.flatnonzero(keys >= 0)
    grouped = rows[np.argsort(keys[rows], kind="stable")]
    starts = np.zeros(count + 1, dtype=np.intp)
    np.cumsum(np.bincount(keys[rows], minlength=count), out=starts[1:])
    return starts, grouped


def ranges(starts, counts):
    """The positions starts[i] .. starts[i] + counts[i] - 1 of each i, one after another."""
    import numpy as np

    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(int(offsets[-1] + counts[-1]) if len(counts) else 0)
