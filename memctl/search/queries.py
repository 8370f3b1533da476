"""Turning what users type (flags, batch lines) into search queries."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from memctl import clock
from memctl.errors import InputError
from memctl.index.filters import Filters
from memctl.store.store import check_scope
from memctl.text.bounds import within_bound

MODES = ("hybrid", "bm25", "vector")
RANKS = ("pipeline", "mera")
MAX_RESULTS = 100_000


@dataclass
class Query:
    text: str
    k: int = 10
    mode: str = "hybrid"
    filters: Filters = field(default_factory=Filters)
    min_score: float | None = None  # None: the subject test and [retrieval] hard_min_score
    rank: str = "pipeline"          # one of RANKS: pipeline, the ranking stages; mera, the governance's retrieval score
    neighbours: bool = True  # False: no neighbours and date stages (a caller that sums a run's hits itself)
    why_none: str | None = field(default=None, compare=False)  # set by the search when nothing passed: why

    def __post_init__(self):
        # Tantivy takes the limit as a 32-bit count: 1e20 overflowed it.
        if not 1 <= self.k <= MAX_RESULTS:
            raise InputError(f"must be a whole number from 1 to {MAX_RESULTS}, got {self.k}", source="-k", field="k")
        if self.rank not in RANKS:
            raise InputError(f"must be one of {', '.join(RANKS)}, got {self.rank!r}", source="--rank", field="rank")
        if self.min_score is not None and not math.isfinite(self.min_score):
            raise InputError(f"must be a finite number, got {self.min_score}", source="--min-score",
                             field="min_score")


_BATCH_KEYS = {"id", "query", "k", "mode", "kind", "scope", "section", "source", "session", "since", "until",
               "min_score", "rank", "tool", "agent"}
_KINDS = ("memory", "message", "log", "topic")


def filters_from(*, kinds=(), scope=None, sections=(), sources=(), sessions=(), since=None, until=None,
                 tools=(), agents=(), where: str = "") -> Filters:
    """Filters from option values; `where` names the flag or line at fault in errors."""
    check_scope(scope, source=where or "--scope")
    return Filters(kinds=tuple(kinds), scopes=(scope,) if scope else (), sections=tuple(sections),
                   sources=tuple(sources), sessions=tuple(sessions), tools=tuple(tools), agents=tuple(agents),
                   since=_time_bound(since, False, where or "--since"),
                   until=_time_bound(until, True, where or "--until"))


def _time_bound(value: str | None, end_of_day: bool, where: str) -> int | None:
    """Unix seconds of an ISO date or time; a bare date as an upper bound means its whole day."""
    if value is None:
        return None
    try:
        moment = clock.parse_ts(value)
    except (ValueError, TypeError):
        raise InputError(f"not an ISO 8601 date or time: {value!r}", source=where) from None
    if end_of_day and isinstance(value, str) and len(value.strip()) == 10:
        moment += timedelta(days=1, seconds=-1)
    return int(moment.timestamp())


def parse_batch(data: bytes, source: str, default: dict[str, Any]) -> tuple[list[Query], list[Any]]:
    """Queries of a --batch input, one JSON object a line; every line is checked before any runs."""
    from memctl.store import jsonl

    text = jsonl.decode(data, source)
    queries, ids = [], []
    for record in jsonl.read_input(text, source):
        line, item = record.line, record.value
        unknown = sorted(set(item) - _BATCH_KEYS)
        if unknown:
            raise InputError(f"not a batch field; known: {', '.join(sorted(_BATCH_KEYS))}", source=source,
                             line=line, field=unknown[0])
        query = item.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InputError("must be non-empty text", source=source, line=line, field="query")
        within_bound(query, source, line=line, field="query")
        options = dict(default)
        if "k" in item:
            if not isinstance(item["k"], int) or isinstance(item["k"], bool) or item["k"] < 1:
                raise InputError("must be a whole number >= 1", source=source, line=line, field="k")
            options["k"] = item["k"]
        if "mode" in item:
            if item["mode"] not in MODES:
                raise InputError(f"must be one of {', '.join(MODES)}", source=source, line=line, field="mode")
            options["mode"] = item["mode"]
        if "rank" in item:
            if item["rank"] not in RANKS:
                raise InputError(f"must be one of {', '.join(RANKS)}", source=source, line=line, field="rank")
            options["rank"] = item["rank"]
        if "min_score" in item:
            if not isinstance(item["min_score"], (int, float)) or isinstance(item["min_score"], bool):
                raise InputError("must be a number", source=source, line=line, field="min_score")
            options["min_score"] = float(item["min_score"])
        if any(key in item for key in ("kind", "scope", "section", "source", "session", "since", "until", "tool",
                                       "agent")):
            options["filters"] = _batch_filters(item, source, line, default["filters"])
        try:
            queries.append(Query(text=query, **options))
        except InputError as exc:  # named after the flag; here the field of this line is at fault
            raise InputError(exc.message, source=source, line=line, field=exc.field) from None
        ids.append(item.get("id", line))
    return queries, ids


def _batch_filters(item: dict, source: str, line: int, default: Filters) -> Filters:
    def many(name: str, current: tuple) -> tuple:
        value = item.get(name)
        if value is None:
            return current
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InputError("must be text or a list of text", source=source, line=line, field=name)
        return tuple(values)

    kinds = many("kind", default.kinds)
    bad = [k for k in kinds if k not in _KINDS]
    if bad:
        raise InputError(f"must be one of {', '.join(_KINDS)}", source=source, line=line, field="kind")
    where = f"{source}:{line}"
    scope = item.get("scope", default.scopes[0] if default.scopes else None)
    try:
        filters = filters_from(kinds=kinds, scope=scope, sections=many("section", default.sections),
                               sources=many("source", default.sources), sessions=many("session", default.sessions),
                               tools=many("tool", default.tools), agents=many("agent", default.agents),
                               since=item.get("since"), until=item.get("until"), where=where)
    except InputError as exc:
        raise InputError(exc.message, source=source, line=line, field=exc.field) from None
    if "since" not in item:
        filters.since = default.since
    if "until" not in item:
        filters.until = default.until
    return filters


