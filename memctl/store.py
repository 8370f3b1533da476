"""The store: a directory of plain files, and safe ways to change them.

Every change goes through a Transaction, which holds the store lock and keeps
an undo journal, so that an invocation is all or nothing even across several
files and even when the process is killed half-way: the next writer to take
the lock rolls the unfinished transaction back before it does anything.
"""

from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import orjson

from .errors import StoreError

DEFAULT_STORE = ".memory"
STORE_ENV = "MEMCTL_STORE"
DIR_MODE = 0o700
FILE_MODE = 0o600

_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_JOURNAL_DIR = ".journal"
_JOURNAL_FILE = "journal.json"


class Store:
    """A memory store rooted at a directory; knows where every file lives."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @classmethod
    def locate(cls, path: str | os.PathLike | None = None) -> "Store":
        """The store named by `path`, else $MEMCTL_STORE, else ./.memory."""
        return cls(path or os.environ.get(STORE_ENV) or DEFAULT_STORE)

    # -- layout (SPEC section 0) -------------------------------------------
    @property
    def memory_md(self) -> Path:
        return self.root / "MEMORY.md"

    @property
    def daily_dir(self) -> Path:
        return self.root / "memory"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def topics_dir(self) -> Path:
        return self.root / "topics"

    @property
    def pending_file(self) -> Path:
        return self.root / "pending.jsonl"

    @property
    def state_file(self) -> Path:
        return self.root / "index_state.json"

    @property
    def config_file(self) -> Path:
        return self.root / "memctl.toml"

    @property
    def index_dir(self) -> Path:
        return self.root / ".index"

    def daily_log(self, day: str) -> Path:
        return self.daily_dir / f"{day}.md"

    def session_file(self, session: str) -> Path:
        return self.sessions_dir / f"{session}.jsonl"

    def daily_logs(self) -> list[Path]:
        if not self.daily_dir.is_dir():
            return []
        return sorted(p for p in self.daily_dir.iterdir() if _DAY_FILE.match(p.name))

    def source_files(self) -> list[Path]:
        """The files the index is built from: their sizes and times tell when to re-index."""
        files = [self.memory_md] if self.memory_md.exists() else []
        if self.sessions_dir.is_dir():
            files += sorted(self.sessions_dir.glob("*.jsonl"))
        return files + self.daily_logs()

    def relative(self, path: Path) -> str:
        """A path as users see it in output: relative to the store root."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def exists(self) -> bool:
        return self.root.is_dir()

    # -- locking and transactions ------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's exclusive lock; repairs an unfinished transaction."""
        _make_dirs(self.root)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._recover()
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

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


class Transaction:
    """Changes to store files that land together or not at all.

    Before each change the journal records how to undo it: the old size of a
    file that is appended to, or a hard link to the old version of a file that
    is replaced. Removing the journal is the commit point.
    """

    def __init__(self, store: Store, *, resume: bool = False):
        self.store = store
        self.dir = store.root / _JOURNAL_DIR
        self.ops: list[dict] = []
        self._seen: set[str] = set()
        if resume:
            try:
                self.ops = orjson.loads((self.dir / _JOURNAL_FILE).read_bytes())
            except FileNotFoundError:
                self.ops = []
            except orjson.JSONDecodeError as exc:  # torn journal: nothing was done after it
                raise StoreError(f"{self.dir / _JOURNAL_FILE}: unreadable journal ({exc}); "
                                 "inspect it, then remove the .journal folder") from exc

    def append(self, path: Path, data: bytes) -> None:
        """Append bytes to a file (created if missing), durably."""
        if not data:
            return
        key = str(path)
        if key not in self._seen:
            size = path.stat().st_size if path.exists() else -1
            self._record({"op": "append", "path": key, "size": size})
        _make_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
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
        key = str(path)
        if key in self._seen:
            return
        backup = None
        if path.exists():
            _make_dirs(self.dir)
            backup = str(self.dir / f"{len(self.ops)}.bak")
            os.link(path, backup)
        self._record({"op": "replace", "path": key, "backup": backup})

    def _record(self, op: dict) -> None:
        self._seen.add(op["path"])
        self.ops.append(op)
        _make_dirs(self.dir)
        atomic_write(self.dir / _JOURNAL_FILE, orjson.dumps(self.ops))

    def commit(self) -> None:
        if self.dir.exists():
            (self.dir / _JOURNAL_FILE).unlink(missing_ok=True)
            _fsync_dir(self.dir)
            import shutil  # here: shutil loads bz2 and lzma, and most commands never commit (a cache hit)

            shutil.rmtree(self.dir)
            _fsync_dir(self.store.root)
        self.ops = []

    def rollback(self) -> None:
        for op in reversed(self.ops):
            path = Path(op["path"])
            if op["op"] == "append":
                if op["size"] < 0:
                    path.unlink(missing_ok=True)
                elif path.exists():
                    with open(path, "r+b") as fh:
                        fh.truncate(op["size"])
                        os.fsync(fh.fileno())
            elif op["backup"]:
                os.replace(op["backup"], path)
                _fsync_dir(path.parent)
            else:
                path.unlink(missing_ok=True)
        self.commit()


class DryRun(Transaction):
    """A Transaction that records nothing and writes nothing."""

    def append(self, path: Path, data: bytes) -> None:
        pass

    def replace(self, path: Path, data: bytes) -> None:
        pass

    def delete(self, path: Path) -> None:
        pass


def atomic_write(path: Path, data: bytes) -> None:
    """Write a whole file so that readers see the old or the new, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def read_jsonl(path: Path, *, unterminated: bool = False) -> Iterator[tuple[int, dict | None, bytes]]:
    """Yield (line number, object or None if unparseable, raw line without newline) per non-blank line.

    A last line without its newline is an append still under way (or cut off by
    a crash, to be rolled back by the next writer) and is skipped, unless
    `unterminated` asks for it (to show or repair a hand-edited file).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines = data.split(b"\n")
    if lines and not (lines[-1] and unterminated):  # "" after the last newline, or a line still being written
        lines = lines[:-1]
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        yield number, obj if isinstance(obj, dict) else None, raw


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
