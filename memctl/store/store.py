"""The store: a directory of plain files, and safe ways to change them.

Every change goes through a Transaction, which holds the store lock and keeps
an undo journal, so that an invocation is all or nothing even across several
files and even when the process is killed half-way: the next process to take
the lock, writer or reader, rolls the unfinished transaction back before it
does anything. Readers hold the lock shared, so they never see a write that
has not been acknowledged.

The journal is data an attacker may have written (a store can be copied,
unpacked or handed over), so it is never trusted: its paths are relative to
the store, and before anything is undone every entry is checked to name a
file inside this store (symlinks resolved). An invalid journal is reported,
never executed.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Collection, Iterator

import orjson

from memctl.errors import InputError, StoreError
from memctl.store import locking
from memctl.store.seam import Truth, Writes

DEFAULT_STORE = ".memory"
# the folders of a store's truth, as a folder store lays them out (and a PostgreSQL store's names)
MEMORY_MD, SESSIONS_DIR, DAILY_DIR, TOPICS_DIR = "MEMORY.md", "sessions", "memory", "topics"
STORE_ENV = "MEMCTL_STORE"
DIR_MODE = 0o700
FILE_MODE = 0o600

_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
# the folders the index is made of (with MEMORY.md), in source_names' order: the files a listing of
# each names (a pattern, and a name's own rule)
SOURCE_FOLDERS = ((SESSIONS_DIR, "*.jsonl", None), (TOPICS_DIR, "t-*.jsonl", None), (DAILY_DIR, "*.md", _DAY_FILE))
_JOURNAL_DIR = ".journal"
_JOURNAL_FILE = "journal.json"
_BACKUP_NAME = re.compile(r"^\d+\.bak$")
# What an id, a session, a scope or a tool may be called: also safe as a file name.
NAME = re.compile(r"[\w.:@+-]{1,128}")
NAME_RULE = "1-128 letters, digits or . _ : @ + -, not only dots"
# What a scope is called. Design 002 names global, project:<name> and lang:<name>; user:<name> is a
# person's (SPEC X3: conversations belong to a user or a project; design 003 keeps one session per
# Telegram user).
SCOPE = re.compile(r"global|(project|lang|user):\S+")
SCOPE_RULE = "global, project:<name>, lang:<name> or user:<name>"


def is_name(value) -> bool:
    """Whether `value` may become part of a path (check_name's test, for those that skip rather than refuse)."""
    return isinstance(value, str) and NAME.fullmatch(value) is not None and bool(value.strip("."))


def check_name(value, what: str, *, source: str | None = None, line: int | None = None) -> str:
    """The one test of a name that becomes part of a path (a session, a topic or message id,
    a cache scope, tool, key or entry id), wherever it came from: an argument, an MCP call,
    an LLM answer or a store file. Store.path() applies it to every part it is given."""
    if not is_name(value):
        shown = value if isinstance(value, str) else type(value).__name__
        # with no file to name, the name came from an argument: --session, --scope, ...
        raise InputError(f"must be {NAME_RULE}, got {shown!r:.80}", source=source or f"--{what}", line=line,
                         field=what)
    return value


class NotRegularFile(StoreError):
    """A file memctl will not open (open_file): not a regular file, or one of several hard links
    to write through. `path` is the file as it was given."""

    def __init__(self, path, what: str):
        self.path = Path(path)
        self.what = what
        super().__init__(f"{path}: {what}")

    @classmethod
    def of_kind(cls, path, mode: int) -> "NotRegularFile":
        """The refusal of a file whose st_mode is `mode`: a FIFO, a socket, a device, a folder."""
        kinds = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                 (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))
        name = next((name for test, name in kinds if test(mode)), "a file of no kind memctl knows")
        return cls(path, f"{name}, not a regular file; memctl opens only regular files (README: Trust): "
                         "remove it, or put a regular file there")

    @classmethod
    def of_links(cls, path, links: int) -> "NotRegularFile":
        return cls(path, f"a file of {links} hard links; memctl writes through none, as another name may lie "
                         "outside the store (README: Trust): make it a file of its own "
                         "(cp FILE FILE.own && mv FILE.own FILE)")


_WRITING = os.O_WRONLY | os.O_RDWR


