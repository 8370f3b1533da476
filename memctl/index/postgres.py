"""The index of a store on PostgreSQL (#35 item 2): the units of its truth in a table of the same
database, their vectors in pgvector, their words for BM25 in arrays of memctl's own tokens.

    memctl_units   one row a unit (units.py), as .index/units.db holds it, and
                   embedding      its vector (pgvector; HNSW index, inner product: the folder's
                                  "cosine" is the product of the vectors as stored, which a
                                  routed model does not make unit length)
                   body_terms     its text's tokens as Tantivy indexes them (lexical.analyzer:
                   context_terms  Chinese cut by memctl, a character a token), in order; a GIN
                                  index finds the units holding a word
                   *_norm         each field's length as Tantivy's BM25 reads it (quantised)
    memctl_index   one row: what the index was built from (the store's `sources_written`, the
                   model, the embedding settings) and the term statistics BM25 needs beyond
                   each word's document frequency (units, tokens of each field)

BM25 is Tantivy's, computed in SQL over those arrays (lexical.search's query: each word and each
pair of adjacent CJK characters a clause, a message's turn before at context_weight, each clause
scored in the field where it scores best): idf from each word's document frequency, counted on
the GIN index at query time (nothing to keep up to date as units come and go), and the average
field lengths from memctl_index. Postgres's own full text is not used: its parsers do not cut
Chinese, and ts_rank is no BM25 (no idf, no length saturation).

Everything here is derived: `memctl index` on the store's URL (and every search first, when what
it is made of was written since) makes it from the truth, embedding only new and changed text.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import TYPE_CHECKING, Callable, Iterable

import orjson

from memctl import clock
from memctl.errors import StoreError
from memctl.index.index import UpdateReport, _Change, _Model, _bm25_text, _embed_text, _meta, _Reading, _each_once, _unique
from memctl.store.seam import Searchable
from memctl.store.store import MEMORY_MD, SESSIONS_DIR

if TYPE_CHECKING:
    from memctl.index.filters import Filters
    from memctl.index.units import Unit
    from memctl.runtime import Runtime
    from memctl.store.postgres import PostgresStore

FORMAT = 1
# How units are made of the truth (units.py): another value reads every unit anew at the next update,
# embedding again only those whose text changed. 2: a message is read with the turn before it only when said within the hour.
UNITS = 2
K1, B = 1.2, 0.75  # Tantivy's BM25 constants (tantivy/src/query/bm25.rs)
# The unit columns a search reads (units_reader.FIELDS, and what filters compare), as in units.db.
COLUMNS = ("row", "id", "record_id", "kind", "text", "source", "line_start", "line_end", "section", "session",
           "speaker", "ts", "scope", "status", "fields", "context_id", "ts_epoch", "tool", "agent", "cache_scope")
_UNITS = """
CREATE TABLE memctl_units (
    row bigint PRIMARY KEY,
    id text NOT NULL UNIQUE,
    digest text NOT NULL,
    embed_digest text NOT NULL,
    kind text NOT NULL,
    record_id text NOT NULL,
    text text NOT NULL,
    source text NOT NULL,
    line_start integer NOT NULL,
    line_end integer NOT NULL,
    section text,
    session text,
    speaker text,
    ts text,
    scope text NOT NULL,
    status text NOT NULL,
    fields text NOT NULL,
    context_id text,
    ts_epoch double precision,
    tool text,
    agent text,
    cache_scope text,
    body_terms text[] NOT NULL,
    context_terms text[] NOT NULL,
    body_norm integer NOT NULL,
    context_norm integer NOT NULL,
    embedding vector({dimension}) NOT NULL);
CREATE INDEX memctl_units_embedding ON memctl_units USING hnsw (embedding vector_ip_ops);
CREATE INDEX memctl_units_body ON memctl_units USING gin (body_terms);
CREATE INDEX memctl_units_context ON memctl_units USING gin (context_terms);
CREATE INDEX memctl_units_record ON memctl_units (record_id);
CREATE INDEX memctl_units_context_id ON memctl_units (context_id);
CREATE INDEX memctl_units_scope ON memctl_units (scope, status);
"""
_STATE = """
CREATE TABLE IF NOT EXISTS memctl_index (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    format integer NOT NULL,
    built jsonb NOT NULL,
    written bigint NOT NULL,
    units bigint NOT NULL,
    body_tokens bigint NOT NULL,
    context_tokens bigint NOT NULL,
    updated_at text NOT NULL);
