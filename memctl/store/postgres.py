"""A store on PostgreSQL, named by a URL (`--store postgresql://user@host:5432/db`; #35, X7).

The truth of a store in tables, with a scope column on every record (docs/design.md "A store on
PostgreSQL"):

    memctl_sessions  one row a session: its one scope
    memctl_messages  one row a line of sessions/<session>.jsonl: id (unique in the store), scope
    memctl_notes     one row a block of MEMORY.md (a heading, an entry, blank lines): id, scope
    memctl_pending   one row a line of pending.jsonl: id, scope
    memctl_files     every other file of the truth (daily logs, topics, the window's state, the
                     governance log, the settings, ...), whole, until its kind gets a table
    memctl_access    one row a memory a search returned: how often, and when last (the access
                     counts of store/counters.py, which a folder appends to access.log)
    memctl_turns     one row: the layered searches counted here (counters.turns, which a folder
                     keeps in search_state.json)
    memctl_store     the format, and `written`, which moves with every committed write

Each row keeps its line's or block's exact text, so a store read back as files is the files that
went in, byte for byte (`memctl store copy`). The folder's lock and undo journal become a
transaction: a write takes a transaction-scoped advisory lock (one writer at a time, as the
folder's flock; released by the server when the writer's connection dies, so a killed writer
neither leaves the store locked nor anything half written) and a read is one REPEATABLE READ
snapshot (no half write is ever seen). Ids stay unique under any number of writers on any
number of machines because the database refuses a second row with the same id.

A search counts what it returned without the write lock and without moving `written`: one upsert
of those ids' rows of memctl_access in a transaction of its own (count_accesses; a layered
search its turn, the row of memctl_turns: count_turn), so searches
never queue behind each other or a writer to count, and no index or working folder takes a count
for a change of the truth. On a read-only database (a hot standby, or one whose sessions default
to read-only transactions) a search reads the index as the primary left it and counts nothing,
and a write stops at its start, in one line (refused_read_only).

The features still reach the truth by its place (a path, seam.Places): on this store each place is
in a working folder of the process (Mirror), brought up to date with what the transaction or
snapshot under way sees, while every write goes to the database first (PostgresWrites) and only
then to the folder; the settings' file is a private copy of its memctl.toml. Its index lives in
the same database (index/postgres.py). The URL's password never appears in a message: `shown` is
what every message names, and `named` puts it in place of the working folder.

psycopg is imported by the first connection only: a folder store never loads it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Collection, Iterator
from urllib.parse import urlsplit, urlunsplit

import orjson

from memctl.errors import StoreError
from memctl.store import counters, memoryfile
from memctl.store.sessions import message_scope
from memctl.store.store import (DAILY_DIR, MEMORY_MD, SESSIONS_DIR, SOURCE_FOLDERS, TOPICS_DIR, Store, _make_dirs,
                                _unlink_if_there, _write_all, check_name, mended, open_file)

FORMAT = 4
NO_SCOPE = "none"  # the scope of a session holding no message (only torn or hand-made lines): no scope's
# One writer at a time: the key of the advisory lock every write transaction takes ("memctl" in ASCII).
WRITE_LOCK = 0x6D656D63746C
PENDING = "pending.jsonl"
CONFIG = "memctl.toml"
STATE = "index_state.json"

SCHEMA = """
CREATE TABLE IF NOT EXISTS memctl_store (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    format integer NOT NULL,
    written bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS memctl_sessions (
    session text PRIMARY KEY,
    scope text NOT NULL,
    UNIQUE (session, scope));
CREATE TABLE IF NOT EXISTS memctl_messages (
    session text NOT NULL,
    seq integer NOT NULL,
    id text UNIQUE,
    scope text NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (session, seq),
    -- a session is in one scope, and so is every message of it
    FOREIGN KEY (session, scope) REFERENCES memctl_sessions (session, scope) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS memctl_messages_scope ON memctl_messages (scope);
CREATE TABLE IF NOT EXISTS memctl_notes (
    seq integer PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('heading', 'entry', 'blank')),
    section text,
    id text,
    scope text,
    raw text NOT NULL);
CREATE INDEX IF NOT EXISTS memctl_notes_scope ON memctl_notes (scope);
CREATE TABLE IF NOT EXISTS memctl_pending (
    seq integer PRIMARY KEY,
    id text UNIQUE,
    scope text NOT NULL,
    line text NOT NULL);
CREATE TABLE IF NOT EXISTS memctl_files (
    path text PRIMARY KEY,
    data bytea NOT NULL);
"""
TABLES = ("memctl_messages", "memctl_sessions", "memctl_notes", "memctl_pending", "memctl_files", "memctl_access",
          "memctl_turns")
# Each step makes format n + 2 from format n + 1 (SCHEMA makes format 1). Format 2: the `written`
# value of the transaction that last changed each session, file, the notes and the pending notes,
# so that a working folder (Mirror) brings over only what changed since it was last read, and of
# the last to change what the index is made of (sources_written), so that a write of anything
# else (the window's state, a counter) has no search update the index first.
MIGRATIONS = [
    """ALTER TABLE memctl_store ADD COLUMN IF NOT EXISTS sources_written bigint NOT NULL DEFAULT 0;
       ALTER TABLE memctl_store ADD COLUMN IF NOT EXISTS notes_written bigint NOT NULL DEFAULT 0;
       ALTER TABLE memctl_store ADD COLUMN IF NOT EXISTS pending_written bigint NOT NULL DEFAULT 0;
       ALTER TABLE memctl_sessions ADD COLUMN IF NOT EXISTS written bigint NOT NULL DEFAULT 0;
       ALTER TABLE memctl_files ADD COLUMN IF NOT EXISTS written bigint NOT NULL DEFAULT 0;""",
    # Format 3: the access counts of searches (store/counters.py): one row a memory id, raised in
    # place by an upsert, so that searches of several processes at once lose no increment.
    """CREATE TABLE IF NOT EXISTS memctl_access (
           id text PRIMARY KEY,
           count bigint NOT NULL CHECK (count > 0),
           last text NOT NULL);""",
    # Format 4: the layered searches' count (counters.turns), raised in place as the access counts
    # are: a layered search had taken the write lock and moved `written` to count its turn in
    # search_state.json, queueing behind writers and making every kept search state stale.
    """CREATE TABLE IF NOT EXISTS memctl_turns (
           one boolean PRIMARY KEY DEFAULT true CHECK (one),
           count bigint NOT NULL CHECK (count > 0));""",
]


_OPEN: dict[tuple[str, int], "PostgresStore"] = {}  # PostgresStore.opened's, by URL and thread


def shown(url: str) -> str:
    """The URL as messages name it: its password (in the user part or a `password=` parameter)
    replaced by ***; for a URL that does not parse, its scheme alone (it may hold a password
    anywhere)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- a port that is no number raises here, as libpq would refuse it
    except ValueError:
        return url.split("://", 1)[0] + "://(unreadable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _password(url: str) -> str | None:
    """The password a (parsed) URL holds, in its user part or a `password=` parameter."""
    parts = urlsplit(url)
    found = re.search(r"(?i)(?:^|&)password=([^&]*)", parts.query)
    return parts.password or (found.group(1) if found else None)


class PostgresStore:
    """A memory store in a PostgreSQL database (module doc). Keeps one connection, made on first use."""

    is_folder = False

    def __init__(self, url: str):
        self.url = url
        self.shown = shown(url)
        self._connection = None
        self._open = False  # a transaction of ours is under way on the connection
        self._folder_read = False  # ... and the working folder was brought up to date in it
        self._settings_folder: Path | None = None  # config_file's
        self._mirror: Mirror | None = None  # made when a feature first asks for a place

    def __repr__(self) -> str:
        return f"PostgresStore({self.shown!r})"

    @property
    def name_to_keep(self) -> str:
        """What a client's settings name the store by: its URL, which may hold no password (it
        would sit in that file in clear; libpq reads it from ~/.pgpass or PGPASSWORD)."""
        if _password(self.url):
            raise StoreError(f"{self.shown}: the URL holds a password, which would be written into the client's "
                             "settings in clear; give the URL without it and keep it in ~/.pgpass or PGPASSWORD")
        return self.url

    @classmethod
    def opened(cls, url: str) -> "PostgresStore":
        """The store at `url` this thread has open, else a new one: the Memory a resident server or
        `memctl mcp` makes for each call finds the connection and the working folder of the last
        (a connection is one thread's: its transactions are)."""
        import threading

        key = (url, threading.get_ident())
        store = _OPEN.get(key)
        if store is None:
            store = _OPEN[key] = cls(url)
        return store

    def named(self, message: str) -> str:
        """A message as a person reads it: a file of the working folder named by the store's URL
        (without its password) and its path in the store."""
        if self._mirror is None:
            return message
        return message.replace(str(self._mirror.folder.root), self.shown)

    # -- the connection ----------------------------------------------------------------
    def _connect(self):
        if self._connection is None or self._connection.closed:
            if self.shown.endswith("(unreadable URL)"):
                raise StoreError(f"{self.shown}: not a URL memctl can read; write it as "
                                 "postgresql://user@host:5432/database")
            try:
                import psycopg
            except ImportError:
                raise StoreError(f"{self.shown}: a store on PostgreSQL needs psycopg: "
                                 "pip install 'memctl[postgres]'") from None
            try:
                self._connection = psycopg.connect(self.url, connect_timeout=10)
            except psycopg.Error as exc:
                raise StoreError(f"{self.shown}: cannot connect: {self.hidden(exc)}") from None
            try:
                _upgrade(self._connection)
            except (psycopg.Error, StoreError) as exc:
                self._connection.close()  # not upgraded: the next call tries again, or says why again
                self._connection = None
                raise StoreError(f"{self.shown}: {self.hidden(exc)}") from None
        return self._connection

    def hidden(self, exc: BaseException) -> str:
        """An error's first line with the password (should a driver ever name it) taken out."""
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        password = _password(self.url)
        return text.replace(password, "***") if password else text

    def close(self) -> None:
        """Close the connection and remove the working folder and the settings' copy (used again,
        the store opens them anew)."""
        import shutil

        if self._connection is not None:
            self._connection.close()
            self._connection = None
        for folder in (self._mirror and self._mirror.folder.root, self._settings_folder):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self._mirror = self._settings_folder = None

    @contextmanager
    def _in_transaction(self, *, write: bool, locked: bool = True) -> Iterator:
        """The connection in a transaction: a write one under the write lock (`locked`; else one that
        takes no lock, for a write that cannot meet another's: count_accesses), or a read-only
        snapshot. Inside one already open (a read within `reading()`, a write within
        `transaction()`), that one. A write on a read-only database stops before its first step."""
        import psycopg

        conn = self._connect()
        if self._open:
            yield conn
            return
        self._open, self._folder_read = True, False
        try:
            # A read's snapshot said in its BEGIN, not in a SET TRANSACTION after it: one round trip
            # less a transaction (a call to a resident server made ~59 at 10k messages; bench/README.md
            # "Issue 35: warm search through the resident server on PostgreSQL"). A write's BEGIN
            # says nothing: READ WRITE would override a database's default_transaction_read_only,
            # which the lock's statement reads to refuse the write.
            from psycopg import IsolationLevel

            conn.isolation_level, conn.read_only = (None, None) if write else (IsolationLevel.REPEATABLE_READ, True)
            with conn.transaction():
                if write and locked:  # the lock, and whether the database takes writes at all, in one round trip
                    if conn.execute("SELECT current_setting('transaction_read_only'), pg_advisory_xact_lock(%s)",
                                    (WRITE_LOCK,)).fetchone()[0] == "on":
                        raise self.refused_read_only()
                yield conn
        except psycopg.IntegrityError as exc:
            detail = exc.diag.message_detail or self.hidden(exc)
            raise StoreError(f"{self.shown}: refused: {detail}") from None
        except psycopg.errors.ReadOnlySqlTransaction:  # an unlocked write (count_accesses)
            raise self.refused_read_only() from None
        except psycopg.Error as exc:
            if conn.broken:
                self._connection = None
            raise StoreError(f"{self.shown}: {self.hidden(exc)}") from None
        finally:
            self._open = False

    def vacuum(self, table: str) -> None:
        """VACUUM (ANALYZE) one of the store's tables (index/postgres.py's, after writing much of it),
        outside any transaction, as VACUUM must run. Inside one, or should it fail (a lost
        connection, say), it is left to autovacuum: the write it follows has committed."""
        self._maintain(f"VACUUM (ANALYZE) {table}")

    def settle_forgotten(self) -> None:
        """ANALYZE the tables that hold what was said, after a forget has committed: a table's
        statistics (pg_statistic) keep samples of its column values, which the planner reads and
        a `pg_dump` does not show, but the database's files do, and a VACUUM FULL keeps them (a
        forgotten text stayed in memctl_units.text's histogram, put there by the index's ANALYZE or
        autovacuum's). ANALYZE samples only the rows that live; its old statistics become dead
        tuples, which VACUUM reclaims as it does the tables' (docs/design.md, "Many writers on
        PostgreSQL, and what `forget` leaves"). TABLES are there (the forget's transaction checked
        the format); memctl_units once the store is indexed."""
        with self._in_transaction(write=False) as conn:
            indexed = conn.execute("SELECT to_regclass('memctl_units') IS NOT NULL").fetchone()[0]
        self._maintain("ANALYZE " + ", ".join(TABLES + (("memctl_units",) if indexed else ())))

    def _maintain(self, statement: str) -> None:
        """`statement` outside any transaction; inside one, or should it fail, left to autovacuum."""
        import psycopg

        if self._open:
            return
        conn = self._connect()
        try:
            conn.autocommit = True
            conn.execute(statement)
        except psycopg.Error:
            if conn.broken:
                self._connection = None
        finally:
            if not conn.closed:
                conn.autocommit = False

    def refused_read_only(self) -> StoreError:
        return StoreError(f"{self.shown}: the database is read-only (a standby, or its transactions default to "
                          "read-only): write through the primary's URL")

    # -- Locked (seam.py) ----------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """The store's write lock, for as long as one transaction."""
        with self._in_transaction(write=True):
            self._folder_current()
            yield

    @contextmanager
    def reading(self, *, recover: bool = True) -> Iterator[None]:
        """One snapshot for the whole read (nothing to recover: an unfinished transaction left nothing)."""
        with self._in_transaction(write=False):
            self._folder_current()
            yield

    @contextmanager
    def snapshot(self) -> Iterator:
        """The connection in one read-only snapshot (as `reading()`), for the index's reads (index/postgres.py)."""
        with self._in_transaction(write=False) as conn:
            yield conn

    @contextmanager
    def indexing(self) -> Iterator:
        """The connection in a transaction under the write lock that moves no `written` stamp: the
        index's update (index/postgres.py) reads the truth and writes what it derives from it, and
        no writer changes the truth meanwhile."""
        with self._in_transaction(write=True) as conn:
            self._check_format(conn)
            yield conn

    @contextmanager
    def transaction(self, *, dry_run: bool = False) -> Iterator["PostgresWrites"]:
        """One database transaction under the write lock: all its writes commit together at the end,
        or none does (an error, a kill, a lost connection). dry_run: every step, then a rollback."""
        if dry_run and not self.exists():
            yield PostgresWrites(self, None)
            return
        import psycopg

        try:
            with self._in_transaction(write=True) as conn:
                if not conn.execute("SELECT to_regclass('memctl_store') IS NOT NULL").fetchone()[0]:
                    # made by the first writer, under the lock; the catalog a waiting writer looked in may
                    # predate the tables the first made, so making them is idempotent too
                    conn.execute(SCHEMA)  # no parameters: several statements go as one simple query
                    conn.execute("INSERT INTO memctl_store (format) VALUES (1) ON CONFLICT DO NOTHING")
                    _upgrade(conn, locked=True)
                self._check_format(conn)
                self._folder_current()
                stamp = conn.execute("SELECT written + 1 FROM memctl_store").fetchone()[0]
                writes = PostgresWrites(self, conn, stamp, mirrored=not dry_run)
                yield writes
                conn.execute("UPDATE memctl_store SET written = %s", (stamp,))
                if dry_run:
                    raise psycopg.Rollback()
        except psycopg.Rollback:
            pass
        else:
            if writes.wrote_folder:  # committed: the folder holds what the database now does
                self._mirror.synced = stamp

    def _check_format(self, conn) -> None:
        """Tables laid out by a newer memctl are neither read nor written: this one could misread them."""
        made = conn.execute("SELECT format FROM memctl_store").fetchone()
        if made is None or made[0] != FORMAT:
            found = "no format row" if made is None else f"format {made[0]}"
            raise StoreError(f"{self.shown}: its tables are of {found}; this memctl reads format {FORMAT} "
                             "(a newer memctl made them: upgrade memctl)")

    def read_only(self) -> bool:
        """Whether the database takes no write: a hot standby, or read-only transactions by default
        (set for the database, the role or the session)."""
        with self._in_transaction(write=False) as conn:
            return conn.execute("SELECT pg_is_in_recovery() OR current_setting('default_transaction_read_only') = 'on'"
                                ).fetchone()[0]

    def written_stamp(self) -> int | None:
        with self._in_transaction(write=False) as conn:  # one snapshot for both: one transaction, not two
            if not self.exists():
                return None
            return conn.execute("SELECT written FROM memctl_store").fetchone()[0]

    def exists(self) -> bool:
        conn = self._connect()
        with self._in_transaction(write=False):
            return conn.execute("SELECT to_regclass('memctl_store') IS NOT NULL").fetchone()[0]

    def require(self) -> None:
        if not self.exists():
            raise StoreError(f"no store at {self.shown}")

    def is_empty(self) -> bool:
        """No record of any kind (a store copy writes only into an empty store)."""
        if not self.exists():
            return True
        with self._in_transaction(write=False) as conn:
            return not any(conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0] for table in TABLES)

    # -- the truth as files (store copy) ------------------------------------------------------
    def files(self) -> dict[str, bytes]:
        """Every file of the truth as a folder store holds it, by its path relative to the root, read
        in one snapshot: MEMORY.md from its blocks, each session's file from its lines, pending.jsonl,
        and the files kept whole."""
        if not self.exists():
            return {}
        with self._in_transaction(write=False) as conn:
            self._check_format(conn)
            changed = _changed_files(conn, since=-1)
            counted = conn.execute("SELECT id, count, last FROM memctl_access ORDER BY id").fetchall()
            turns = _turns_counted(conn)
        if counted:  # the searches counted here folded in, as the lifecycle folds a folder's log
            folded = counters.fold(changed.get(counters.FILE_NAME), changed.pop(counters.LOG_NAME, None), counted)
            changed[counters.FILE_NAME] = orjson.dumps(folded, option=orjson.OPT_SORT_KEYS)
        if turns:  # ... and the layered searches counted here, into search_state.json as a folder keeps them
            changed[counters.TURNS_FILE] = counters.turns_file(changed.get(counters.TURNS_FILE), turns)
        return dict(sorted((path, data) for path, data in changed.items() if data is not None))

    # -- access counts (store/counters.py) ------------------------------------------------------
    def count_accesses(self, ids: list[str], at: str) -> None:
        """One access more for each of `ids` (distinct), last at `at`: one upsert, in a transaction of
        its own that takes no write lock and moves no `written` (a count is no change of the truth).
        Concurrent searches raise the same rows one after the other, each adding to what the last
        committed, so none is lost; taking the rows in the order of their ids, no two wait on each
        other in a circle (no deadlock). A read-only database refuses it (StoreError)."""
        with self._in_transaction(write=True, locked=False) as conn:
            conn.execute("INSERT INTO memctl_access (id, count, last) SELECT id, 1, %s FROM unnest(%s::text[]) AS id "
                         "ORDER BY id ON CONFLICT (id) DO UPDATE SET count = memctl_access.count + excluded.count, "
                         "last = excluded.last", (at, ids))

    def accesses(self) -> tuple[bytes | None, bytes | None, list[tuple[str, int, str]]]:
        """What the counts are read from, in one snapshot: access.json and access.log as the store
        keeps them (from a folder's copy; the lifecycle folds the log) and the table's rows."""
        if not self.exists():
            return None, None, []
        with self._in_transaction(write=False) as conn:
            files = dict(conn.execute("SELECT path, data FROM memctl_files WHERE path = ANY(%s)",
                                      ([counters.FILE_NAME, counters.LOG_NAME],)).fetchall())
            counted = conn.execute("SELECT id, count, last FROM memctl_access").fetchall()
        return (*(bytes(files[name]) if name in files else None for name in (counters.FILE_NAME, counters.LOG_NAME)),
                counted)

    def count_turn(self) -> None:
        """One layered search more (counters.count_turn): one upsert of memctl_turns' row, in a
        transaction of its own that takes no write lock and moves no `written`, as count_accesses."""
        with self._in_transaction(write=True, locked=False) as conn:
            conn.execute("INSERT INTO memctl_turns (count) VALUES (1) "
                         "ON CONFLICT (one) DO UPDATE SET count = memctl_turns.count + 1")

    def turns(self) -> tuple[bytes | None, int]:
        """What the layered searches' count is read from, in one snapshot: search_state.json as the
        store keeps it (from a folder's copy, or an older memctl's count) and the table's count."""
        if not self.exists():
            return None, 0
        with self._in_transaction(write=False) as conn:
            found = conn.execute("SELECT data FROM memctl_files WHERE path = %s", (counters.TURNS_FILE,)).fetchone()
            return (bytes(found[0]) if found else None), _turns_counted(conn)

    @property
    def config_file(self) -> Path:
        """The store's settings as a file config.load reads: its memctl.toml (kept whole in
        memctl_files) copied, as the database holds it now, into a private folder of this process
        (a Memory reads its settings once, and a resident server's next call's Memory reads them
        anew); a path that does not exist when the store has none. Apart from the working folder,
        which a search never makes."""
        if self._settings_folder is None:
            self._settings_folder = _private_folder("settings")
        data = None
        with self._in_transaction(write=False) as conn:  # one snapshot: read twice a call to a resident server
            if self.exists():
                found = conn.execute("SELECT data FROM memctl_files WHERE path = %s", (CONFIG,)).fetchone()
                data = bytes(found[0]) if found else None
        path = self._settings_folder / CONFIG
        if data is None:
            path.unlink(missing_ok=True)
        elif not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        return path

    # -- Places and Names (seam.py): the working folder's -------------------------------------------
    def working_folder(self) -> Store:
        """The whole truth as files in this process's working folder (Mirror), as the transaction
        or snapshot under way sees it (outside any, as one of its own does): what a walk of the
        store (a rebuild, `forget`'s check, `health`) reads."""
        return self._holding(folder="")

    def _holding(self, *names: str, folder: str | None = None) -> Store:
        """The working folder holding the files `names` and every file under `folder` ("" the
        whole truth), each as the database holds it in the transaction or snapshot under way
        (outside any, in one of its own). Only what a feature asks for is brought: an ingest at
        50k messages had brought the whole store (7,848 session files and 256 daily logs) into the
        folder first, 7 of its 10 s under the write lock (bench/README.md "Issue 35: the working
        folder brought by what is asked")."""
        if self._mirror is None:
            self._mirror = Mirror()
        if self._open:
            conn = self._connection
            if not self._folder_read:
                self._mirror.sync(conn)
                self._folder_read = True
            self._mirror.hold(conn, names, folder)
        else:
            with self._in_transaction(write=False) as conn:
                self._mirror.sync(conn)
                self._mirror.hold(conn, names, folder)
        return self._mirror.folder

    def _folder(self) -> Store:
        """The working folder as a place to name paths in, nothing brought."""
        if self._mirror is None:
            self._mirror = Mirror()
        return self._mirror.folder

    def _folder_current(self) -> None:
        """At the start of a transaction or snapshot, what the working folder holds brought up to
        date if this process has one: a place asked for before (a path a feature keeps) reads what
        this one sees. A process that never asked for a place (`store copy`, a search) makes none."""
        if self._mirror is not None:
            self._holding()

    root = property(lambda self: self.working_folder().root)
    memory_md = property(lambda self: self._holding(MEMORY_MD).memory_md)
    daily_dir = property(lambda self: self._holding(folder=DAILY_DIR).daily_dir)
    sessions_dir = property(lambda self: self._holding(folder=SESSIONS_DIR).sessions_dir)
    topics_dir = property(lambda self: self._holding(folder=TOPICS_DIR).topics_dir)
    pending_file = property(lambda self: self._holding(PENDING).pending_file)
    state_file = property(lambda self: self._holding(STATE).state_file)
    index_dir = property(lambda self: self.working_folder().index_dir)

    def session_file(self, session: str) -> Path:
        path = self._folder().session_file(session)  # the name checked first
        self._holding(self._folder().relative(path))
        return path

    def daily_log(self, day: str) -> Path:
        path = self._folder().daily_log(day)  # the name checked first
        self._holding(self._folder().relative(path))
        return path

    def daily_logs(self) -> list[Path]:
        return self._holding(folder=DAILY_DIR).daily_logs()

    def sessions_with(self, ids: Collection[str]) -> list[Path]:
        """The session files that hold a message of `ids`, found by the messages' ids in the
        database, brought alone: an ingest checks its ids against those (a folder reads every
        session file)."""
        with self._in_transaction(write=False) as conn:
            if not conn.execute("SELECT to_regclass('memctl_store') IS NOT NULL").fetchone()[0]:
                return []
            sessions = [session for (session,) in conn.execute(
                "SELECT DISTINCT session FROM memctl_messages WHERE id = ANY(%s) ORDER BY session", (sorted(ids),))]
        return [self.session_file(session) for session in sessions]

    def path(self, *parts: str) -> Path:
        path = self._folder().path(*parts)  # each part checked first
        if parts:
            self._holding("/".join(parts))
        else:
            self.working_folder()  # the root: the whole truth
        return path

    def located(self, name: str) -> Path:
        self._holding(name)  # names from the database: each part was checked when written
        return self._folder().located(name)

    def confine(self, path: Path) -> Path:
        return self._folder().confine(path)

    def inside(self, path: Path) -> bool:
        return self._folder().inside(path)

    def relative(self, path: Path) -> str:
        return self._folder().relative(path)

    def listing(self, folder: Path, pattern: str) -> list[Path]:
        folder = self._folder().confine(folder)
        self._holding(folder=self._folder().relative(folder) if folder != self._folder().root else "")
        return self._folder().listing(folder, pattern)

    def source_names(self) -> list[str]:
        """The files the index is made of, as a folder store lists them (sorted within each kind),
        from the database: no file brought into the working folder."""
        with self._in_transaction(write=False) as conn:
            if not conn.execute("SELECT to_regclass('memctl_store') IS NOT NULL").fetchone()[0]:
                return []
            present = {name for name in _present(conn) if not name.rsplit("/", 1)[-1].startswith(".")}  # as a listing
        names = [MEMORY_MD] if MEMORY_MD in present else []
        for folder, pattern, wanted in SOURCE_FOLDERS:  # as a folder store's listings name them
            in_folder = (name.split("/")[1] for name in present if name.count("/") == 1
                         and name.startswith(folder + "/"))
            names += [f"{folder}/{name}" for name in sorted(in_folder)
                      if fnmatch.fnmatchcase(name, pattern) and (wanted is None or wanted.match(name))]
        return names

    def source_files(self) -> list[Path]:
        return self.working_folder().source_files()


