"""Gathering a search's candidates: BM25's hits, the vectors' best rows and the turns those
were read with, in one order whether the open index's rows are read as a search meets them
(cold) or were all learned ahead (warm, a resident server: IndexRows.learn_ahead); as arrays
(Candidates), with what a unit alone decides for the ranking stages (RowFacts) and its words
(UnitWords), each kept while the index stays open."""

from __future__ import annotations

import functools
import math
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

import orjson

from memctl import clock
from memctl.text.noise import noise_reason

from memctl.index.index import CHUNK
from memctl.index.units_reader import Links

if TYPE_CHECKING:
    from memctl import config
    from memctl.index import lexical
    from memctl.index.filters import Filters
    from memctl.index.units_reader import UnitsReader


class Candidates:
    """One search's candidates, as arrays in the order they were found (one entry each): the
    stages compute on the arrays, and only the results a search returns become Result objects.

    Each of ~430 candidates of a warm 6k search was a Result with a dict of ~20 --explain
    numbers that the stages filled one by one: fusion, neighbours, scoring, the Result objects
    and newer-first took ~5 ms of a ~12 ms search (bench/README.md, "Search's measurements, as
    the code cited them"). The arithmetic on the arrays is Python's in the same order (float64),
    so every score is the same number.
    """

    def __init__(self, units: list[dict], rows, messages, bm25):
        """`rows`: each one's row; `messages`: whether each is a chat message; `bm25`: each one's
        BM25 score (read from ~430 units' dicts they took 0.20-0.23 ms of a warm 6k search)."""
        import numpy as np

        self.units = units  # the index's units (dicts of units_reader.FIELDS), read-only
        self.rows = rows
        self.messages = messages
        self.bm25 = bm25
        self.score = np.zeros(len(units))
        # What the minimum judges, rounded as it always judged them (stages.Fusion): relevance,
        # BM25 coverage, the own calibrated cosine, and the vector weight.
        self.relevance = self.coverage = self.relevance_cosine = self.score
        self.vector_weight = 0.0
        self.confidence = self.score  # each one's probability of being relevant (stages.Confidence)
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
        self.memory = np.zeros(rows, dtype=bool)  # it is a memory (a note)
        self.record = np.full(rows, -1, dtype=np.int64)  # its record, as a number (records)
        self.turn_before = np.full(rows, -1, dtype=np.int64)  # a message's turn before's record, as a number; -1: none
        self._numbers: dict[str | None, int] = {}  # sessions' and sources' numbers
        self.records: dict[str, int] = {}  # record ids' numbers
        self.names: list[str] = []  # record number -> record id
        self.links: Links | None = None  # once every row of the table is known (learning ahead)

    def learn(self, units: list[dict], rows, retrieval_settings: config.Retrieval) -> None:
        import numpy as np

        for at in np.flatnonzero(~self.known[rows]).tolist():
            unit = units[at]
            row = unit["row"]
            fields = orjson.loads(unit["fields"] or "{}")
            importance = fields.get("importance", retrieval_settings.default_importance)
            importance = importance if isinstance(importance, (int, float)) else retrieval_settings.default_importance
            base = retrieval_settings.importance_base
            self.importance[row] = base + (1 - base) * importance
            ratio = max(len(unit["text"]) / retrieval_settings.length_norm_anchor, 1.0)
            self.length[row] = 1 / (1 + retrieval_settings.length_norm_strength * math.log2(ratio))
            self.dated[row] = _dated(unit["kind"], fields, retrieval_settings.evergreen_memory_classes)
            self.noise[row] = bool(noise_reason(unit["text"], fields.get("role")))
            self.session[row] = self._numbers.setdefault(unit["session"], len(self._numbers))
            self.record[row] = self._number(unit["record_id"])
            if unit["context_id"]:
                self.turn_before[row] = self._number(unit["context_id"])
            if unit["kind"] == "message":
                self.message[row] = True
                source = self._numbers.setdefault(unit["source"], len(self._numbers))
                self.line[row] = (source << 32) + unit["line_start"]
            self.memory[row] = unit["kind"] == "memory"
            moment = moment_of(unit["ts"])
            if moment is not None:
                self.timed[row] = True
                self.micros[row] = micros(moment)
            self.known[row] = True

    def _number(self, record_id: str) -> int:
        number = self.records.setdefault(record_id, len(self.records))
        if number == len(self.names):
            self.names.append(record_id)
        return number


