"""One search's candidates as arrays (Candidates), and what a unit alone decides for the
ranking stages, per row of the open index (RowFacts)."""

from __future__ import annotations

import functools
import math
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import orjson

from memctl import clock
from memctl.text.noise import noise_reason

if TYPE_CHECKING:
    from memctl import config
    from memctl.index.units_reader import Links


class Candidates:
    """One search's candidates, as arrays in the order they were found (one entry each): the
    stages compute on the arrays, and only the results a search returns become Result objects.

    Each of ~430 candidates of a warm 6k search was a Result with a dict of ~20 --explain
    numbers that the stages filled one by one: fusion, neighbours, scoring, the Result objects
    and newer-first took ~5 ms of a ~12 ms search (bench/README.md, "Search's measurements, as
    the code cited them"). The arithmetic on the arrays is Python's in the same order (float64),
    so every score is the same number.
    """

    def __init__(self, units: list[dict], rows=None, messages=None, bm25=None):
        """`rows`, `messages` (whether each is a chat message) and `bm25` (each one's BM25 score),
        when the caller has them: read from ~430 units' dicts they took 0.20-0.23 ms of a warm
        6k search."""
        import numpy as np

        self.units = units  # the index's units (dicts of units_reader.FIELDS), read-only
        self.rows = np.array([unit["row"] for unit in units], dtype=np.intp) if rows is None else rows
        self.messages = (np.array([unit["kind"] == "message" for unit in units], dtype=bool) if messages is None
                         else messages)
        self.bm25 = bm25
        self.score = np.zeros(len(units))
        # What the minimum judges, rounded as it always judged them (stages.Fusion): relevance,
        # BM25 coverage, the own calibrated cosine, and the vector weight.
        self.relevance = self.coverage = self.relevance_cosine = self.score
        self.vector_weight = 0.0
        self.kept = None  # which pass the minimum (and the noise filter): a mask, once judged
        self.order: list[int] = []  # the positions kept, best first, once ranked
        self.stopped = False  # nothing is returned: the minimum found the store does not know the subject
        # --explain, by stage order: name -> (an array of each one's value, or one value for all;
        # which carry it: a mask, None for all). Texts (mmr, newer_first, mera): by position. The
        # arrays are kept as they are: a stage makes new arrays, it never changes one in place.
        self.explained: dict[str, tuple[Any, Any]] = {}
        self.notes: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.units)

    @functools.cached_property
    def ids(self) -> list[str]:
        return [unit["id"] for unit in self.units]

    def explain(self, name: str, values, carried=None) -> None:
        self.explained[name] = (values, carried)

    def note(self, at: int, name: str, text: Any) -> None:
        self.notes.setdefault(at, {})[name] = text

    def explain_of(self, at: int, digits: dict[str, int]) -> dict[str, Any]:
        """The --explain of the candidate at `at`: each number a stage left unrounded rounded to
        its `digits` (rounding every candidate's took 2.5 ms of a warm 6k search)."""
        import numpy as np

        explain = {}
        for name, (values, carried) in self.explained.items():
            if carried is None or carried[at]:
                value = float(values[at]) if isinstance(values, np.ndarray) else values
                explain[name] = round(value, digits[name]) if name in digits else value
        explain.update(self.notes.get(at, {}))
        return explain

    def best_of_each_record(self, k: int) -> list[int]:
        """The first k positions of the order of distinct records."""
        seen: set[str] = set()
        out = []
        for at in self.order:
            unit = self.units[at]
            key = unit["record_id"] or unit["id"]
            if key not in seen:
                seen.add(key)
                out.append(at)
                if len(out) == k:
                    break
        return out


class RowFacts:
    """What a unit alone decides for the stages, per row of the index, kept while it is open: its
    unit's text, fields and time do not change. Computed for a row when it is first a candidate
    (a warm search's candidates are mostly the last one's): noise patterns, the importance,
    length and time-decay factors and the parsed time of ~400 candidates cost ~2 ms of a warm
    6k search before they were kept."""

    def __init__(self, rows: int):
        import numpy as np

        self.known = np.zeros(rows, dtype=bool)
        self.importance = np.ones(rows)  # the importance stage's factor
        self.length = np.ones(rows)  # the length stage's factor
        self.dated = np.zeros(rows, dtype=bool)  # whether time decays it (_dated)
        self.noise = np.zeros(rows, dtype=bool)  # noise_reason says it is noise
        self.timed = np.zeros(rows, dtype=bool)  # it has a time
        self.micros = np.zeros(rows, dtype=np.int64)  # its time, in µs since the epoch
        self.session = np.zeros(rows, dtype=np.int64)  # its session, as a number
        self.line = np.zeros(rows, dtype=np.int64)  # a message's source (as a number) and first line, one number
        self.message = np.zeros(rows, dtype=bool)  # it is a chat message
        self.record = np.full(rows, -1, dtype=np.int64)  # its record, as a number (records)
        self.context = np.full(rows, -1, dtype=np.int64)  # a message's turn before's record, as a number; -1: none
        self._numbers: dict[str | None, int] = {}  # sessions' and sources' numbers
        self.records: dict[str, int] = {}  # record ids' numbers
        self.links: Links | None = None  # once every row of the table is known (learning ahead)

    def learn(self, units: list[dict], rows, cfg: config.Retrieval) -> None:
        import numpy as np

        for at in np.flatnonzero(~self.known[rows]).tolist():
            unit = units[at]
            row = unit["row"]
            fields = orjson.loads(unit["fields"] or "{}")
            importance = fields.get("importance", cfg.default_importance)
            importance = importance if isinstance(importance, (int, float)) else cfg.default_importance
            self.importance[row] = cfg.importance_base + (1 - cfg.importance_base) * importance
            ratio = max(len(unit["text"]) / cfg.length_norm_anchor, 1.0)
            self.length[row] = 1 / (1 + cfg.length_norm_strength * math.log2(ratio))
            self.dated[row] = _dated(unit["kind"], fields, cfg.evergreen_memory_classes)
            self.noise[row] = bool(noise_reason(unit["text"], fields.get("role")))
            self.session[row] = self._numbers.setdefault(unit["session"], len(self._numbers))
            self.record[row] = self.records.setdefault(unit["record_id"], len(self.records))
            if unit["context_id"]:
                self.context[row] = self.records.setdefault(unit["context_id"], len(self.records))
            if unit["kind"] == "message":
                self.message[row] = True
                source = self._numbers.setdefault(unit["source"], len(self._numbers))
                self.line[row] = (source << 32) + unit["line_start"]
            moment = moment_of(unit["ts"])
            if moment is not None:
                self.timed[row] = True
                self.micros[row] = micros(moment)
            self.known[row] = True


@functools.lru_cache(maxsize=65_536)
def moment_of(ts: str | None) -> datetime | None:
    """A unit's time, parsed once a process: newer-first compares each top result with every
    later candidate, ~3,300 pairs a search, and parsing both stamps of each pair took 5 ms of a
    warm 26 ms search (6k store). None when it is no time."""
    try:
        return clock.parse_ts(ts)
    except (ValueError, TypeError):
        return None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(moment: datetime) -> int:
    """An aware time as whole µs since the epoch: the difference of two is the exact timedelta,
    so ages on an array are clock.age_days' numbers."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _dated(kind: str, fields: dict, evergreen_classes: list[str]) -> bool:
    """Messages, log entries and episodic memories fade with age; a memory of an
    evergreen class (a policy, say) is as true next year as today."""
    return kind != "memory" or fields.get("memory_class") not in evergreen_classes
