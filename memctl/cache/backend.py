"""What a cache backend does, and the entry it stores.

A backend keeps entries per scope and never lets one scope see another's.
Two implement this protocol: files in the store (memctl/cache/files.py, the
default) and a Redis server (memctl/cache/redis.py), for agents on several
machines. memctl/cache/__init__.py holds the behaviour both share.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from memctl.errors import MemctlError

EVENTS = ("hits", "misses", "negative_hits")


class CacheError(MemctlError):
    """The cache cannot answer: its server is unreachable, or a wait timed out (exit 2)."""


@dataclass
class Entry:
    """One stored tool call. `args` is the canonical JSON arguments, or the argv of a command."""
    id: str               # this version of the key's output: a new run is a new id
    key: str
    scope: str
    tool: str
    args: Any
    output: bytes
    stderr_tail: str = ""
    exit_code: int = 0
    agent: str = ""
    created_at: str = ""  # ISO 8601
    expires_at: float = 0.0  # Unix seconds
    duration_ms: float = 0.0
    access_count: int = 1
    consolidated: str | None = None  # the memory id it became

    @property
    def negative(self) -> bool:
        """An empty or failed result (H2): cached too, with its own TTL."""
        return self.exit_code != 0 or not self.output.strip()

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")

    def to_json(self) -> dict[str, Any]:
        """The stored form; output that is not UTF-8 is kept in base64."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("output", "access_count", "consolidated")}
        try:
            out["output"] = self.output.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            out["output_base64"] = base64.b64encode(self.output).decode()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Entry":
        values = dict(data)
        if "output_base64" in values:
            import base64

            output = base64.b64decode(values.pop("output_base64"))
        else:
            output = values.pop("output", "").encode("utf-8")
        known = {k: values.pop(k) for k in list(values) if k in cls.__dataclass_fields__}
        return cls(output=output, **known)

    def as_dict(self) -> dict[str, Any]:
        """What `memctl cache get --json` prints (docs/cache.md)."""
        from memctl import clock

        out = self.to_json()
        out["expires_at"] = clock.format_ts(clock.parse_ts(round(self.expires_at, 3)))
        out.update(negative=self.negative, access_count=self.access_count, consolidated=self.consolidated)
        return out


EXIT_CODE_MAX = 255  # what a process can exit with: `cache run` exits with the stored status


def is_exit_code(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= EXIT_CODE_MAX


class Backend(Protocol):
    """Storage of entries, counters and single-run locks, per scope."""

    name: str

    def load(self, scope: str, key: str) -> Entry | None:
        """The entry of key if it has not expired, with its access count and consolidation mark."""

    def save(self, entry: Entry, ttl: float) -> None:
        """Store (replace) the entry of entry.key, to expire after ttl seconds; its access count starts at 1."""

    def count_access(self, entry: Entry) -> int:
        """One more access of the entry; returns its access count."""

    def count(self, scope: str, tool: str, event: str) -> None:
        """Count one of EVENTS for the scope's tool."""

    def single_run(self, scope: str, key: str, timeout: float) -> AbstractContextManager[bool]:
        """Hold the key's run lock: one holder at a time, across processes and machines.

        Gives True when the lock was held by another at first (this caller waited).
        Raises CacheError after `timeout` seconds of waiting. The lock is let go
        when its holder dies (flock on close; Redis by the lock's expiry).
        """

    def entries(self, scope: str) -> Iterable[Entry]:
        """Every unexpired entry of the scope."""

    def mark_consolidated(self, marks: list[tuple[Entry, str]]) -> None:
        """Remember that these versions of entries became these memory ids.

        A mark saves reading MEMORY.md; it is not what prevents a second copy
        (the memory id is), so it need not survive a crash."""

    def counters(self, scope: str) -> dict[str, dict[str, int]]:
        """tool -> {event: count} for the scope."""

    def scopes(self) -> list[str]:
        """Scopes that hold anything."""

    def clear(self, scope: str) -> int:
        """Remove the scope's entries and counters; returns how many entries there were."""


_POLL_SECONDS = (0.005, 0.05)  # first and longest pause between tries for a held lock


def wait_for(take: Callable[[], bool], *, timeout: float, scope: str, key: str) -> bool:
    """Try `take` (a lock) until it succeeds, backing off; True when another agent made us
    wait. Past `timeout`, a CacheError: a runner that hangs never holds the others forever."""
    deadline = time.monotonic() + timeout
    pause = _POLL_SECONDS[0]
    waited = False
    while not take():
        if time.monotonic() >= deadline:
            raise CacheError(f"waited {timeout:g} s for another agent's run of this call "
                             f"(scope {scope}, key {key}); try again or raise [cache] wait_timeout")
        waited = True
        time.sleep(pause)
        pause = min(pause * 2, _POLL_SECONDS[1])
    return waited