ALTER TABLE memctl_index ADD COLUMN IF NOT EXISTS shared_ids boolean NOT NULL DEFAULT true;
"""


def field_norms() -> list[int]:
    """Tantivy's FIELD_NORMS_TABLE (tantivy/src/fieldnorm/code.rs, Lucene's scheme): the lengths
    0..40 exactly, then buckets of 8 whose width doubles from 2."""
    table, step = list(range(41)), 2
    while len(table) < 256:
        table += [table[-1] + step * n for n in range(1, 9)]
        step *= 2
    return table[:256]


_NORMS = field_norms()


def field_norm(tokens: int) -> int:
    """A field's length as Tantivy's BM25 reads it: the largest of the table not above it."""
    import bisect

    return _NORMS[bisect.bisect_right(_NORMS, tokens) - 1]


def tokens_of(text: str) -> list[str]:
    """Text as Tantivy indexes it in memctl's analyzer, in order (lexical.analyzer)."""
    from memctl.index import lexical
    from memctl.text.cjk import simplified

    return lexical._QUERY_ANALYZER.analyze(simplified(text))


class PgIndex(Searchable):
    """The index of a PostgreSQL store, kept in its database (module doc)."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.store: PostgresStore = rt.store
        self.settings = rt.settings

    # -- freshness ------------------------------------------------------------------
    def _built(self) -> dict:
        model = _Model(self.settings.embedding)
        return {"model": model.identity, "with_previous_turn": self.settings.embedding.with_previous_turn,
                "format": FORMAT, "units": UNITS}

    def is_fresh(self) -> bool:
        """Whether the index holds what it is made of as the last write of it left it, made by the
        model the settings name. Judged, as a folder's index is, by the settings (the model's name,
        its precision, the turn before): the model's identity, which an update compares (a package
        upgraded under the same name: rebuilt by the next update), is worked out here only when
        they differ. Working it out opens the model's packages, 13-24 ms of each cold search at
        10k messages (bench/README.md "Issue 35: PostgreSQL's build memory and cold search")."""
        with self.store.snapshot() as conn:  # one transaction, not one for exists() and one for the state
            if not self.store.exists():
                return True
            state = self._state(conn)
            return state is not None and state[0] == _sources_written(conn) and (
                _made_as_set(state[1], self.settings.embedding) or state[1] == self._built())

    def _state(self, conn) -> tuple[int, dict] | None:
        if not conn.execute("SELECT to_regclass('memctl_index') IS NOT NULL").fetchone()[0]:
            return None
        found = conn.execute("SELECT written, built FROM memctl_index").fetchone()
        return (found[0], found[1]) if found else None

    def summary(self) -> dict:
        """The index as `memctl status` shows it (index.Index.summary)."""
        state = None
        if self.store.exists():
            with self.store.snapshot() as conn:
                state = self._state(conn)
                found = conn.execute("SELECT units, updated_at FROM memctl_index").fetchone() if state else None
        if state is None or found is None:
            return {"built": False, "updated_at": None, "units": 0, "model": None, "fresh": False}
        return {"built": True, "updated_at": found[1], "units": found[0],
                "model": (state[1].get("model") or {}).get("name"), "fresh": self.is_fresh()}

    def size(self) -> int:
        """Bytes of the index's tables in the database (their indexes and TOAST included)."""
        if not self.store.exists():
            return 0
        with self.store.snapshot() as conn:
            return conn.execute("SELECT coalesce(sum(pg_total_relation_size(to_regclass(name))), 0)::bigint FROM "
                                "unnest(ARRAY['memctl_units', 'memctl_index']) AS name").fetchone()[0]

    def rebuild_reasons(self) -> list[tuple[str, str]]:
        """(where, message) for each way the index needs more than the next search's update."""
        if not self.store.exists():
            return []
        with self.store.snapshot() as conn:
            state = self._state(conn)
        reason = "" if state is None else _rebuild_reason(state, self._built())
        return [("memctl_units", f"{reason}; the next search rebuilds it")] if reason else []

    def refresh(self, say: Callable[[str], None] | None = None) -> UpdateReport:
        """Index first if the store was written since the last index (what a search does). A read-only
        database (a replica) cannot be indexed: its index is searched as the primary last left it,
        and a search says so when the truth was written since; one with no index of this model is
        refused, naming what to run on the primary."""
        if self.is_fresh():
            return UpdateReport()
        if not self.store.read_only():
            return self.update().tell(say)
        with self.store.snapshot() as conn:
            reason = _rebuild_reason(self._state(conn), self._built()) or ("" if _has_units(conn) else "missing")
        if reason:
            raise StoreError(f"{self.store.shown}: the database is read-only and its index cannot be searched "
                             f"({reason}): run `memctl index` on the primary")
        if say:
            say(f"memctl: {self.store.shown} is read-only: searched its index as the primary last updated it, "
                "before the store's last writes (`memctl index` on the primary brings it up to date)")
        return UpdateReport()

    def scrub(self) -> UpdateReport:
        """As update: a removed unit's row is deleted (what VACUUM then does with it is #35 item 4)."""
        return self.update()

    def embed_ahead(self, most: int = 0) -> None:
        """Nothing ahead (Memory.embed_ahead does not ask it): the texts the next update embeds are
        worked out from the database (the files written since: _changed), on a connection and into a
        working folder that are one thread's (store/postgres.py), so a thread embedding them beside
        the resident server's next call would need its own of both, and the update would take its
        vectors only for exactly those texts, as a folder's does (index._embedded_ahead). Until
        then the update embeds them on its caller's time."""

    # -- updating -------------------------------------------------------------------------
    def update(self, *, rebuild: bool = False, progress=None) -> UpdateReport:
        """The units of the truth as it stands into memctl_units: the gone and changed ones' rows
        deleted, the new and changed ones' inserted with their vectors (copied from a row of the same
        text, else embedded), in one transaction under the store's write lock, so the truth read is
        the one indexed and two updates never interleave."""
        if not self.store.exists():
            return UpdateReport()
        built = self._built()
        with self.store.indexing() as conn:
            conn.execute(_STATE)
            state = self._state(conn)
            written = _sources_written(conn)
            if not rebuild and state == (written, built):
                return UpdateReport(units=conn.execute("SELECT units FROM memctl_index").fetchone()[0])
            reason = "asked" if rebuild else _rebuild_reason(state, built)
            start_over = bool(reason) or not _has_units(conn)
            model = _Model(self.settings.embedding)
            # units made another way (UNITS) are all read anew, each embedded again only if its text changed
            made_alike = state is not None and state[1].get("units") == built["units"]
            reading = None if start_over or not made_alike else self._changed(conn, state[0])
            if reading is None:
                reading = self._whole(conn, start_over)
            change = _Change.between(reading.old, reading.units)
            report = UpdateReport(added=change.added, changed=len(change.gone) - change.removed,
                                  removed=change.removed, files_read=reading.files, rebuilt=start_over,
                                  reason=reason or ("missing" if start_over else ""), skipped=reading.skipped)
            texts = [_embed_text(unit, model.embedding_settings.with_previous_turn) for unit in change.fresh]
            embed_digests = [hashlib.sha1(text.encode()).hexdigest() for text in texts]
            donors = {} if start_over else _donors(conn, set(embed_digests))
            wanted, place = _each_once(texts, embed_digests, donors)
            report.embedded = len(wanted)
            made = None
            if wanted:
                step = (lambda n: progress("embedding", n, report.embedded)) if progress else None
                # In one call, as the folder's update makes them (the embedder tokenises a slice at
                # a time), and before the table is dropped: a rebuild holds its exclusive lock, which
                # stops every search, only while the rows go in. Kept float32 (3.5 KB a unit at 896
                # dimensions), each row's vector sent from them as it goes.
                made = model.embedder().embed(wanted, progress=step)
            del texts, wanted  # their strings, not needed past here
            if start_over:
                conn.execute("DROP TABLE IF EXISTS memctl_units")
                _create_units(conn, made.shape[1] if made is not None else model.embedder().dimension)
            for start in range(0, len(change.gone), 1000):
                conn.execute("DELETE FROM memctl_units WHERE id = ANY(%s)", (change.gone[start:start + 1000],))
            top = conn.execute("SELECT coalesce(max(row) + 1, 0) FROM memctl_units").fetchone()[0]
            with_turn = model.embedding_settings.with_previous_turn
            if change.fresh:
                _insert(conn, (_row(unit, top + at, change.digests[at], digest, with_turn,
                                    made[place[digest]] if digest in place else donors[digest])
                               for at, (unit, digest) in enumerate(zip(change.fresh, embed_digests))))
            counts = conn.execute("SELECT count(*), coalesce(sum(cardinality(body_terms)), 0), "
                                  "coalesce(sum(cardinality(context_terms)), 0) FROM memctl_units").fetchone()
            # made anew, or changed past autovacuum's own threshold (50 rows and a tenth of the table)
            settle = start_over or len(change.fresh) + len(change.gone) > 50 + 0.1 * counts[0]
            conn.execute("DELETE FROM memctl_index")
            conn.execute("INSERT INTO memctl_index (format, built, written, units, body_tokens, context_tokens, "
                         "updated_at, shared_ids) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                         (FORMAT, json.dumps(built), written, *counts, clock.format_ts(self.rt.clock.now()),
                          reading.shared_ids))
            report.units = counts[0]
        if settle:
            # VACUUM (ANALYZE) now, not at autovacuum's next look a minute or more later: until then
            # every search reads rows no VACUUM has seen and plans blind (a new table has no
            # statistics: each word's units counted by reading every row). Right after 10k units
            # were written anew, warm searches took 1.1-1.4 s at p50, 150 ms once vacuumed (0.5 s);
            # ANALYZE alone left them at 1.1-1.2 s (bench/README.md "Issue 35: warm search through
            # the resident server on PostgreSQL").
            self.store.vacuum("memctl_units")
        return report

    def _whole(self, conn, start_over: bool) -> _Reading:
        """Every unit of the truth (units.collect over the store's working folder, read in the
        caller's transaction: the units, their ids and sources are a folder's), and every row of
        the table (none when it starts over)."""
        from memctl.index.units import collect

        truth = self.store.working_folder()
        skipped: list[str] = []
        units, shared_ids = _unique(collect(truth, skipped))
        old = {} if start_over else {unit_id: (row, digest, embed_digest) for unit_id, row, digest, embed_digest
                                     in conn.execute("SELECT id, row, digest, embed_digest FROM memctl_units")}
        return _Reading(units, old, shared_ids, len(truth.source_names()), skipped)

    def _changed(self, conn, indexed: int) -> _Reading | None:
        """The units of the files of the truth changed since the index was made of it (`indexed`,
        the store's `sources_written` then: each session, file and the notes keep the `written`
        of the transaction that last changed them) or gone since, and the table's rows of them,
        read as a folder's index reads the files whose stamps changed (index.read_files); None
        when it must read the whole (an id in two files, then or now). Parsing the whole working
        folder for one new message took ~2 s of an update at 10k messages (bench/README.md
        "Issue 35: warm search on PostgreSQL")."""
        from memctl.index.index import read_files

        if conn.execute("SELECT shared_ids FROM memctl_index").fetchone()[0]:
            return None
        present = set(self.store.source_names())
        names = {f"{SESSIONS_DIR}/{session}.jsonl" for (session,) in conn.execute(
            "SELECT session FROM memctl_sessions WHERE written > %s", (indexed,))}
        names.update(path for (path,) in conn.execute("SELECT path FROM memctl_files WHERE written > %s", (indexed,)))
        if conn.execute("SELECT notes_written > %s FROM memctl_store", (indexed,)).fetchone()[0]:
            names.add(MEMORY_MD)
        gone = {source for (source,) in conn.execute("SELECT DISTINCT source FROM memctl_units")} - present
        # read through the store, which brings into its working folder only the files read
        return read_files(self.store, _UnitsTable(conn), (names & present) | gone)


