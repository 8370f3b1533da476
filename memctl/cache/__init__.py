"""Shared working memory for tool outputs (SPEC H1-H5, design 004).

Every agent of one run (a scope: a debate, a job) shares one cache of tool
calls. A call already made by any of them is answered from the cache; empty
and failed results are cached too, with a shorter TTL, so nobody repeats a
call known to come back empty; when several agents ask for the same missing
call at once, one runs it and the others wait for its result. What proves
useful (accessed at least twice) is consolidated into long-term memory,
where `memctl search` finds it by tool, agent and time.

    from memctl.cache import Cache
    cache = Cache(rt)                             # [cache] backend: files, or redis://...
    answer = cache.run("debate-7", "tej.price", ["tej", "price", "2330"], agent="pro")
    answer.entry.output, answer.hit

This module is imported on every `memctl cache` call, so it stays small:
the index and search machinery is imported only by search. Consolidation
writes long-term memory, which is ingest's work, and ingest stands above the
cache: a Cache consolidates through the consolidator it is given, and
`Memory(...).cache` is the one given memctl/ingest/consolidate.py's. A Cache made
without one keeps tool outputs and writes no memory.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from memctl.runtime import Runtime
from memctl import config
from memctl.clock import Clock, format_ts
from memctl.errors import InputError, MemctlError
from memctl.store.store import Store
from memctl.cache.backend import EVENTS, EXIT_CODE_MAX, Backend, CacheError, Consolidated, Entry, is_exit_code
from memctl.cache.keys import canonical, check_name, json_args, key_of, parse_args
from memctl.text.bounds import need_query
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:
    from memctl.search.search import Result

__all__ = ["Cache", "CacheError", "CacheStats", "Cleared", "Entry", "RunResult",
           "cache_problems", "canonical", "check_seconds", "key_of", "open_backend", "parse_args"]

# Ten years, as [ingest] pending_ttl_hours: further out, an expiry time overflows the
# calendar (--ttl 1e308 did) and a Redis PX its integer.
SECONDS_MAX = 315_360_000
# The [cache] settings that are durations, bounded as --ttl is.
_SECONDS_SETTINGS = ("ttl", "negative_ttl", "wait_timeout", "lock_ttl", "socket_timeout")


def check_seconds(value: Any, *, source: str, field: str, zero: bool = False) -> float:
    """A duration given by a flag, an MCP argument or a setting: a finite number of seconds above 0
    (or 0 when `zero`), at most SECONDS_MAX; else InputError naming source and field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"must be a number of seconds, got {type(value).__name__}", source=source, field=field)
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float: too long a time anyway
        seconds = math.inf
    above_lowest = seconds >= 0 if zero else seconds > 0
    if not (above_lowest and seconds <= SECONDS_MAX):  # NaN fails every comparison
        lowest = "0 or more" if zero else "above 0"
        raise InputError(f"must be {lowest} and at most {SECONDS_MAX} seconds (ten years), got {seconds!r}",
                         source=source, field=field)
    return seconds


def cache_problems(store: Store, clock: Clock) -> list[tuple[str, int | None, str]]:
    """What is wrong in the files of the store's cache, for `memctl health`: (file relative to
    the store, line or None for the whole file, message), one a problem. Reading the cache
    never fails on them: a bad entry is a miss (the next run replaces it), a bad events line is
    not counted, a bad consolidation mark is no mark. The Redis backend is not read."""
    from memctl.cache.files import FileBackend

    return FileBackend(files_of(store), clock).problems()


