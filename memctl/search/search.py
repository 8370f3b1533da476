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
                  min_best_relevance (0.38) and no two hold subject_min_words (0.55) of its
                  words' idf; else every result stays (hard_min_score, 0 by default, is a
                  floor on relevance)
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
import os
import sqlite3
import functools
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from memctl.runtime import Runtime
from memctl import clock
from memctl import config
from memctl.errors import InputError
from memctl.index.index import CHUNK, select_in
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


class Searcher:
    """An open index, reused for every query of one process (see --batch)."""

    def __init__(self, store: Store, settings: config.Settings | None = None,
                 runtime: Runtime | None = None):
        from memctl.index import lexical

        self.store = store
        self.runtime = runtime  # whose query embedder to use, if given
        self.settings = settings or config.load(store.config_file)
        self.retrieval = self.settings.retrieval
        index_dir = store.index_dir
        self.manifest = _manifest_stamp(index_dir)  # every update rewrites the manifest (a new file)
        self.tantivy = lexical.open_index(index_dir / "tantivy")
        self.db = sqlite3.connect(f"file:{index_dir / 'units.db'}?mode=ro", uri=True)
        self._index_dir = index_dir
        self._vectors = None
        self._embedder = None
        self._masks: dict[tuple, Any] = {}  # filters -> rows they allow, while this index stays open
        self._noise: dict[int, str | None] = {}  # row -> its unit's noise_reason, while this index stays open
        self._factors: dict[int, tuple[float, float, bool]] = {}  # row -> _factors_of, while this index stays open
        self._terms: dict[int, frozenset[str]] = {}  # row -> _terms_of, while this index stays open
        # The table's units and replies as searches read them, kept while this index stays open (_units)
        self._by_row: dict[int, dict | None] = {}
        self._by_id: dict[str, dict | None] = {}
        self._replies_of: dict[str, tuple[int, ...]] = {}
        self._units_of: dict[str, tuple[dict, ...]] = {}  # record id -> its units (_turns_before)

    # -- the pieces, loaded only when a query needs them -------------------------
    @property
    def vectors(self):
        if self._vectors is None:
            import numpy as np

            # A plain ndarray over the mapped file: products with a np.memmap pay its subclass's
            # wrapping, 1.5 ms of a warm search's 2.7 ms product at 6k (2026-11-24).
            self._vectors = np.asarray(np.load(self._index_dir / "vectors.npy", mmap_mode="r"))
        return self._vectors

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
        from memctl.index import lexical

        cfg = self.retrieval
        limit = max(cfg.candidates, query.k * 3)
        bm25 = lexical.Hits({}, 0.0)
        if query.mode != "vector":
            bm25 = lexical.search(self.tantivy, query.text, query.filters, limit, cfg.coverage_query_words,
                                  cfg.context_weight)

        vector_weight, bm25_weight, unknown = self._weights(query)
        cosines: dict[int, float] = {}
        query_vectors = None
        if vector_weight > 0:
            query_vectors = self.embedder.embed_queries(_query_lines(query.text, cfg.split_query_lines))
            cosines = self._vector_candidates(query_vectors, query.filters, limit)

        rows = self._rows(bm25_ids=list(bm25.scores), vector_rows=list(cosines))
        replies: dict[str, float] = {}
        if query_vectors is not None:
            rows += self._turns_before(rows, cosines, query.filters)
            missing = [row["row"] for row in rows if row["row"] not in cosines]
            if missing:
                best = _query_cosines(self.vectors[missing], query_vectors)
                cosines.update(zip(missing, map(float, best)))
            replies = self._reply_cosines(rows, query_vectors)
        results = [self._result(row) for row in rows]
        self._fuse(results, bm25, cosines, vector_weight, bm25_weight, unknown, replies)
        if cfg.neighbour_weight > 0 and query.neighbours:
            self._neighbours(results)
        periods = _named_periods(query.text) if cfg.date_weight > 0 and query.neighbours else []
        if periods:
            self._dates(results, periods)
        results = self._score(results, query, bm25)
        if query.rank == "mera":
            self._rank_mera(results)
        if query_vectors is not None:
            results = self._mmr(results, query.k)
        else:
            for result in results:
                result.explain["mmr"] = "skipped: no vectors in bm25 mode"
        if cfg.newer_first and not periods:  # a query naming a period asks about then, not the latest
            self._newer_first(results, query)
        results = _best_chunk_per_record(results)[:query.k]
        for result in results:
            _round_explain(result.explain)
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

    def _vector_candidates(self, query_vectors, filters: Filters, limit: int) -> dict[int, float]:
        import numpy as np

        vectors = self.vectors
        if len(vectors) == 0:
            return {}
        scores = np.asarray(_query_cosines(vectors, query_vectors), dtype=np.float32)
        mask = self._mask(filters, len(scores))
        if mask is not None:
            scores = scores + mask
        count = min(limit, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.isfinite(scores[top])]
        return dict(zip(top.tolist(), scores[top].tolist()))

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

    def _turns_before(self, rows: list[dict], cosines: dict[int, float], filters: Filters) -> list[dict]:
        """The messages that vector candidates were read with (see _reply_cosines), if the
        filters admit them and they are not candidates already."""
        have = {row["record_id"] for row in rows}
        wanted = sorted({row["context_id"] for row in rows if row["row"] in cosines and row["context_id"]} - have)
        if filters.sources:  # SQLite may walk its source index then: its order, from SQLite
            where, params = filters.sql_where()
            return [dict(zip(_FIELDS, values))
                    for values in select_in(self.db, ", ".join(_FIELDS), "record_id", wanted, where, params)]
        # The filter's rows are its mask (_mask); the units, by record and row as SQLite walked its
        # record_id index, kept while the index is open (0.8 ms of a warm 6k search, 2026-11-24).
        missing = [record_id for record_id in wanted if record_id not in self._units_of]
        found: dict[str, list[dict]] = {}
        for values in select_in(self.db, ", ".join(_FIELDS), "record_id", missing):
            unit = dict(zip(_FIELDS, values))
            self._by_row[unit["row"]] = self._by_id[unit["id"]] = unit
            found.setdefault(unit["record_id"], []).append(unit)
        for record_id in missing:
            self._units_of[record_id] = tuple(sorted(found.get(record_id, ()), key=lambda unit: unit["row"]))
        mask = self._mask(filters, len(self.vectors))
        return [unit for record_id in wanted for unit in self._units_of[record_id]
                if mask is None or mask[unit["row"]] == 0]

    def _reply_cosines(self, rows: list[dict], query_vectors) -> dict[str, float]:
        """Record id -> the best cosine of the messages read with it as their turn before.

        A message is embedded with the turn before it, so a reply's vector holds the
        message it answers as well: "I painted that lake sunrise last year" says what
        the photo shared before it shows. Its cosine is evidence for both turns.
        """
        ids = sorted({row["record_id"] for row in rows if row["kind"] == "message"})
        missing = [record_id for record_id in ids if record_id not in self._replies_of]
        found: dict[str, list[int]] = {}
        for context_id, row in select_in(self.db, "context_id, row", "context_id", missing):
            found.setdefault(context_id, []).append(row)
        for record_id in missing:
            self._replies_of[record_id] = tuple(sorted(found.get(record_id, ())))
        # As SQLite gave them before the cache: by context id, then row (its index on context_id).
        replies = {record_id: self._replies_of[record_id] for record_id in ids if self._replies_of[record_id]}
        if not replies:
            return {}
        reply_rows = [row for found in replies.values() for row in found]
        best = dict(zip(reply_rows, map(float, _query_cosines(self.vectors[reply_rows], query_vectors))))
        return {context_id: max(best[row] for row in found) for context_id, found in replies.items()}

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
                unit = dict(zip(_FIELDS, values))
                self._by_row[unit["row"]] = self._by_id[unit["id"]] = unit
            for key in missing:
                cache.setdefault(key, None)  # not in the table: a hole's row
        return [cache[key] for start in range(0, len(keys), CHUNK) for key in sorted(set(keys[start:start + CHUNK]))
                if cache[key] is not None]

    @staticmethod
    def _result(row: dict) -> Result:
        # In Result's field order, by position: by keyword the call took 1.6 µs a candidate, by
        # position 0.7 (~0.4 ms of a warm 6k search's ~430 candidates, 2026-11-24).
        return Result(row["id"], row["kind"], row["text"], 0.0, row["source"], [row["line_start"], row["line_end"]],
                      row["section"], row["session"], row["ts"], row["speaker"], row["scope"], row["record_id"],
                      row["row"], orjson.loads(row["fields"] or "{}"))

    def _fuse(self, results: list[Result], bm25: lexical.Hits, cosines: dict[int, float],
              vector_weight: float, bm25_weight: float, unknown: float | None,
              replies: dict[str, float] | None = None) -> None:
        """Two scores a result: `fused` orders, `relevance` is what the minimum judges.

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
        """
        cfg = self.retrieval
        scores = bm25.scores
        top_bm25 = max(scores.values(), default=0.0) or 1.0
        floor, ceiling = self._cosine_calibration() if cosines else (0.0, 1.0)
        if cfg.fusion == "rrf":
            bm25_rank = {uid: r for r, uid in enumerate(sorted(scores, key=scores.get, reverse=True), 1)}
            cos_rank = {row: r for r, row in enumerate(sorted(cosines, key=cosines.get, reverse=True), 1)}
            k = cfg.rrf_k
            best = (vector_weight + bm25_weight) / (k + 1)
        total = (vector_weight + bm25_weight) or 1.0
        replies = replies or {}
        rounded_vector_weight, rounded_bm25_weight = round(vector_weight, 4), round(bm25_weight, 4)
        span = ceiling - floor
        for result in results:
            raw = scores.get(result.id, 0.0)
            cosine = own = cosines.get(result.row, 0.0)
            reply = replies.get(result.record_id)
            if reply is not None:
                cosine += cfg.context_weight * max(0.0, reply - own)
                result.explain.update({"cosine_own": own, "cosine_reply": reply})
            if result.row in cosines:
                meaning = min(1.0, max(0.0, (cosine - floor) / span))
                own_meaning = min(1.0, max(0.0, (own - floor) / span))
            else:
                meaning = own_meaning = 0.0
            coverage = bm25.coverage(result.id)
            if cfg.fusion == "rrf":
                fused = (bm25_weight / (k + bm25_rank[result.id]) if result.id in bm25_rank else 0.0) + \
                        (vector_weight / (k + cos_rank[result.row]) if result.row in cos_rank else 0.0)
                fused /= best
            else:
                fused = (vector_weight * meaning + bm25_weight * raw / top_bm25) / total
            result.score = fused
            # The numbers later stages judge are rounded now, as they were always judged; the
            # others when search() returns (_ROUNDED_LATER).
            result.explain.update({"bm25": raw, "bm25_norm": raw / top_bm25,
                                   "bm25_coverage": round(coverage, 4), "cosine": cosine,
                                   "cosine_calibrated": meaning, "relevance_cosine": round(own_meaning, 4),
                                   "vector_weight": rounded_vector_weight,
                                   "bm25_weight": rounded_bm25_weight, "fusion": cfg.fusion,
                                   "fused": fused,
                                   "relevance": round((vector_weight * own_meaning + bm25_weight * coverage) / total,
                                                      4)})
            if unknown is not None:
                result.explain["unknown_share"] = unknown

    def _neighbours(self, results: list[Result]) -> None:
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
        weight = self.retrieval.neighbour_weight
        fused = {(r.source, r.lines[0]): r.score for r in results if r.kind == "message"}
        for result in results:
            if result.kind != "message":
                continue
            line = result.lines[0]
            best = max(fused.get((result.source, line - 1), 0.0), fused.get((result.source, line + 1), 0.0))
            bonus = weight * max(0.0, best - result.score)
            result.score += bonus
            result.explain["neighbours_bonus"] = bonus
            result.explain["neighbours"] = result.score

    def _dates(self, results: list[Result], periods: list) -> None:
        """A chat turn or log entry said in a period the query names ranks higher: + date_weight.

        "What dish did Nate make on 9 November, 2022?": the turns of that day hold the answer, and
        the date is in their timestamp, not their words. Orders only, like the neighbours stage.
        """
        from memctl.search.dates import within

        weight = self.retrieval.date_weight
        for result in results:
            moment = _moment(result.ts) if result.kind in ("message", "log") else None
            if moment is None:
                continue
            bonus = weight if within(moment, periods) else 0.0
            result.score += bonus
            result.explain["date_bonus"] = bonus
            result.explain["date"] = result.score

    def _cosine_calibration(self) -> tuple[float, float]:
        return self.embedder.cosine_floor, self.embedder.cosine_ceiling

    def _score(self, results: list[Result], query: Query, bm25: lexical.Hits) -> list[Result]:
        """The minimum judges relevance alone; then the stages that may reorder, never erase.

        The design's literal order (decay, then the minimum) drops every
        relevant memory older than a few months: at 1,198 days a score is
        halved. Here the minimum comes first, on the calibrated relevance,
        and age only moves a result among those that passed.
        """
        cfg = self.retrieval
        now = clock.now()
        if query.min_score is None:
            minimum = cfg.hard_min_score
            if not self._knows_subject(results) and not self._words_known(results, bm25):
                return []
        else:  # --min-score: the caller's floor on each result's relevance replaces the subject test
            minimum = query.min_score
            if max((r.explain["relevance"] for r in results), default=0.0) < minimum:
                return []
        kept = []
        for result in results:
            stages = result.explain
            if stages["relevance"] < minimum:
                continue
            if cfg.filter_noise and self._noise_of(result):
                continue
            age = _age_days(result.ts, now)
            score = result.score
            recency = math.exp(-age / cfg.recency_decay_days) * cfg.recency_weight
            score += recency
            stages["recency_bonus"], stages["recency"] = recency, score
            importance_factor, length_factor, dated = self._factors_of(result)
            score *= importance_factor
            stages["importance_factor"], stages["importance"] = importance_factor, score
            score *= length_factor
            stages["length_factor"], stages["length"] = length_factor, score
            factor = 1.0
            if dated:
                floor = cfg.time_decay_floor
                factor = floor + (1 - floor) * math.exp(-age / cfg.time_decay_days)
            score *= factor
            stages["time_decay_factor"], stages["time_decay"] = factor, score
            stages["age_days"] = age
            stages["final"] = score
            result.score = score
            kept.append(result)
        kept.sort(key=lambda r: (-r.score, r.id))
        return kept

    def _factors_of(self, result: Result) -> tuple[float, float, bool]:
        """A result's importance factor, length factor and whether time decays it, kept per row
        while the index is open: its unit's text and fields do not change (before the snippets cut
        the text), and computing them for ~400 candidates cost ~0.6 ms of a warm 6k search (2026-11-24)."""
        if result.row not in self._factors:
            cfg = self.retrieval
            importance = result.fields.get("importance", cfg.default_importance)
            importance = importance if isinstance(importance, (int, float)) else cfg.default_importance
            ratio = max(len(result.text) / cfg.length_norm_anchor, 1.0)
            self._factors[result.row] = (cfg.importance_base + (1 - cfg.importance_base) * importance,
                                         1 / (1 + cfg.length_norm_strength * math.log2(ratio)),
                                         _dated(result, cfg.evergreen_memory_classes))
        return self._factors[result.row]

    def _terms_of(self, result: Result) -> frozenset[str]:
        """lexical.content_terms of a result's unit, kept while the index is open (its text does not
        change before the snippets cut it): newer-first, MMR's twin test and the minimum's word test
        analysed ~26 texts a warm 6k search, mostly the same from one search to the next."""
        from memctl.index import lexical

        if result.row not in self._terms:
            self._terms[result.row] = frozenset(lexical.content_terms(result.text))
        return self._terms[result.row]

    def _noise_of(self, result: Result) -> str | None:
        """noise_reason of a result's unit, kept while the index is open: its text and role do not
        change, and the patterns cost ~1 ms a warm search of ~400 candidates (6k store, 2026-11-24)."""
        if result.row not in self._noise:
            self._noise[result.row] = noise_reason(result.text, (result.fields or {}).get("role"))
        return self._noise[result.row]

    def _newer_first(self, results: list[Result], query: Query) -> None:
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
        """
        import numpy as np

        from memctl.index import lexical

        cfg = self.retrieval
        page = min(query.k, FIRST_PAGE)
        top = results[:page]
        if not top:
            return
        most = max(2, int(self.tantivy.searcher().num_docs * cfg.newer_rare_share))
        asked = lexical.content_terms(query.text)
        moved: set[int] = set()
        relevance = None  # the results' relevance in their order, as an array (made again after a move)
        for older in list(top):
            if id(older) in moved:
                continue
            before = _moment(older.ts) if older.kind == "message" else None
            if before is None:
                continue
            rare = lexical.rare_terms(self.tantivy, self._terms_of(older), most) - asked
            if not rare:
                continue
            at = results.index(older)
            pull = cfg.newer_pull_share * older.explain["relevance"]
            if relevance is None:
                relevance = np.array([result.explain["relevance"] for result in results])
            # From below the page, only a statement about as relevant as the one it updates: the
            # cheap test first, on the array (it passes over most of ~400 candidates; a Python
            # loop over them all took ~1 ms a warm 6k search, 2026-11-24).
            below = min(max(page, at + 1), len(results))
            places = itertools.chain(range(at + 1, below), (below + np.flatnonzero(relevance[below:] >= pull)).tolist())
            for place in places:
                newer = results[place]
                # Later: a chat message of a later session (a reply in the same conversation is
                # not an update; a message later than a memory is as often the talk it was written
                # from). Tested here, not in a function: ~1,250 pairs a warm 6k search.
                if newer.kind != "message" or newer.session == older.session or id(newer) in moved:
                    continue
                then = _moment(newer.ts)
                if then is None or not then > before:
                    continue
                shared = sorted(rare & self._terms_of(newer))
                if shared:
                    results.remove(newer)
                    results.insert(at, newer)
                    relevance = None
                    moved.add(id(newer))
                    newer.explain["newer_first"] = (f"moved above {older.record_id or older.id}: later "
                                                    f"({newer.ts} > {older.ts}) and names '{shared[0]}' as it does")
                    older.explain["newer_first"] = f"below {newer.record_id or newer.id}, a later statement"
                    break

    def _knows_subject(self, results: list[Result]) -> bool:
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
        cfg = self.retrieval
        for result in results:
            stages = result.explain
            trust = stages["vector_weight"] / cfg.vector_weight if cfg.vector_weight > 0 else 0.0
            meaning = stages.get("relevance_cosine", 0.0) * min(1.0, trust)
            if (meaning >= cfg.subject_min_cosine or stages["bm25_coverage"] >= cfg.subject_min_coverage
                    or stages["relevance"] >= cfg.min_best_relevance):
                return True
        return False

    def _words_known(self, results: list[Result], bm25: lexical.Hits) -> bool:
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
        held = [set(weights) & self._terms_of(r) for r in results if r.id in bm25.scores]
        if not held:
            return False
        first = max(held, key=lambda words: sum(weights[w] for w in words))
        second = max(held, key=lambda words: sum(weights[w] for w in words - first))
        return sum(weights[w] for w in first | second) >= self.retrieval.subject_min_words * total

    def _rank_mera(self, results: list[Result]) -> None:
        """Order by G4 retrieval_score, relevance being the fused search score (0..1)."""
        from memctl.search.scores import Scorer

        scorer = Scorer(self.store, gov=self.settings.governance)
        for result in results:
            fields = result.fields if result.kind == "memory" else {"created_at": result.ts}
            score = scorer.retrieval(round(result.explain["fused"], 4), fields, result.record_id or result.id)
            result.explain["mera"] = score.as_dict()
            result.score = score.total
        results.sort(key=lambda r: (-r.score, r.id))

    def _mmr(self, results: list[Result], k: int) -> list[Result]:
        """Demote a result whose cosine to a better kept one passes the threshold.

        In rank order, each result against the ones kept so far, until k records are kept:
        nothing after them can be among the k returned. Comparing all pairs in one matrix
        product took 4.8 ms of a warm 6k search for ~400 candidates (2026-11-24), a pairwise
        Python loop over all of them 0.40 s once. Adjacent turns of one session are never
        twins: each is embedded with the turn before it, so their vectors share a turn's
        text by construction.
        """
        import numpy as np

        threshold = self.retrieval.mmr_threshold
        kept: list[Result] = []
        kept_vectors = np.empty((0, self.vectors.shape[1]), dtype=np.float32)
        demoted: list[Result] = []
        records: set[str] = set()
        for at, result in enumerate(results):
            if len(records) >= k:
                return kept + results[at:] + demoted
            vector = np.asarray(self.vectors[result.row], dtype=np.float32)
            twin = next((kept[j] for j in np.flatnonzero(kept_vectors @ vector > threshold)
                         if not _neighbours(kept[j], result) and self._repeats(result, kept[j])), None)
            if twin is not None:
                result.explain["mmr"] = f"demoted: cosine > {threshold} to {twin.record_id or twin.id}"
                demoted.append(result)
                continue
            kept.append(result)
            kept_vectors = np.vstack([kept_vectors, vector])
            records.add(result.record_id or result.id)
        return kept + demoted

    def _repeats(self, result: Result, better: Result) -> bool:
        """Whether `result` says in words little that `better` does not: at least mmr_word_overlap
        of its content words are `better`'s."""

        words = self._terms_of(result)
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
            answers = [self._open(index, report.touched).search(q) for q in queries]
        except (ValueError, OSError, sqlite3.Error) as exc:
            if self.say:
                self.say(f"memctl: the index is unreadable ({exc}); rebuilding it")
            index.update(rebuild=True)
            answers = [self._open(index, True).search(q) for q in queries]
        if count_access:
            counters.record(self.store, [r.record_id or r.id for results in answers for r in results
                                         if r.kind == "memory"])
        return answers

    def _open(self, index, changed: bool) -> Searcher:
        if (changed or self._searcher is None or self._searcher.settings != index.settings
                or self._searcher.manifest != _manifest_stamp(index.dir)):  # another process updated it
            self._searcher = Searcher(self.store, index.settings, self.runtime)
        return self._searcher