class _UnitsTable:
    """memctl_units as index.read_files asks a folder index's table (index._Table) about its rows."""

    manifest = {"shared_ids": False}  # read_files is asked only then; no log tails kept: a log changed is read whole

    def __init__(self, conn):
        self.conn = conn

    def _select(self, columns: str, column: str, keys) -> list[tuple]:
        return self.conn.execute(f"SELECT {columns} FROM memctl_units WHERE {column} = ANY(%s)",
                                 (sorted(keys),)).fetchall()

    def rows(self, sources: list[str]) -> dict[str, tuple[int, str, str]]:
        return {unit_id: (row, digest, embed_digest)
                for unit_id, row, digest, embed_digest in self._select("id, row, digest, embed_digest", "source", sources)}

    def sources_of(self, ids: list[str]) -> dict[str, str]:
        return dict(self._select("id, source", "id", ids))

    def message_ids(self, sources: list[str]) -> set[str]:
        return {record_id for record_id, kind in self._select("record_id, kind", "source", sources) if kind == "message"}

    def message_sources(self, record_ids: list[str]) -> dict[str, str]:
        return {unit_id: source for unit_id, source, kind in self._select("id, source, kind", "id", record_ids)
                if kind == "message"}

    def log_sources(self, record_ids: set[str]) -> set[str]:
        return {source for source, kind in self._select("source, kind", "record_id", record_ids) if kind == "log"}


