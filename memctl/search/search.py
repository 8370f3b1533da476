"""Hybrid search: BM25 and vector candidates, then the ranking stages (stages.py).

Candidates: BM25 over each unit's text and, for a message, the turn before it
(a field of its own at context_weight 0.5, each query word counted where it
scores best; lexical.search), and the vectors (a message embedded with the
turn before it).

Then the ranking stages, in the order stages.STAGES gives (stages.py has their table).

The model's vectors carry no signal for text it cannot read (all-MiniLM-L6-v2
turns about half of Chinese word pieces into [UNK]), so the vector weight
shrinks as the query's unknown share grows from 0.1 to 0.5 and moves to BM25;
at 0.5 and above the model is not even loaded.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from memctl.runtime import Runtime
from memctl import clock
from memctl import config
from memctl.index.index import CHUNK
from memctl.index.filters import Filters
from memctl.index.units_reader import Links, UnitsReader
from memctl.search.candidates import Candidates, RowFacts
from memctl.search.queries import Query
from memctl.search.stages import ROUNDING, SearchRun, rank
from memctl.store.store import Store

if TYPE_CHECKING:
    from memctl.index import lexical

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
        # One segment set for as long as this Searcher is used: it is made anew when the index changes
        # (Retriever._open), and the ids of its documents are kept with it (lexical.Reader).
        self.tantivy = lexical.Reader(lexical.open_index(index_dir / "tantivy"))
        self.units = UnitsReader(index_dir / "units.db")
        self._index_dir = index_dir
        self._vectors = None
        self._embedder = None
        self._facts: RowFacts | None = None  # per row, while this index stays open
        self._terms: dict[int, frozenset[str]] = {}  # row -> _terms_of, while this index stays open
        self._rare: dict[int, frozenset[str]] = {}  # row -> _rare_terms_of, while this index stays open
        self._learned_to = 0  # learn_ahead has read the rows below this one

    def learn_ahead(self, rows: int) -> bool:
        """Read and learn the next `rows` rows' units and facts (_units, RowFacts) before a search
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
        units = [unit for unit in self.units.rows_from(start, rows)
                 if unit["row"] < len(facts.known)]  # rows the vectors lack yet: learned by the search that meets them
        if units:
            facts.learn(units, np.array([unit["row"] for unit in units], dtype=np.intp), self.retrieval)
        self._learned_to = start + rows
        if self._learned_to < total:
            return False
        # Links only when every row of the table is known (not when it holds rows the vectors lack yet)
        if facts.links is None and self.units.count() == int(np.count_nonzero(facts.known)):
            facts.links = Links(facts.records, facts.record, facts.context, self.units.by_row)
        return True

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

        weights = self._weights(query)
        # Every row's cosine to the query, when it is embedded: the candidates', their turns
        # before's and their replies' are read from this one product (each was a product again).
        cosines = None
        vector_rows: list[int] = []
        if weights[0] > 0:
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
        periods = _named_periods(query.text) if cfg.date_weight > 0 and query.neighbours else []
        run = SearchRun(self.settings, self.store, self, bm25, cosines, vector_rows, weights, periods,
                        self._cosine_calibration)
        rank(found, query, run)
        results = [self._result(found, at) for at in found.best_of_each_record(query.k)]
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
        mask = self.units.mask(filters, len(scores))
        if mask is not None:
            scores = scores + mask
        count = min(limit, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        return top[np.isfinite(scores[top])].tolist()

    def _turns_before(self, rows: list[dict], vector_rows: list[int], filters: Filters) -> list[dict]:
        """The messages that vector candidates were read with (see _reply_cosines), if the
        filters admit them and they are not candidates already."""
        vector_rows = set(vector_rows)
        have = {row["record_id"] for row in rows}
        wanted = sorted({row["context_id"] for row in rows if row["row"] in vector_rows and row["context_id"]} - have)
        if filters.sources:  # SQLite may walk its source index then: its order, from SQLite
            return self.units.units_of_records_where(wanted, filters)
        # The filter's rows are its mask
        mask = self.units.mask(filters, len(self.vectors))
        return [unit for unit in self.units.units_of_records(wanted) if mask is None or mask[unit["row"]] == 0]

    def _linked_candidates(self, links: Links, bm25: lexical.Hits, vector_rows: list[int], turns_before: bool,
                           filters: Filters) -> Candidates:
        """The candidates _rows and _turns_before give, in the same order, when every row is known
        (links; see _Links for what it saves)."""
        import numpy as np

        facts, row_of = self._facts, self.units.row_of
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

    def _linked_turns_before(self, links: Links, rows, vector_rows, filters: Filters):
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
        units = links.units_of(wanted)
        mask = self.units.mask(filters, len(self.vectors))
        return units if mask is None else units[mask[units] == 0]

    def reply_cosines(self, found: Candidates, cosines):
        """Each candidate's best cosine of the messages read with it as their turn before (NaN: none).

        A message is embedded with the turn before it, so a reply's vector holds the
        message it answers as well: "I painted that lake sunrise last year" says what
        the photo shared before it shows. Its cosine is evidence for both turns.
        """
        import numpy as np

        facts = self.row_facts(found)
        links = facts.links
        if links is not None:
            records = facts.record[found.rows]
            counts = np.where(found.messages, links.reply_counts(records), 0)
            answered = np.flatnonzero(counts)
            best = np.full(len(found), np.nan)
            if answered.size:
                sizes = counts[answered]
                replies = links.replies_of(records[answered], sizes)
                best[answered] = np.maximum.reduceat(cosines[replies], np.cumsum(sizes) - sizes)
            return best
        messages = np.flatnonzero(found.messages).tolist()
        record_ids = [found.units[at]["record_id"] for at in messages]
        best = np.full(len(found), np.nan)
        answered = [(at, replies) for at, replies in zip(messages, self.units.replies_of(record_ids)) if replies]
        if answered:
            sizes = [len(replies) for _, replies in answered]
            starts = np.cumsum([0, *sizes[:-1]])
            best[[at for at, _ in answered]] = np.maximum.reduceat(
                cosines[[row for _, replies in answered for row in replies]], starts)
        return best

    def _rows(self, bm25_ids: list[str], vector_rows: list[int]) -> list[dict]:
        rows: dict[int, dict] = {}
        for column, keys in (("id", bm25_ids), ("row", vector_rows)):
            for unit in self.units.units(column, keys):
                rows[unit["row"]] = unit
        return list(rows.values())

    @staticmethod
    def _result(found: Candidates, at: int) -> Result:
        row = found.units[at]
        return Result(row["id"], row["kind"], row["text"], float(found.score[at]), row["source"],
                      [row["line_start"], row["line_end"]], row["section"], row["session"], row["ts"], row["speaker"],
                      row["scope"], row["record_id"], row["row"], orjson.loads(row["fields"] or "{}"),
                      found.explain_of(at, ROUNDING))

    def _cosine_calibration(self) -> tuple[float, float]:
        return self.embedder.cosine_floor, self.embedder.cosine_ceiling

    def row_facts(self, found: Candidates) -> RowFacts:
        """The candidates' rows' facts (RowFacts), computed for those first seen: noise patterns,
        the importance, length and time-decay factors and the parsed time of ~400 candidates cost
        ~2 ms of a warm 6k search before they were kept (2026-11-24)."""
        # the table may hold rows the vectors lack yet
        facts = self._facts_for(max(len(self.vectors), int(found.rows.max()) + 1 if len(found) else 0))
        facts.learn(found.units, found.rows, self.retrieval)
        return facts

    def _facts_for(self, rows: int) -> RowFacts:
        """The facts kept, made anew (empty) when they hold fewer than `rows` rows."""
        if self._facts is None or len(self._facts.known) < rows:
            self._facts = RowFacts(rows)
        return self._facts

    @property
    def documents(self) -> int:
        """How many documents the open index holds."""
        return self.tantivy.searcher.num_docs

    def terms_of(self, unit: dict) -> frozenset[str]:
        """lexical.content_terms of a unit, kept while the index is open (its text does not
        change): newer-first, MMR's twin test and the minimum's word test analysed ~26 texts a
        warm 6k search, mostly the same from one search to the next."""
        from memctl.index import lexical

        row = unit["row"]
        if row not in self._terms:
            self._terms[row] = frozenset(lexical.content_terms(unit["text"]))
        return self._terms[row]

    def rare_terms_of(self, unit: dict, most: int) -> frozenset[str]:
        """lexical.rare_terms of a unit's content words, kept while the index is open (`most`, from
        the store's size, is the same for each search): ~10 Tantivy lookups of each of the first
        page's results a search."""
        from memctl.index import lexical

        row = unit["row"]
        if row not in self._rare:
            self._rare[row] = frozenset(lexical.rare_terms(self.tantivy, self.terms_of(unit), most))
        return self._rare[row]

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

    def learn_ahead(self, rows: int) -> bool:
        """The open index's Searcher.learn_ahead; True when there is nothing (more) to learn."""
        return self._searcher is None or self._searcher.learn_ahead(rows)

    def _open(self, index, changed: bool) -> Searcher:
        if (changed or self._searcher is None or self._searcher.settings != index.settings
                or self._searcher.manifest != _manifest_stamp(index.dir)):  # another process updated it
            self._searcher = Searcher(self.store, index.settings, self.runtime)
        return self._searcher


def search_store(store: Store, queries: list[Query], *, say=None, count_access: bool = True,
                 runtime: Runtime | None = None) -> list[list[Result]]:
    """One search of a store by a fresh Retriever (a command's single run)."""
    return Retriever(store, say=say, runtime=runtime).search(queries, count_access=count_access)


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