class Mirror:
    """The truth of a PostgreSQL store as files, in a working folder of this process's own.

    The features read and write the truth by its place, as files (seam.Places): this folder gives
    them those places, while every change goes to the database in its transaction (PostgresWrites)
    and is copied here once made there. It holds only what was asked for: the files named (a
    session's, MEMORY.md, a day's log) and the folders listed or walked, each whole (a walk of the
    store, the whole truth). It is derived, as .index/ is: a private temporary folder (mode 0700)
    whose files are brought up to date by what changed since it was last read (the `written` of
    the transaction that last changed each session, file, the notes and the pending notes),
    removed when the process ends, and one that a killed process left is removed by the next to
    make its own. A forgotten record leaves it with the change that forgets it.
    """

    def __init__(self):
        self.folder = Store(_private_folder("pg"))
        self.synced: int | None = None  # the `written` whose truth what is held shows; None: nothing held
        self.files: set[str] = set()  # files held one by one, there or known not to be
        self.folders: set[str] = set()  # folders held whole ("" the whole truth)
        self.empty = True  # no store in the database: nothing to bring

    def sync(self, conn) -> None:
        """Bring what the folder holds to what `conn`'s transaction sees."""
        self.empty = not conn.execute("SELECT to_regclass('memctl_store') IS NOT NULL").fetchone()[0]
        written = 0 if self.empty else conn.execute("SELECT written FROM memctl_store").fetchone()[0]
        if written == self.synced:
            return
        if self.synced is None or self.empty:
            self._drop()
        else:
            for folder in sorted(self.folders):
                self._bring(conn, folder, since=self.synced)
            for name in _stale(conn, sorted(n for n in self.files if not self._in_folder(n)), since=self.synced,
                               there=lambda name: self._path(name).exists()):
                self._put(name, _file_of(conn, name))
        self.synced = written

    def hold(self, conn, names: tuple[str, ...], folder: str | None) -> None:
        """`names` and every file under `folder` brought, as `conn`'s transaction sees them, unless held."""
        if folder is not None and not self._in_folder(folder, itself=True):
            if not self.empty:
                self._bring(conn, folder, since=-1)
            self.folders.add(folder)
        for name in names:
            if self._in_folder(name, itself=True) or name in self.files:
                continue
            data = None if self.empty else _file_of(conn, name)
            if data is None and not self.empty and _is_folder(conn, name):
                self.hold(conn, (), name)  # path("topics", "archived"), say: a folder of the truth
                continue
            self._put(name, data)
            self.files.add(name)

    def write(self, conn, name: str) -> None:
        """One file of the folder made what `conn`'s transaction holds for it."""
        self._put(name, _file_of(conn, name))
        if not self._in_folder(name):
            self.files.add(name)

    def _in_folder(self, name: str, *, itself: bool = False) -> bool:
        return any(f == "" or name.startswith(f + "/") or (itself and name == f) for f in self.folders)

    def _bring(self, conn, folder: str, *, since: int) -> None:
        """Every file under `folder` changed after `since` (-1: every file) brought, and those gone removed."""
        present = _present(conn, under=folder)
        for name, data in _changed_files(conn, since=since, under=folder).items():
            self._put(name, data)
        for name in self._names(folder):
            if name not in present:
                self._put(name, None)

    def _drop(self) -> None:
        """Nothing held: the folder emptied (a transaction that changed it did not commit, or the store is gone)."""
        import shutil

        with os.scandir(self.folder.root) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    _unlink_if_there(Path(entry.path))
        self.files, self.folders = set(), set()

    def _path(self, name: str) -> Path:
        return self.folder.path(*name.split("/"))  # each part of a name from the database checked

    def _put(self, name: str, data: bytes | None) -> None:
        path = self._path(name)
        if data is None:
            if not path.is_dir():
                _unlink_if_there(path)
            return
        _make_dirs(path.parent)
        fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            _write_all(fd, data)  # no fsync: the folder is rebuilt from the database, never the truth
        finally:
            os.close(fd)

    def _names(self, under: str = "") -> list[str]:
        """Every file under `under` ("" the whole folder) that is not hidden, by its path relative to the folder."""
        root = str(self.folder.root)
        found = []
        for folder, folders, files in os.walk(os.path.join(root, under) if under else root):
            folders[:] = [name for name in folders if not name.startswith(".")]
            found += [os.path.relpath(os.path.join(folder, name), root) for name in files if not name.startswith(".")]
        return found


