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


# A batch line's keys besides its filters, whose keys are the search filters' (api Filters, passed down).
_BATCH_KEYS = {"id", "query", "k", "mode", "min_score", "rank"}


def filters_from(*, kinds=(), scope=None, sections=(), sources=(), sessions=(), since=None, until=None,
                 tools=(), agents=(), where: str = "") -> Filters:
    """Filters from option values; `where` names the flag or line at fault in errors."""
    check_scope(scope, source=where or "--scope")
    return Filters(kinds=tuple(kinds), scopes=(scope,) if scope else (), sections=tuple(sections),
                   sources=tuple(sources), sessions=tuple(sessions), tools=tuple(tools), agents=tuple(agents),
                   since=_time_bound(since, False, where or "--since", "since"),
                   until=_time_bound(until, True, where or "--until", "until"))


def _time_bound(value: str | None, end_of_day: bool, where: str, name: str) -> int | None:
    """Unix seconds of an ISO date or time; a bare date as an upper bound means its whole day."""
    if value is None:
        return None
    try:
        moment = clock.parse_ts(value)
    except (ValueError, TypeError):
        raise InputError(f"not an ISO 8601 date or time: {value!r}", source=where, field=name) from None
    if end_of_day and isinstance(value, str) and len(value.strip()) == 10:
        moment += timedelta(days=1, seconds=-1)
    return int(moment.timestamp())


def parse_batch(data: bytes, source: str, default: dict[str, Any], where: Any,
                filter_params: tuple[Any, ...]) -> tuple[list[Query], list[Any]]:
    """Queries of a --batch input, one JSON object a line; every line is checked before any runs.
    `where` (the api's Filters) holds the default filters, `filter_params` their declarations (Params):
    a line's filter keys are theirs, so a filter added there is a batch key too."""
    from memctl.store import jsonl

    filter_keys = {p.wire_name: p for p in filter_params}
    known = _BATCH_KEYS | set(filter_keys)
    text = jsonl.decode(data, source)
    queries, ids = [], []
    for record in jsonl.read_input(text, source):
        line, item = record.line, record.value
        unknown = sorted(set(item) - known)
        if unknown:
            raise InputError(f"not a batch field; known: {', '.join(sorted(known))}", source=source,
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
        given = {param.name: _filter_value(param, item[key], source, line)
                 for key, param in filter_keys.items() if key in item}
        if given:
            try:
                options["filters"] = where.given(**given).rendered()
            except InputError as exc:  # named after the flag; here the field of this line is at fault
                raise InputError(exc.message, source=source, line=line, field=exc.field) from None
        try:
            queries.append(Query(text=query, **options))
        except InputError as exc:
            raise InputError(exc.message, source=source, line=line, field=exc.field) from None
        ids.append(item.get("id", line))
    return queries, ids


def _filter_value(param: Any, value: Any, source: str, line: int) -> Any:
    """A batch line's value of a filter, checked against its declaration (a Param); a list filter
    takes one text or a list of them, as its option is repeatable."""
    key = param.wire_name
    if param.type is bool:
        if not isinstance(value, bool):
            raise InputError("must be true or false", source=source, line=line, field=key)
        return value
    if param.many:
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InputError("must be text or a list of text", source=source, line=line, field=key)
        if param.choices and any(v not in param.choices for v in values):
            raise InputError(f"must be one of {', '.join(param.choices)}", source=source, line=line, field=key)
        return tuple(values)
    return value