def open_file(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """The one way memctl opens a file of a store (and its own settings): a descriptor of a regular
    file, opened through no symbolic link, without waiting, and, when it may write in place, of a
    file with no other name. Anything else is NotRegularFile naming it in one line; a file that
    is not there raises FileNotFoundError, as os.open does.

    A FIFO planted in a store made every command, `health check` included, wait forever for a
    writer at its open (and a resident server's search 10 minutes): O_NONBLOCK opens it at once
    (for reading; for writing it fails, ENXIO) and fstat says what it is. A hard link to a file
    outside the store carried appends there (#31): an append, a truncation or a write in place
    goes through a file of one link only. Replacing a file (atomic_write) makes a new one and
    never writes through the old."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.ELOOP, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):
            raise
        try:
            kind = os.lstat(path).st_mode
        except OSError:
            raise exc from None
        raise NotRegularFile.of_kind(path, kind) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile.of_kind(path, info.st_mode)
        if flags & _WRITING and info.st_nlink > 1:
            raise NotRegularFile.of_links(path, info.st_nlink)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(path: str | os.PathLike) -> bytes:
    """A whole file's bytes, opened as open_file opens it (FileNotFoundError if it is not there)."""
    with open(open_file(path), "rb", closefd=True) as file:
        return file.read()


def is_scope(value) -> bool:
    """Whether `value` names a scope (check_scope's test, for a stored field that is reported, not refused)."""
    return isinstance(value, str) and SCOPE.fullmatch(value) is not None


def check_scope(value, *, source: str = "--scope", line: int | None = None) -> str | None:
    """The one test of a scope a caller gives (--scope, an MCP call's scope, a --batch line's);
    None, no scope, passes."""
    if value is not None and not is_scope(value):
        shown = value if isinstance(value, str) else type(value).__name__
        raise InputError(f"must be {SCOPE_RULE}, got {shown!r:.80}", source=source, line=line, field="scope")
    return value


class Store(Truth):
    """A memory store rooted at a directory; knows where every file lives."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    is_folder = True

    @property
    def shown(self) -> str:
        """The store as messages and `status` name it."""
        return str(self.root)

    def named(self, message: str) -> str:
        """A message as a person reads it (PostgresStore names its working folder by its URL)."""
        return message

    @property
    def name_to_keep(self) -> str:
        """What a client's settings name the store by (hooks and MCP installers): its folder."""
        return os.path.abspath(self.root)

    @classmethod
    def locate(cls, path: str | os.PathLike | None = None) -> "Store":
        """The store named by `path`, else $MEMCTL_STORE, else ./.memory (a folder; memctl.api.open_store
        opens a URL too)."""
        return cls(path or os.environ.get(STORE_ENV) or DEFAULT_STORE)

    # -- layout (SPEC section 0) -------------------------------------------
    # Every file and folder of the store is reached through path(): nothing of a store,
    # however it was made, leads outside it.
    def path(self, *parts: str) -> Path:
        """The store's file or folder at root/part/part/...: each part a checked name
        (check_name), and no part on the way a symbolic link (confine)."""
        for part in parts:
            check_name(part, "file name", source=str(self.root))
        return self.confine(self.root.joinpath(*parts))

    def located(self, name: str) -> Path:
        """The file or folder at `name`, a path relative to the root as a listing or the index writes
        it: confined, each part not checked as a name (a listing shows a file made by hand as it is)."""
        return self.confine(self.root.joinpath(*name.split("/")))

    def confine(self, path: Path) -> Path:
        """`path` if it lies under the root and nothing between the root and it is a
        symbolic link; else StoreError naming the link. The root itself may be a link
        (where the user keeps the store is theirs to say); inside it memctl follows none,
        so every name resolves inside the store's real path."""
        root = Path(os.path.abspath(self.root))
        try:
            relative = Path(os.path.abspath(path)).relative_to(root)
        except ValueError:
            raise StoreError(f"{path}: not a file of the store at {self.root}") from None
        current = root
        for part in relative.parts:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except (FileNotFoundError, NotADirectoryError):
                break  # what does not exist yet is not a link
            if stat.S_ISLNK(mode):
                raise StoreError(f"{current}: a symbolic link inside the store; memctl follows none "
                                 "(README: Trust): replace it with the real folder or file")
        return path

    def listing(self, folder: Path, pattern: str) -> list[Path]:
        """The files of a store folder matching `pattern`, sorted; none if the folder is not
        there. A link among them (or the folder one) is refused as path() refuses it."""
        return [folder / name for name in self._names(folder, pattern)]

    def _names(self, folder: Path, pattern: str) -> list[str]:
        """listing()'s file names."""
        self.confine(folder)
        # One scandir, each entry's kind from the directory itself: Path.glob and a confine()
        # (abspath, relative_to, an lstat a part) per file cost a warm search 3 ms of its ~20 in
        # a 130-file store (bench/README.md "Cited measurements"). As glob, a pattern not starting with
        # "." skips hidden names.
        found = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if fnmatch.fnmatchcase(entry.name, pattern) and (
                            pattern.startswith(".") or not entry.name.startswith(".")):
                        if entry.is_symlink():
                            self.confine(folder / entry.name)  # refused, the link named
                        found.append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found)

    @property
    def memory_md(self) -> Path:
        return self.path(MEMORY_MD)

    @property
    def daily_dir(self) -> Path:
        return self.path(DAILY_DIR)

    @property
    def sessions_dir(self) -> Path:
        return self.path(SESSIONS_DIR)

    @property
    def topics_dir(self) -> Path:
        return self.path(TOPICS_DIR)

    @property
    def pending_file(self) -> Path:
        return self.path("pending.jsonl")

    @property
    def state_file(self) -> Path:
        return self.path("index_state.json")

    @property
    def config_file(self) -> Path:
        return self.path("memctl.toml")

    @property
    def index_dir(self) -> Path:
        return self.path(".index")

    def daily_log(self, day: str) -> Path:
        return self.path(DAILY_DIR, f"{day}.md")

    def session_file(self, session: str) -> Path:
        check_name(session, "session")
        return self.path(SESSIONS_DIR, f"{session}.jsonl")

    def daily_logs(self) -> list[Path]:
        return [p for p in self.listing(self.daily_dir, "*.md") if _DAY_FILE.match(p.name)]

    def sessions_with(self, ids: Collection[str]) -> list[Path]:
        """The session files that may hold a message of `ids`: a folder cannot tell without
        reading them, so every one."""
        return self.listing(self.sessions_dir, "*.jsonl")

    def source_files(self) -> list[Path]:
        """The files the index is built from: their sizes and times tell when to re-index."""
        files = [self.memory_md] if self.memory_md.exists() else []
        files += self.listing(self.sessions_dir, "*.jsonl")
        files += self.listing(self.topics_dir, "t-*.jsonl")
        return files + self.daily_logs()

    def source_names(self) -> list[str]:
        """source_files() as relative() writes them, without a Path made for each: the index's
        freshness check stamps every one before every search (a 50k store: ~800 files, whose
        Paths cost ~2 ms; bench/README.md "Cited measurements"). The list is kept while the store's
        folders stay as they
        were (_LISTED): a resident server's listing of 945 files cost 1.2 ms a search."""
        root = os.path.abspath(self.root)
        listed_at = time.time_ns()
        folders = _folder_stamps(root)
        names = _LISTED.get(root, folders)
        if names is None:
            names = self._source_names()
            if folders is not None:
                _LISTED.keep(root, folders, names, [stamp[-1] for stamp in folders if stamp is not None], listed_at)
        return list(names)

    def _source_names(self) -> list[str]:
        names = [MEMORY_MD] if self.memory_md.exists() else []
        for folder, pattern, wanted in SOURCE_FOLDERS:
            names += [f"{folder}/{name}" for name in self._names(self.path(folder), pattern)
                      if wanted is None or wanted.match(name)]
        return names

    def relative(self, path: Path) -> str:
        """A path as users see it in output: relative to the store root."""
        # A string's prefix first: pathlib's relative_to cost a 50k store's freshness check (a
        # stamp for each of ~800 files, every search) 15 ms (bench/README.md "Cited measurements").
        text, root = str(path), str(self.root)
        if os.sep == "/" and text.startswith(root + "/") and root not in ("", "."):
            return text[len(root) + 1:]
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def exists(self) -> bool:
        return self.root.is_dir()

    def settle_forgotten(self) -> None:
        """Nothing: a forget writes each file that held what it took out anew, and the index too
        (Index.scrub); no other copy of a text is kept."""

    def written_stamp(self) -> tuple[int, int] | None:
        """The root folder's inode and change time: it moves whenever a write transaction commits
        (its journal folder is made and removed there), and when a file is made or removed at the
        root; not when a file is edited in place. None when there is no store."""
        try:
            info = os.stat(self.root)
        except OSError:
            return None
        return info.st_ino, info.st_mtime_ns

    def require(self) -> None:
        """A read command on a store that isn't there is an error, not "nothing found"."""
        if not self.exists():
            raise StoreError(f"no store at {self.root}")

    # -- locking and transactions ------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's exclusive lock; repairs an unfinished transaction."""
        _make_dirs(self.root)
        fd = open_file(self.path(".lock"), os.O_RDWR | os.O_CREAT)
        try:
            locking.flock(fd, locking.LOCK_EX)
            self._recover()
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    @contextmanager
    def reading(self, *, recover: bool = True) -> Iterator[None]:
        """Hold the lock shared while reading: a writer under way is waited for.

        A writer that died left a journal and released its lock; its half
        batch is still in the files, so a reader rolls it back first (taking
        the lock exclusively for that moment), unless `recover` is off (a
        check that reports the journal instead). Writes nothing else, and
        creates nothing in a store memctl never wrote to.
        """
        try:
            fd = open_file(self.path(".lock"))
        except FileNotFoundError:
            yield  # no memctl writer ever took the lock here: nothing to wait for
            return
        try:
            locking.flock(fd, locking.LOCK_SH)
            if recover and (self.root / _JOURNAL_DIR).exists():
                locking.flock(fd, locking.LOCK_EX)  # not atomic: re-check the journal under the lock
                try:
                    self._recover()
                except StoreError as exc:
                    # A journal nobody can undo must not lock every reader out of their memory:
                    # read on, and say once what to remove (writers still refuse).
                    print(f"memctl: warning: {exc}", file=sys.stderr)
                locking.flock(fd, locking.LOCK_SH)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def transaction(self, *, dry_run: bool = False) -> Iterator["Transaction"]:
        """Lock the store and give a Transaction; commit on success, undo on error.

        With dry_run the Transaction writes nothing, so a command can go
        through all its steps and report what it would have changed.
        """
        if dry_run and not self.exists():  # nothing to lock, nothing to create
            yield DryRun(self)
            return
        with self.lock():
            tx = DryRun(self) if dry_run else Transaction(self)
            try:
                yield tx
            except BaseException:
                tx.rollback()
                raise
            tx.commit()

    def _recover(self) -> None:
        journal_dir = self.root / _JOURNAL_DIR
        if journal_dir.exists():
            Transaction(self, resume=True).rollback()

    def inside(self, path: Path) -> bool:
        """Whether a path, every symlink resolved, is a file of this store (not its journal or lock)."""
        root = os.path.realpath(self.root)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root or real == root:
            return False
        first = Path(os.path.relpath(real, root)).parts[0]
        return first not in (_JOURNAL_DIR, ".lock")


