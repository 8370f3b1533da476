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

import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from memctl.runtime import Runtime
from memctl.errors import StoreError
from memctl.index.filters import Filters
from memctl.index.index import kept_manifest, manifest_stamp
from memctl.index.units_reader import UnitsReader
from memctl.search.candidates import Candidates, IndexRows, UnitWords
from memctl.search.queries import Query
from memctl.search.stages import ROUNDING, SearchRun, rank
from memctl.text.shape import ABSENT, Shape, derived, hidden, shown


@dataclass
class Result(Shape):
    """One search result, best first: a MEMORY.md note, a chat message, a daily-log entry or a topic."""

    id: str = hidden()  # the search unit's id; a record cut into several units has one record_id
    kind: Literal["memory", "message", "log", "topic"] = shown("memory: a MEMORY.md note; message: a chat "
                                                               "message; log: a daily-log entry; topic: a topic.")
    text: str = shown("The matched text.")
    score: float = shown("The final ranking score (higher is better).", digits=6)
    confidence: float = shown("How sure the search is that it is relevant: a probability, 0-1, from a model "
                              "fitted on dev data (memctl/search/rules/confidence.toml); it orders nothing.",
                              digits=4)
    source: str = shown("The store file it is in, relative to the store.")
    lines: tuple[int, int] = shown("Its first and last line in that file.")
    section: str | None = shown("A memory's MEMORY.md section.")
    session: str | None = shown("A message's session id.")
    ts: str | None = shown("When it was said or written, ISO 8601.")
    speaker: str | None = shown("Who said it.")
    scope: str = shown("Its scope: global, user:<name>, project:<name> or lang:<name>.")
    record_id: str = hidden(default="")
    row: int = hidden(default=-1)
    fields: dict[str, Any] = hidden(default_factory=dict)
    explain: dict[str, Any] = shown("Each ranking stage's score (asked with explain).", when="explain",
                                    default_factory=dict)

    @derived("The record's id (as show, forget and history take it).", name="id", after="")
    def shown_id(self) -> str:
        return self.record_id or self.id

    @derived("A memory's schema fields (summary, memory_class, ...); memories only.", name="fields",
             optional=True, after="scope")
    def memory_fields(self) -> dict[str, Any]:
        return self.fields if self.kind == "memory" else ABSENT

    def explain_lines(self) -> list[str]:
        """`--explain` for a person: each ranking stage's own factor beside the running score."""
        from memctl.search.explain import explain_lines

        return explain_lines(self.explain)


class IndexChanged(StoreError):
    """Another process changed the index while a Searcher read it (Searcher.__init__)."""

    def __init__(self):
        super().__init__("the index changed while it was read, again and again; try again")


READS_FREE = 3  # reads of changing generations before one with updates held off (Retriever._answers)