def _changed_files(conn, *, since: int, under: str = "") -> dict[str, bytes | None]:
    """The files of the truth under `under` ("" all) changed by a transaction after `since` (-1:
    every file), by their path as a folder store lays them out (None: no longer there)."""
    changed: dict[str, bytes | None] = {}
    if not under:
        notes_at, pending_at = conn.execute("SELECT notes_written, pending_written FROM memctl_store").fetchone()
        if notes_at > since:
            changed[MEMORY_MD] = _file_of(conn, MEMORY_MD)
        if pending_at > since:
            changed[PENDING] = _file_of(conn, PENDING)
    if under in ("", SESSIONS_DIR):
        lines: dict[str, list[str]] = {}
        for session, line in conn.execute(
                "SELECT m.session, m.line FROM memctl_messages m JOIN memctl_sessions s ON s.session = m.session "
                "WHERE s.written > %s ORDER BY m.session, m.seq", (since,)):
            lines.setdefault(session, []).append(line)
        for (session,) in conn.execute("SELECT session FROM memctl_sessions WHERE written > %s", (since,)):
            changed[f"{SESSIONS_DIR}/{session}.jsonl"] = "".join(lines[session]).encode() if session in lines else None
    for path, data in conn.execute("SELECT path, data FROM memctl_files WHERE written > %s AND starts_with(path, %s)",
                                   (since, under + "/" if under else "")):
        changed[path] = bytes(data)
    return changed


