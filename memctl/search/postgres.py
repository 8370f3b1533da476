"""Search of a store on PostgreSQL (#35 item 2): the candidates gathered in SQL, ranked by the
folder store's stages (search.Ranking).

BM25's hits come from index/postgres.py's SQL (Tantivy's BM25 over memctl's own tokens), the
vectors' candidates from pgvector's HNSW index, both within the filters (a scope is a WHERE
clause: no row of another scope is a candidate). Then the rows a search reads with them (their
turns before, the replies read with them) are asked for, those no search of this generation of
the index read before come over with their vectors (Seen), and the stages run on them as on a
folder's open index: each by its row in memctl_units, the units in a table in memory
(UnitsReader), each row's cosine to the query the product of the same vectors with the same
query vectors. Everything a search reads is one snapshot of the database (store.snapshot()), so
an update committing meanwhile is seen whole or not at all.
"""

from __future__ import annotations

from memctl.index.postgres import COLUMNS, PgIndex, PgReader
from memctl.index.units_reader import UnitsReader
from memctl.runtime import Runtime
from memctl.search.candidates import IndexRows, UnitWords
from memctl.search.queries import Query
from memctl.search.search import Ranking, Result, _query_cosines, count_returned, vector_parts


class PgSearcher(Ranking):
    """The searches of one snapshot of a PostgreSQL store's index."""

    def __init__(self, rt: Runtime, conn, kept: dict | None = None):
        """`kept`: what PgReader keeps between searches of one generation of the index, and the
        rows those searches read (Seen)."""
        super().__init__(rt)
        self.reader = PgReader(conn, kept)
        kept = {} if kept is None else kept
        if kept.get("seen") is None or kept["seen"].retrieval != self.retrieval:
            kept["seen"] = Seen(self.reader, self.retrieval)
        self.seen = kept["seen"]
        self.seen.words.doc_freqs = self.reader.doc_freqs  # this snapshot's (the same generation's)

    def search(self, query: Query) -> list[Result]:
        import numpy as np

        from memctl.index import lexical

        retrieval, reader, seen = self.retrieval, self.reader, self.seen
        limit = self.limit(query)
        bm25 = lexical.Hits({}, 0.0)
        if query.mode != "vector":
            bm25 = reader.bm25(query.text, query.filters, limit, retrieval.coverage_query_words,
                               retrieval.context_weight)
        weights = self._weights(query)
        query_vectors = self.query_vectors(query, weights)
        nearest = reader.nearest(query_vectors, query.filters, limit) if query_vectors is not None else []
        seen.read(reader, reader.slice(list(dict.fromkeys([*bm25.scores, *nearest]))))
        matrix = seen.matrix
        cosines = vector_rows = None
        compared = reader.count(query.filters)
        if query_vectors is not None:
            models = getattr(self.embedder, "models", None)
            cosines = self.comparable(matrix, _query_cosines(matrix, query_vectors), query_vectors,
                                      parts=seen.parts(models[0]) if models else None)
            # each query line's nearest, then the `limit` best of them as the lines' cosines combine
            found = np.array([seen.row_of[unit_id] for unit_id in nearest if unit_id in seen.row_of], dtype=np.intp)
            vector_rows = found[np.argsort(-cosines[found], kind="stable")[:limit]].tolist()
        return self.ranked(query, bm25, weights, seen.rows, seen.words, matrix, query_vectors, cosines,
                           vector_rows or [], compared)


class Seen:
    """The rows of the index that searches of one generation of it read so far, kept by a process
    that searches again (a resident server, `memctl mcp`): their units in a table in memory
    (UnitsReader) and their vectors in a matrix of the index's rows (a row not read yet: zeros,
    which no stage reads), each by the row it has in memctl_units; and what the ranking learns of
    them (IndexRows, UnitWords), as a folder's open index keeps them. A search then reads only
    the rows it needs that no search read before. Making these anew for each search, and reading
    its ~500 rows with their vectors again, took ~45 ms of a ~85 ms warm search at 3k messages
    (bench/README.md "Issue 35: warm search on PostgreSQL")."""

    def __init__(self, reader: PgReader, retrieval):
        import numpy as np

        self.retrieval = retrieval
        self.matrix = np.zeros((reader.rows(), reader.dimension()), dtype=np.float32)
        self.units = UnitsReader.of_rows([], COLUMNS)
        self.row_of: dict[str, int] = {}  # unit id -> its row, of the rows read
        self._read: set[int] = set()
        self.rows = IndexRows(self.units, lambda: len(self.matrix), retrieval)
        self.words = UnitWords(reader.documents, reader.doc_freqs)
        self._parts: tuple | None = None  # vector_parts of the matrix, and the split they were taken at
        self._split: int | None = None

    def parts(self, split: int) -> tuple:
        """search.vector_parts of the matrix (Ranking.comparable's), kept: a row's taken when it is
        read. Taken over the whole matrix for each search, they cost a warm search at 50k rows ~40
        ms of ~280 (cProfile, bench/README.md "Issue 35: the working folder brought by what is
        asked")."""
        if self._parts is None or self._split != split:
            self._parts, self._split = vector_parts(self.matrix, split), split
        return self._parts

    def read(self, reader: PgReader, rows: list[int]) -> None:
        """These rows read, those not read before from the database."""
        missing = [row for row in rows if row not in self._read]
        if not missing:
            return
        units, vectors = reader.units(missing, self.matrix.shape[1])
        self.units.add(units)
        self.row_of.update((unit[1], unit[0]) for unit in units)
        rows = [unit[0] for unit in units]
        self.matrix[rows] = vectors
        if self._parts is not None:
            norms, latin = vector_parts(self.matrix[rows], self._split)
            self._parts[0][rows], self._parts[1][rows] = norms, latin
        self._read.update(missing)

class PgRetriever:
    """Searches a PostgreSQL store (search.Retriever's part for a folder): indexes first when the store
    was written since its index, then answers every query from one snapshot. Kept by a process
    that searches again (Memory.adopt), it keeps what PgReader may between searches."""

    def __init__(self, rt: Runtime, *, say=None):
        self.store = rt.store
        self.say = say
        self.runtime = rt
        self._kept: dict = {}

    def search(self, queries: list[Query], *, count_access: bool = True) -> list[list[Result]]:
        """Each query's results; every memory returned counts as an access (`count_access`), as on a
        folder (store/counters.py: a row raised in the database, without the write lock)."""
        index = PgIndex(self.runtime)
        with self.store.snapshot() as conn:  # the store, its index's freshness and the search: one snapshot
            self.store.require()
            fresh = index.is_fresh()
            answers = [PgSearcher(self.runtime, conn, self._kept).search(query) for query in queries] if fresh else None
        if answers is None:  # written since its index: indexed first, then searched in a snapshot after
            index.refresh(self.say)
            with self.store.snapshot() as conn:
                answers = [PgSearcher(self.runtime, conn, self._kept).search(query) for query in queries]
        if count_access:
            count_returned(self.runtime, answers)
        return answers

    def learn_ahead(self, rows: int) -> bool:
        return True  # nothing is kept between searches to learn ahead