class Transaction(Writes):
    """Changes to store files that land together or not at all.

    Before each change the journal records how to undo it: the old size of a
    file that is appended to, or a hard link to the old version of a file that
    is replaced. Removing the journal is the commit point.

    The journal file is `{"store": <root when written>, "ops": [...]}`; each
    op's path is relative to the store root and a backup is a file name in
    the journal folder, so a moved or copied store undoes its own files.
    """

    def __init__(self, store: Store, *, resume: bool = False):
        self.store = store
        self.dir = store.path(_JOURNAL_DIR)
        self.ops: list[dict] = []
        self._seen: set[str] = set()
        if resume:
            self.ops = load_journal(store)

    def append(self, path: Path, data: bytes) -> None:
        """Append bytes to a file (created if missing), durably.

        A JSON-lines file whose last line has no newline (a writer killed mid-line, a hand
        edit) is mended first, or the new lines would follow it on the same line and the
        torn line would sit mid-file where every reader refuses it: a last line that parses
        gets its newline, one that does not is cut, and the file is replaced atomically."""
        if not data:
            return
        if path.suffix == ".jsonl":
            mended = mended_tail(path)
            if mended is not None:
                cut = path.stat().st_size - len(mended)
                if cut > 0:
                    print(f"memctl: warning: {path}: cut a torn last line ({cut} bytes) before appending",
                          file=sys.stderr)
                self.replace(path, mended + data)
                return
        key = self._key(path)
        # Never through a link (symbolic or hard) that may lead a write outside the store (open_file),
        # refused before the journal names the file: its undo would be refused as well.
        try:
            fd = open_file(path, os.O_WRONLY | os.O_APPEND)
        except (FileNotFoundError, NotADirectoryError):
            fd = None
        try:
            if key not in self._seen:
                self._record({"op": "append", "path": key, "size": os.fstat(fd).st_size if fd is not None else -1})
            if fd is None:
                _make_dirs(path.parent)
                fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            if fd is not None:
                os.close(fd)

    def replace(self, path: Path, data: bytes) -> None:
        """Replace a file's whole content atomically (temp file, fsync, rename)."""
        self._backup(path)
        _make_dirs(path.parent)
        atomic_write(path, data)

    def delete(self, path: Path) -> None:
        """Remove a file; undone by restoring it if the transaction fails."""
        if not path.exists():
            return
        self._backup(path)
        path.unlink()
        _fsync_dir(path.parent)

    def _backup(self, path: Path) -> None:
        key = self._key(path)
        if key in self._seen:
            return
        backup = None
        if path.exists():
            _make_dirs(self.dir)
            backup = f"{len(self.ops)}.bak"
            os.link(path, self.dir / backup)
        self._record({"op": "replace", "path": key, "backup": backup})

    def _key(self, path: Path) -> str:
        """A path as the journal names it: relative to the store root, never outside it,
        and never through a symbolic link (Store.confine)."""
        self.store.confine(path)
        return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(self.store.root))).as_posix()

    def _record(self, op: dict) -> None:
        self._seen.add(op["path"])
        self.ops.append(op)
        _make_dirs(self.dir)
        journal = {"store": os.path.realpath(self.store.root), "ops": self.ops}
        atomic_write(self.dir / _JOURNAL_FILE, orjson.dumps(journal))

    def commit(self) -> None:
        if self.dir.exists():
            (self.dir / _JOURNAL_FILE).unlink(missing_ok=True)
            _fsync_dir(self.dir)
            import shutil  # here: shutil loads bz2 and lzma, and most commands never commit (a cache hit)

            shutil.rmtree(self.dir)
            _fsync_dir(self.store.root)
        self.ops = []

    def rollback(self) -> None:
        """Undo every recorded change, newest first (ops were checked by load_journal).

        A change that cannot be undone (its folder replaced by a file, a disk that
        refuses) stops the rollback with one line saying what to remove: the journal
        stays, writers refuse until a person looks, and readers go on (Store.reading)."""
        for op in reversed(self.ops):
            path = self.store.root / op["path"]
            try:
                if op["op"] == "append":
                    if op["size"] < 0:
                        _unlink_if_there(path)
                    else:
                        _truncate(path, op["size"])
                elif op["backup"]:
                    os.replace(self.dir / op["backup"], path)
                    _fsync_dir(path.parent)
                else:
                    _unlink_if_there(path)
            except (OSError, NotRegularFile) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise StoreError(f"{self.dir}: an unfinished change to {op['path']} cannot be undone "
                                 f"({why}); check that file, then remove {self.dir}") from None
        self.commit()