def _sources_written(conn) -> int:
    """The `written` of the last transaction that changed what the index is made of (store/postgres.py)."""
    return conn.execute("SELECT sources_written FROM memctl_store").fetchone()[0]


def _rebuild_reason(state: tuple[int, dict] | None, built: dict) -> str:
    """Why the index is made from scratch, as the folder's says it; "" when it is only updated."""
    if state is None:
        return "missing"
    was = state[1]
    if was.get("format") != built["format"]:
        return "old format"
    if any((was.get("model") or {}).get(key) != built["model"].get(key) for key in ("sha256", "precision")):
        return f"model changed: {(was.get('model') or {}).get('name')} to {built['model']['name']}"
    made_alike = {key: value for key, value in was.items() if key != "units"} == \
        {key: value for key, value in built.items() if key != "units"}
    return "" if made_alike else "embedding settings changed"


def _made_as_set(built: dict, embedding) -> bool:
    """Whether an index built as `built` (PgIndex._built) is of this format and these embedding
    settings: the model's name (its identity's: the setting, or the default's name) and precision
    (a packaged model's that has none: "package", whatever the setting)."""
    from memctl.index.embedders import DEFAULT

    model = built.get("model") or {}
    return (built.get("format") == FORMAT and built.get("units") == UNITS
            and built.get("with_previous_turn") == embedding.with_previous_turn
            and model.get("name") == (embedding.model or DEFAULT)
            and model.get("precision") in (embedding.precision, "package"))