def _present(conn, *, under: str = "") -> set[str]:
    """The paths of every file of the truth under `under` ("" all)."""
    present: set[str] = set()
    if under in ("", SESSIONS_DIR):
        present.update(f"{SESSIONS_DIR}/{session}.jsonl" for (session,) in conn.execute(
            "SELECT session FROM memctl_sessions s WHERE EXISTS (SELECT 1 FROM memctl_messages m "
            "WHERE m.session = s.session)"))
    present.update(path for (path,) in conn.execute("SELECT path FROM memctl_files WHERE starts_with(path, %s)",
                                                    (under + "/" if under else "",)))
    if not under:
        for name, table in ((MEMORY_MD, "memctl_notes"), (PENDING, "memctl_pending")):
            if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]:
                present.add(name)
    return present


def _stale(conn, names: list[str], *, since: int, there) -> list[str]:
    """Of the files `names`, those a transaction after `since` changed, made or removed (`there`:
    whether a name is a file of the folder now): a session's, the notes' and the pending notes'
    `written`, a file's kept whole; a file with none is gone, if it was there."""
    if not names:
        return []
    stamps: dict[str, int] = {}
    sessions = {name[len(SESSIONS_DIR) + 1:-6]: name for name in names
                if name.startswith(SESSIONS_DIR + "/") and name.count("/") == 1 and name.endswith(".jsonl")}
    if sessions:
        for session, written in conn.execute("SELECT session, written FROM memctl_sessions WHERE session = ANY(%s)",
                                             (sorted(sessions),)):
            stamps[sessions[session]] = written
    for path, written in conn.execute("SELECT path, written FROM memctl_files WHERE path = ANY(%s)", (names,)):
        stamps[path] = max(stamps.get(path, -1), written)
    if MEMORY_MD in names or PENDING in names:
        notes_at, pending_at = conn.execute("SELECT notes_written, pending_written FROM memctl_store").fetchone()
        stamps[MEMORY_MD], stamps[PENDING] = max(stamps.get(MEMORY_MD, -1), notes_at), max(stamps.get(PENDING, -1),
                                                                                          pending_at)
    return [name for name in names if (name in stamps and stamps[name] > since) or (name not in stamps and there(name))]