def search_store(store: Store, queries: list[Query], *, say=None, count_access: bool = True,
                 runtime: Runtime | None = None) -> list[list[Result]]:
    """One search of a store by a fresh Retriever (a command's single run)."""
    return Retriever(store, say=say, runtime=runtime).search(queries, count_access=count_access)


def _neighbours(one: Result, other: Result) -> bool:
    """Adjacent messages of one session file (see Searcher._mmr)."""
    return (one.kind == "message" and other.kind == "message" and one.source == other.source
            and abs(one.lines[0] - other.lines[0]) == 1)


def _manifest_stamp(index_dir) -> tuple[int, int] | None:
    try:
        info = os.stat(index_dir / "manifest.json")
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns


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


# --explain's numbers the stages leave unrounded, and their digits: search() rounds those of the
# results it returns. Rounding ~20 numbers of each of ~400 candidates took 2.5 ms of a warm 6k
# search (2026-11-24); the numbers a stage judges (relevance and its parts) are rounded at once.
_ROUNDED_LATER = {"cosine_own": 4, "cosine_reply": 4, "bm25": 4, "bm25_norm": 4, "cosine": 4, "cosine_calibrated": 4,
                  "fused": 4, "unknown_share": 3, "neighbours_bonus": 4, "neighbours": 4, "date_bonus": 4, "date": 4,
                  "recency_bonus": 4,
                  "recency": 4, "importance_factor": 4, "importance": 4, "length_factor": 4, "length": 4,
                  "time_decay_factor": 4, "time_decay": 4, "age_days": 2, "final": 4}


def _round_explain(explain: dict[str, Any]) -> None:
    for name, digits in _ROUNDED_LATER.items():
        if name in explain:
            explain[name] = round(explain[name], digits)


def _best_chunk_per_record(results: list[Result]) -> list[Result]:
    seen: set[str] = set()
    out = []
    for result in results:
        key = result.record_id or result.id
        if key not in seen:
            seen.add(key)
            out.append(result)
    return out


def _dated(result: Result, evergreen_classes: list[str]) -> bool:
    """Messages, log entries and episodic memories fade with age; a memory of an
    evergreen class (a policy, say) is as true next year as today."""
    return result.kind != "memory" or result.fields.get("memory_class") not in evergreen_classes


def _age_days(ts: str | None, now) -> float:
    """clock.age_days, on the parsed time kept by _moment; 0 when it is no time."""
    return clock.age_days(_moment(ts), now)