def _has_units(conn) -> bool:
    return conn.execute("SELECT to_regclass('memctl_units') IS NOT NULL").fetchone()[0]


def _create_units(conn, dimension: int) -> None:
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except Exception as exc:  # psycopg's, named without importing it here
        raise StoreError(f"the database has no pgvector ({str(exc).splitlines()[0]}); a superuser runs "
                         "CREATE EXTENSION vector once") from None
    conn.execute(_UNITS.format(dimension=int(dimension)))


def _donors(conn, digests: set[str]) -> dict:
    """embed digest -> the vector (float32) the table holds of that text (read before the update
    deletes its row: a unit whose place moved keeps its text's vector)."""
    found = conn.execute("SELECT DISTINCT ON (embed_digest) embed_digest, embedding FROM memctl_units "
                         "WHERE embed_digest = ANY(%s)", (sorted(digests),), binary=True).fetchall()
    return dict(zip([digest for digest, _ in found], vectors_of([vector for _, vector in found], 0)))


def _row(unit: Unit, row: int, digest: str, embed_digest: str, with_turn: bool, vector) -> tuple:
    """A unit's row of memctl_units, in _INSERTED's order. A note's field that the store's check
    says must be text (created_at, tool, agent, cache_scope) and a hand edit made a number, true or
    a list goes as it is written in MEMORY.md (JSON): COPY takes a text column's value as text only."""
    meta = _meta(unit)
    body = tokens_of(_bm25_text(unit))
    context = tokens_of(unit.context) if unit.context and with_turn else []
    return (row, unit.id, digest, embed_digest, meta["kind"], meta["record_id"], unit.text, meta["source"],
            unit.line_start, unit.line_end, meta["section"], meta["session"], unit.speaker, _text(unit.ts),
            meta["scope"], meta["status"], orjson.dumps(unit.fields).decode(), unit.context_id, meta["ts_epoch"],
            _text(meta["tool"]), _text(meta["agent"]), _text(meta["cache_scope"]), body, context,
            field_norm(len(body)), field_norm(len(context)), vector)


def _text(value) -> str | None:
    return value if value is None or isinstance(value, str) else orjson.dumps(value).decode()


# memctl_units's columns as _row makes them, and their types
_INSERTED = (("row", "int8"), ("id", "text"), ("digest", "text"), ("embed_digest", "text"), ("kind", "text"),
             ("record_id", "text"), ("text", "text"), ("source", "text"), ("line_start", "int4"),
             ("line_end", "int4"), ("section", "text"), ("session", "text"), ("speaker", "text"), ("ts", "text"),
             ("scope", "text"), ("status", "text"), ("fields", "text"), ("context_id", "text"),
             ("ts_epoch", "float8"), ("tool", "text"), ("agent", "text"), ("cache_scope", "text"),
             ("body_terms", "text[]"), ("context_terms", "text[]"), ("body_norm", "int4"),
             ("context_norm", "int4"), ("embedding", "vector"))