def bytes_under(folder: str | os.PathLike, *, leave_out: str = "") -> int:
    """Bytes of every file under `folder` (links not followed), but those under a subfolder named
    `leave_out`: what `memctl status` reports."""
    total = 0
    for place, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if name != leave_out]
        for name in files:
            try:
                total += os.lstat(os.path.join(place, name)).st_size
            except FileNotFoundError:
                continue  # removed meanwhile
    return total


def mended_tail(path: Path) -> bytes | None:
    """The content of a JSON-lines file with its unterminated last line ended or cut; None if it is whole."""
    try:
        fd = open_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return None
        data = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    return mended(data)


def mended(data: bytes) -> bytes:
    """JSON lines whose unterminated last line is ended (it parses) or cut (it does not), as an
    append finds them before it adds its own lines (a PostgreSQL store's too)."""
    if not data or data.endswith(b"\n"):
        return data
    keep = data.rfind(b"\n") + 1
    try:
        orjson.loads(data[keep:])
        return data + b"\n"
    except orjson.JSONDecodeError:
        return data[:keep]


def _unlink_if_there(path: Path) -> None:
    """Remove a file the transaction created; where its folder is not one, it cannot be there."""
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        pass


class DryRun(Transaction):
    """A Transaction that records nothing and writes nothing."""

    def append(self, path: Path, data: bytes) -> None:
        pass

    def replace(self, path: Path, data: bytes) -> None:
        pass

    def delete(self, path: Path) -> None:
        pass


