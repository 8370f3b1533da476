"""Timestamps: parsing what callers send, and the current time.

MEMCTL_NOW pins the clock (ISO 8601), so that ages, TTLs and decay can be
replayed exactly, in tests and when re-running a cron job for a past day.
It is read here and nowhere else: `Clock.from_environment()` (a Memory's
clock, runtime.Runtime: every module below the API takes its time from that) and `now()`
(a face's own stamps, given no Memory).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone

ENVIRONMENT = "MEMCTL_NOW"


@dataclass(frozen=True)
class Clock:
    """The current time, or a pinned one (`pinned`): every age, TTL and expiry reads one of these."""

    pinned: datetime | None = None

    @classmethod
    def from_environment(cls) -> "Clock":
        value = os.environ.get(ENVIRONMENT)
        return cls(parse_ts(value) if value else None)

    def now(self) -> datetime:
        """Now, to the second (stamps in the files are)."""
        if self.pinned is not None:
            return self.pinned
        return datetime.now(timezone.utc).replace(microsecond=0)

    def seconds(self) -> float:
        """Now as Unix seconds, to the sub-second: what TTLs (the cache's expiry) count in."""
        return self.pinned.timestamp() if self.pinned is not None else time.time()


def now() -> datetime:
    """Now, by MEMCTL_NOW if set: for code that was given no Clock."""
    return Clock.from_environment().now()


def parse_ts(value: str | int | float) -> datetime:
    """An aware datetime from ISO 8601 text or Unix seconds; naive text is UTC.

    Raises ValueError (or TypeError for other types) on anything else.
    """
    if isinstance(value, bool):
        raise TypeError("a boolean is not a time")
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    if not isinstance(value, str):
        raise TypeError(f"expected ISO 8601 text or Unix seconds, got {type(value).__name__}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def epoch_or_none(value: str | None) -> float | None:
    """Unix seconds of a stored time (ISO 8601 text); None when there is none or it is unreadable."""
    try:
        return parse_ts(value).timestamp() if value else None
    except (ValueError, TypeError):
        return None


def format_ts(moment: datetime) -> str:
    """ISO 8601 with the offset kept as given; UTC is written with Z."""
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def age_days(then: str | datetime | None, at: datetime) -> float:
    """Days from `then` to `at`; 0 when `then` is unknown."""
    if then is None:
        return 0.0
    moment = parse_ts(then) if not isinstance(then, datetime) else then
    return max(0.0, (at - moment).total_seconds() / 86400)