def _insert(conn, rows: Iterable[tuple]) -> None:
    """Rows into memctl_units by one binary COPY, each sent as it is made: psycopg writes a buffer
    at a time, so the rows of a build are never all in memory. Made all at once for an
    executemany, each vector a list of Python floats, they took most of a PostgreSQL build's
    peak RSS (3.0 GB at 50k messages, the folder's 1.2); a rebuild at 10k peaked at 1,161 MB so,
    799 this way (bench/README.md "Issue 35: PostgreSQL's build memory and cold search"). The
    vectors go in pgvector's binary form, straight from float32."""
    import numpy as np
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    vector_oid = conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0]

    class VectorDumper(Dumper):
        """pgvector's binary vector (vector_recv): two int16, the dimension and 0, then big-endian float4s."""
        format = Format.BINARY
        oid = vector_oid

        def dump(self, vector):
            return len(vector).to_bytes(2, "big") + b"\0\0" + vector.astype(">f4").tobytes()

    cursor = conn.cursor()
    cursor.adapters.register_dumper(np.ndarray, VectorDumper)  # this cursor's: the connection's stay as they are
    with cursor.copy(f"COPY memctl_units ({', '.join(name for name, _ in _INSERTED)}) FROM STDIN (FORMAT BINARY)") \
            as copy:
        copy.set_types([vector_oid if kind == "vector" else kind for _, kind in _INSERTED])
        for row in rows:
            copy.write_row(row)


