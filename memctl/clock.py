"""Timestamps: parsing what callers send, and the current time.

MEMCTL_NOW pins the clock (ISO 8601), so that ages, TTLs and decay can be
replayed exactly, in tests and when re-running a cron job for a past day.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone


def now() -> datetime:
    pinned = os.environ.get("MEMCTL_NOW")
    if pinned:
        return parse_ts(pinned)
    return datetime.now(timezone.utc).replace(microsecond=0)


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


def format_ts(moment: datetime) -> str:
    """ISO 8601 with the offset kept as given; UTC is written with Z."""
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def age_days(then: str | datetime | None, at: datetime | None = None) -> float:
    """Days from `then` to `at` (default now); 0 when `then` is unknown."""
    if then is None:
        return 0.0
    moment = parse_ts(then) if not isinstance(then, datetime) else then
    return max(0.0, ((at or now()) - moment).total_seconds() / 86400)
