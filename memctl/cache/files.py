"""The default cache backend: plain files in the store, under cache/<scope>/.

    cache/<scope>/entries/<key>.json     an entry (docs/cache.md), replaced atomically
    cache/<scope>/access/<entry id>      one byte appended per access after the first
    cache/<scope>/consolidated/<entry id>  the memory id an entry became
    cache/<scope>/locks/<key>            flock'ed by the one process running the key's command
    cache/<scope>/events                 one line "<event>\\t<tool>" per hit, miss, negative hit

Entries are single files replaced by rename (readers see the old or the new
entry, never a mix), and counters are appends, which the kernel makes atomic
for a short write with O_APPEND: a hit takes no lock at all. The run lock is
an flock, so it goes away with its holder when that process dies.

Whatever a hand (or another program) left unreadable is read as nothing
rather than raised: an entry as a miss that the next run replaces, a
consolidation mark as none.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import orjson

from memctl.errors import InputError
from memctl.store.store import FILE_MODE, Store, _make_dirs, atomic_write
from memctl.cache.backend import EVENTS, Entry, wait_for
from memctl.cache.keys import is_name

_EVENT_CODES = {"hits": b"h", "misses": b"m", "negative_hits": b"n"}
_EVENT_NAMES = {code: name for name, code in _EVENT_CODES.items()}


class FileBackend:
    name = "files"

    def __init__(self, store: Store):
        self.store = store

    def _path(self, scope: str, part: str, *name: str) -> Path:
        """Every path of the cache: scope, key and entry id are names (Store.path checks them)."""
        return self.store.path("cache", scope, part, *name)

    def load(self, scope: str, key: str) -> Entry | None:
        path = self._path(scope, "entries", f"{key}.json")
        try:
            entry = self._read_entry(path, scope, key)
        except FileNotFoundError:
            return None
        except InputError:  # an entry edited by hand into nonsense: a miss, replaced by the next run
            return None
        if entry.expires_at <= time.time():
            return None
        try:
            entry.access_count = 1 + os.stat(self._path(scope, "access", entry.id)).st_size
        except FileNotFoundError:
            pass
        entry.consolidated = self._read_mark(self._path(scope, "consolidated", entry.id))
        return entry

    def _read_entry(self, path: Path, scope: str, key: str) -> Entry:
        """The entry in `path`, which must be scope's entry of key; InputError naming the file if not."""
        source = self.store.relative(path)
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc})", source=source) from None
        entry = Entry.from_json(data, source)
        # Counted and marked by its own scope and id: another's would be counted in the wrong place.
        if entry.scope != scope:
            raise InputError(f"is scope {scope!r}'s file, not {entry.scope!r}'s", source=source, field="scope")
        if entry.key != key:
            raise InputError(f"is the file of key {key}, not {entry.key}", source=source, field="key")
        return entry

    @staticmethod
    def _read_mark(path: Path) -> str | None:
        """The memory id an entry became, if its mark is there and one; a missing or unreadable
        mark costs consolidation a no-op ingest, never a duplicate (memctl/cache/consolidate.py)."""
        try:
            mark = path.read_bytes().decode("utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        return mark if is_name(mark) else None

    def save(self, entry: Entry, ttl: float) -> None:
        entry.expires_at = time.time() + ttl
        path = self._path(entry.scope, "entries", f"{entry.key}.json")
        _make_dirs(path.parent)
        atomic_write(path, orjson.dumps(entry.to_json()))

    def count_access(self, entry: Entry) -> int:
        return 1 + _append(self._path(entry.scope, "access", entry.id), b"1")

    def count(self, scope: str, tool: str, event: str) -> None:
        _append(self.store.path("cache", scope, "events"), _EVENT_CODES[event] + b"\t" + tool.encode() + b"\n")

    @contextmanager
    def single_run(self, scope: str, key: str, timeout: float) -> Iterator[bool]:
        path = self._path(scope, "locks", key)
        _make_dirs(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            yield wait_for(lambda: _try_flock(fd), timeout=timeout, scope=scope, key=key)
        finally:
            os.close(fd)  # closing releases the flock

    def entries(self, scope: str) -> Iterator[Entry]:
        for path in self.store.listing(self._path(scope, "entries"), "*.json"):
            if not is_name(path.stem):
                continue  # not a key memctl wrote (health names the file)
            entry = self.load(scope, path.stem)
            if entry is not None:
                yield entry

    def mark_consolidated(self, marks: list[tuple[Entry, str]]) -> None:
        for entry, memory_id in marks:  # no fsync: a lost mark costs a no-op ingest, not a duplicate
            _append(self._path(entry.scope, "consolidated", entry.id), memory_id.encode(), replace=True)

    def counters(self, scope: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(EVENTS, 0))
        try:
            data = self.store.path("cache", scope, "events").read_bytes()
        except FileNotFoundError:
            return {}
        for line in data.split(b"\n"):
            code, _, tool = line.partition(b"\t")
            if tool and code in _EVENT_NAMES:
                out[tool.decode()][_EVENT_NAMES[code]] += 1
        return dict(out)

    def scopes(self) -> list[str]:
        return [p.name for p in self.store.listing(self.store.path("cache"), "*")
                if p.is_dir() and not p.name.startswith(".")]

    def clear(self, scope: str) -> int:
        folder = self.store.path("cache", scope)  # a link is refused here, before anything is renamed
        if not folder.is_dir():
            return 0
        count = sum(1 for _ in self.entries(scope))
        # Renamed first, so the scope disappears at once, even for readers in mid-walk.
        import shutil

        doomed = self.store.path("cache", f".{scope}.{os.getpid()}.cleared")
        os.rename(folder, doomed)
        shutil.rmtree(doomed)
        return count


def _append(path: Path, data: bytes, *, replace: bool = False) -> int:
    """Append in one write (atomic with O_APPEND), or replace the content; returns the file's size after it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if replace else os.O_APPEND)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except FileNotFoundError:
        _make_dirs(path.parent)
        fd = os.open(path, flags, FILE_MODE)
    try:
        os.write(fd, data)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _try_flock(fd: int) -> bool:
    """Take the lock without blocking (blocking could not time out); the kernel drops it if we die."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return False