class Ranking:
    """What a search does once its candidates are gathered, whichever index gave them: the ranking
    stages (stages.STAGES) over them, and the results. The folder's index (Searcher: Tantivy, the
    vector file, units.db) and a PostgreSQL store's (search/postgres.py: SQL, pgvector) each gather
    BM25's hits, every row's cosine to the query that a stage reads, the vectors' candidates and
    the rows' units (IndexRows), and hand them to `ranked`: one ranking for both."""

    def __init__(self, rt: Runtime):
        self.runtime = rt  # the call's: a resident server hands a Searcher on (Retriever._open)
        self.store = rt.store
        self.settings = rt.settings
        self.retrieval = self.settings.retrieval

    @property
    def embedder(self):
        return self.runtime.embedder  # the call's (a resident server hands a Searcher on: Retriever._open)

    def limit(self, query: Query) -> int:
        """How many candidates each of BM25 and the vectors gives."""
        return max(self.retrieval.candidates, query.k * 3)

    def query_vectors(self, query: Query, weights) -> Any:
        """The query embedded as _query_lines says, or None when the vectors have no weight."""
        if weights[0] <= 0:
            return None
        return self.embedder.embed_queries(_query_lines(query.text, self.retrieval.split_query_lines))

    def ranked(self, query: Query, bm25, weights, rows: IndexRows, words: UnitWords, vectors, query_vectors,
               cosines, vector_rows: list[int], compared: int = 0) -> list[Result]:
        """The results of the ranking stages over BM25's hits and the vectors' rows (`cosines`: the
        cosine to the query of every row a stage reads, comparable(); `vectors`: those rows' vectors;
        `compared`: how many units the filters allow, which the subject test and the confidence read)."""
        judged = None
        models = getattr(self.embedder, "models", None) if cosines is not None else None
        if models:
            def judged(rows, vectors=vectors):
                return judged_cosines(vectors, query_vectors, rows, models)
        found = rows.gather(bm25, vector_rows, cosines is not None, query.filters)
        now = self.runtime.clock.now()
        periods = _named_periods(query.text, now) if self.retrieval.date_weight > 0 and query.neighbours else []
        run = SearchRun(self.settings, self.store, rows, words, vectors, bm25, cosines, vector_rows,
                        weights, periods, self._cosine_calibration, now, judged, compared)
        rank(found, query, run)
        results = [self._result(found, at) for at in found.best_of_each_record(query.k)]
        self._snippets(results)
        if not results:
            query.why_none = self._why_none(found, query, compared)
        return results

    def comparable(self, vectors, cosines, query_vectors, parts=None):
        """Every row's cosine to the query on the query's own scale. A row in the other script
        meets the query in the shared model (USE) alone, and the one space's weights scale their
        dot product down to √(1 − latin_share) of USE's cosine (OneSpace): English lines on the
        theme of an English question outranked the Chinese fact that answers it. Its own USE
        cosine, mapped from USE's calibration onto the query's (the one Fusion reads), orders it
        instead. The paraphrase set, gate off, dev hit@3: English fact, Chinese question .050 ->
        .200, the other way .350 -> .350 (.500 with bm25_full_coverage); no question lost
        (bench/README.md, "Issue 33, third pass"). `parts`: vector_parts of `vectors`, when kept."""
        import numpy as np

        models = getattr(self.embedder, "models", None)
        if not models or cosines is None:
            return cosines
        split = models[0]
        shared_norms, latin_rows = parts or vector_parts(vectors, split)
        query_shared = float(np.linalg.norm(query_vectors[-1, split:]))
        query_latin = bool(np.any(query_vectors[:, :split] != 0))
        across = latin_rows != query_latin
        if not across.any() or query_shared == 0:
            return cosines
        floor, ceiling = self._cosine_calibration()
        low, high = models[2]  # the shared model's own calibration
        own = cosines / np.maximum(shared_norms, 1e-12) / query_shared
        mapped = floor + (own - low) / (high - low) * (ceiling - floor)
        return np.where(across, mapped, cosines).astype(np.float32)

    def _why_none(self, found: Candidates, query: Query, compared: int) -> str:
        """Why a search returned nothing, for --explain: no candidate, the minimum (its cosine
        threshold for a store of `compared` units), or the noise filter."""
        from memctl.search.subject import SubjectTest

        retrieval_settings = self.retrieval
        min_cosine = SubjectTest(retrieval_settings).min_cosine(compared)
        if not len(found.relevance):
            return ("no unit matched the query's words or meaning" + (" within the filters" if query.filters != Filters()
                                                                      else ""))
        best = float(found.relevance.max())
        if query.min_score is not None:
            if best < query.min_score:
                return f"the best relevance, {best:.3f}, is under --min-score {query.min_score:g}"
            return f"every candidate at or over --min-score {query.min_score:g} was noise (a refusal, a greeting)"
        trust = found.vector_weight / retrieval_settings.vector_weight if retrieval_settings.vector_weight > 0 else 0.0
        meaning = float((found.relevance_cosine * min(1.0, trust)).max())
        coverage = float(found.coverage.max())
        if (best < retrieval_settings.min_best_relevance and meaning < min_cosine
                and coverage < retrieval_settings.subject_min_coverage):
            size = (f"; {min_cosine:.3f} in a store of {compared} units"
                    if min_cosine != retrieval_settings.subject_min_cosine else "")
            return (f"the store does not seem to know the subject ([retrieval] minimum): of {len(found.relevance)} "
                    f"candidates the best calibrated cosine is {meaning:.3f} (subject_min_cosine "
                    f"{retrieval_settings.subject_min_cosine:g}{size}), "
                    f"the best share of the query's words {coverage:.3f} (subject_min_coverage "
                    f"{retrieval_settings.subject_min_coverage:g}), the best relevance {best:.3f} (min_best_relevance "
                    f"{retrieval_settings.min_best_relevance:g}), and no two units hold subject_min_words "
                    f"({retrieval_settings.subject_min_words:g}) of its words")
        return (f"every one of {len(found.relevance)} candidates was noise (a refusal, a greeting) or under "
                f"[retrieval] hard_min_score ({retrieval_settings.hard_min_score:g})")

    def _weights(self, query: Query) -> tuple[float, float, float | None]:
        retrieval_settings = self.retrieval
        if query.mode == "bm25":
            return 0.0, 1.0, None
        if query.mode == "vector":
            return 1.0, 0.0, None
        unknown = self.embedder.unknown_share(query.text)
        low, high = retrieval_settings.unknown_share_low, retrieval_settings.unknown_share_high
        confidence = min(1.0, max(0.0, (high - unknown) / (high - low))) if high > low else float(unknown < high)
        vector_weight = retrieval_settings.vector_weight * confidence
        return vector_weight, retrieval_settings.bm25_weight + retrieval_settings.vector_weight - vector_weight, unknown

    @staticmethod
    def _result(found: Candidates, at: int) -> Result:
        row = found.units[at]
        return Result(row["id"], row["kind"], row["text"], float(found.score[at]), float(found.confidence[at]),
                      row["source"],
                      [row["line_start"], row["line_end"]], row["section"], row["session"], row["ts"], row["speaker"],
                      row["scope"], row["record_id"], row["row"], orjson.loads(row["fields"] or "{}"),
                      found.explain_of(at, ROUNDING))

    def _cosine_calibration(self) -> tuple[float, float]:
        return self.embedder.cosine_floor, self.embedder.cosine_ceiling

    def _snippets(self, results: list[Result]) -> None:
        for result in results:
            limit = (self.retrieval.memory_snippet_tokens if result.kind == "memory"
                     else self.retrieval.message_snippet_tokens)
            # A token is at least one UTF-8 byte: text with no more bytes than the limit fits
            # without loading the encoding (~300 ms).
            if len(result.text.encode()) > limit:
                from memctl.text.tokens import truncate_tokens

                result.text = truncate_tokens(result.text, limit)