def _is_folder(conn, name: str) -> bool:
    """Whether `name` is a folder of the truth: sessions/, or a file kept whole lies under it."""
    return name in ("", SESSIONS_DIR) or conn.execute(
        "SELECT EXISTS (SELECT 1 FROM memctl_files WHERE starts_with(path, %s))", (name + "/",)).fetchone()[0]


def _turns_counted(conn) -> int:
    found = conn.execute("SELECT count FROM memctl_turns").fetchone()
    return found[0] if found else 0


def _file_of(conn, name: str) -> bytes | None:
    """One file of the truth as a folder store holds it (None: not there), from its rows."""
    if name == MEMORY_MD:
        rows = conn.execute("SELECT raw FROM memctl_notes ORDER BY seq").fetchall()
    elif name == PENDING:
        rows = conn.execute("SELECT line FROM memctl_pending ORDER BY seq").fetchall()
    elif name.startswith(SESSIONS_DIR + "/") and name.count("/") == 1 and name.endswith(".jsonl") and len(name) > 15:
        rows = conn.execute("SELECT line FROM memctl_messages WHERE session = %s ORDER BY seq",
                            (name[len(SESSIONS_DIR) + 1:-6],)).fetchall()
    else:
        rows = []
    if rows:
        return "".join(text for (text,) in rows).encode()
    found = conn.execute("SELECT data FROM memctl_files WHERE path = %s", (name,)).fetchone()  # kept whole
    return None if found is None else bytes(found[0])