class IndexRows:
    """The open index's rows as a search gathers and ranks them: their units (units.db, read as a
    search meets them or all ahead), their facts (RowFacts) and, once every row is known, the
    links between them as arrays (units_reader.Links), kept while the index stays open.
    `vector_rows()`: how many rows the vectors hold (the table may hold rows they lack yet)."""

    def __init__(self, units: UnitsReader, vector_rows, retrieval_settings: config.Retrieval):
        self.units = units
        self._vector_rows = vector_rows
        self.retrieval = retrieval_settings
        self._facts: RowFacts | None = None
        self._learned_to = 0  # learn_ahead has read the rows below this one

    def gather(self, bm25: lexical.Hits, vector_rows: list[int], turns_before: bool, filters: Filters) -> Candidates:
        """BM25's hits (by id, a chunk at a time, each in id order), then the vectors' rows not
        among them (a chunk at a time, each in row order; a row of no unit, a hole, left out),
        then, with `turns_before`, the units of the messages the vectors' rows were read with
        (reply_cosines), if the filters admit them and their records are not candidates already.
        Read from units.db as SQLite walks its indexes when a row is first met, on arrays once
        every row is known: one order either way (tests/test_search.py checks both)."""
        import numpy as np

        links = self._facts.links if self._facts is not None and not filters.sources else None
        ids = _chunk_sorted(list(bm25.scores))
        vector = np.array(_chunk_sorted(vector_rows), dtype=np.intp)
        if links is None:  # read what this search meets first, and learn its facts
            met = self.units.units("id", ids) + self.units.units("row", vector.tolist())
            self._learned(met)
        facts, row_of = self._facts_for(0), self.units.row_of
        found_ids = [key for key in ids if key in row_of]
        lexical_rows = np.fromiter(map(row_of.__getitem__, found_ids), dtype=np.intp, count=len(found_ids))
        vector = vector[facts.known[vector]]
        taken = np.zeros(len(facts.known), dtype=bool)
        taken[lexical_rows] = True
        rows = np.concatenate([lexical_rows, vector[~taken[vector]]])
        if turns_before:
            rows = np.concatenate([rows, self._turns_before(links, rows, vector, filters)])
        unit_of = links.unit_of.__getitem__ if links is not None else self.units.by_row.__getitem__
        units = list(map(unit_of, rows.tolist()))
        facts = self._learned(units, rows)
        scores = np.zeros(len(rows))
        scores[:len(found_ids)] = list(map(bm25.scores.__getitem__, found_ids))
        return Candidates(units, rows, facts.message[rows], scores)

    def _turns_before(self, links: Links | None, rows, vector_rows, filters: Filters):
        """The rows of the turns before `vector_rows` whose records are not those of `rows`: records
        in id order, each's units in row order (with a source filter, as SQLite gives them)."""
        import numpy as np

        facts = self._facts_for(0)
        wanted = np.zeros(len(facts.names) + 1, dtype=bool)  # by record number; the last: -1, none
        wanted[facts.turn_before[vector_rows]] = True
        wanted[facts.record[rows]] = False
        wanted[-1] = False
        wanted = sorted(np.flatnonzero(wanted).tolist(), key=facts.names.__getitem__)
        if not wanted:
            return np.zeros(0, dtype=np.intp)
        if links is not None:
            return self._allowed(links.units_of(np.array(wanted, dtype=np.intp)), filters)
        names = [facts.names[number] for number in wanted]
        if filters.sources:  # SQLite may walk its source index then: its order, from SQLite
            return _rows_of(self.units.units_of_records_where(names, filters))
        return self._allowed(_rows_of(self.units.units_of_records(names)), filters)

    def _allowed(self, rows, filters: Filters):
        """The rows the filters allow (their mask)."""
        mask = self.units.mask(filters, self._vector_rows())
        return rows if mask is None else rows[mask[rows] == 0]

    def reply_cosines(self, found: Candidates, cosines):
        """Each candidate's best cosine of the messages read with it as their turn before (NaN: none).

        A message is embedded with the turn before it, so a reply's vector holds the
        message it answers as well: "I painted that lake sunrise last year" says what
        the photo shared before it shows. Its cosine is evidence for both turns.
        """
        import numpy as np

        facts = self.row_facts(found)
        if facts.links is not None:
            records = facts.record[found.rows]
            counts = np.where(found.messages, facts.links.reply_counts(records), 0)
            answered = np.flatnonzero(counts)
            sizes = counts[answered]
            replies = facts.links.replies_of(records[answered], sizes) if answered.size else answered
        else:
            messages = np.flatnonzero(found.messages).tolist()
            read = self.units.replies_of([found.units[at]["record_id"] for at in messages])
            answered = np.array([at for at, rows in zip(messages, read) if rows], dtype=np.intp)
            sizes = np.array([len(rows) for rows in read if rows], dtype=np.intp)
            replies = np.array([row for rows in read for row in rows], dtype=np.intp)
        best = np.full(len(found), np.nan)
        if answered.size:
            best[answered] = np.maximum.reduceat(cosines[replies], np.cumsum(sizes) - sizes)
        return best

    def row_facts(self, found: Candidates) -> RowFacts:
        """The candidates' rows' facts, learned for those first seen."""
        return self._learned(found.units, found.rows)

    def learn_ahead(self, rows: int) -> bool:
        """Read and learn the next `rows` rows' units and facts before a search needs them; True
        when every row is known. For a resident server between calls: a search whose candidates
        were not seen before learned them itself, ~3 ms of a ~13 ms warm 6k search (bench/README.md,
        "Search's measurements, as the code cited them"). What is learned is what a search would
        learn: results are the same (tests/test_search.py)."""
        import numpy as np

        total = self._vector_rows()
        start = self._learned_to
        if start >= total:
            return True
        facts = self._facts_for(total)
        units = [unit for unit in self.units.rows_from(start, rows)
                 if unit["row"] < len(facts.known)]  # rows the vectors lack yet: learned by the search that meets them
        if units:
            facts.learn(units, _rows_of(units), self.retrieval)
        self._learned_to = start + rows
        if self._learned_to < total:
            return False
        # Links only when every row of the table is known (not when it holds rows the vectors lack yet)
        if facts.links is None and self.units.count() == int(np.count_nonzero(facts.known)):
            facts.links = Links(facts.records, facts.record, facts.turn_before, self.units.by_row)
        return True

    def _learned(self, units: list[dict], rows=None) -> RowFacts:
        """The facts kept, with these units' learned (`rows`: theirs, if the caller has them)."""
        rows = _rows_of(units) if rows is None else rows
        # the table may hold rows the vectors lack yet
        facts = self._facts_for(int(rows.max()) + 1 if len(rows) else 0)
        facts.learn(units, rows, self.retrieval)
        return facts

    def _facts_for(self, rows: int) -> RowFacts:
        """The facts kept, made anew (empty) when they hold fewer than `rows` rows or the vectors'."""
        rows = max(rows, self._vector_rows())
        if self._facts is None or len(self._facts.known) < rows:
            self._facts = RowFacts(rows)
        return self._facts