class Searcher(Ranking):
    """An open index, reused for every query of one process (see --batch): its BM25 reader, its
    rows (IndexRows: units.db and what is kept of it), its units' words and its vectors; each
    search gathers its candidates there and walks the ranking stages (Ranking)."""

    def __init__(self, rt: Runtime):
        import numpy as np

        from memctl.index import lexical

        super().__init__(rt)
        store = self.store
        index_dir = store.index_dir
        # One generation of the index, the table's rows read with the vectors they number: a search
        # read rows an update had just added against the vectors before them (IndexError, or
        # scores of neither version). An update patches in place: it appends vectors, then commits
        # the table; so the table's version is read first, the vectors mapped after it hold every
        # row of that version, and a search that ends on another version (data_version: a commit
        # of another connection) is done again on the new one (IndexChanged). A compaction
        # replaces the files between two manifests, the first saying so: a manifest that changed
        # while they were opened, or says so, is an open done again.
        self.manifest, manifest = kept_manifest(index_dir)  # every update rewrites the manifest (a new file)
        if manifest is not None and manifest.get("compacting"):
            raise IndexChanged
        self.units = UnitsReader.open(index_dir / "units.db")
        try:
            self._version = self._table_version()
            # A plain ndarray over the mapped file: products with a np.memmap pay its subclass's
            # wrapping, 1.5 ms of a warm search's 2.7 ms product at 6k.
            self.vectors = np.asarray(np.load(index_dir / "vectors.npy", mmap_mode="r"))
            # One segment set for as long as this Searcher is used: it is made anew when the index
            # changes (Retriever._open), and the ids of its documents are kept with it (lexical.Reader).
            # Its ids are looked up in the table: one it lacks (or a newer hit) is no candidate.
            self.tantivy = lexical.Reader(lexical.open_index(index_dir / "tantivy"))
            if manifest_stamp(index_dir) != self.manifest:
                raise IndexChanged
        except BaseException:
            self.units.db.close()
            raise
        self.rows = IndexRows(self.units, lambda: len(self.vectors), self.retrieval)
        self.words = UnitWords.of_tantivy(self.tantivy)
        self._parts = None  # the vectors' parts, read once an open index (comparable)

    def _table_version(self) -> int:
        (version,) = self.units.db.execute("PRAGMA data_version").fetchone()
        return version

    def current(self) -> bool:
        """Whether every read of the table so far read the version this Searcher opened."""
        return self._table_version() == self._version

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

        retrieval = self.retrieval
        limit = self.limit(query)
        bm25 = lexical.Hits({}, 0.0)
        if query.mode != "vector":
            bm25 = lexical.search(self.tantivy, query.text, query.filters, limit, retrieval.coverage_query_words,
                                  retrieval.context_weight)
        weights = self._weights(query)
        # Every row's cosine to the query, when it is embedded: the candidates', their turns
        # before's and their replies' are read from this one product (each was a product again).
        cosines = None
        vector_rows: list[int] = []
        compared = 0
        query_vectors = self.query_vectors(query, weights)
        if query_vectors is not None:
            models = getattr(self.embedder, "models", None)
            if models and self._parts is None:
                self._parts = vector_parts(self.vectors, models[0])
            cosines = self.comparable(self.vectors, _query_cosines(self.vectors, query_vectors), query_vectors,
                                      self._parts)
            vector_rows, compared = self._vector_candidates(cosines, query.filters, limit)
        else:  # the store's size still tells how sure a result is (stages.Confidence)
            compared = self._allowed(query.filters)
        return self.ranked(query, bm25, weights, self.rows, self.words, self.vectors, query_vectors, cosines,
                           vector_rows, compared)

    def _allowed(self, filters: Filters) -> int:
        """How many rows the filters allow."""
        import numpy as np

        mask = self.units.mask(filters, len(self.vectors))
        return len(self.vectors) if mask is None else int(np.count_nonzero(mask == 0))

    def _vector_candidates(self, cosines, filters: Filters, limit: int) -> tuple[list[int], int]:
        """The `limit` rows of the best cosines the filters allow (in no particular order), and
        how many rows they allow."""
        import numpy as np

        if len(cosines) == 0:
            return [], 0
        scores = np.asarray(cosines, dtype=np.float32)
        mask = self.units.mask(filters, len(scores))
        allowed = len(scores)
        if mask is not None:
            scores = scores + mask
            allowed = int(np.count_nonzero(mask == 0))
        count = min(limit, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        return top[np.isfinite(scores[top])].tolist(), allowed


class Retriever:
    """Searches a store, indexing first when its files changed; keeps the index open.

    A command line run makes one and searches once; a server (memctl mcp)
    keeps one, so the model, Tantivy and the vectors stay loaded and a warm
    search costs milliseconds. A corrupt index is rebuilt and the search
    tried again; every memory returned counts as an access (the governance's
    retrieval score reads them).
    """

    def __init__(self, rt: Runtime, *, say=None):
        """`rt`: its Memory's (the store, settings read once, the clock, the query embedder shared)."""
        self.store = rt.store
        self.say = say
        self.runtime = rt
        self._searcher: Searcher | None = None

    def search(self, queries: list[Query], *, count_access: bool = True) -> list[list[Result]]:
        from memctl.index.index import Index

        self.store.require()
        index = Index(self.runtime)
        report = index.refresh(self.say)
        try:
            answers = self._answers(index, queries, report.touched)
        except (ValueError, OSError, sqlite3.Error) as exc:
            if self.say:
                self.say(f"memctl: the index is unreadable ({exc}); rebuilding it")
            index.update(rebuild=True)
            answers = self._answers(index, queries, True)
        if count_access:
            count_returned(self.runtime, answers)
        return answers

    def learn_ahead(self, rows: int) -> bool:
        """The open index's rows learned ahead (IndexRows.learn_ahead); True when there is nothing (more) to learn."""
        if self._searcher is None or not self._searcher.current():  # a newer table: the next search opens it anew
            return True
        return self._searcher.rows.learn_ahead(rows)

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
            self._searcher = Searcher(self.runtime)
        self._searcher.runtime = self.runtime  # a Memory that adopted this one's: its model is the call's
        return self._searcher


def count_returned(rt: Runtime, answers: list[list[Result]]) -> None:
    """Every memory a search returned counts as an access (store/counters.py), on either backend."""
    from memctl.store import counters

    counters.record(rt.store, [r.record_id or r.id for results in answers for r in results if r.kind == "memory"],
                    rt.clock.now())


def search_store(rt: Runtime, queries: list[Query], *, say=None, count_access: bool = True) -> list[list[Result]]:
    """One search of a store by a fresh Retriever (a command's single run)."""
    return Retriever(rt, say=say).search(queries, count_access=count_access)


def vector_parts(vectors, split: int):
    """Each row's shared part's norm, and whether it fills the Latin part (Ranking.comparable).
    einsum over the column slices: np.linalg.norm of the strided slice took 65 ms at 6k, this 2."""
    import numpy as np

    return (np.sqrt(np.einsum("ij,ij->i", vectors[:, split:], vectors[:, split:])),
            np.einsum("ij,ij->i", vectors[:, :split], vectors[:, :split]) > 0)


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
    whole gave .673-.698); fused through the CLI see bench/README.md, "Chinese: one script, and a
    dialogue read whole and by its closest line"."""
    import numpy as np

    if len(query_vectors) == 1:  # one line: a matrix-vector product
        # Over the columns the query fills only: a routed model's query fills one model's part
        # (MiniLM's 384 of 896), and the product reads the vectors from memory at ~10 GB/s.
        filled = np.flatnonzero(query_vectors[0])
        columns = slice(filled[0], filled[-1] + 1) if filled.size else slice(0, 0)
        return vectors[:, columns] @ query_vectors[0, columns]
    products = vectors @ query_vectors.T
    return (products[:, :-1].max(axis=1) + products[:, -1]) / 2


