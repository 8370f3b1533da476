"""Hybrid search (P3): BM25 and vector candidates, fusion, then the scoring stages.

Candidates: BM25 over each unit's text and, for a message, the turn before it
(a field of its own at context_weight 0.5, each query word counted where it
scores best; lexical.search), and the vectors (a message embedded with the
turn before it).

Stages, each configurable in memctl.toml [retrieval] and shown by --explain:

    relevance     calibrated, 0..1: w_vec·cal(cosine) + w_bm25·coverage, where cal()
                  maps the model's cosines onto one scale (embedders.py) and coverage is
                  the share of the query's BM25 weight a result matched (lexical.Hits)
    minimum       nothing when the store does not know the subject: no candidate's own
                  calibrated cosine reaches subject_min_cosine (0.5), none matches
                  subject_min_coverage (0.4) of the query's BM25 weight, none has
                  min_best_relevance (0.38), no two hold subject_min_words (0.55) of its
                  words' idf, and, of a query in two scripts, no unit of one holds
                  subject_min_coverage of the query's names in it; else every result
                  stays (hard_min_score, 0 by default, is a floor on relevance)
    noise         drop refusals, greetings, memory questions (P6)
    fusion        orders: weighted w_vec·cal(cosine) + w_bm25·BM25/max(BM25) (0.7 / 0.3)
                  or rrf Σ w/(k + rank), scaled to [0, 1]
    neighbours    + 0.4 · (the better fused score of the turns right before and after − own),
                  chat turns only, when that is above their own
    date          + 0.2 for a chat turn or log entry said in a period the query names
    recency       + exp(−age_days / 14) · 0.10
    importance    × (0.7 + 0.3 · importance)
    length        × 1 / (1 + 0.5 · log2(max(chars / 500, 1)))
    time decay    × (0.5 + 0.5 · exp(−age_days / 60)), not for evergreen memories (policy)
    MMR           a result whose cosine to a better one is > 0.85 and half of whose content
                  words that one holds moves after the rest

The design (003 §5) drops below 0.35 after the time decay. With that order
a relevant turn 1,198 days old fuses to 0.42, decays to 0.19 and is gone:
LoCoMo recall@10 with those defaults was 0.02. Here the minimum judges
relevance alone and age only reorders what passed; and it judges a
calibrated score, because max-normalised BM25 makes the best keyword hit 1.0
whatever it matched.

The model's vectors carry no signal for text it cannot read (all-MiniLM-L6-v2
turns about half of Chinese word pieces into [UNK]), so the vector weight
shrinks as the query's unknown share grows from 0.1 to 0.5 and moves to BM25;
at 0.5 and above the model is not even loaded.
"""

from __future__ import annotations

import math
import re
import sqlite3
import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import orjson

from memctl.runtime import Runtime
from memctl import clock
from memctl import config
from memctl.errors import InputError, StoreError
from memctl.index.index import CHUNK, kept_manifest, manifest_stamp, select_in
from memctl.index.filters import Filters
from memctl.text.noise import noise_reason
from memctl.store.store import Store

if TYPE_CHECKING:
    from memctl.index import lexical

MODES = ("hybrid", "bm25", "vector")
RANKS = ("pipeline", "mera")
# The results an agent reads first: the newer fact is settled among these whatever k is, so a
# search for 50 orders its first 10 as a search for 10 does (the benches ask for 50).
FIRST_PAGE = 10
MAX_RESULTS = 100_000
_FIELDS = ("row", "id", "record_id", "kind", "text", "source", "line_start", "line_end", "section", "session",
           "speaker", "ts", "scope", "status", "fields", "context_id")


@dataclass
class Result:
    id: str
    kind: str
    text: str
    score: float
    source: str
    lines: list[int]
    section: str | None
    session: str | None
    ts: str | None
    speaker: str | None
    scope: str
    record_id: str = ""
    row: int = -1
    fields: dict[str, Any] = field(default_factory=dict)
    explain: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, explain: bool = False) -> dict[str, Any]:
        out = {"id": self.record_id or self.id, "kind": self.kind, "text": self.text,
               "score": round(self.score, 6), "source": self.source, "lines": self.lines,
               "section": self.section, "session": self.session, "ts": self.ts, "speaker": self.speaker,
               "scope": self.scope}
        if self.kind == "memory":
            out["fields"] = self.fields
        if explain:
            out["explain"] = self.explain
        return out


@dataclass
class Query:
    text: str
    k: int = 10
    mode: str = "hybrid"
    filters: Filters = field(default_factory=Filters)
    min_score: float | None = None  # None: the subject test and [retrieval] hard_min_score
    rank: str = "pipeline"          # one of RANKS: pipeline, the P3 stages; mera, G4 retrieval_score
    neighbours: bool = True         # False: no neighbours and date stages (a caller that sums a run's hits itself)

    def __post_init__(self):
        # Tantivy takes the limit as a 32-bit count: 1e20 overflowed it.
        if not 1 <= self.k <= MAX_RESULTS:
            raise InputError(f"must be a whole number from 1 to {MAX_RESULTS}, got {self.k}", source="-k", field="k")
        if self.rank not in RANKS:
            raise InputError(f"must be one of {', '.join(RANKS)}, got {self.rank!r}", source="--rank", field="rank")
        if self.min_score is not None and not math.isfinite(self.min_score):
            raise InputError(f"must be a finite number, got {self.min_score}", source="--min-score",
                             field="min_score")


class IndexChanged(StoreError):
    """Another process changed the index while a Searcher read it (Searcher.__init__)."""

    def __init__(self):
        super().__init__("the index changed while it was read, again and again; try again")


READS_FREE = 3  # reads of changing generations before one with updates held off (Retriever._answers)


class Candidates:
    """One search's candidates, as arrays in the order they were found (one entry each): the
    stages compute on the arrays, and only the results a search returns become Result objects.

    Each of ~430 candidates of a warm 6k search was a Result with a dict of ~20 --explain
    numbers that the stages filled one by one: fusion, neighbours, scoring, the Result objects
    and newer-first took ~5 ms of a ~12 ms search (thread CPU, 2026-11-24). The arithmetic on
    the arrays is Python's in the same order (float64), so every score is the same number.
    """

    def __init__(self, units: list[dict], rows=None, messages=None, bm25=None):
        """`rows`, `messages` (whether each is a chat message) and `bm25` (each one's BM25 score),
        when the caller has them (Searcher._linked_candidates): read from ~430 units' dicts they
        took 0.20-0.23 ms of a warm 6k search (2026-11-24)."""
        import numpy as np

        self.units = units  # the index's units (dicts of _FIELDS), read-only
        self.rows = np.array([unit["row"] for unit in units], dtype=np.intp) if rows is None else rows
        self.messages = (np.array([unit["kind"] == "message" for unit in units], dtype=bool) if messages is None
                         else messages)
        self.bm25 = bm25
        self.score = np.zeros(len(units))
        # What the minimum judges, rounded as it always judged them (_fuse): relevance, BM25
        # coverage, the own calibrated cosine, and the vector weight.
        self.relevance = self.coverage = self.relevance_cosine = self.score
        self.vector_weight = 0.0
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

    def result(self, at: int) -> Result:
        import numpy as np

        unit = self.units[at]
        result = Searcher._result(unit)
        result.score = float(self.score[at])
        explain = result.explain
        for name, (values, carried) in self.explained.items():
            if carried is None or carried[at]:
                value = float(values[at]) if isinstance(values, np.ndarray) else values
                explain[name] = round(value, _ROUNDED_LATER[name]) if name in _ROUNDED_LATER else value
        explain.update(self.notes.get(at, {}))
        return result