def load_journal(store: Store) -> list[dict]:
    """The ops of an unfinished transaction, each checked to touch only this store.

    Raises StoreError naming the journal and the first bad entry; then nothing
    is undone, since undoing a journal nobody can trust could destroy data.
    """
    journal = store.root / _JOURNAL_DIR / _JOURNAL_FILE
    advice = f"nothing was rolled back; inspect it, then remove {journal.parent}"
    try:
        data = orjson.loads(read_file(journal))
    except FileNotFoundError:
        return []  # killed before the first record: nothing was changed
    except orjson.JSONDecodeError as exc:  # torn journal: written atomically, so only by hand
        raise StoreError(f"{journal}: unreadable journal ({exc}); {advice}") from exc
    ops = data.get("ops") if isinstance(data, dict) else None
    if not isinstance(ops, list):
        raise StoreError(f"{journal}: invalid journal: expected an object with an 'ops' list; {advice}")
    for number, op in enumerate(ops, 1):
        problem = _journal_op_problem(store, op)
        if problem:
            raise StoreError(f"{journal}: invalid journal: entry {number}: {problem}; {advice}")
    return ops


def _journal_op_problem(store: Store, op) -> str | None:
    """Why an op of a journal may not be executed, or None."""
    if not isinstance(op, dict):
        return "not an object"
    path = op.get("path")
    if not isinstance(path, str) or not path:
        return "'path' missing or not a string"
    if os.path.isabs(path) or ".." in Path(path).parts:
        return f"path '{path}' is not relative to the store"
    if not store.inside(store.root / path):
        return f"path '{path}' leads outside the store"
    if op.get("op") == "append":
        size = op.get("size")
        if type(size) is not int or size < -1:
            return "'size' is not a whole number >= -1"
    elif op.get("op") == "replace":
        backup = op.get("backup")
        if backup is not None and not (isinstance(backup, str) and _BACKUP_NAME.match(backup)):
            return f"backup '{backup}' is not a backup file of the journal"
    else:
        return f"unknown op {op.get('op')!r}"
    return None