def files_of(store) -> Store:
    """Where the files backend keeps a store's cache: the store's own folder, or for a store on
    PostgreSQL a folder of this machine's user, $XDG_CACHE_HOME/memctl/postgresql/<hash of the URL
    without its password> (~/.cache when unset): tool output is this machine's, kept for minutes,
    and written outside any transaction, which a database store has no place for (a cache shared
    by several machines is the Redis backend's)."""
    if store.is_folder:
        return store
    from _blake2 import blake2b

    base = os.environ.get("XDG_CACHE_HOME", "")
    folder = (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "memctl" / "postgresql"
    return Store(folder / blake2b(store.shown.encode(), digest_size=8).hexdigest())


@dataclass
class CacheStats(Shape):
    """Hits, misses, negative hits, keys and bytes, one dict a scope and tool."""

    rows: list[dict[str, Any]] = shown('{"scope", "tool", "hits", "misses", "negative_hits", "keys", '
                                       '"negative_keys", "bytes", "consolidated"}: hits and misses count calls '
                                       "since the run began; keys and bytes what is stored now.", name="stats")


@dataclass
class Cleared(Shape):
    """A run's cache forgotten (after consolidating it, when [cache] consolidate_on has clear)."""

    scope: str = shown()
    entries: int = shown("Entries removed (or, dry, that would be).")
    consolidated: list[Consolidated] = shown("What was consolidated first.")
    dry_run: bool = shown()


@dataclass
class RunResult(Shape):
    """A command run through the cache: its entry, and whether it came from the cache."""
    entry: Entry = shown(flatten=True)
    hit: bool = shown("Answered from the cache.")
    waited: bool = shown("Another agent was running the same call; this one waited for its result.")


def open_backend(spec: str, store: Store, settings: config.Cache, clock: Clock) -> Backend:
    """The backend a [cache] backend setting (or --backend) names; `clock` decides what is expired."""
    if spec == "files":
        from memctl.cache.files import FileBackend

        return FileBackend(files_of(store), clock)
    if spec.startswith(("redis://", "rediss://", "unix://")):
        try:
            from memctl.cache.redis_backend import RedisBackend
        except ImportError:
            raise InputError("the Redis backend needs the redis client: pip install 'memctl[redis]'",
                             source="--backend", field="backend") from None
        return RedisBackend(spec, socket_timeout=settings.socket_timeout, lock_ttl=settings.lock_ttl, clock=clock)
    raise InputError(f"unknown backend {spec!r}; use files or redis://host:port/db", source="--backend",
                     field="backend")


class Cache:
    """The working memory of one store, on the backend its settings (or `backend`) name: `memory.cache`.
    The backend is opened by the first call that needs it, so making a Cache (and `memctl cache
    --help`) opens none."""

    def __init__(self, rt: Runtime, *, backend: str | Backend | None = None,
                 consolidator: Callable | None = None):
        """`rt`: its Memory's (the store, settings, clock, embedder)."""
        self.runtime = rt
        self.store = store = rt.store
        self.clock = rt.clock
        self._consolidator = consolidator  # (cache, scope, everything=, dry_run=, only=, index=) -> rows
        self.settings = rt.settings.cache
        for name in _SECONDS_SETTINGS:  # memctl.toml takes any finite number; a TTL of 1e308 overflows
            check_seconds(getattr(self.settings, name), source=_setting_source(store, name), field=f"cache.{name}")
        self.backend_spec = backend if backend is not None else self.settings.backend

    def on(self, backend: str | None) -> "Cache":
        """The same cache on another backend (files, redis://...); None: this one."""
        if backend is None or backend == self.backend_spec:
            return self
        return Cache(self.runtime, backend=backend, consolidator=self._consolidator)

    @cached_property
    def backend(self) -> Backend:
        spec = self.backend_spec
        return open_backend(spec, self.store, self.settings, self.clock) if isinstance(spec, str) else spec

    # A call's arguments: JSON text (`--args`), or already JSON (an MCP call's), checked and made the
    # canonical form the key is made of (keys sorted, 1.0 = 1, spaces collapsed), so both meet.
    parse_args = staticmethod(parse_args)
    json_args = staticmethod(json_args)

    # -- one call ----------------------------------------------------------------
    def get(self, scope: str, tool: str, args: Any) -> Entry | None:
        """The stored result of tool(args) in scope, counted as a hit; None (a miss) if there is none."""
        check_name(scope, "scope")
        check_name(tool, "tool")
        entry = self.backend.load(scope, key_of(tool, args))
        if entry is None:
            self.backend.count(scope, tool, "misses")
            return None
        self._count_hit(entry)
        return entry

    def put(self, scope: str, tool: str, args: Any, output: bytes | str, *, exit_code: int = 0,
            error: str = "", agent: str = "", ttl: float | None = None, duration_ms: float = 0.0) -> Entry:
        """Store the result of a tool call the caller made itself, for every agent of the run; empty
        or failed results too (H2). `error`: the call's error message, kept as its stderr."""
        check_name(scope, "scope")
        check_name(tool, "tool")
        if agent:
            check_name(agent, "agent")
        if not is_exit_code(exit_code):
            # The value is not shown: a huge int has more digits than Python will print.
            raise InputError(f"must be an exit status, a whole number from 0 to {EXIT_CODE_MAX}",
                             source="--exit-code", field="exit_code")
        entry = Entry(id=os.urandom(8).hex(), key=key_of(tool, args), scope=scope, tool=tool, args=args,
                      output=output.encode() if isinstance(output, str) else bytes(output),
                      stderr_tail=_tail(error, self.settings.stderr_lines), exit_code=exit_code,
                      agent=agent, created_at=format_ts(self.clock.now()), duration_ms=round(duration_ms, 1))
        self.backend.save(entry, self._ttl(entry, ttl))
        return entry

    def run(self, scope: str, tool: str, argv: list[str], *, args: Any = None, ttl: float | None = None,
            refresh: bool = False, agent: str = "", timeout: float | None = None) -> RunResult:
        """The output of the command argv, from the cache or by running it (once per scope and TTL).

        The key is tool + args (canonical JSON), or tool + argv when args is
        None. Of several callers missing the same key at once, one runs the
        command and the rest wait up to `timeout` ([cache] wait_timeout)
        seconds and get its result. `refresh` runs the command regardless.
        """
        check_name(scope, "scope")
        check_name(tool, "tool")
        if not argv:
            raise InputError("give the command to run after --", source="COMMAND")
        # Checked before the command runs: a bad TTL must not cost a run whose result cannot be kept.
        if ttl is not None:
            check_seconds(ttl, source="--ttl", field="ttl")
        if timeout is not None:
            check_seconds(timeout, source="--timeout", field="timeout", zero=True)
        key = key_of(tool, list(argv), "COMMAND") if args is None else key_of(tool, args)
        if not refresh:
            entry = self.backend.load(scope, key)
            if entry is not None:
                self._count_hit(entry)
                return RunResult(entry, hit=True, waited=False)
        wait = self.settings.wait_timeout if timeout is None else timeout
        with self.backend.single_run(scope, key, wait) as waited:
            if not refresh:
                entry = self.backend.load(scope, key)  # the runner we waited for stored it
                if entry is not None:
                    self._count_hit(entry)
                    return RunResult(entry, hit=True, waited=waited)
            self.backend.count(scope, tool, "misses")
            import subprocess  # here: a hit never needs it (process start matters, see bench/cache.py)

            from memctl.programs import dies_with_this_process

            began = time.perf_counter()
            try:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                      preexec_fn=dies_with_this_process())
            except OSError as exc:  # no such command: the caller's mistake, not a result to cache
                raise InputError(exc.strerror or str(exc), source=argv[0], field="COMMAND") from None
            # Killed by a signal: the shell's convention, 128 + the signal's number.
            status = done.returncode if done.returncode >= 0 else 128 - done.returncode
            entry = self.put(scope, tool, list(argv) if args is None else args, done.stdout, exit_code=status,
                             error=done.stderr.decode("utf-8", errors="replace"), agent=agent, ttl=ttl,
                             duration_ms=(time.perf_counter() - began) * 1000)
        return RunResult(entry, hit=False, waited=waited)

    def _count_hit(self, entry: Entry) -> None:
        entry.access_count = self.backend.count_access(entry)
        self.backend.count(entry.scope, entry.tool, "negative_hits" if entry.negative else "hits")
        if (self._consolidator and "hit" in self.settings.consolidate_on
                and entry.access_count == self.settings.consolidate_min_access):
            self.consolidate(entry.scope, only=[entry])

    def _ttl(self, entry: Entry, ttl: float | None) -> float:
        if ttl is not None:
            return check_seconds(ttl, source="--ttl", field="ttl")
        return self.settings.negative_ttl if entry.negative else self.settings.ttl

    # -- a whole scope -----------------------------------------------------------
    def entries(self, scope: str) -> list[Entry]:
        check_name(scope, "scope")
        return list(self.backend.entries(scope))

    def stats(self, scope: str | None = None) -> "CacheStats":
        """Per scope and tool: hits, misses, negative hits (counted events), keys and bytes (live entries)."""
        scopes = [check_name(scope, "scope")] if scope else self.backend.scopes()
        rows = []
        for name in scopes:
            tools: dict[str, dict[str, Any]] = {}
            for tool, counts in self.backend.counters(name).items():
                tools[tool] = {**dict.fromkeys(EVENTS, 0), **counts}
            for entry in self.backend.entries(name):
                row = tools.setdefault(entry.tool, dict.fromkeys(EVENTS, 0))
                row["keys"] = row.get("keys", 0) + 1
                row["bytes"] = row.get("bytes", 0) + len(entry.output)
                row["negative_keys"] = row.get("negative_keys", 0) + entry.negative
                row["consolidated"] = row.get("consolidated", 0) + (entry.consolidated is not None)
            for tool, row in sorted(tools.items()):
                rows.append({"scope": name, "tool": tool, **{k: row.get(k, 0) for k in (
                    *EVENTS, "keys", "negative_keys", "bytes", "consolidated")}})
        return CacheStats(rows)

    def clear(self, scope: str, *, dry_run: bool = False) -> "Cleared":
        """End a run: forget the scope (after consolidating it, where [cache] consolidate_on has clear)."""
        check_name(scope, "scope")
        consolidated = []
        if self._consolidator and "clear" in self.settings.consolidate_on:
            consolidated = self.consolidate(scope, dry_run=dry_run)
        entries = len(self.entries(scope)) if dry_run else self.backend.clear(scope)
        return Cleared(scope, entries, consolidated, dry_run)

    def consolidate(self, scope: str, *, everything: bool = False, dry_run: bool = False,
                    only: list[Entry] | None = None, index: bool = True):
        """Write what proved useful (access count >= [cache] consolidate_min_access, or everything)
        to long-term memory, once; see memctl/ingest/consolidate.py."""
        check_name(scope, "scope")
        if self._consolidator is None:
            raise MemctlError("this cache writes no long-term memory; open it through Memory(...).cache")
        return self._consolidator(self, scope, everything=everything, dry_run=dry_run, only=only, index=index)

    def search(self, query: str, *, scope: str | None = None, tools: Iterable[str] = (),
               agents: Iterable[str] = (), k: int = 5) -> list["Result"]:
        """Search what the agents of a run already found (design 004's search_shared_memory):
        the consolidated items in long-term memory, by meaning and words."""
        need_query(query)
        from memctl.index.filters import Filters
        from memctl.search.queries import Query
        from memctl.search import open_retriever

        filters = Filters(kinds=("memory",), cache_scopes=(check_name(scope, "scope"),) if scope else (),
                          tools=tuple(check_name(t, "tool") for t in tools), agents=tuple(agents))
        (results,) = open_retriever(self.runtime).search([Query(text=query, k=k, filters=filters)])
        return results


def _setting_source(store: Store, name: str) -> str:
    """Where config.load took [cache] name from: its environment variable, else memctl.toml."""
    variable = f"MEMCTL_CACHE_{name.upper()}"
    return f"${variable}" if variable in os.environ else str(store.config_file)


def _tail(text: str, lines: int) -> str:
    if not lines or not text:
        return ""
    return "\n".join(text.rstrip("\n").split("\n")[-lines:])
