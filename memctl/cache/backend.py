"""What a cache backend does, and the entry it stores.

A backend keeps entries per scope and never lets one scope see another's.
Two implement this protocol: files in the store (memctl/cache/files.py, the
default) and a Redis server (memctl/cache/redis_backend.py), for agents on several
machines. memctl/cache/__init__.py holds the behaviour both share.
"""

from __future__ import annotations

import base64
import math
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Protocol

from memctl import clock
from memctl.cache.keys import check_args
from memctl.errors import InputError, MemctlError
from memctl.store import store
from memctl.text.shape import ABSENT, Shape, derived, hidden, shown

EVENTS = ("hits", "misses", "negative_hits")


class CacheError(MemctlError):
    """The cache cannot answer: its server is unreachable, or a wait timed out (exit 2)."""


@dataclass
class Entry(Shape):
    """One stored tool call (`memctl cache get --json`)."""
    id: str = shown("This version of the call's output: a new run is a new id.")
    key: str = shown("The call's key: the tool and its canonical arguments.")
    scope: str = shown("The run whose agents share it.")
    tool: str = shown()
    args: Any = shown("The canonical JSON arguments, or the argv of a command.")
    output: bytes = hidden()
    stderr_tail: str = shown("The last lines of its stderr (or error message).", default="")
    exit_code: int = shown(default=0)
    agent: str = shown("Who made the call.", default="")
    created_at: str = shown("When the tool ran, ISO 8601.", default="")
    expires_at: float = hidden(default=0.0)  # Unix seconds
    duration_ms: float = shown(default=0.0)
    access_count: int = shown("Times it was served.", default=1)
    consolidated: str | None = shown("The memory id it became in long-term memory, or null.", default=None)

    key_order = ("id", "key", "scope", "tool", "args", "stderr_tail", "exit_code", "agent", "created_at",
                 "expires", "duration_ms", "output_text", "output_base64", "negative", "access_count",
                 "consolidated")

    @derived("An empty or failed result (H2): cached too, with its own TTL.")
    def negative(self) -> bool:
        return self.exit_code != 0 or not self.output.strip()

    @derived("When it stops being served, ISO 8601.", name="expires_at")
    def expires(self) -> str:
        return clock.format_ts(clock.parse_ts(round(self.expires_at, 3)))

    @derived("What the tool returned, when it is UTF-8 text.", name="output", optional=True)
    def output_text(self) -> str:
        try:
            return self.output.decode("utf-8")
        except UnicodeDecodeError:
            return ABSENT

    @derived("What the tool returned, in base64, when it is not UTF-8 text.", optional=True)
    def output_base64(self) -> str:
        return ABSENT if self.output_text is not ABSENT else base64.b64encode(self.output).decode()

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")

    def to_json(self) -> dict[str, Any]:
        """The stored form; output that is not UTF-8 is kept in base64."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("output", "access_count", "consolidated")}
        try:
            out["output"] = self.output.decode("utf-8")
        except UnicodeDecodeError:
            out["output_base64"] = base64.b64encode(self.output).decode()
        return out

    @classmethod
    def from_json(cls, data: Any, source: str | None = None) -> "Entry":
        """An entry from its stored form (to_json), every field checked, since a file or a Redis
        value can be edited by hand: InputError naming source and field, never a TypeError later."""
        if not isinstance(data, dict):
            raise InputError(f"expected an entry (a JSON object), got {type(data).__name__}", source=source)

        def required(name: str) -> Any:
            if name not in data:
                raise InputError("missing", source=source, field=name)
            return data[name]

        def checked(name: str, test: Callable[[Any], bool], rule: str) -> Any:
            value = required(name)
            if not test(value):
                raise InputError(f"must be {rule}, got {_shown(value)}", source=source, field=name)
            return value

        names = {name: store.check_name(required(name), name, source=source)
                 for name in ("id", "key", "scope", "tool")}
        agent = checked("agent", _is_text, "text")
        if agent:
            store.check_name(agent, "agent", source=source)
        if "output_base64" in data:
            try:
                output = base64.b64decode(checked("output_base64", _is_text, "text"), validate=True)
            except ValueError:  # binascii.Error, or text that is not ASCII
                raise InputError("must be base64 text", source=source, field="output_base64") from None
        else:
            output = checked("output", _is_text, "text").encode("utf-8")
        return cls(**names, args=check_args(required("args"), source), output=output,
                   stderr_tail=checked("stderr_tail", _is_text, "text"),
                   exit_code=checked("exit_code", is_exit_code, f"a whole number from 0 to {EXIT_CODE_MAX}"),
                   agent=agent, created_at=checked("created_at", _is_time, "an ISO 8601 time"),
                   expires_at=float(checked("expires_at", _is_expiry, f"Unix seconds from 0 to {_LAST_SECOND}")),
                   duration_ms=float(checked("duration_ms", _is_duration, "milliseconds, 0 or more")))


@dataclass
class Consolidated(Shape):
    """A cached call consolidated into long-term memory (memctl/ingest/consolidate.py)."""
    key: str = shown("The call's key.")
    tool: str = shown()
    memory_id: str = shown("The memory it became.")
    status: Literal["stored", "duplicate", "marked"] = shown("duplicate: already in MEMORY.md; marked: "
                                                             "consolidated before.")
    access_count: int = shown()


EXIT_CODE_MAX = 255  # what a process can exit with: `cache run` exits with the stored status
_LAST_SECOND = 253_402_300_799  # Unix seconds: the end of 9999, where datetime (as_dict's expires_at) ends


def is_exit_code(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= EXIT_CODE_MAX


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_number(value: Any) -> bool:
    """A JSON number: not a bool, and finite (compared, never converted: a huge int would overflow)."""
    return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)


def _is_expiry(value: Any) -> bool:
    return _is_number(value) and 0 <= value <= _LAST_SECOND


def _is_duration(value: Any) -> bool:
    return _is_number(value) and value >= 0


def _shown(value: Any) -> str:
    """A field's value in a message: a scalar as written, clipped; an array or object by its kind
    (its repr could be 1,000 levels deep, past Python's recursion limit)."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return f"{value!r:.80}"


def _is_time(value: Any) -> bool:
    """ISO 8601 text (consolidation hands it to ingest as the memory's created_at)."""
    if not isinstance(value, str):
        return False
    try:
        clock.parse_ts(value)
    except ValueError:
        return False
    return True


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
