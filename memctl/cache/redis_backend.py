"""The cache on a Redis server (H5), for agents on several machines.

Keys of a scope share one prefix, memctl:cache:{<scope>}: — the braces keep
scopes apart (a scope name cannot hold a brace, so no scope's prefix is the
start of another's) and are a Redis Cluster hash tag (a scope lives in one
slot):

    e:<key>   the entry (docs/cache.md), expiring with the entry's TTL
    a:<key>   accesses after the first (INCR), expiring with the entry
    c:<key>   "<entry id> <memory id>" once that version was consolidated
    l:<key>   the single-run lock: SET NX PX, renewed while its command runs
    s         a hash "<event>\\t<tool>" -> count (HINCRBY)

plus memctl:cache:scopes, the set of scopes. Every call has a socket timeout,
so a dead server is a one-line error (exit 2), never a hang.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

import orjson
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from memctl.cache.backend import EVENTS, CacheError, Entry, wait_for
from memctl.clock import Clock
from memctl.store.store import is_name
from memctl.errors import InputError

_SCOPES = "memctl:cache:scopes"
# Let go of a lock only if it is still ours (it may have expired and been taken).
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_RENEW = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
          "else return 0 end")


class RedisBackend:
    name = "redis"

    def __init__(self, url: str, *, clock: Clock, socket_timeout: float = 2.0, lock_ttl: float = 30.0):
        self.url = url
        # What is expired: by this clock (MEMCTL_NOW when pinned), checked on every read; the
        # server's own expiry (relative, so a pinned clock does not set it in the past) frees the memory.
        self.clock = clock
        self.lock_ms = max(1, int(lock_ttl * 1000))
        try:
            self.client = redis.Redis.from_url(
                url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
                retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2))
        except ValueError as exc:
            raise CacheError(f"{url}: not a Redis URL ({exc})") from None
        self._release = self.client.register_script(_RELEASE)
        self._renew = self.client.register_script(_RENEW)

    @contextmanager
    def _talking(self) -> Iterator[None]:
        """Any failure of the server or the network as one line, naming the server."""
        try:
            yield
        except redis.RedisError as exc:
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise CacheError(f"{self.url}: {text}") from None

    def _left_ms(self, entry: Entry) -> int:
        """Milliseconds until the entry expires by this backend's clock: the server's TTL of its keys."""
        return max(1, int((entry.expires_at - self.clock.seconds()) * 1000))

    @staticmethod
    def _prefix(scope: str) -> str:
        return f"memctl:cache:{{{scope}}}:"

    def load(self, scope: str, key: str) -> Entry | None:
        p = self._prefix(scope)
        with self._talking():
            data, accesses, mark = self.client.mget(p + "e:" + key, p + "a:" + key, p + "c:" + key)
        return self._entry(scope, key, data, accesses, mark)

    def _entry(self, scope: str, key: str, data: bytes | None, accesses: bytes | None,
               mark: bytes | None) -> Entry | None:
        """The entry from its three values, checked as the files backend checks a file: a value
        edited by hand (or another program's) is a miss, and the next run replaces all three."""
        if data is None:
            return None
        try:
            entry = Entry.from_json(orjson.loads(data))
        except (orjson.JSONDecodeError, InputError):
            return None
        if entry.expires_at <= self.clock.seconds():
            return None
        accesses_after_first = _counter(accesses or b"0")
        # Counted by its own scope and key: another's would be counted in the wrong place; and a
        # counter INCR cannot add to is a miss too (the next save deletes it).
        if (entry.scope, entry.key) != (scope, key) or accesses_after_first is None:
            return None
        entry.access_count = 1 + accesses_after_first
        entry_id, _, memory_id = (mark or b"").decode("utf-8", errors="replace").partition(" ")
        # A mark of another version, or garbled, is no mark: it costs a no-op ingest, never a duplicate.
        entry.consolidated = memory_id if entry_id == entry.id and is_name(memory_id) else None
        return entry

    def save(self, entry: Entry, ttl: float) -> None:
        entry.expires_at = self.clock.seconds() + ttl
        p = self._prefix(entry.scope)
        with self._talking():
            pipe = self.client.pipeline(transaction=True)
            pipe.set(p + "e:" + entry.key, orjson.dumps(entry.to_json()), px=max(1, int(ttl * 1000)))
            pipe.delete(p + "a:" + entry.key, p + "c:" + entry.key)
            pipe.sadd(_SCOPES, entry.scope)
            pipe.execute()

    def count_access(self, entry: Entry) -> int:
        name = self._prefix(entry.scope) + "a:" + entry.key
        with self._talking():
            pipe = self.client.pipeline(transaction=True)
            pipe.incr(name)
            pipe.pexpire(name, self._left_ms(entry))
            accesses, _ = pipe.execute()
        return 1 + accesses

    def count(self, scope: str, tool: str, event: str) -> None:
        with self._talking():
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(self._prefix(scope) + "s", f"{event}\t{tool}", 1)
            pipe.sadd(_SCOPES, scope)
            pipe.execute()

    @contextmanager
    def single_run(self, scope: str, key: str, timeout: float) -> Iterator[bool]:
        name = self._prefix(scope) + "l:" + key
        token = uuid.uuid4().hex
        with self._talking():
            waited = wait_for(lambda: bool(self.client.set(name, token, nx=True, px=self.lock_ms)),
                              timeout=timeout, scope=scope, key=key)
        stop = threading.Event()
        renewer = threading.Thread(target=self._keep, args=(name, token, stop), daemon=True)
        renewer.start()
        try:
            yield waited
        finally:
            stop.set()
            renewer.join()
            try:
                self._release(keys=[name], args=[token])
            except redis.RedisError:
                pass  # the lock expires by itself

    def _keep(self, name: str, token: str, stop: threading.Event) -> None:
        """Renew the lock while its command runs: a long command keeps it, a dead holder loses it."""
        while not stop.wait(self.lock_ms / 3000):
            try:
                self._renew(keys=[name], args=[token, self.lock_ms])
            except redis.RedisError:
                return

    def entries(self, scope: str) -> Iterator[Entry]:
        p = self._prefix(scope)
        with self._talking():
            # A key name memctl did not write (not UTF-8, not a name) is not an entry of ours.
            keys = sorted(key for key in (name[len(p) + 2:].decode("utf-8", errors="replace")
                                          for name in self.client.scan_iter(p + "e:*", count=1000))
                          if is_name(key))
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                pipe = self.client.pipeline(transaction=False)
                for key in chunk:
                    pipe.mget(p + "e:" + key, p + "a:" + key, p + "c:" + key)
                for key, values in zip(chunk, pipe.execute()):
                    entry = self._entry(scope, key, *values)
                    if entry is not None:
                        yield entry

    def mark_consolidated(self, marks: list[tuple[Entry, str]]) -> None:
        with self._talking():
            pipe = self.client.pipeline(transaction=False)
            for entry, memory_id in marks:
                pipe.set(self._prefix(entry.scope) + "c:" + entry.key, f"{entry.id} {memory_id}",
                         px=self._left_ms(entry))
            pipe.execute()

    def counters(self, scope: str) -> dict[str, dict[str, int]]:
        with self._talking():
            raw = self.client.hgetall(self._prefix(scope) + "s")
        out: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(EVENTS, 0))
        for field, value in raw.items():
            event, _, tool = field.decode("utf-8", errors="replace").partition("\t")
            count = _counter(value)
            if event in EVENTS and is_name(tool) and count is not None:  # else edited by hand: skipped
                out[tool][event] = count
        return dict(out)

    def scopes(self) -> list[str]:
        with self._talking():
            names = (s.decode("utf-8", errors="replace") for s in self.client.smembers(_SCOPES))
            return sorted(name for name in names if is_name(name))  # a scope memctl could have added

    def clear(self, scope: str) -> int:
        p = self._prefix(scope)
        with self._talking():
            names = list(self.client.scan_iter(p + "*", count=1000))
            count = sum(name.startswith((p + "e:").encode()) for name in names)
            for start in range(0, len(names), 500):
                self.client.unlink(*names[start:start + 500])
            self.client.srem(_SCOPES, scope)
        return count


def _counter(value: bytes) -> int | None:
    """A count Redis keeps (INCR, HINCRBY: at most 19 digits), or None if the value is not one."""
    text = value.decode("ascii", errors="replace")
    return int(text) if text.isdigit() and len(text) <= 19 else None