class UnitWords:
    """Units' analysed content words, kept by row while the index is open (a unit's text does not
    change): newer-first, MMR's twin test and the minimum's word test analysed ~26 texts a warm 6k
    search, mostly the same from one search to the next. `documents`: how many units the index
    holds; `doc_freqs`: words -> how many units hold each in their text (Tantivy's, or the
    PostgreSQL index's: index/postgres.py)."""

    def __init__(self, documents: int, doc_freqs: Callable[[set[str]], dict[str, int]]):
        self.documents = documents
        self.doc_freqs = doc_freqs
        self._terms: dict[int, frozenset[str]] = {}
        self._rare: dict[int, frozenset[str]] = {}

    @classmethod
    def of_tantivy(cls, reader: lexical.Reader) -> UnitWords:
        searcher = reader.searcher
        return cls(searcher.num_docs, lambda words: {word: searcher.doc_freq("body", word) for word in words})

    def terms_of(self, unit: dict) -> frozenset[str]:
        """lexical.content_terms of a unit."""
        from memctl.index import lexical

        row = unit["row"]
        if row not in self._terms:
            self._terms[row] = frozenset(lexical.content_terms(unit["text"]))
        return self._terms[row]

    def rare_terms_of_each(self, units: list[dict], most: int) -> None:
        """rare_terms_of these units worked out at once, their words' frequencies asked in one
        call: on PostgreSQL one statement, not one a unit (~10 a cold search)."""
        from memctl.index import lexical

        new = {unit["row"]: self.terms_of(unit) for unit in units if unit["row"] not in self._rare}
        if new:
            found = self.doc_freqs(set().union(*new.values()))
            self._rare.update((row, frozenset(lexical.rare_terms(lambda asked: found, terms, most)))
                              for row, terms in new.items())

    def rare_terms_of(self, unit: dict, most: int) -> frozenset[str]:
        """lexical.rare_terms of a unit's content words (`most`, from the store's size, is the same
        for each search): ~10 Tantivy lookups of each of the first page's results a search."""
        from memctl.index import lexical

        row = unit["row"]
        if row not in self._rare:
            self._rare[row] = frozenset(lexical.rare_terms(self.doc_freqs, self.terms_of(unit), most))
        return self._rare[row]


def _chunk_sorted(keys: list) -> list:
    """The keys a chunk (index.CHUNK) at a time, each chunk sorted: the order SQLite gives a
    chunk's units (select_in), which the candidates keep whether read from it or not."""
    return [key for start in range(0, len(keys), CHUNK) for key in sorted(keys[start:start + CHUNK])]


def _rows_of(units: list[dict]):
    import numpy as np

    return np.fromiter((unit["row"] for unit in units), dtype=np.intp, count=len(units))


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
