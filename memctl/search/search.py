"""Hybrid search (P3): BM25 and vector candidates, fusion, then the scoring stages.

Stages, in the SPEC's order, each configurable in memctl.toml [retrieval]:

    fusion        weighted: w_vec·cosine + w_bm25·BM25/max(BM25)   (0.7 / 0.3)
                  rrf:      Σ w/(k + rank), scaled to [0, 1]
    recency       + exp(−age_days / 14) · 0.10
    importance    × (0.7 + 0.3 · importance)
    length        × 1 / (1 + 0.5 · log2(max(chars / 500, 1)))
    time decay    × (0.5 + 0.5 · exp(−age_days / 60))
    hard minimum  drop below 0.35
    noise         drop refusals, greetings, memory questions (P6)
    MMR           a result whose cosine to a better one is > 0.85 moves after the rest

The model's vectors carry no signal for text it cannot read (all-MiniLM-L6-v2
turns about half of Chinese word pieces into [UNK]), so the vector weight
shrinks as the query's unknown share grows from 0.1 to 0.5 and moves to BM25;
at 0.5 and above the model is not even loaded.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import orjson

from memctl import clock
from memctl import config
from memctl.errors import InputError
from memctl.search.filters import Filters
from memctl.text.noise import noise_reason
from memctl.store.store import Store

MODES = ("hybrid", "bm25", "vector")
MAX_RESULTS = 100_000
_FIELDS = ("row", "id", "record_id", "kind", "text", "source", "line_start", "line_end", "section", "session",
           "speaker", "ts", "scope", "status", "fields")


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
    min_score: float | None = None  # None: [retrieval] hard_min_score
    rank: str = "pipeline"          # pipeline: the P3 stages; mera: G4 retrieval_score

    def __post_init__(self):
        # Tantivy takes the limit as a 32-bit count: 1e20 overflowed it.
        if not 1 <= self.k <= MAX_RESULTS:
            raise InputError(f"must be a whole number from 1 to {MAX_RESULTS}, got {self.k}", source="-k", field="k")
        if self.min_score is not None and not math.isfinite(self.min_score):
            raise InputError(f"must be a finite number, got {self.min_score}", source="--min-score",
                             field="min_score")


class Searcher:
    """An open index, reused for every query of one process (see --batch)."""

    def __init__(self, store: Store, settings: dict | None = None):
        from memctl.index import lexical

        self.store = store
        self.settings = settings or config.load(store.config_file)
        self.retrieval = self.settings["retrieval"]
        index_dir = store.index_dir
        self.tantivy = lexical.open_index(index_dir / "tantivy")
        self.db = sqlite3.connect(f"file:{index_dir / 'units.db'}?mode=ro", uri=True)
        self._index_dir = index_dir
        self._vectors = None
        self._embedder = None

    # -- the pieces, loaded only when a query needs them -------------------------
    @property
    def vectors(self):
        if self._vectors is None:
            import numpy as np

            self._vectors = np.load(self._index_dir / "vectors.npy", mmap_mode="r")
        return self._vectors

    @property
    def embedder(self):
        if self._embedder is None:
            from memctl.index.embedding import Embedder, model_dir

            embedding = self.settings["embedding"]
            self._embedder = Embedder(model_dir(embedding["model"]), threads=embedding["query_threads"],
                                      batch_size=embedding["batch_size"], precision=embedding["precision"])
        return self._embedder

    # -- search ------------------------------------------------------------------
    def search(self, query: Query) -> list[Result]:
        from memctl.index import lexical

        cfg = self.retrieval
        limit = max(cfg["candidates"], query.k * 3)
        bm25: dict[str, float] = {}
        if query.mode != "vector":
            bm25 = dict(lexical.search(self.tantivy, query.text, query.filters, limit))

        vector_weight, bm25_weight, unknown = self._weights(query)
        cosines: dict[int, float] = {}
        query_vector = None
        if vector_weight > 0:
            query_vector = self.embedder.embed([query.text])[0]
            cosines = self._vector_candidates(query_vector, query.filters, limit)

        rows = self._rows(bm25_ids=list(bm25), vector_rows=list(cosines))
        if query_vector is not None:
            for row in rows:
                if row["row"] not in cosines:
                    cosines[row["row"]] = float(self.vectors[row["row"]] @ query_vector)
        results = [self._result(row) for row in rows]
        self._fuse(results, bm25, cosines, vector_weight, bm25_weight, unknown)
        results = self._score(results, query)
        if query.rank == "mera":
            self._rank_mera(results)
        if query_vector is not None:
            results = self._mmr(results)
        else:
            for result in results:
                result.explain["mmr"] = "skipped: no vectors in bm25 mode"
        results = _best_chunk_per_record(results)[:query.k]
        self._snippets(results)
        return results

    def _weights(self, query: Query) -> tuple[float, float, float | None]:
        cfg = self.retrieval
        if query.mode == "bm25":
            return 0.0, 1.0, None
        if query.mode == "vector":
            return 1.0, 0.0, None
        unknown = self.embedder.unknown_share(query.text)
        low, high = cfg["unknown_share_low"], cfg["unknown_share_high"]
        confidence = min(1.0, max(0.0, (high - unknown) / (high - low))) if high > low else float(unknown < high)
        vector_weight = cfg["vector_weight"] * confidence
        return vector_weight, cfg["bm25_weight"] + cfg["vector_weight"] - vector_weight, unknown

    def _vector_candidates(self, query_vector, filters: Filters, limit: int) -> dict[int, float]:
        import numpy as np

        vectors = self.vectors
        if len(vectors) == 0:
            return {}
        scores = np.asarray(vectors @ query_vector, dtype=np.float32)
        allowed = self._allowed_rows(filters)
        if allowed is not None:
            mask = np.full(len(scores), -np.inf, dtype=np.float32)
            mask[allowed] = 0
            scores = scores + mask
        count = min(limit, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        return {int(row): float(scores[row]) for row in top if np.isfinite(scores[row])}

    def _allowed_rows(self, filters: Filters):
        """Rows passing the filters, or None when nothing is filtered."""
        where, params = filters.sql_where()
        if not where:
            return None
        sql = f"SELECT row FROM units WHERE {' AND '.join(where)}"
        return [row for (row,) in self.db.execute(sql, params)]

    def _rows(self, bm25_ids: list[str], vector_rows: list[int]) -> list[dict]:
        rows: dict[int, dict] = {}
        for column, keys in (("id", bm25_ids), ("row", vector_rows)):
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                sql = f"SELECT {', '.join(_FIELDS)} FROM units WHERE {column} IN ({', '.join('?' * len(chunk))})"
                for values in self.db.execute(sql, chunk):
                    rows[values[0]] = dict(zip(_FIELDS, values))
        return list(rows.values())

    @staticmethod
    def _result(row: dict) -> Result:
        return Result(id=row["id"], record_id=row["record_id"], kind=row["kind"], text=row["text"], score=0.0,
                      source=row["source"], lines=[row["line_start"], row["line_end"]], section=row["section"],
                      session=row["session"], ts=row["ts"], speaker=row["speaker"], scope=row["scope"],
                      row=row["row"], fields=orjson.loads(row["fields"] or "{}"))

    def _fuse(self, results: list[Result], bm25: dict[str, float], cosines: dict[int, float],
              vector_weight: float, bm25_weight: float, unknown: float | None) -> None:
        cfg = self.retrieval
        top_bm25 = max(bm25.values(), default=0.0) or 1.0
        if cfg["fusion"] == "rrf":
            bm25_rank = {uid: r for r, uid in enumerate(sorted(bm25, key=bm25.get, reverse=True), 1)}
            cos_rank = {row: r for r, row in enumerate(sorted(cosines, key=cosines.get, reverse=True), 1)}
            k = cfg["rrf_k"]
            best = (vector_weight + bm25_weight) / (k + 1)
        for result in results:
            raw = bm25.get(result.id, 0.0)
            cosine = cosines.get(result.row, 0.0)
            if cfg["fusion"] == "rrf":
                fused = (bm25_weight / (k + bm25_rank[result.id]) if result.id in bm25_rank else 0.0) + \
                        (vector_weight / (k + cos_rank[result.row]) if result.row in cos_rank else 0.0)
                fused /= best
            else:
                fused = vector_weight * cosine + bm25_weight * raw / top_bm25
            result.score = fused
            result.explain.update({"bm25": round(raw, 4), "bm25_norm": round(raw / top_bm25, 4),
                                   "cosine": round(cosine, 4), "vector_weight": round(vector_weight, 4),
                                   "bm25_weight": round(bm25_weight, 4), "fusion": cfg["fusion"],
                                   "fused": round(fused, 4)})
            if unknown is not None:
                result.explain["unknown_share"] = round(unknown, 3)

    def _score(self, results: list[Result], query: Query) -> list[Result]:
        cfg = self.retrieval
        now = clock.now()
        minimum = cfg["hard_min_score"] if query.min_score is None else query.min_score
        kept = []
        for result in results:
            age = _age_days(result.ts, now)
            stages = result.explain
            score = result.score + math.exp(-age / cfg["recency_half_life_days"]) * cfg["recency_weight"]
            stages["recency"] = round(score, 4)
            importance = result.fields.get("importance", cfg["default_importance"])
            importance = importance if isinstance(importance, (int, float)) else cfg["default_importance"]
            score *= 0.7 + 0.3 * importance
            stages["importance"] = round(score, 4)
            ratio = max(len(result.text) / cfg["length_norm_anchor"], 1.0)
            score *= 1 / (1 + 0.5 * math.log2(ratio))
            stages["length"] = round(score, 4)
            score *= 0.5 + 0.5 * math.exp(-age / cfg["time_decay_half_life_days"])
            stages["time_decay"] = round(score, 4)
            stages["age_days"] = round(age, 2)
            stages["final"] = round(score, 4)
            result.score = score
            if score < minimum:
                continue
            if cfg["filter_noise"]:
                noise = noise_reason(result.text, (result.fields or {}).get("role"))
                if noise:
                    continue
            kept.append(result)
        kept.sort(key=lambda r: (-r.score, r.id))
        return kept

    def _rank_mera(self, results: list[Result]) -> None:
        """Order by G4 retrieval_score, relevance being the fused search score (0..1)."""
        from memctl.governance.governance import Scorer

        scorer = Scorer(self.store)
        for result in results:
            fields = result.fields if result.kind == "memory" else {"created_at": result.ts}
            score = scorer.retrieval(result.explain["fused"], fields, result.record_id or result.id)
            result.explain["mera"] = score.as_dict()
            result.score = score.total
        results.sort(key=lambda r: (-r.score, r.id))

    def _mmr(self, results: list[Result]) -> list[Result]:
        import numpy as np

        threshold = self.retrieval["mmr_threshold"]
        kept: list[Result] = []
        demoted: list[Result] = []
        # One dense copy of the rows: row-by-row reads of the memory map cost ~3 s for 380
        # candidates (a `context` evaluation searches with no minimum score), this ~10 ms.
        vectors = np.asarray(self.vectors[[r.row for r in results]]) if results else None
        kept_rows: list[int] = []
        for index, result in enumerate(results):
            twin = None
            if kept_rows:
                similar = np.flatnonzero(vectors[kept_rows] @ vectors[index] > threshold)
                twin = next((kept[j] for j in similar if not _neighbours(kept[j], result)), None)
            if twin is None:
                kept.append(result)
                kept_rows.append(index)
            else:
                result.explain["mmr"] = f"demoted: cosine > {threshold} to {twin.record_id or twin.id}"
                demoted.append(result)
        return kept + demoted

    def _snippets(self, results: list[Result]) -> None:
        for result in results:
            limit = self.retrieval["memory_snippet_tokens" if result.kind == "memory" else "message_snippet_tokens"]
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

    def __init__(self, store: Store, *, say=None):
        self.store = store
        self.say = say
        self._searcher: Searcher | None = None

    def search(self, queries: list[Query], *, count_access: bool = True) -> list[list[Result]]:
        from memctl.index.index import Index
        from memctl.store import counters

        self.store.require()
        index = Index(self.store)
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
        if changed or self._searcher is None or self._searcher.settings != index.settings:
            self._searcher = Searcher(self.store, index.settings)
        return self._searcher


def search_store(store: Store, queries: list[Query], *, say=None, count_access: bool = True) -> list[list[Result]]:
    """One search of a store by a fresh Retriever (a command's single run)."""
    return Retriever(store, say=say).search(queries, count_access=count_access)


def _neighbours(a: Result, b: Result) -> bool:
    """Adjacent turns of one session: each is embedded with the turn before it, so their
    vectors share a turn's text by construction. That is not duplication; MMR leaves them be."""
    return (a.kind == b.kind == "message" and a.source == b.source
            and abs(a.lines[0] - b.lines[0]) == 1)


def _best_chunk_per_record(results: list[Result]) -> list[Result]:
    seen: set[str] = set()
    out = []
    for result in results:
        key = result.record_id or result.id
        if key not in seen:
            seen.add(key)
            out.append(result)
    return out


def _age_days(ts: str | None, now) -> float:
    try:
        return clock.age_days(ts, now)
    except (ValueError, TypeError):
        return 0.0
