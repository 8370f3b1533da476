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
rather than raised: an entry as a miss that the next run replaces, an events
line as not counted, a consolidation mark as none. problems() names each,
with its file and line, for `memctl health` (memctl.cache.cache_problems).
"""

from __future__ import annotations

import errno
import os
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import orjson

from memctl.clock import Clock
from memctl.store import locking
from memctl.errors import InputError, StoreError
from memctl.store.store import NAME_RULE, NotRegularFile, Store, _make_dirs, atomic_write, is_name, open_file, read_file
from memctl.cache.backend import EVENTS, Entry, wait_for

_EVENT_CODES = {"hits": b"h", "misses": b"m", "negative_hits": b"n"}
_EVENT_NAMES = {code: name for name, code in _EVENT_CODES.items()}
Problem = tuple[str, int | None, str]  # file relative to the store, line (None: the whole file), what is wrong


class FileBackend:
    name = "files"

    def __init__(self, store: Store, clock: Clock):
        self.store = store
        self.clock = clock  # what is expired: its runtime's (MEMCTL_NOW when pinned)

    def _path(self, scope: str, part: str, *name: str) -> Path:
        """Every path of the cache: scope, key and entry id are names (Store.path checks them)."""
        return self.store.path("cache", scope, part, *name)

    def load(self, scope: str, key: str) -> Entry | None:
        path = self._path(scope, "entries", f"{key}.json")
        try:
            entry = self._read_entry(path, scope, key)
        except FileNotFoundError:
            return None
        except InputError:  # edited by hand into nonsense: a miss, replaced by the next run (problems() names it)
            return None
        if entry.expires_at <= self.clock.seconds():
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
            data = orjson.loads(read_file(path))
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
        mark (even a folder) costs consolidation a no-op ingest, never a duplicate (consolidate.py)."""
        try:
            mark = read_file(path).decode("utf-8")
        except (OSError, UnicodeDecodeError, NotRegularFile):
            return None
        return mark if is_name(mark) else None

    def save(self, entry: Entry, ttl: float) -> None:
        entry.expires_at = self.clock.seconds() + ttl
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
        fd = open_file(path, os.O_RDWR | os.O_CREAT)
        try:
            yield wait_for(lambda: _try_flock(fd), timeout=timeout, scope=scope, key=key)
        finally:
            os.close(fd)  # closing releases the flock

    def entries(self, scope: str) -> Iterator[Entry]:
        for path in self.store.listing(self._path(scope, "entries"), "*.json"):
            if not is_name(path.stem):
                continue  # not a key memctl wrote (cache_problems names the file)
            entry = self.load(scope, path.stem)
            if entry is not None:
                yield entry

    def mark_consolidated(self, marks: list[tuple[Entry, str]]) -> None:
        for entry, memory_id in marks:  # no fsync: a lost mark costs a no-op ingest, not a duplicate
            _append(self._path(entry.scope, "consolidated", entry.id), memory_id.encode(), replace=True)

    def counters(self, scope: str) -> dict[str, dict[str, int]]:
        try:
            data = read_file(self.store.path("cache", scope, "events"))
        except FileNotFoundError:
            return {}
        counts, _ = _tally_events(data)
        return counts

    def scopes(self) -> list[str]:
        # Not a name memctl wrote (or a cleared scope's leftover, .<scope>.<pid>.cleared): skipped here,
        # named by cache_problems.
        return [p.name for p in self.store.listing(self.store.path("cache"), "*")
                if p.is_dir() and is_name(p.name) and not p.name.startswith(".")]

    def problems(self) -> list[Problem]:
        """Everything the reads above skip or treat as a miss, file by file (memctl.cache.cache_problems)."""
        found: list[Problem] = []
        for name in self._names(found, "cache"):
            if name.startswith("."):
                continue  # a cleared scope being removed, or a temp file (the store check reports those)
            if not is_name(name):
                found.append((f"cache/{name}", None, f"not a scope name ({NAME_RULE}): never read"))
            elif (folder := self._checked(found, "cache", name)) is not None:
                if folder.is_dir():
                    found += self._scope_problems(name)
                else:
                    found.append((f"cache/{name}", None, "not a scope (a folder); memctl never writes it"))
        return found

    def _scope_problems(self, scope: str) -> list[Problem]:
        found: list[Problem] = []
        for name in self._names(found, "cache", scope, "entries"):
            key = name.removesuffix(".json")
            if name.startswith(".") or key == name:
                continue  # a temp file of atomic_write (the store check reports those), or no entry
            if not is_name(key):
                found.append((f"cache/{scope}/entries/{name}", None, f"not a key ({NAME_RULE}): never read"))
            elif (path := self._checked(found, "cache", scope, "entries", name)) is not None:
                try:
                    self._read_entry(path, scope, key)
                except InputError as exc:
                    what = f"field '{exc.field}': {exc.message}" if exc.field else exc.message
                    found.append((self.store.relative(path), exc.line,
                                  f"{what}; read as a miss, replaced by the next run"))
                except OSError as exc:
                    found.append((self.store.relative(path), None, _reason(exc)))
                except NotRegularFile as exc:
                    found.append((self.store.relative(path), None, exc.what))
        for name in self._names(found, "cache", scope, "consolidated"):
            path = self._checked(found, "cache", scope, "consolidated", name)
            if path is not None and self._read_mark(path) is None:
                found.append((self.store.relative(path), None, "not a memory id; read as no mark"))
        events = self._checked(found, "cache", scope, "events")
        data = b""
        try:
            data = read_file(events) if events is not None else b""
        except FileNotFoundError:
            pass
        except OSError as exc:
            found.append((f"cache/{scope}/events", None, _reason(exc)))
        except NotRegularFile as exc:
            found.append((f"cache/{scope}/events", None, exc.what))
        _, bad = _tally_events(data)
        found += [(f"cache/{scope}/events", number, f"{what}; not counted") for number, what in bad]
        return found

    def _names(self, found: list[Problem], *parts: str) -> list[str]:
        """The names in the store folder at parts, sorted; each is then opened through Store.path
        (_checked), so that one link among them is reported alone rather than hiding the rest."""
        try:
            return sorted(os.listdir(self.store.path(*parts)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except (OSError, StoreError) as exc:
            found.append(("/".join(parts), None, _reason(exc)))
            return []

    def _checked(self, found: list[Problem], *parts: str) -> Path | None:
        """Store.path(*parts), or None with the link or name it refuses reported in found."""
        try:
            return self.store.path(*parts)
        except StoreError as exc:
            found.append(("/".join(parts), None, _reason(exc)))
        except InputError as exc:
            found.append(("/".join(parts), None, exc.message))
        return None

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


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _tally_events(data: bytes) -> tuple[dict[str, dict[str, int]], list[tuple[int, str]]]:
    """The counts per tool and event of an events file, and its lines that are not events
    (line number, what is wrong): skipped, never counted under a garbled name."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(EVENTS, 0))
    bad: list[tuple[int, str]] = []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last event
    for number, line in enumerate(lines, 1):
        code, _, raw_tool = line.partition(b"\t")
        try:
            tool = raw_tool.decode("utf-8")
        except UnicodeDecodeError:
            bad.append((number, "the tool's name is not UTF-8"))
            continue
        if code not in _EVENT_NAMES:
            bad.append((number, f"unknown event {code.decode('utf-8', 'replace')!r:.40}; "
                                "expected h (hit), m (miss) or n (negative hit), a tab, a tool"))
        elif not is_name(tool):
            bad.append((number, f"tool must be {NAME_RULE}, got {tool!r:.80}"))
        else:
            counts[tool][_EVENT_NAMES[code]] += 1
    return dict(counts), bad


def _append(path: Path, data: bytes, *, replace: bool = False) -> int:
    """Append in one write (atomic with O_APPEND), or replace the content; returns the file's size after it."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_APPEND)
    try:
        fd = open_file(path, flags)
    except FileNotFoundError:
        _make_dirs(path.parent)
        fd = open_file(path, flags)
    try:
        os.write(fd, data)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _try_flock(fd: int) -> bool:
    """Take the lock without blocking (blocking could not time out); the kernel drops it if we die."""
    try:
        locking.flock(fd, locking.LOCK_EX | locking.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return False