def judged_cosines(vectors, query_vectors, rows, models):
    """Each of `rows`' own cosine to the query as the subject test judges it, calibrated
    (embedders.OneSpace.models: the shared part's first column; the calibrations of the Latin
    part's cosine, the shared part's within a script and across): the Latin part's where the
    row and the query both fill it, else the shared part's, with each part's norms divided out
    (a part holds its model's unit vector times a weight); lines combined as _query_cosines
    combines them."""
    import numpy as np

    split, latin, shared, across = models
    picked = np.asarray(vectors[rows], dtype=np.float64)
    query_vectors = np.asarray(query_vectors, dtype=np.float64)

    def own(columns):
        part, query_part = picked[:, columns], query_vectors[:, columns]
        norms, query_norms = np.linalg.norm(part, axis=1), np.linalg.norm(query_part, axis=1)
        products = (part @ query_part.T) / np.maximum(norms, 1e-12)[:, None] / np.maximum(query_norms, 1e-12)[None, :]
        cosine = products[:, 0] if len(query_part) == 1 else (products[:, :-1].max(axis=1) + products[:, -1]) / 2
        return cosine, norms > 0

    def calibrated(cosine, calibration):
        floor, ceiling = calibration
        return np.clip((cosine - floor) / (ceiling - floor), 0.0, 1.0)

    shared_cosine, _ = own(slice(split, None))
    latin_cosine, row_latin = own(slice(0, split))
    query_latin = bool(np.linalg.norm(query_vectors[:, :split]) > 0)  # a query's lines are read alike
    return np.where(row_latin & query_latin, calibrated(latin_cosine, latin),
                    np.where(row_latin == query_latin, calibrated(shared_cosine, shared),
                             calibrated(shared_cosine, across)))


def _named_periods(text: str, now) -> list:
    """The periods the query names (search/dates.py), read against `now`."""
    from memctl.search.dates import named_periods

    return named_periods(text, now)