class _RowFacts:
    """What a unit alone decides for the stages, per row of the index, kept while it is open: its
    unit's text, fields and time do not change. Computed for a row when it is first a candidate
    (a warm search's candidates are mostly the last one's)."""

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
        self.links: _Links | None = None  # once every row of the table is known (Searcher.learn_ahead)

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
            moment = _moment(unit["ts"])
            if moment is not None:
                self.timed[row] = True
                self.micros[row] = _micros(moment)
            self.known[row] = True


class _Links:
    """Which rows a search reads together, for every row of the table: each record's units and the
    messages read with each record as their turn before (each in row order), by record number
    (_RowFacts.records). Made once learn_ahead has read the whole table (a resident server):
    the candidates, their turns before and their replies are then read on arrays. Asking SQLite
    for the records first seen and walking ~430 candidates' dicts took 1.7-1.9 ms of a warm 6k
    search after learning ahead, on arrays 0.5-0.55 (thread CPU, 150 new LoCoMo questions,
    2026-11-24; the last look, which makes these, took ~2 ms at 6k and ~9 ms at 50k)."""

    def __init__(self, facts: _RowFacts, by_row: dict[int, dict | None]):
        self.unit_of = [by_row.get(row) for row in range(len(facts.known))]  # row -> its unit: a list reads faster
        count = len(facts.records)
        self.names = [""] * count  # record number -> record id
        for name, number in facts.records.items():
            self.names[number] = name
        self.units_start, self.units = self._grouped(facts.record, count)
        self.replies_start, self.replies = self._grouped(facts.context, count)

    @staticmethod
    def _grouped(keys, count: int):
        """The rows of each key (a number below `count`; -1: none) in row order, as one array and where each key's begin."""
        import numpy as np

        rows = np.flatnonzero(keys >= 0)
        grouped = rows[np.argsort(keys[rows], kind="stable")]
        starts = np.zeros(count + 1, dtype=np.intp)
        np.cumsum(np.bincount(keys[rows], minlength=count), out=starts[1:])
        return starts, grouped


