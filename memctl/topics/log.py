"""The tuning log (T11): topics/activation_log.jsonl, one JSON object an event, appended.

    {"at": "…", "event": "round", "session": "s1", "scores": {"t-…": 0.82}, "averages": {"t-…": 0.6},
     "activation_threshold": 0.5, "dormancy_threshold": 0.25, "cue": "did you forget" | null}
    {"at": "…", "event": "activated" | "dormant" | "archived" | "merged",
     "topic": "t-…", "reason": "score" | "amnesia cue" | "explicit" | "daily review" | …, "into"?: "t-…"}

Every write goes through the caller's Transaction, so a round and its events land together.
"""

from __future__ import annotations

import orjson

from memctl import clock
from memctl.errors import InputError
from memctl.store import jsonl
from memctl.store.store import Store

LOG = "activation_log.jsonl"


def append(tx, store: Store, events: list[dict]) -> None:
    if events:
        tx.append(store.path("topics", LOG), b"".join(orjson.dumps(e) + b"\n" for e in events))


def read(store: Store, since: str | None = None) -> list[dict]:
    """The events at or after `since` (an ISO date or time), oldest first."""
    start = None
    if since:
        try:
            start = clock.parse_ts(since)
        except (ValueError, TypeError):
            raise InputError(f"not an ISO 8601 date or time: {since!r}", source="--since") from None
    events = []
    for line in jsonl.read(store.path("topics", LOG)):
        event = line.value
        if line.problem == jsonl.UNTERMINATED:
            continue
        if event is None:
            raise InputError(line.problem or "not a JSON object", source=str(store.path("topics", LOG)), line=line.number)
        if start is None or clock.parse_ts(event["at"]) >= start:
            events.append(event)
    return events