def _truncate(path: Path, size: int) -> None:
    """Cut a file back to its old size; never follows a symlink."""
    try:
        fd = open_file(path, os.O_WRONLY)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, lasting: bool = True) -> None:
    """Write a whole file so that readers see the old or the new, never a mix; `lasting`: the
    new name also outlives a power cut (its directory synced), not only a crash of the process."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if lasting:
        _fsync_dir(path.parent)


def _make_dirs(path: Path) -> None:
    if path.is_dir():
        return
    _make_dirs(path.parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return
    _fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


RACY_NS = 100_000_000  # well over a tick of the file system's clock (1-10 ms)


class KeptWhileUnchanged:
    """What was read from files, kept while their stamp (inodes, sizes, change times) stays as it
    was when they were read: a long-lived process (the resident server) reads them before every
    call. A change time moves with every change, but on a clock of coarse ticks, so a change in
    the tick of the reading could leave it as it was: a value is kept only if every change time
    in its stamp is RACY_NS older than the reading's start (as git's "racily clean" entries), so
    that any later change moves the stamp."""

    def __init__(self, most: int = 16):
        self._kept: dict = {}  # key -> (stamp, value)
        self._most = most

    def get(self, key, stamp):
        """The value kept for `key` under this very stamp, else None."""
        kept = self._kept.get(key)
        return kept[1] if kept is not None and kept[0] == stamp else None

    def keep(self, key, stamp, value, changed_ns: list[int], read_at_ns: int) -> None:
        """Keep `value`, read from what `stamp` stamps (whose change times are `changed_ns`) by a
        reading that began at `read_at_ns`; the caller must not change it afterwards."""
        if all(changed < read_at_ns - RACY_NS for changed in changed_ns):
            if len(self._kept) >= self._most:
                self._kept.clear()
            self._kept[key] = (stamp, value)


# source_names() of the stores a process has listed (a resident server: its one store), by the
# abspath of the root, kept while the root and its source folders stay as they were.
_LISTED = KeptWhileUnchanged()


def _folder_stamps(root: str) -> tuple | None:
    """(device, inode, mode, change time) of the root and of each folder source_names() lists (None
    for one that is not there); None when one is a link, which the listing refuses every time."""
    stamps = []
    for at, name in enumerate(("", *(folder for folder, _, _ in SOURCE_FOLDERS))):
        try:
            info = os.stat(root) if at == 0 else os.lstat(os.path.join(root, name))
        except (FileNotFoundError, NotADirectoryError):
            stamps.append(None)
            continue
        if stat.S_ISLNK(info.st_mode):
            return None
        stamps.append((info.st_dev, info.st_ino, info.st_mode, info.st_ctime_ns))
    return tuple(stamps)