class Searcher:
    """An open index, reused for every query of one process (see --batch)."""

    def __init__(self, store: Store, settings: config.Settings | None = None,
                 runtime: Runtime | None = None):
        from memctl.index import lexical

        self.store = store
        self.runtime = runtime  # whose query embedder to use, if given
        self.settings = settings or config.load(store.config_file)
        self.retrieval = self.settings.retrieval
        import numpy as np

        index_dir = store.index_dir
        # One generation of the index, the table's rows read with the vectors they number (#31: a
        # search read rows an update had just added against the vectors before them, IndexError).
        # An update patches in place: it appends vectors, then commits the table; so the table's
        # version is read first, the vectors mapped after it hold every row of that version, and a
        # search that ends on another version (data_version: a commit of another connection) is
        # done again on the new one (IndexChanged). A compaction replaces the files, between
        # two manifests, the first saying so: a manifest that changed while they were opened, or
        # says so, is an open done again.
        self.manifest, manifest = kept_manifest(index_dir)
        if manifest is not None and manifest.get("compacting"):
            raise IndexChanged
        self.db = sqlite3.connect(f"file:{index_dir / 'units.db'}?mode=ro", uri=True)
        try:
            self._version = self._table_version()
            # A plain ndarray over the mapped file: products with a np.memmap pay its subclass's
            # wrapping, 1.5 ms of a warm search's 2.7 ms product at 6k (2026-11-24).
            self._vectors = np.asarray(np.load(index_dir / "vectors.npy", mmap_mode="r"))
            # One segment set for as long as this Searcher is used: it is made anew when the index changes
            # (Retriever._open), and the ids of its documents are kept with it (lexical.Reader). Its
            # ids are looked up in the table: one it lacks (or a newer hit) is no candidate.
            self.tantivy = lexical.Reader(lexical.open_index(index_dir / "tantivy"))
            if manifest_stamp(index_dir) != self.manifest:
                raise IndexChanged
        except BaseException:
            self.db.close()
            raise
        self._embedder = None
        self._masks: dict[tuple, Any] = {}  # filters -> rows they allow, while this index stays open
        self._facts: _RowFacts | None = None  # per row, while this index stays open
        self._terms: dict[int, frozenset[str]] = {}  # row -> _terms_of, while this index stays open
        self._rare: dict[int, frozenset[str]] = {}  # row -> _rare_terms_of, while this index stays open
        # The table's units and replies as searches read them, kept while this index stays open (_units)
        self._by_row: dict[int, dict | None] = {}
        self._by_id: dict[str, dict | None] = {}
        self._row_of: dict[str, int] = {}  # unit id -> row, of the units kept
        self._replies_of: dict[str, tuple[int, ...]] = {}
        self._units_of: dict[str, tuple[dict, ...]] = {}  # record id -> its units (_turns_before)
        self._learned_to = 0  # learn_ahead has read the rows below this one

    def learn_ahead(self, rows: int) -> bool:
        """Read and learn the next `rows` rows' units and facts (_units, _RowFacts) before a search
        needs them; True when every row is known. For a resident server between calls: a search
        whose candidates were not seen before learned them itself, ~3 ms of a ~13 ms warm 6k search
        (thread CPU p50 of 130 new questions: 13.6 ms in a fresh process, 10.4 after 390 others,
        2026-11-24). What is learned is what a search would learn: results are the same."""
        import numpy as np

        total = len(self.vectors)
        start = self._learned_to
        if start >= total:
            return True
        facts = self._facts_for(total)
        units = [self._kept_unit(values) for values in self.db.execute(
            f"SELECT {', '.join(_FIELDS)} FROM units WHERE row >= ? AND row < ? ORDER BY row", (start, start + rows))
            if values[0] < len(facts.known)]  # rows the vectors lack yet: learned by the search that meets them
        if units:
            facts.learn(units, np.array([unit["row"] for unit in units], dtype=np.intp), self.retrieval)
        self._learned_to = start + rows
        if not self.current():  # learned from a newer table: the next search opens the index anew
            return True
        if self._learned_to < total:
            return False
        # Links only when every row of the table is known (not when it holds rows the vectors lack yet)
        (count,) = self.db.execute("SELECT COUNT(*) FROM units").fetchone()
        if facts.links is None and count == int(np.count_nonzero(facts.known)):
            facts.links = _Links(facts, self._by_row)
        return True

    # -- the pieces, loaded only when a query needs them -------------------------
    @property
    def vectors(self):
        return self._vectors

    def _table_version(self) -> int:
        (version,) = self.db.execute("PRAGMA data_version").fetchone()
        return version

    def current(self) -> bool:
        """Whether every read of the table so far read the version this Searcher opened."""
        return self._table_version() == self._version

    @property
    def embedder(self):
        if self._embedder is None and self.runtime is not None:
            self._embedder = self.runtime.embedder
        if self._embedder is None:
            from memctl.index.embedders import open_embedder

            # a query runs on [embedding] query_threads (embedding.py): one embedder a process
            self._embedder = open_embedder(self.settings.embedding, self.retrieval)
        return self._embedder

    # -- search ------------------------------------------------------------------
    def search(self, query: Query) -> list[Result]:
        """The results of one query; IndexChanged when the table changed while it was read (what it
        read may mix two versions: an error, or scores of neither)."""
        try:
            results = self._search(query)
        except Exception:
            if not self.current():
                raise IndexChanged from None
            raise
        if not self.current():
            raise IndexChanged
        return results

    def _search(self, query: Query) -> list[Result]:
        from memctl.index import lexical

        cfg = self.retrieval
        limit = max(cfg.candidates, query.k * 3)
        bm25 = lexical.Hits({}, 0.0)
        if query.mode != "vector":
            bm25 = lexical.search(self.tantivy, query.text, query.filters, limit, cfg.coverage_query_words,
                                  cfg.context_weight)

        vector_weight, bm25_weight, unknown = self._weights(query)
        # Every row's cosine to the query, when it is embedded: the candidates', their turns
        # before's and their replies' are read from this one product (each was a product again).
        cosines = None
        vector_rows: list[int] = []
        if vector_weight > 0:
            query_vectors = self.embedder.embed_queries(_query_lines(query.text, cfg.split_query_lines))
            cosines = _query_cosines(self.vectors, query_vectors)
            vector_rows = self._vector_candidates(cosines, query.filters, limit)

        links = self._facts.links if self._facts is not None else None
        if links is not None and not query.filters.sources:
            found = self._linked_candidates(links, bm25, vector_rows, cosines is not None, query.filters)
        else:
            units = self._rows(bm25_ids=list(bm25.scores), vector_rows=vector_rows)
            if cosines is not None:
                units += self._turns_before(units, vector_rows, query.filters)
            found = Candidates(units)
        self._fuse(found, bm25, cosines, vector_rows, vector_weight, bm25_weight, unknown)
        if cfg.neighbour_weight > 0 and query.neighbours:
            self._neighbours(found)
        periods = _named_periods(query.text) if cfg.date_weight > 0 and query.neighbours else []
        if periods:
            self._dates(found, periods)
        order = self._score(found, query, bm25)  # positions in `found`, best first
        if query.rank == "mera":
            self._rank_mera(found, order)
        if cosines is not None:
            order = self._mmr(found, order, query.k)
        else:
            for at in order:
                found.note(at, "mmr", "skipped: no vectors in bm25 mode")
        if cfg.newer_first and not periods:  # a query naming a period asks about then, not the latest
            self._newer_first(found, order, query)
        results = [found.result(at) for at in _best_chunk_per_record(found, order, query.k)]
        self._snippets(results)
        return results

    def _weights(self, query: Query) -> tuple[float, float, float | None]:
        cfg = self.retrieval
        if query.mode == "bm25":
            return 0.0, 1.0, None
        if query.mode == "vector":
            return 1.0, 0.0, None
        unknown = self.embedder.unknown_share(query.text)
        low, high = cfg.unknown_share_low, cfg.unknown_share_high
        confidence = min(1.0, max(0.0, (high - unknown) / (high - low))) if high > low else float(unknown < high)
        vector_weight = cfg.vector_weight * confidence
        return vector_weight, cfg.bm25_weight + cfg.vector_weight - vector_weight, unknown

    def _vector_candidates(self, cosines, filters: Filters, limit: int) -> list[int]:
        """The `limit` rows of the best cosines the filters allow (in no particular order)."""
        import numpy as np

        if len(cosines) == 0:
            return []
        scores = np.asarray(cosines, dtype=np.float32)
        mask = self._mask(filters, len(scores))
        if mask is not None:
            scores = scores + mask
        count = min(limit, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        return top[np.isfinite(scores[top])].tolist()

    def _mask(self, filters: Filters, rows: int):
        """0 for each row the filters allow, -inf for the others; None when nothing is filtered.
        Kept per filter while the index is open (a server's searches): reading the allowed rows
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
            self._masks = {key: mask}  # the last filter only: a server's calls mostly repeat one
        return self._masks[key]

    def _turns_before(self, rows: list[dict], vector_rows: list[int], filters: Filters) -> list[dict]:
        """The messages that vector candidates were read with (see _reply_cosines), if the
        filters admit them and they are not candidates already."""
        vector_rows = set(vector_rows)
        have = {row["record_id"] for row in rows}
        wanted = sorted({row["context_id"] for row in rows if row["row"] in vector_rows and row["context_id"]} - have)
        if filters.sources:  # SQLite may walk its source index then: its order, from SQLite
            where, params = filters.sql_where()
            return [dict(zip(_FIELDS, values))
                    for values in select_in(self.db, ", ".join(_FIELDS), "record_id", wanted, where, params)]
        # The filter's rows are its mask (_mask); the units, by record and row as SQLite walked its
        # record_id index, kept while the index is open (0.8 ms of a warm 6k search, 2026-11-24).
        missing = [record_id for record_id in wanted if record_id not in self._units_of]
        found: dict[str, list[dict]] = {}
        for values in select_in(self.db, ", ".join(_FIELDS), "record_id", missing):
            unit = self._kept_unit(values)
            found.setdefault(unit["record_id"], []).append(unit)
        for record_id in missing:
            self._units_of[record_id] = tuple(sorted(found.get(record_id, ()), key=lambda unit: unit["row"]))
        mask = self._mask(filters, len(self.vectors))
        return [unit for record_id in wanted for unit in self._units_of[record_id]
                if mask is None or mask[unit["row"]] == 0]

    def _linked_candidates(self, links: _Links, bm25: lexical.Hits, vector_rows: list[int], turns_before: bool,
                           filters: Filters) -> Candidates:
        """The candidates _rows and _turns_before give, in the same order, when every row is known
        (links; see _Links for what it saves)."""
        import numpy as np

        facts, row_of = self._facts, self._row_of
        # BM25's, by id a chunk at a time, then the vectors', by row a chunk at a time, as _units reads them
        keys = list(bm25.scores)
        found_ids = [key for start in range(0, len(keys), CHUNK) for key in sorted(keys[start:start + CHUNK])
                     if key in row_of]
        vector = np.asarray(vector_rows, dtype=np.intp)
        if vector.size:
            vector = np.concatenate([np.sort(vector[start:start + CHUNK]) for start in range(0, len(vector), CHUNK)])
            vector = vector[facts.known[vector]]  # a row of no unit: a hole
        lexical_rows = np.fromiter(map(row_of.__getitem__, found_ids), dtype=np.intp, count=len(found_ids))
        taken = np.zeros(len(facts.known), dtype=bool)
        taken[lexical_rows] = True
        rows = np.concatenate([lexical_rows, vector[~taken[vector]]])
        if turns_before:
            rows = np.concatenate([rows, self._linked_turns_before(links, rows, vector, filters)])
        scores = np.zeros(len(rows))
        scores[:len(found_ids)] = list(map(bm25.scores.__getitem__, found_ids))
        return Candidates(list(map(links.unit_of.__getitem__, rows.tolist())), rows, facts.message[rows], scores)

    def _linked_turns_before(self, links: _Links, rows, vector_rows, filters: Filters):
        """_turns_before's rows when every row is known (links), in the same order: records by id, units by row."""
        import numpy as np

        facts = self._facts
        wanted = np.zeros(len(links.names) + 1, dtype=bool)  # by record number; the last: -1, none
        wanted[facts.context[vector_rows]] = True
        wanted[facts.record[rows]] = False
        wanted[-1] = False
        wanted = np.array(sorted(np.flatnonzero(wanted).tolist(), key=links.names.__getitem__), dtype=np.intp)
        if not wanted.size:
            return wanted
        starts = links.units_start[wanted]
        units = links.units[_ranges(starts, links.units_start[wanted + 1] - starts)]
        mask = self._mask(filters, len(self.vectors))
        return units if mask is None else units[mask[units] == 0]

    def _reply_cosines(self, found: Candidates, cosines):
        """Each candidate's best cosine of the messages read with it as their turn before (NaN: none).

        A message is embedded with the turn before it, so a reply's vector holds the
        message it answers as well: "I painted that lake sunrise last year" says what
        the photo shared before it shows. Its cosine is evidence for both turns.
        """
        import numpy as np

        facts = self._row_facts(found)
        links = facts.links
        if links is not None:
            records = facts.record[found.rows]
            counts = np.where(found.messages, links.replies_start[records + 1] - links.replies_start[records], 0)
            answered = np.flatnonzero(counts)
            best = np.full(len(found), np.nan)
            if answered.size:
                sizes = counts[answered]
                replies = links.replies[_ranges(links.replies_start[records[answered]], sizes)]
                best[answered] = np.maximum.reduceat(cosines[replies], np.cumsum(sizes) - sizes)
            return best
        messages = np.flatnonzero(found.messages).tolist()
        record_ids = [found.units[at]["record_id"] for at in messages]
        missing = sorted({record_id for record_id in record_ids if record_id not in self._replies_of})
        found_replies: dict[str, list[int]] = {}
        for context_id, row in select_in(self.db, "context_id, row", "context_id", missing):
            found_replies.setdefault(context_id, []).append(row)
        for record_id in missing:
            self._replies_of[record_id] = tuple(sorted(found_replies.get(record_id, ())))
        best = np.full(len(found), np.nan)
        answered = [(at, self._replies_of[record_id]) for at, record_id in zip(messages, record_ids)
                    if self._replies_of[record_id]]
        if answered:
            sizes = [len(replies) for _, replies in answered]
            starts = np.cumsum([0, *sizes[:-1]])
            best[[at for at, _ in answered]] = np.maximum.reduceat(
                cosines[[row for _, replies in answered for row in replies]], starts)
        return best

    def _rows(self, bm25_ids: list[str], vector_rows: list[int]) -> list[dict]:
        rows: dict[int, dict] = {}
        for column, keys in (("id", bm25_ids), ("row", vector_rows)):
            for unit in self._units(column, keys):
                rows[unit["row"]] = unit
        return list(rows.values())

    def _units(self, column: str, keys: list) -> list[dict]:
        """The units (dicts of _FIELDS) whose `column`, "id" or "row", is among `keys`, in the order
        select_in gave them: a chunk of keys at a time, each in key order (SQLite walks an IN list
        sorted, on the id index or the row key). Kept while this index stays open: a warm search
        read its ~400 candidates from SQLite in ~2 ms of ~26 (6k store, 2026-11-24), and the
        candidates of one search are mostly those of the next. Read-only: the caller may not change them."""
        cache = self._by_row if column == "row" else self._by_id
        missing = [key for key in keys if key not in cache]
        if missing:
            for values in select_in(self.db, ", ".join(_FIELDS), column, missing):
                self._kept_unit(values)
            for key in missing:
                cache.setdefault(key, None)  # not in the table: a hole's row
        return [cache[key] for start in range(0, len(keys), CHUNK) for key in sorted(set(keys[start:start + CHUNK]))
                if cache[key] is not None]

    def _kept_unit(self, values: tuple) -> dict:
        """The unit of a table row read as _FIELDS, kept by row and id (the one kept already, if any)."""
        unit = self._by_row.get(values[0])
        if unit is None:
            unit = dict(zip(_FIELDS, values))
            self._by_row[unit["row"]] = self._by_id[unit["id"]] = unit
            self._row_of[unit["id"]] = unit["row"]
        return unit

    @staticmethod
    def _result(row: dict) -> Result:
        # In Result's field order, by position: by keyword the call took 1.6 µs, by position 0.7
        # (2026-11-24, when every candidate was made one; now the returned results only).
        return Result(row["id"], row["kind"], row["text"], 0.0, row["source"], [row["line_start"], row["line_end"]],
                      row["section"], row["session"], row["ts"], row["speaker"], row["scope"], row["record_id"],
                      row["row"], orjson.loads(row["fields"] or "{}"))

    def _fuse(self, found: Candidates, bm25: lexical.Hits, cosines, vector_rows: list[int],
              vector_weight: float, bm25_weight: float, unknown: float | None) -> None:
        """Two scores a candidate: `fused` orders, `relevance` is what the minimum judges.

        Both read the cosine through the model's calibration (0 at the cosine
        of unrelated text, 1 at a close paraphrase), so one threshold and one
        weighting mean the same for every model. BM25 enters `fused`
        max-normalised (the best keyword hit leads, whatever it is) and
        `relevance` as the share of the query's weight matched (Hits.coverage).
        A message's cosine gains context_weight of what its reply's vector
        (which reads it as the turn before) scores above its own, as BM25
        counts the turn before at that weight: a reply's vector is evidence for
        both turns, and whose words matched it cannot tell. That credit orders;
        relevance reads the message's own cosine (LoCoMo dev: unrelated queries
        returning anything 3.75% with the credit, 3.1% without; recall@10 .743 / .741).
        `cosines`: every row's cosine to the query, None when it was not embedded.
        """
        import numpy as np

        cfg = self.retrieval
        scores = bm25.scores
        top_bm25 = max(scores.values(), default=0.0) or 1.0
        raw = found.bm25 if found.bm25 is not None else np.array([scores.get(unit_id, 0.0) for unit_id in found.ids])
        coverage = np.minimum(1.0, raw / bm25.ideal) if bm25.ideal > 0 else np.zeros(len(found))
        total = (vector_weight + bm25_weight) or 1.0
        if cosines is not None and len(found):
            floor, ceiling = self._cosine_calibration()
            span = ceiling - floor
            own = cosines[found.rows].astype(np.float64)
            reply = self._reply_cosines(found, cosines)
            answered = ~np.isnan(reply)
            cosine = np.where(answered, own + cfg.context_weight * np.maximum(0.0, reply - own), own)
            meaning = np.minimum(1.0, np.maximum(0.0, (cosine - floor) / span))
            own_meaning = np.minimum(1.0, np.maximum(0.0, (own - floor) / span))
            found.explain("cosine_own", own, answered)
            found.explain("cosine_reply", reply, answered)
        else:
            own = cosine = meaning = own_meaning = np.zeros(len(found))
        if cfg.fusion == "rrf":
            fused = self._rrf(found, scores, cosines, vector_rows, vector_weight, bm25_weight)
        else:
            fused = (vector_weight * meaning + bm25_weight * raw / top_bm25) / total
        found.score = fused
        found.vector_weight = round(vector_weight, 4)
        found.coverage = _rounded(coverage, 4)
        found.relevance_cosine = _rounded(own_meaning, 4)
        # The numbers later stages judge, rounded now as they were always judged (as Python
        # rounds: _rounded); the others when a result is made (_ROUNDED_LATER).
        found.relevance = _rounded((vector_weight * own_meaning + bm25_weight * coverage) / total, 4)
        for name, values in (("bm25", raw), ("bm25_norm", raw / top_bm25), ("bm25_coverage", found.coverage),
                             ("cosine", cosine), ("cosine_calibrated", meaning),
                             ("relevance_cosine", found.relevance_cosine), ("vector_weight", found.vector_weight),
                             ("bm25_weight", round(bm25_weight, 4)), ("fusion", cfg.fusion), ("fused", fused),
                             ("relevance", found.relevance)):
            found.explain(name, values)
        if unknown is not None:
            found.explain("unknown_share", unknown)

    def _rrf(self, found: Candidates, scores: dict[str, float], cosines, vector_rows: list[int],
             vector_weight: float, bm25_weight: float):
        """Reciprocal rank fusion, scaled to [0, 1]: Σ w / (rrf_k + rank) over BM25's and the vectors' ranks."""
        import numpy as np

        k = self.retrieval.rrf_k
        bm25_rank = {uid: r for r, uid in enumerate(sorted(scores, key=scores.get, reverse=True), 1)}
        cos_rank = {}
        if cosines is not None:  # the vector candidates, then the others, as ties stand
            ranked = list(dict.fromkeys([*vector_rows, *found.rows.tolist()]))
            cosine_of = dict(zip(ranked, cosines[ranked].tolist()))
            cos_rank = {row: r for r, row in enumerate(sorted(cosine_of, key=cosine_of.get, reverse=True), 1)}
        best = (vector_weight + bm25_weight) / (k + 1)
        return np.array([((bm25_weight / (k + bm25_rank[uid]) if uid in bm25_rank else 0.0)
                          + (vector_weight / (k + cos_rank[row]) if row in cos_rank else 0.0)) / best
                         for uid, row in zip(found.ids, found.rows.tolist())])

    def _neighbours(self, found: Candidates) -> None:
        """A chat turn moves neighbour_weight of the way up to the better fused score of the
        turns right before and after it in its session, when those are candidates.

        Evidence comes in runs: the question asked a turn earlier, the detail added a turn
        later ("I went to the pride parade." / "It was last Saturday, with Rachel."), and a
        turn's own words rarely hold all of what the query asks. A turn next to a strong hit
        is likelier evidence than a lone turn of the same score elsewhere. Never past its
        neighbour: a run of turns would otherwise outrank the one memory saying the same
        (the demo store's Chinese memory fell below two turns repeating it). Orders only:
        relevance, which the minimum judges, is the turn's own. Measured (bench/README.md,
        "Neighbouring turns"): LoCoMo dev recall@10 .741 -> .760 at 0.4 (0.6: .764, temporal
        .838 -> .823), LongMemEval dev all@10 unchanged (.800); memories (MADial) untouched.
        """
        import numpy as np

        messages = np.flatnonzero(found.messages)
        lines = self._row_facts(found).line[found.rows[messages]]
        by_line = np.argsort(lines, kind="stable")
        in_order = lines[by_line]
        nobody = len(found)  # the position of a fused score 0.0, for a turn with no neighbour among them

        def at(wanted):  # the candidate at each wanted line (the last found, if several), else nobody
            place = np.maximum(np.searchsorted(in_order, wanted, side="right") - 1, 0)
            return np.where(in_order[place] == wanted, messages[by_line[place]], nobody)

        fused = np.append(found.score, 0.0)
        bonus = np.zeros(len(found))
        if len(messages):
            bonus[messages] = self.retrieval.neighbour_weight * np.maximum(
                0.0, np.maximum(fused[at(lines - 1)], fused[at(lines + 1)]) - fused[messages])
        found.score = found.score + bonus
        found.explain("neighbours_bonus", bonus, found.messages)
        found.explain("neighbours", found.score, found.messages)

    def _dates(self, found: Candidates, periods: list) -> None:
        """A chat turn or log entry said in a period the query names ranks higher: + date_weight.

        "What dish did Nate make on 9 November, 2022?": the turns of that day hold the answer, and
        the date is in their timestamp, not their words. Orders only, like the neighbours stage.
        """
        import numpy as np

        from memctl.search.dates import within

        bonus = np.zeros(len(found))
        dated = np.zeros(len(found), dtype=bool)
        for at, unit in enumerate(found.units):
            moment = _moment(unit["ts"]) if unit["kind"] in ("message", "log") else None
            if moment is not None:
                dated[at] = True
                bonus[at] = self.retrieval.date_weight if within(moment, periods) else 0.0
        found.score = found.score + bonus
        found.explain("date_bonus", bonus, dated)
        found.explain("date", found.score, dated)

    def _cosine_calibration(self) -> tuple[float, float]:
        return self.embedder.cosine_floor, self.embedder.cosine_ceiling

    def _score(self, found: Candidates, query: Query, bm25: lexical.Hits) -> list[int]:
        """The minimum judges relevance alone; then the stages that may reorder, never erase.
        The positions kept, best first.

        The design's literal order (decay, then the minimum) drops every
        relevant memory older than a few months: at 1,198 days a score is
        halved. Here the minimum comes first, on the calibrated relevance,
        and age only moves a result among those that passed.
        """
        import numpy as np

        cfg = self.retrieval
        if query.min_score is None:
            minimum = cfg.hard_min_score
            if not (self._knows_subject(found) or self._words_known(found, bm25)
                    or self._named_in_its_script(found, bm25, query.text)):
                return []
        else:  # --min-score: the caller's floor on each result's relevance replaces the subject test
            minimum = query.min_score
            if max(found.relevance.tolist(), default=0.0) < minimum:
                return []
        facts = self._row_facts(found)
        rows = found.rows
        kept = found.relevance >= minimum
        if cfg.filter_noise:
            kept &= ~facts.noise[rows]
        age = np.where(facts.timed[rows], (_micros(clock.now()) - facts.micros[rows]) / 1e6 / 86400, 0.0)
        age = np.maximum(0.0, age)
        # math.exp, not numpy's: numpy's may differ in the last digit, and scores stay Python's.
        recency = np.array([math.exp(x) for x in (-age / cfg.recency_decay_days).tolist()]) * cfg.recency_weight
        score = found.score + recency
        found.explain("recency_bonus", recency)
        found.explain("recency", score)
        score = score * facts.importance[rows]
        found.explain("importance_factor", facts.importance[rows])
        found.explain("importance", score)
        score = score * facts.length[rows]
        found.explain("length_factor", facts.length[rows])
        found.explain("length", score)
        floor = cfg.time_decay_floor
        decay = np.array([math.exp(x) for x in (-age / cfg.time_decay_days).tolist()])
        factor = np.where(facts.dated[rows], floor + (1 - floor) * decay, 1.0)
        score = score * factor
        found.explain("time_decay_factor", factor)
        found.explain("time_decay", score)
        found.explain("age_days", age)
        found.explain("final", score)
        found.score = score
        # Best first, ties by id: numpy's sort, and Python's key sort only when two scores tie (a
        # key sort of ~430 candidates was ~0.1 ms a warm search).
        ranked = np.flatnonzero(kept)
        ranked = ranked[np.argsort(-score[ranked], kind="stable")]
        if np.any(np.diff(score[ranked]) == 0):
            return sorted(ranked.tolist(), key=lambda at: (-score[at], found.ids[at]))
        return ranked.tolist()

    def _row_facts(self, found: Candidates) -> _RowFacts:
        """The candidates' rows' facts (_RowFacts), computed for those first seen: noise patterns,
        the importance, length and time-decay factors and the parsed time of ~400 candidates cost
        ~2 ms of a warm 6k search before they were kept (2026-11-24)."""
        # the table may hold rows the vectors lack yet
        facts = self._facts_for(max(len(self.vectors), int(found.rows.max()) + 1 if len(found) else 0))
        facts.learn(found.units, found.rows, self.retrieval)
        return facts

    def _facts_for(self, rows: int) -> _RowFacts:
        """The facts kept, made anew (empty) when they hold fewer than `rows` rows."""
        if self._facts is None or len(self._facts.known) < rows:
            self._facts = _RowFacts(rows)
        return self._facts

    def _terms_of(self, unit: dict) -> frozenset[str]:
        """lexical.content_terms of a unit, kept while the index is open (its text does not
        change): newer-first, MMR's twin test and the minimum's word test analysed ~26 texts a
        warm 6k search, mostly the same from one search to the next."""
        from memctl.index import lexical

        row = unit["row"]
        if row not in self._terms:
            self._terms[row] = frozenset(lexical.content_terms(unit["text"]))
        return self._terms[row]

    def _newer_first(self, found: Candidates, order: list[int], query: Query) -> None:
        """A later statement on the subject of a top result ranks right above it.

        "Harbor uses MySQL 8", then in a later session "we switched from MySQL to
        PostgreSQL": the second rarely names what the question names ("which database does
        Harbor use"), but it names what the first answered: a word of the top result that
        the query does not hold and few units of the store hold (at most newer_rare_share of
        them, and at least 2). A candidate later than a top result (in a later session:
        a reply in the same conversation is not an update) that holds such a word
        moves right above it (the best ranked, if several). From below the first
        page it comes only with newer_pull_share (0.8) of the older one's relevance. --explain
        says which word and which result. Chat messages only: memories have their supersedes
        chains. After MMR, which would otherwise demote the newer of two twins.

        Measured (bench/README.md, "The newer fact"): LongMemEval dev all@10 .767 -> .800 (one
        temporal question), LoCoMo dev recall@10 -.003; pulling any later candidate up cost
        LoCoMo .028 (a later turn naming the same pet is rarely an update there).
        `order`: positions in `found`, best first; moves happen in it.
        """
        import numpy as np

        from memctl.index import lexical

        cfg = self.retrieval
        page = min(query.k, FIRST_PAGE)
        top = order[:page]
        if not top:
            return
        units, facts = found.units, self._row_facts(found)
        most = max(2, int(self.tantivy.searcher.num_docs * cfg.newer_rare_share))
        asked = lexical.content_terms(query.text)
        moved: set[int] = set()
        ranked = None  # the candidates in `order` as arrays (made again after a move)
        for older in top:
            old = units[older]
            row = old["row"]
            if older in moved or not found.messages[older] or not facts.timed[row]:
                continue
            rare = self._rare_terms_of(old, most) - asked
            if not rare:
                continue
            if ranked is None:
                ranked = found.rows[order]
                relevance = found.relevance[order]
                messages = found.messages[order] & facts.timed[ranked]
                micros, sessions = facts.micros[ranked], facts.session[ranked]
            at = order.index(older)
            # Later: a chat message of a later session (a reply in the same conversation is not
            # an update; a message later than a memory is as often the talk it was written from).
            # From below the page, only a statement about as relevant as the one it updates.
            # Tested on arrays, the words last: ~1,250 pairs a warm 6k search, each a Python
            # test, took ~1.5 ms (2026-11-24).
            below = min(max(page, at + 1), len(order))
            reach = relevance >= cfg.newer_pull_share * found.relevance[older]
            reach[:below] = False
            reach[at + 1:below] = True
            later = reach & messages & (micros > facts.micros[row]) & (sessions != facts.session[row])
            for place in np.flatnonzero(later).tolist():
                newer = order[place]
                new = units[newer]
                shared = sorted(rare & self._terms_of(new)) if newer not in moved else None
                if shared:
                    del order[place]
                    order.insert(at, newer)
                    ranked = None
                    moved.add(newer)
                    found.note(newer, "newer_first", f"moved above {old['record_id'] or old['id']}: later "
                                                     f"({new['ts']} > {old['ts']}) and names '{shared[0]}' as it does")
                    found.note(older, "newer_first", f"below {new['record_id'] or new['id']}, a later statement")
                    break

    def _rare_terms_of(self, unit: dict, most: int) -> frozenset[str]:
        """lexical.rare_terms of a unit's content words, kept while the index is open (`most`, from
        the store's size, is the same for each search): ~10 Tantivy lookups of each of the first
        page's results a search."""
        from memctl.index import lexical

        row = unit["row"]
        if row not in self._rare:
            self._rare[row] = frozenset(lexical.rare_terms(self.tantivy, self._terms_of(unit), most))
        return self._rare[row]

    def _knows_subject(self, found: Candidates) -> bool:
        """Whether some candidate is about the query: its own meaning or its words match it well.

        The minimum judges the query, not each result against the best: on LongMemEval an
        evidence turn ranked in the top 10 may hold half the best one's relevance, and a cut
        there cost .159 of all@10. What tells a store that knows the subject from one that
        does not is the strongest evidence of either kind: the best own calibrated cosine
        (the cosine clause counts in proportion to the vector weight, which shrinks for text
        the model cannot read), the best BM25 coverage, or, where both are middling, the
        best relevance (their weighted sum, the old test). Each is scale-free: the cosine
        calibrated per model (0 unrelated, 1 paraphrase), the coverage a share of the
        query's own weight. The thresholds: bench/README.md, "The minimum".
        """
        import numpy as np

        cfg = self.retrieval
        trust = found.vector_weight / cfg.vector_weight if cfg.vector_weight > 0 else 0.0
        meaning = found.relevance_cosine * min(1.0, trust)
        return bool(np.any((meaning >= cfg.subject_min_cosine) | (found.coverage >= cfg.subject_min_coverage)
                           | (found.relevance >= cfg.min_best_relevance)))

    def _words_known(self, found: Candidates, bm25: lexical.Hits) -> bool:
        """Whether two units together hold subject_min_words of the query's word weight (idf).

        A question that joins two facts ("Which happened first, the meeting with Rachel or the
        pride parade?") finds each in its own turn, and no one turn holds enough of its words or
        meaning for _knows_subject. Counted as a set (a word held or not), not by BM25: BM25's
        coverage rewards a short turn that repeats a common word, and a pair of such turns
        covered half of other conversations' questions. Only BM25's candidates can hold a word.
        Measured (bench/README.md, "The minimum, third pass"): LongMemEval dev keeps the pride
        parade question; unrelated queries returning anything 2.1 % -> 3.3 %.
        """

        weights = bm25.weights
        total = sum(weights.values())
        if total <= 0:
            return False
        held = [set(weights) & self._terms_of(unit) for unit in found.units if unit["id"] in bm25.scores]
        if not held:
            return False
        first = max(held, key=lambda words: sum(weights[w] for w in words))
        second = max(held, key=lambda words: sum(weights[w] for w in words - first))
        return sum(weights[w] for w in first | second) >= self.retrieval.subject_min_words * total

    def _named_in_its_script(self, found: Candidates, bm25: lexical.Hits, query_text: str) -> bool:
        """Whether a unit written in one script holds subject_min_coverage of the query's words of
        that script, when the query is written in two: "Kestrel 的菜谱存在哪个数据库？" over the
        English note "Kestrel stores its recipes in PostgreSQL". Each script goes to its own model
        (embedders.ByScript), so the note's cosine to the Chinese query is 0, and the Chinese words,
        which no English text can hold, left its coverage at ~1/20: a bilingual user's question that
        names an English project, person or tool found nothing. Judged on the words (idf) of the
        unit's own script only, as _words_known counts them: held or not.
        """
        from memctl.index import lexical
        from memctl.text.cjk import has_cjk

        weights = bm25.weights
        # Of the Latin words, those written as names are: "Kestrel", "PostgreSQL", "iPhone", not "OK",
        # "Hi" or "bug", with which a Chinese sentence often says what an English one would not
        # ("OK 我们明天见" returned "I'm doing OK" from a LoCoMo store); a number is of no script.
        names = lexical.content_terms(" ".join(_NAME_WORD.findall(query_text)))
        by_script = {True: {w for w in weights if has_cjk(w)}, False: {w for w in weights if w in names}}
        if not (by_script[True] and by_script[False]):
            return False
        for unit in found.units:
            if unit["id"] not in bm25.scores:
                continue
            cjk, latin = has_cjk(unit["text"]), _LATIN_WORD.search(unit["text"]) is not None
            if cjk == latin:  # written in both (judged as any unit is) or in neither
                continue
            script = by_script[cjk]
            held = script & self._terms_of(unit)
            if sum(weights[w] for w in held) >= self.retrieval.subject_min_coverage * sum(weights[w] for w in script):
                return True
        return False

    def _rank_mera(self, found: Candidates, order: list[int]) -> None:
        """Order by G4 retrieval_score, relevance being the fused search score (0..1)."""
        from memctl.search.scores import Scorer

        scorer = Scorer(self.store, gov=self.settings.governance)
        fused = found.explained["fused"][0]
        found.score = found.score.copy()  # the time decay's explain keeps the one it had
        for at in order:
            unit = found.units[at]
            fields = orjson.loads(unit["fields"] or "{}") if unit["kind"] == "memory" else {"created_at": unit["ts"]}
            score = scorer.retrieval(round(float(fused[at]), 4), fields, unit["record_id"] or unit["id"])
            found.note(at, "mera", score.as_dict())
            found.score[at] = score.total
        final = found.score.tolist()
        order.sort(key=lambda at: (-final[at], found.ids[at]))

    def _mmr(self, found: Candidates, order: list[int], k: int) -> list[int]:
        """Demote a result whose cosine to a better kept one passes the threshold.

        In rank order, each result against the ones kept so far, until k records are kept:
        nothing after them can be among the k returned. Comparing all pairs in one matrix
        product took 4.8 ms of a warm 6k search for ~400 candidates (2026-11-24), a pairwise
        Python loop over all of them 0.40 s once. Adjacent turns of one session are never
        twins: each is embedded with the turn before it, so their vectors share a turn's
        text by construction. `order`: positions in `found`, best first.
        """
        import numpy as np

        threshold = self.retrieval.mmr_threshold
        units = found.units
        kept: list[int] = []
        kept_vectors = np.empty((0, self.vectors.shape[1]), dtype=np.float32)
        demoted: list[int] = []
        records: set[str] = set()
        for place, at in enumerate(order):
            if len(records) >= k:
                return kept + order[place:] + demoted
            unit = units[at]
            vector = np.asarray(self.vectors[unit["row"]], dtype=np.float32)
            twin = next((units[kept[j]] for j in np.flatnonzero(kept_vectors @ vector > threshold)
                         if not _adjacent(units[kept[j]], unit) and self._repeats(unit, units[kept[j]])), None)
            if twin is not None:
                found.note(at, "mmr", f"demoted: cosine > {threshold} to {twin['record_id'] or twin['id']}")
                demoted.append(at)
                continue
            kept.append(at)
            kept_vectors = np.vstack([kept_vectors, vector])
            records.add(unit["record_id"] or unit["id"])
        return kept + demoted

    def _repeats(self, unit: dict, better: dict) -> bool:
        """Whether `unit` says in words little that `better` does not: at least mmr_word_overlap
        of its content words are `better`'s."""

        words = self._terms_of(unit)
        if not words:
            return True
        return len(words & self._terms_of(better)) / len(words) >= self.retrieval.mmr_word_overlap

    def _snippets(self, results: list[Result]) -> None:
        for result in results:
            limit = (self.retrieval.memory_snippet_tokens if result.kind == "memory"
                     else self.retrieval.message_snippet_tokens)
            # A token is at least one UTF-8 byte: text with no more bytes than the limit fits
            # without loading the encoding (~300 ms).
            if len(result.text.encode()) > limit:
                from memctl.text.tokens import truncate_tokens

                result.text = truncate_tokens(result.text, limit)


class Retriever:
    """Searches a store, indexing first when its files changed (C3); keeps the index open.

    A command line run makes one and searches once; a server (memctl mcp)
    keeps one, so the model, Tantivy and the vectors stay loaded and a warm
    search costs milliseconds. A corrupt index is rebuilt and the search
    tried again; every memory returned counts as an access (G4).
    """

    def __init__(self, store: Store, *, say=None, runtime: Runtime | None = None):
        """`runtime`: its Memory's (settings read once, the query embedder shared); without one,
        each search reads memctl.toml and a change of settings reopens the index."""
        self.store = store
        self.say = say
        self.runtime = runtime
        self._searcher: Searcher | None = None

    def search(self, queries: list[Query], *, count_access: bool = True) -> list[list[Result]]:
        from memctl.index.index import Index
        from memctl.store import counters

        self.store.require()
        index = Index(self.store, self.runtime.settings if self.runtime else None)
        report = index.refresh(self.say)
        try:
            answers = self._answers(index, queries, report.touched)
        except (ValueError, OSError, sqlite3.Error) as exc:
            if self.say:
                self.say(f"memctl: the index is unreadable ({exc}); rebuilding it")
            index.update(rebuild=True)
            answers = self._answers(index, queries, True)
        if count_access:
            counters.record(self.store, [r.record_id or r.id for results in answers for r in results
                                         if r.kind == "memory"])
        return answers

    def learn_ahead(self, rows: int) -> bool:
        """The open index's Searcher.learn_ahead; True when there is nothing (more) to learn."""
        return self._searcher is None or self._searcher.learn_ahead(rows)

    def _answers(self, index, queries: list[Query], changed: bool) -> list[list[Result]]:
        """Each query's results, all read from one generation of the index (Searcher): when another
        process changed it meanwhile, the update under way is waited for and the queries read
        again; after READS_FREE such reads, once more with updates held off."""
        for _ in range(READS_FREE):
            try:
                return [self._open(index, changed).search(q) for q in queries]
            except IndexChanged:
                self._searcher = None
                changed = True
                index.refresh(self.say)  # waits for the update under way (its lock), indexes what is new
        with index.unchanging():
            return [self._open(index, True).search(q) for q in queries]

    def _open(self, index, changed: bool) -> Searcher:
        if (changed or self._searcher is None or self._searcher.settings != index.settings
                or self._searcher.manifest != manifest_stamp(index.dir)):  # another process updated it
            self._searcher = None
            self._searcher = Searcher(self.store, index.settings, self.runtime)
        return self._searcher


def search_store(store: Store, queries: list[Query], *, say=None, count_access: bool = True,
                 runtime: Runtime | None = None) -> list[list[Result]]:
    """One search of a store by a fresh Retriever (a command's single run)."""
    return Retriever(store, say=say, runtime=runtime).search(queries, count_access=count_access)


def _query_lines(text: str, split: bool) -> list[str]:
    """What a query is embedded as: a query of several lines (a chat so far) a line at a
    time and then whole (see _query_cosines); one line as it is."""
    lines = [line.strip() for line in text.splitlines() if line.strip()] if split else []
    return [*lines, text] if len(lines) > 1 else lines or [text]


def _query_cosines(vectors, query_vectors):
    """Each row's cosine to the query (embedded as _query_lines says): for several lines,
    the mean of the closest line's cosine and the whole text's.

    One vector of a whole dialogue blurs the turn a memory belongs to, and the closest line
    alone misses what the talk is about; together they lead both. MADial dev, USE, dense
    recall@5: whole .555, closest line .590, their mean .698 (a share of 0.2-0.6 for the
    whole gave .673-.698); fused through the CLI see bench/README.md (2026-11-24)."""
    import numpy as np

    if len(query_vectors) == 1:  # one line: a matrix-vector product
        # Over the columns the query fills only: a routed model's query fills one model's part
        # (MiniLM's 384 of 896), and the product reads the vectors from memory at ~10 GB/s.
        filled = np.flatnonzero(query_vectors[0])
        columns = slice(filled[0], filled[-1] + 1) if filled.size else slice(0, 0)
        return vectors[:, columns] @ query_vectors[0, columns]
    products = vectors @ query_vectors.T
    return (products[:, :-1].max(axis=1) + products[:, -1]) / 2


def _named_periods(text: str) -> list:
    """The periods the query names (search/dates.py), read against now."""
    from memctl.search.dates import named_periods

    return named_periods(text, clock.now())


@functools.lru_cache(maxsize=65_536)
def _moment(ts: str | None) -> datetime | None:
    """A unit's time, parsed once a process: _newer_first compares each top result with every
    later candidate, ~3,300 pairs a search, and parsing both stamps of each pair took 5 ms of a
    warm 26 ms search (6k store, 2026-11-24). None when it is no time."""
    try:
        return clock.parse_ts(ts)
    except (ValueError, TypeError):
        return None


# --explain's numbers the stages leave unrounded, and their digits: Candidates.result rounds those
# of the results a search returns. Rounding ~20 numbers of each of ~400 candidates took 2.5 ms of a warm 6k
# search (2026-11-24); the numbers a stage judges (relevance and its parts) are rounded at once.
_ROUNDED_LATER = {"cosine_own": 4, "cosine_reply": 4, "bm25": 4, "bm25_norm": 4, "cosine": 4, "cosine_calibrated": 4,
                  "fused": 4, "unknown_share": 3, "neighbours_bonus": 4, "neighbours": 4, "date_bonus": 4, "date": 4,
                  "recency_bonus": 4,
                  "recency": 4, "importance_factor": 4, "importance": 4, "length_factor": 4, "length": 4,
                  "time_decay_factor": 4, "time_decay": 4, "age_days": 2, "final": 4}


def _best_chunk_per_record(found: Candidates, order: list[int], k: int) -> list[int]:
    """The first k positions of `order` of distinct records."""
    seen: set[str] = set()
    out = []
    for at in order:
        unit = found.units[at]
        key = unit["record_id"] or unit["id"]
        if key not in seen:
            seen.add(key)
            out.append(at)
            if len(out) == k:
                break
    return out


def _adjacent(one: dict, other: dict) -> bool:
    """Adjacent messages of one session file (see Searcher._mmr)."""
    return (one["kind"] == "message" and other["kind"] == "message" and one["source"] == other["source"]
            and abs(one["line_start"] - other["line_start"]) == 1)


def _dated(kind: str, fields: dict, evergreen_classes: list[str]) -> bool:
    """Messages, log entries and episodic memories fade with age; a memory of an
    evergreen class (a policy, say) is as true next year as today."""
    return kind != "memory" or fields.get("memory_class") not in evergreen_classes


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


_LATIN_WORD = re.compile(r"[A-Za-z]{2}")  # two letters of the Latin script: a word, not a unit or a digit
# A word written as a name: three or more Latin letters or digits, one of them a capital
_NAME_WORD = re.compile(r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*[A-Z])[A-Za-z][A-Za-z0-9]{2,}(?![A-Za-z0-9])")


def _micros(moment: datetime) -> int:
    """An aware time as whole µs since the epoch: the difference of two is the exact timedelta,
    so ages on an array are clock.age_days' numbers."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _ranges(starts, counts):
    """The positions starts[i] .. starts[i] + counts[i] - 1 of each i, one after another."""
    import numpy as np

    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(int(offsets[-1] + counts[-1]) if len(counts) else 0)


def _rounded(values, digits: int):
    """round(x, digits) of each, as Python rounds it (the exact decimal, half to even).

    numpy's round (multiply, round to integer, divide) picks the same decimal except where
    the scaled number lies within its float error of a half; there Python's round decides.
    Python's round over ~430 candidates' three judged numbers cost ~0.3 ms a warm search."""
    import numpy as np

    scale = 10.0 ** digits
    scaled = values * scale
    out = np.rint(scaled) / scale
    for at in np.flatnonzero(np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6).tolist():
        out[at] = round(float(values[at]), digits)
    return out