# -- reading, for a search ---------------------------------------------------------------------
class PgReader:
    """A search's reads of the index, in the caller's snapshot (store.reading()): BM25's hits, the
    nearest vectors, the units a search reads with its candidates, and words' document frequencies.

    `kept`: what a process that searches again (a resident server, `memctl mcp`: PgRetriever's)
    keeps between searches of one generation of the index, the transaction that last wrote its
    memctl_index row (its xmin: every update deletes and inserts that row): words' document
    frequencies and how many units a filter allows. Counting them on the GIN index took ~40 ms of
    a warm search at 10k messages, mostly words met before (bench/README.md "Issue 35: warm
    search on PostgreSQL")."""

    def __init__(self, conn, kept: dict | None = None):
        import numpy as np

        self.conn = conn
        found = conn.execute("SELECT units, body_tokens, context_tokens, xmin::text, written FROM memctl_index").fetchone() \
            if _has_units(conn) and conn.execute("SELECT to_regclass('memctl_index') IS NOT NULL").fetchone()[0] \
            else None
        self.documents, body_tokens, context_tokens, *generation = found or (0, 0, 0, None, None)
        self.empty = not self.documents
        # Tantivy's average field length: its tokens over the units, in float32
        self.average = {field: float(np.float32(tokens) / np.float32(max(self.documents, 1)))
                        for field, tokens in (("body", body_tokens), ("context", context_tokens))}
        kept = {} if kept is None else kept
        if kept.get("generation") != generation:
            kept.clear()
            kept.update(generation=generation, frequencies={}, counts={})
        self._frequencies: dict[tuple[str, str], int] = kept["frequencies"]
        self._counts: dict[tuple, int] = kept["counts"]

    def doc_freqs(self, terms, field: str = "body") -> dict[str, int]:
        """How many units hold each term in `field` (counted on its GIN index, kept for this generation)."""
        return self._counted(terms, (field,))[field]

    def _counted(self, terms, fields: tuple[str, ...]) -> dict[str, dict[str, int]]:
        """doc_freqs of each of `fields` (body, context), counted in one statement."""
        wanted = sorted({term for term in terms for field in fields if (field, term) not in self._frequencies})
        if wanted and not self.empty:
            counts = ", ".join(f"(SELECT count(*) FROM memctl_units WHERE {field}_terms @> ARRAY[t])" for field in fields)
            for term, *found in self.conn.execute(f"SELECT t, {counts} FROM unnest(%s::text[]) AS t", (wanted,)):
                self._frequencies.update(((field, term), count) for field, count in zip(fields, found))
        return {field: {term: self._frequencies.get((field, term), 0) for term in terms} for field in fields}

    def bm25(self, text: str, filters: Filters, limit: int, ideal_terms: int, context_weight: float):
        """lexical.search's hits (Hits), scored as Tantivy scores them, in SQL."""
        import math

        import numpy as np

        from memctl.index import lexical
        from memctl.text.cjk import simplified

        terms, pairs = lexical._query_terms(simplified(text))
        if (not terms and not pairs) or self.empty:
            return lexical.Hits({}, 0.0)
        documents = self.documents
        letters = sorted({*terms, *(c for pair in pairs for c in pair)})
        body, context = self._counted(letters, ("body", "context")).values()

        def idf(found: int) -> float:  # Tantivy's, in float32 as it computes it
            return float(_logf(np.float32(1) + (np.float32(documents - found) + np.float32(0.5))
                               / (np.float32(found) + np.float32(0.5))))

        clauses = [(term, None) for term in terms] + [(pair[0], pair[1]) for pair in pairs]
        firsts, seconds, body_weights, context_weights = [], [], [], []
        for first, second in clauses:
            parts = (first,) if second is None else (first, second)
            firsts.append(first)
            seconds.append(second)
            body_weights.append(float(np.float32(sum(idf(body[p]) for p in parts)) * np.float32(1 + K1)))
            context_weights.append(float(np.float32(sum(idf(context[p]) for p in parts)) * np.float32(1 + K1)
                                         * np.float32(context_weight)) if context_weight > 0 else 0.0)
        where, params = _filters_sql(filters)
        # each clause's term frequency in a field: a word's occurrences, a pair's adjacent occurrences
        tf = ("CASE WHEN q.second IS NULL THEN cardinality(array_positions(u.{f}, q.first)) ELSE "
              "(SELECT count(*) FROM unnest(array_positions(u.{f}, q.first)) AS p WHERE u.{f}[p + 1] = q.second) END")
        # in float4 and in Tantivy's order: weight × tf / (tf + k1 · (1 − b + b · length / average))
        score = ("q.{w} * (t.{n} / (t.{n} + {k1}::real * ({one_b}::real + {b}::real * u.{norm}::real / {avg}::real)))")
        # Each clause meets only the units holding its (first) word, found on the GIN index; its
        # term frequencies are counted once (OFFSET 0 keeps the subquery from being inlined into
        # each use of them: six array scans a pair of unit and clause, ~114 of a search's 138 ms
        # at 10k messages); a unit's clauses are summed in the query's order, as Tantivy's union
        # adds them (the scores are its to the bit, whichever plan the database picks).
        sql = f"""
            SELECT id, score FROM (
                SELECT u.id, u.row, sum(greatest(
                    CASE WHEN t.body > 0 THEN {score.format(w='body_weight', n='body', norm='body_norm', k1=K1,
                                                             one_b=1 - B, b=B, avg=max(self.average['body'], 1e-9))}
                         ELSE 0 END,
                    CASE WHEN t.context > 0 THEN {score.format(w='context_weight', n='context', norm='context_norm',
                                                                k1=K1, one_b=1 - B, b=B,
                                                                avg=max(self.average['context'], 1e-9))}
                         ELSE 0 END) ORDER BY q.n)::real AS score
                FROM unnest(%s::text[], %s::text[], %s::real[], %s::real[]) WITH ORDINALITY
                    AS q(first, second, body_weight, context_weight, n)
                JOIN memctl_units u ON (u.body_terms @> ARRAY[q.first] OR u.context_terms @> ARRAY[q.first])
                CROSS JOIN LATERAL (SELECT ({tf.format(f='body_terms')})::real AS body,
                                           ({tf.format(f='context_terms')})::real AS context OFFSET 0) AS t
                {'WHERE ' + ' AND '.join(where) if where else ''}
                GROUP BY u.id, u.row) AS scored
            WHERE score > 0
            ORDER BY score DESC, row
            LIMIT %s"""
        hits = self.conn.execute(sql, (firsts, seconds, body_weights, context_weights, *params, limit),
                                 prepare=False).fetchall()
        idfs = {term: math.log(1 + (documents - body[term] + 0.5) / (body[term] + 0.5)) for term in letters}
        ideal = sum(idfs[t] for t in terms) + sum(idfs[a] + idfs[b] for a, b in pairs)
        count = len(terms) + 2 * len(pairs)
        if count > ideal_terms:
            ideal *= ideal_terms / count
        # a float4 arrives as its shortest decimal: read as the float32 it is, as Tantivy's scores are
        return lexical.Hits({unit_id: float(np.float32(score)) for unit_id, score in hits}, ideal,
                            {term: idfs[term] for term in terms})

    def nearest(self, query_vectors, filters: Filters, limit: int) -> list[str]:
        """The ids of the `limit` units nearest each query vector (HNSW, inner product, within the
        filters: pgvector's iterative scan goes on until that many pass them).

        The planner's costs hold a sequential scan cheaper, and it read every vector out of its
        TOAST table: 75 ms at 10k messages against HNSW's ~12 (the same 200 ids); so sequential
        scans are off for this one statement (an index on the filters' columns stays an
        alternative when they admit few). The vector goes as a `vector` parameter: as
        float4[]::vector, a prepared statement's generic plan (psycopg prepares a statement run
        five times) cast it again for every row, 0.5-0.8 s a search."""
        if self.empty:
            return []
        where, params = _filters_sql(filters)
        (scanning,) = self.conn.execute(
            "SELECT current_setting('enable_seqscan'), set_config('hnsw.ef_search', %s, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('enable_seqscan', 'off', true)",
            (str(min(1000, max(40, int(limit)))),)).fetchone()[:1]
        found: dict[str, None] = {}
        try:
            for vector in query_vectors:
                sql = (f"SELECT id FROM memctl_units {'WHERE ' + ' AND '.join(where) if where else ''} "
                       "ORDER BY embedding <#> %s::vector LIMIT %s")
                found.update(dict.fromkeys(unit_id for (unit_id,) in self.conn.execute(
                    sql, (*params, _vector_text(vector), limit))))
        finally:
            self.conn.execute("SELECT set_config('enable_seqscan', %s, true)", (scanning,))
        return list(found)

    def count(self, filters: Filters) -> int:
        """How many units the filters allow (the folder index's mask counts the same), kept for this generation."""
        if self.empty:
            return 0
        where, params = _filters_sql(filters)
        key = (tuple(where), tuple(params))
        if key not in self._counts:
            self._counts[key] = self.conn.execute(
                f"SELECT count(*) FROM memctl_units {'WHERE ' + ' AND '.join(where) if where else ''}", params).fetchone()[0]
        return self._counts[key]

    def slice(self, ids: list[str]) -> list[int]:
        """The rows a search reads with these units: theirs, the turns before them (every unit of
        those records) and the messages read with any of those as their turn before; in row order."""
        return [row for (row,) in self.conn.execute("""
            WITH first AS (SELECT row, record_id, context_id, kind FROM memctl_units WHERE id = ANY(%s)),
            before AS (SELECT row, record_id, kind FROM memctl_units
                       WHERE record_id IN (SELECT context_id FROM first)),
            answered AS (SELECT record_id FROM first WHERE kind = 'message'
                         UNION SELECT record_id FROM before WHERE kind = 'message'),
            replies AS (SELECT row FROM memctl_units WHERE context_id IN (SELECT record_id FROM answered))
            SELECT row FROM first UNION SELECT row FROM before UNION SELECT row FROM replies ORDER BY row""",
                                                            (ids,))]

    def units(self, rows: list[int], dimension: int):
        """These rows' units, in row order, each as COLUMNS, and their vectors as a float32 matrix
        (`dimension` columns when there are none).
        Read in binary: pgvector's vectors as text, parsed into Python floats, took 0.3 s of a
        0.6 s search on a 419-unit LoCoMo store; in binary 20 ms for the whole table."""
        found = self.conn.execute(f"SELECT {', '.join(COLUMNS)}, embedding FROM memctl_units WHERE row = ANY(%s) "
                                  "ORDER BY row", (rows,), binary=True).fetchall()
        return [row[:-1] for row in found], vectors_of([row[-1] for row in found], dimension)

    def rows(self) -> int:
        """One more than the highest row of the index (a table of that many rows holds every unit by its row)."""
        return self.conn.execute("SELECT coalesce(max(row) + 1, 0) FROM memctl_units").fetchone()[0] \
            if not self.empty else 0

    def dimension(self) -> int:
        """The vectors' dimension (memctl_units.embedding's type, vector(d))."""
        return self.conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memctl_units'::regclass "
                                 "AND attname = 'embedding'").fetchone()[0] if not self.empty else 0


