"""A store on PostgreSQL, named by a URL (`--store postgresql://user@host:5432/db`; #35, X7).

The truth of a store in tables, with a scope column on every record (docs/design.md "A store on
PostgreSQL"):

    memctl_sessions  one row a session: its one scope
    memctl_messages  one row a line of sessions/<session>.jsonl: id (unique in the store), scope
    memctl_notes     one row a block of MEMORY.md (a heading, an entry, blank lines): id, scope
    memctl_pending   one row a line of pending.jsonl: id, scope
    memctl_files     every other file of the truth (daily logs, topics, the window's state, the
                     governance log, the settings, ...), whole, until its kind gets a table
    memctl_store     the format, and `written`, which moves with every committed write

Each row keeps its line's or block's exact text, so a store read back as files is the files that
went in, byte for byte (`memctl store copy`). The folder's lock and undo journal become a
transaction: a write takes a transaction-scoped advisory lock (one writer at a time, as the
folder's flock; released by the server when the writer's connection dies, so a killed writer
neither leaves the store locked nor anything half written) and a read is one REPEATABLE READ
snapshot (no half write is ever seen). Ids stay unique under any number of writers on any
number of machines because the database refuses a second row with the same id.

The features still reach the truth by its place (a path, seam.Places): on this store every place
but the settings' file (config_file: a private copy of its memctl.toml) is NotOnPostgres, so every
command that would read or write by place stops with one line and exit 2 instead of running on
something else. Its index lives in the same database (index/postgres.py). The URL's password
never appears in a message: `shown` is what every message names.

psycopg is imported by the first connection only: a folder store never loads it.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

import orjson

from memctl.errors import MemctlError, StoreError
from memctl.store import memoryfile
from memctl.store.sessions import message_scope
from memctl.store.store import check_name, mended

FORMAT = 1
NO_SCOPE = "none"  # the scope of a session holding no message (only torn or hand-made lines): no scope's
# One writer at a time: the key of the advisory lock every write transaction takes ("memctl" in ASCII).
WRITE_LOCK = 0x6D656D63746C
MEMORY_MD = "MEMORY.md"
PENDING = "pending.jsonl"
CONFIG = "memctl.toml"
SESSIONS = "sessions"

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
TABLES = ("memctl_messages", "memctl_sessions", "memctl_notes", "memctl_pending", "memctl_files")


class NotOnPostgres(MemctlError):
    """What the features cannot do yet on a store named by a URL: exit 2, one line."""

    def __init__(self, shown: str, what: str = "this command"):
        super().__init__(f"{shown}: {what} is not yet on PostgreSQL (#35); `memctl store copy {shown} DIR` "
                         "gives the store as a folder, which every command runs on")


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
        self._settings_folder: Path | None = None  # config_file's

    def __repr__(self) -> str:
        return f"PostgresStore({self.shown!r})"

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
        return self._connection

    def hidden(self, exc: BaseException) -> str:
        """An error's first line with the password (should a driver ever name it) taken out."""
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        password = _password(self.url)
        return text.replace(password, "***") if password else text

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    @contextmanager
    def _in_transaction(self, *, write: bool) -> Iterator:
        """The connection in a transaction: a write one under the write lock, or a read-only snapshot.
        Inside one already open (a read within `reading()`, a write within `transaction()`), that one."""
        import psycopg

        conn = self._connect()
        if self._open:
            yield conn
            return
        self._open = True
        try:
            with conn.transaction():
                if write:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                else:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn
        except psycopg.IntegrityError as exc:
            detail = exc.diag.message_detail or self.hidden(exc)
            raise StoreError(f"{self.shown}: refused: {detail}") from None
        except psycopg.Error as exc:
            if conn.broken:
                self._connection = None
            raise StoreError(f"{self.shown}: {self.hidden(exc)}") from None
        finally:
            self._open = False

    # -- Locked (seam.py) ----------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """The store's write lock, for as long as one transaction."""
        with self._in_transaction(write=True):
            yield

    @contextmanager
    def reading(self, *, recover: bool = True) -> Iterator[None]:
        """One snapshot for the whole read (nothing to recover: an unfinished transaction left nothing)."""
        with self._in_transaction(write=False):
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
                    # made by the first writer (under the lock: two first writers make it once)
                    conn.execute(SCHEMA)  # no parameters: several statements go as one simple query
                    conn.execute("INSERT INTO memctl_store (format) VALUES (%s)", (FORMAT,))
                self._check_format(conn)
                writes = PostgresWrites(self, conn)
                yield writes
                conn.execute("UPDATE memctl_store SET written = written + 1")
                if dry_run:
                    raise psycopg.Rollback()
        except psycopg.Rollback:
            pass

    def _check_format(self, conn) -> None:
        """Tables laid out by a newer memctl are neither read nor written: this one could misread them."""
        made = conn.execute("SELECT format FROM memctl_store").fetchone()
        if made is None or made[0] != FORMAT:
            found = "no format row" if made is None else f"format {made[0]}"
            raise StoreError(f"{self.shown}: its tables are of {found}; this memctl reads format {FORMAT} "
                             "(a newer memctl made them: upgrade memctl)")

    def written_stamp(self) -> int | None:
        if not self.exists():
            return None
        with self._in_transaction(write=False) as conn:
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
        found: dict[str, bytes] = {}
        if not self.exists():
            return found
        with self._in_transaction(write=False) as conn:
            self._check_format(conn)
            notes = conn.execute("SELECT raw FROM memctl_notes ORDER BY seq").fetchall()
            if notes:
                found[MEMORY_MD] = "".join(raw for (raw,) in notes).encode()
            sessions: dict[str, list[str]] = {}
            for session, line in conn.execute("SELECT session, line FROM memctl_messages ORDER BY session, seq"):
                sessions.setdefault(session, []).append(line)
            for session, lines in sessions.items():
                found[f"{SESSIONS}/{session}.jsonl"] = "".join(lines).encode()
            pending = conn.execute("SELECT line FROM memctl_pending ORDER BY seq").fetchall()
            if pending:
                found[PENDING] = "".join(line for (line,) in pending).encode()
            for path, data in conn.execute("SELECT path, data FROM memctl_files ORDER BY path"):
                found[path] = bytes(data)
        return dict(sorted(found.items()))

    @property
    def config_file(self) -> Path:
        """The store's settings as a file config.load reads: its memctl.toml (kept whole in
        memctl_files) copied into a private folder of this process, read once per PostgresStore
        (a Memory reads its settings once); a path that does not exist when the store has none."""
        if self._settings_folder is None:
            import atexit
            import shutil
            import tempfile

            folder = Path(tempfile.mkdtemp(prefix="memctl-settings-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            data = None
            if self.exists():
                with self._in_transaction(write=False) as conn:
                    found = conn.execute("SELECT data FROM memctl_files WHERE path = %s", (CONFIG,)).fetchone()
                    data = bytes(found[0]) if found else None
            if data is not None:
                (folder / CONFIG).write_bytes(data)
            self._settings_folder = folder
        return self._settings_folder / CONFIG

    # -- Places and Names (seam.py): the features' ways by path, not yet here -----------------------
    def _by_place(self, what: str):
        raise NotOnPostgres(self.shown, f"reading or writing {what} by its place")

    root = property(lambda self: self._by_place("the store's folder"))
    memory_md = property(lambda self: self._by_place(MEMORY_MD))
    daily_dir = property(lambda self: self._by_place("the daily logs"))
    sessions_dir = property(lambda self: self._by_place("the sessions"))
    topics_dir = property(lambda self: self._by_place("the topics"))
    pending_file = property(lambda self: self._by_place(PENDING))
    state_file = property(lambda self: self._by_place("index_state.json"))
    index_dir = property(lambda self: self._by_place("the index"))

    def session_file(self, session: str):
        self._by_place("a session's file")

    def daily_log(self, day: str):
        self._by_place("a daily log")

    def daily_logs(self):
        self._by_place("the daily logs")

    def path(self, *parts: str):
        self._by_place("/".join(parts) or "the store's folder")

    def confine(self, path):
        self._by_place(str(path))

    def inside(self, path):
        self._by_place(str(path))

    def relative(self, path):
        self._by_place(str(path))

    def listing(self, folder, pattern: str):
        self._by_place(str(folder))

    def source_names(self):
        self._by_place("the index's sources")

    def source_files(self):
        self._by_place("the index's sources")


class PostgresWrites:
    """seam.Writes on PostgreSQL: a path relative to the store (as a folder store names its file)
    goes to its kind's table; `conn` None writes nothing (a dry run of a store not made yet)."""

    def __init__(self, store: PostgresStore, conn):
        self.store = store
        self.conn = conn

    def append(self, path, data: bytes) -> None:
        """As a folder store's append: a JSON-lines file's torn last line (from a copy of a file a
        writer was killed in) is ended or cut first (store.mended)."""
        if not data or self.conn is None:
            return
        where = self._where(path)
        jsonl = self._name(path).endswith(".jsonl")
        if where == "files":
            old = self.conn.execute("SELECT data FROM memctl_files WHERE path = %s", (self._name(path),)).fetchone()
            if old is not None and jsonl and not bytes(old[0]).endswith(b"\n"):
                self.replace(path, mended(bytes(old[0])) + data)
                return
            self.conn.execute("INSERT INTO memctl_files (path, data) VALUES (%s, %s) ON CONFLICT (path) "
                              "DO UPDATE SET data = memctl_files.data || excluded.data", (self._name(path), data))
            return
        old = self._read(where)
        if where[0] == "notes":  # MEMORY.md's blocks depend on what precedes: parse the whole anew
            self.replace(path, old + data)
        elif old and not old.endswith(b"\n"):
            self.replace(path, mended(old) + data)
        else:
            self._insert_lines(where, data, start=self._next_seq(where))

    def replace(self, path, data: bytes) -> None:
        if self.conn is None:
            return
        where = self._where(path)
        self.delete(path)
        if where == "files":
            self.conn.execute("INSERT INTO memctl_files (path, data) VALUES (%s, %s)", (self._name(path), data))
        elif where[0] == "notes":
            self._insert_notes(data)
        else:
            self._insert_lines(where, data, start=0)

    def delete(self, path) -> None:
        if self.conn is None:
            return
        where = self._where(path)
        if where == "files":
            self.conn.execute("DELETE FROM memctl_files WHERE path = %s", (self._name(path),))
        elif where[0] == "notes":
            self.conn.execute("DELETE FROM memctl_notes")
        elif where[0] == "pending":
            self.conn.execute("DELETE FROM memctl_pending")
        else:
            self.conn.execute("DELETE FROM memctl_sessions WHERE session = %s", (where[1],))  # its lines cascade

    # -- inside ----------------------------------------------------------------------------
    def _name(self, path) -> str:
        """A relative path from outside (a store file, a copy's source): each part a checked name."""
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
        if len(parts) == 2 and parts[0] == SESSIONS and parts[1].endswith(".jsonl") and len(parts[1]) > 6:
            return ("session", check_name(parts[1][:-6], "session", source=self.store.shown))
        return "files"

    def _read(self, where) -> bytes:
        if where[0] == "notes":
            rows = self.conn.execute("SELECT raw FROM memctl_notes ORDER BY seq").fetchall()
        elif where[0] == "pending":
            rows = self.conn.execute("SELECT line FROM memctl_pending ORDER BY seq").fetchall()
        else:
            rows = self.conn.execute("SELECT line FROM memctl_messages WHERE session = %s ORDER BY seq",
                                     (where[1],)).fetchall()
        return "".join(text for (text,) in rows).encode()

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
        what = PENDING if where[0] == "pending" else f"{SESSIONS}/{where[1]}.jsonl"
        lines = re.findall(r"[^\n]*\n|[^\n]+$", self._text(data, what))
        records = [_record(line) for line in lines]
        if where[0] == "pending":
            rows = [(start + n, None if record is None else record[0],
                     "global" if record is None else _pending_scope(record[1]), line)
                    for n, (line, record) in enumerate(zip(lines, records))]
            self.conn.cursor().executemany(
                "INSERT INTO memctl_pending (seq, id, scope, line) VALUES (%s, %s, %s, %s)", rows)
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
            self.conn.execute("INSERT INTO memctl_sessions (session, scope) VALUES (%s, %s)", (session, scope))
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