def _private_folder(kind: str) -> Path:
    """A new private temporary folder of this process, memctl-KIND-PID-… (the Mirror's "pg", the
    settings' copy "settings"), removed at exit; the folders of either kind of processes no longer
    running are removed first (a kill skips the exit, and they hold the store's text)."""
    import atexit
    import shutil
    import tempfile

    parent = tempfile.gettempdir()
    try:
        with os.scandir(parent) as entries:
            for entry in entries:
                left = re.fullmatch(r"memctl-(?:pg|settings)-(\d+)-\w+", entry.name)
                if left and entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid():
                    try:
                        os.kill(int(left[1]), 0)
                    except ProcessLookupError:
                        shutil.rmtree(entry.path, ignore_errors=True)
                    except (OSError, OverflowError):
                        pass  # running, or not ours to ask about: left alone
    except OSError:
        pass
    folder = tempfile.mkdtemp(prefix=f"memctl-{kind}-{os.getpid()}-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder)


def _upgrade(conn, *, locked: bool = False) -> None:
    """Tables of an older format brought to this one (MIGRATIONS) under the write lock (`locked`:
    the caller holds it), so that a store an older memctl made is read and written as one made
    now; tables of a newer format are left for _check_format to refuse."""
    with conn.transaction():
        if not conn.execute("SELECT to_regclass('memctl_store') IS NOT NULL").fetchone()[0]:
            return
        made = conn.execute("SELECT format FROM memctl_store").fetchone()
        if made is None or made[0] >= FORMAT:
            return
        if conn.execute("SHOW transaction_read_only").fetchone()[0] == "on":
            raise StoreError(f"its tables are of format {made[0]}; this memctl reads format {FORMAT}, and a "
                             "read-only database is not upgraded: run a write of this memctl on the primary")
        if not locked:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            made = conn.execute("SELECT format FROM memctl_store").fetchone()  # another may have upgraded meanwhile
        for step in MIGRATIONS[made[0] - 1:]:
            conn.execute(step)
        conn.execute("UPDATE memctl_store SET format = %s", (FORMAT,))


class PostgresWrites:
    """seam.Writes on PostgreSQL: a path relative to the store (as a folder store names its file)
    goes to its kind's table; `conn` None writes nothing (a dry run of a store not made yet)."""

    def __init__(self, store: PostgresStore, conn, stamp: int = 0, *, mirrored: bool = False):
        """`stamp`: the `written` this transaction commits, kept on each session, file, the notes or
        the pending notes it changes; `mirrored`: also change the working folder, when it was read
        in this transaction (a dry run changes none)."""
        self.store = store
        self.conn = conn
        self.stamp = stamp
        self.mirrored = mirrored
        self.wrote_folder = False

    def append(self, path, data: bytes) -> None:
        """As a folder store's append: a JSON-lines file's torn last line (from a copy of a file a
        writer was killed in) is ended or cut first (store.mended)."""
        if not data or self.conn is None:
            return
        self._append(path, data)
        self._mirror(path)

    def _append(self, path, data: bytes) -> None:
        where = self._where(path)
        jsonl = self._name(path).endswith(".jsonl")
        if where == "files":
            old = self.conn.execute("SELECT data FROM memctl_files WHERE path = %s", (self._name(path),)).fetchone()
            if old is not None and jsonl and not bytes(old[0]).endswith(b"\n"):
                self._replace(path, mended(bytes(old[0])) + data)
                return
            self.conn.execute("INSERT INTO memctl_files (path, data, written) VALUES (%s, %s, %s) ON CONFLICT (path) "
                              "DO UPDATE SET data = memctl_files.data || excluded.data, written = excluded.written",
                              (self._name(path), data, self.stamp))
            self._source_changed(self._name(path))
            return
        self._unmark_empty(path)
        old = _file_of(self.conn, self._name(path)) or b""
        if where[0] == "notes":  # MEMORY.md's blocks depend on what precedes: parse the whole anew
            self._replace(path, old + data)
        elif old and not old.endswith(b"\n"):
            self._replace(path, mended(old) + data)
        else:
            self._insert_lines(where, data, start=self._next_seq(where))

    def replace(self, path, data: bytes) -> None:
        if self.conn is None:
            return
        self._replace(path, data)
        self._mirror(path)

    def _replace(self, path, data: bytes) -> None:
        where = self._where(path)
        self._delete(path)
        if where == "files":
            self.conn.execute("INSERT INTO memctl_files (path, data, written) VALUES (%s, %s, %s)",
                              (self._name(path), data, self.stamp))
            self._source_changed(self._name(path))
        elif where[0] == "notes":
            self._insert_notes(data)
        else:
            self._insert_lines(where, data, start=0)
        if where != "files" and not data:  # an empty file holds no row: kept whole, so it comes back
            self.conn.execute("INSERT INTO memctl_files (path, data, written) VALUES (%s, '', %s)",
                              (self._name(path), self.stamp))

    def delete(self, path) -> None:
        if self.conn is None:
            return
        self._delete(path)
        self._mirror(path)

    def _unmark_empty(self, path) -> None:
        """MEMORY.md, pending.jsonl or a session's file is no longer an empty file kept whole."""
        self.conn.execute("DELETE FROM memctl_files WHERE path = %s", (self._name(path),))

    def _delete(self, path) -> None:
        where = self._where(path)
        if where != "files":
            self._unmark_empty(path)
        if where == "files":
            self.conn.execute("DELETE FROM memctl_files WHERE path = %s", (self._name(path),))
            self._source_changed(self._name(path))
        elif where[0] == "notes":
            self.conn.execute("DELETE FROM memctl_notes")
            self.conn.execute("UPDATE memctl_store SET notes_written = %s, sources_written = %s", (self.stamp,) * 2)
        elif where[0] == "pending":
            self.conn.execute("DELETE FROM memctl_pending")
            self.conn.execute("UPDATE memctl_store SET pending_written = %s", (self.stamp,))
        else:
            self.conn.execute("DELETE FROM memctl_sessions WHERE session = %s", (where[1],))  # its lines cascade
            self._source_changed()

    def _source_changed(self, name: str | None = None) -> None:
        """Mark what the index is made of as changed (a session, or the file `name` if it is one of
        the index's sources: a topic or a daily log; MEMORY.md is marked with the notes)."""
        if name is None or re.fullmatch(r"topics/t-[^/]*\.jsonl|memory/\d{4}-\d{2}-\d{2}\.md", name):
            self.conn.execute("UPDATE memctl_store SET sources_written = %s", (self.stamp,))

    def _mirror(self, path) -> None:
        """The file at `path` in the working folder made what the database now holds for it, when the
        folder was read in this transaction (else it is brought up to date when next read). Its
        `synced` is cleared first: should the transaction not commit, the folder is read anew."""
        if not (self.mirrored and self.store._folder_read):
            return
        self.store._mirror.synced = None
        self.wrote_folder = True
        self.store._mirror.write(self.conn, self._name(path))

    # -- inside ----------------------------------------------------------------------------
    def _name(self, path) -> str:
        """A path relative to the store (a copy's source), or one in the working folder (a feature's,
        from the store's places): each part a checked name."""
        if PurePosixPath(path).is_absolute() and self.store._mirror is not None:
            folder = self.store._mirror.folder
            path = folder.relative(folder.confine(Path(path)))
        parts = PurePosixPath(path).parts
        if not parts or PurePosixPath(path).is_absolute():
            raise StoreError(f"{self.store.shown}: {path}: not a path inside a store")
        for part in parts:
            check_name(part, "file name", source=self.store.shown)
        return "/".join(parts)

    def _where(self, path):
        """("notes",), ("pending",), ("session", name) or "files"."""
        name = self._name(path)
        if name == MEMORY_MD:
            return ("notes",)
        if name == PENDING:
            return ("pending",)
        parts = name.split("/")
        if len(parts) == 2 and parts[0] == SESSIONS_DIR and parts[1].endswith(".jsonl") and len(parts[1]) > 6:
            return ("session", check_name(parts[1][:-6], "session", source=self.store.shown))
        return "files"

    def _next_seq(self, where) -> int:
        if where[0] == "pending":
            return self.conn.execute("SELECT coalesce(max(seq) + 1, 0) FROM memctl_pending").fetchone()[0]
        return self.conn.execute("SELECT coalesce(max(seq) + 1, 0) FROM memctl_messages WHERE session = %s",
                                 (where[1],)).fetchone()[0]

    def _text(self, data: bytes, what: str) -> str:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[:exc.start].count(b"\n") + 1
            raise StoreError(f"{self.store.shown}: {what}:{line}: not valid UTF-8; fix or remove that byte") from None
        if "\x00" in text:
            line = text[:text.index("\x00")].count("\n") + 1
            raise StoreError(f"{self.store.shown}: {what}:{line}: a NUL character, which no text column holds")
        return text

    def _insert_lines(self, where, data: bytes, *, start: int) -> None:
        what = PENDING if where[0] == "pending" else f"{SESSIONS_DIR}/{where[1]}.jsonl"
        lines = re.findall(r"[^\n]*\n|[^\n]+$", self._text(data, what))
        records = [_record(line) for line in lines]
        if where[0] == "pending":
            rows = [(start + n, None if record is None else record[0],
                     "global" if record is None else _pending_scope(record[1]), line)
                    for n, (line, record) in enumerate(zip(lines, records))]
            self.conn.cursor().executemany(
                "INSERT INTO memctl_pending (seq, id, scope, line) VALUES (%s, %s, %s, %s)", rows)
            self.conn.execute("UPDATE memctl_store SET pending_written = %s", (self.stamp,))
            return
        session = where[1]
        scopes = {message_scope(record[1]) for record in records if record is not None}
        stored = self.conn.execute("SELECT scope FROM memctl_sessions WHERE session = %s", (session,)).fetchone()
        if stored is not None:
            scopes.add(stored[0])
        if len(scopes) > 1:
            raise StoreError(f"{self.store.shown}: {what}: messages in scopes {', '.join(sorted(scopes))}; a session "
                             "is in one scope: correct its 'scope' fields")
        scope = next(iter(scopes), NO_SCOPE)
        if stored is None:
            self.conn.execute("INSERT INTO memctl_sessions (session, scope, written) VALUES (%s, %s, %s)",
                              (session, scope, self.stamp))
        else:
            self.conn.execute("UPDATE memctl_sessions SET written = %s WHERE session = %s", (self.stamp, session))
        self._source_changed()
        rows = [(session, start + n, None if record is None else record[0], scope, line)
                for n, (line, record) in enumerate(zip(lines, records))]
        self.conn.cursor().executemany(
            "INSERT INTO memctl_messages (session, seq, id, scope, line) VALUES (%s, %s, %s, %s, %s)", rows)

    def _insert_notes(self, data: bytes) -> None:
        document = memoryfile.parse(self._text(data, MEMORY_MD))
        rows = []
        for seq, block in enumerate(document.blocks):
            if isinstance(block, memoryfile.Entry):
                rows.append((seq, "entry", block.section, block.id, memoryfile.note_scope(block.fields), block.raw))
            elif isinstance(block, memoryfile.Heading):
                rows.append((seq, "heading", block.title, None, None, block.raw))
            else:
                rows.append((seq, "blank", None, None, None, block.raw))
        self.conn.cursor().executemany(
            "INSERT INTO memctl_notes (seq, kind, section, id, scope, raw) VALUES (%s, %s, %s, %s, %s, %s)", rows)
        self.conn.execute("UPDATE memctl_store SET notes_written = %s, sources_written = %s", (self.stamp,) * 2)


def _record(line: str) -> tuple[str, dict] | None:
    """(id, record) of a JSON-lines line that is a record with an id; None for any other line."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        return value["id"], value
    return None


def _pending_scope(item: dict) -> str:
    """A pending note's scope, as governance.review.pending_scope (above the store) reads it."""
    fields = item.get("fields")
    return memoryfile.note_scope(fields if isinstance(fields, dict) else {})