def vectors_of(values: list[bytes], dimension: int):
    """pgvector's binary vectors (two int16, the dimension and 0, then big-endian float4s) as a float32 matrix."""
    import numpy as np

    if not values:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.frombuffer(b"".join(value[4:] for value in values), dtype=">f4").astype(np.float32).reshape(
        len(values), -1)


def _vector_text(vector) -> str:
    """A float32 vector as pgvector's text: each number's float64 repr, which parses back to the same float32."""
    return "[" + ",".join(map(str, vector.astype("float32").tolist())) + "]"


def _logf(value) -> float:
    """The C library's single-precision natural logarithm, which Tantivy's idf takes (Rust's
    f32::ln); numpy's float32 log differs from it in the last bit for about one idf in five at
    3k messages (each such BM25 score then one float32 step off Tantivy's)."""
    return _libm_logf()(float(value))


@functools.cache
def _libm_logf():
    import ctypes
    import ctypes.util
    import math

    import numpy as np

    try:
        libm = ctypes.CDLL("libm.so.6")  # glibc's, by name: find_library runs ldconfig
    except OSError:
        name = ctypes.util.find_library("m")
        if name is None:  # no C library to ask (not seen): the correctly rounded logarithm, in float32
            return lambda value: float(np.float32(math.log(value)))
        libm = ctypes.CDLL(name)
    logf = libm.logf
    logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
    return logf


def _filters_sql(filters: Filters) -> tuple[list[str], list]:
    """Filters.sql_where for psycopg (its `?` placeholders as %s), over memctl_units as `u`."""
    where, params = filters.sql_where()
    return [condition.replace("?", "%s") for condition in where], params
