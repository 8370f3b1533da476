"""MERA scores (G4), each in [0, 1] with its parts kept for --explain:

    retrieval_score = 0.4 relevance + 0.25 recency_decay + 0.2 access_frequency + 0.15 user_weight/10
    health_score    =                 0.4 recency_decay + 0.35 access_frequency + 0.25 user_weight/10
    recency_decay    = exp(-ln2 / 14 * days since created_at)   (1.0 when created_at is missing)
    access_frequency = min(access_count / 20, 1), access_count = the entry's own
                       `access_count` (a base) + the searches counted in access.json
    user_weight      = the entry's, else 5 (the middle of 0..10)

Every constant is a setting of the [governance] table of memctl.toml. Search ranks by the
retrieval score (--rank mera); governance's lifecycle and health by the health score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from memctl import clock
from memctl import config
from memctl.store.memoryfile import Entry
from memctl.store.status import fields_of
from memctl.store.store import Store
from memctl.text.shape import Shape, shown


def governance_settings() -> config.Governance:
    """The default [governance] settings (a store's are its runtime's: rt.settings.governance)."""
    return config.Governance()


def _number(value: Any, low: float, high: float) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high:
        return float(value)
    return None


def user_weight_of(entry: Entry | Mapping[str, Any], governance_settings: config.Governance) -> float:
    weight = _number(fields_of(entry).get("user_weight"), 0, 10)
    return governance_settings.default_user_weight if weight is None else weight


def is_core(entry: Entry | Mapping[str, Any], governance_settings: config.Governance) -> bool:
    """Layer 0: is_core, or user_weight at least core_user_weight (9). Never demoted."""
    fields = fields_of(entry)
    weight = _number(fields.get("user_weight"), 0, 10)
    return fields.get("is_core") is True or (weight is not None and weight >= governance_settings.core_user_weight)


def parse_time(value: Any) -> datetime | None:
    try:
        return clock.parse_ts(value) if isinstance(value, str) else None
    except (ValueError, TypeError):
        return None


@dataclass
class Score(Shape):
    """A score and the parts it was made of (each in [0, 1] but user_weight, 0..10)."""
    total: float = shown(name="score", digits=6)
    recency_decay: float = shown(digits=6)
    access_frequency: float = shown(digits=6)
    # 0..10 as used (the entry's, else the default); the formulas use /10
    user_weight: float = shown("0-10, as used (the memory's, else the default).", digits=6)
    access_count: int = shown()
    age_days: float | None = shown("Null when created_at is missing or unreadable.", digits=3)
    relevance: float | None = shown("Retrieval scores only.", digits=6, omit="none", default=None)


def _parts(entry: Entry | Mapping[str, Any], now: datetime, accesses: int,
           governance_settings: config.Governance) -> tuple[float, float, float, int, float | None]:
    fields = fields_of(entry)
    created = parse_time(fields.get("created_at"))
    age = None if created is None else clock.age_days(created, now)
    recency = 1.0 if age is None else math.exp(-math.log(2) / governance_settings.recency_half_life_days * age)
    base = fields.get("access_count")
    base = base if isinstance(base, int) and not isinstance(base, bool) and base >= 0 else 0
    count = base + max(0, int(accesses))
    frequency = min(count / governance_settings.access_saturation, 1.0)
    return recency, frequency, user_weight_of(entry, governance_settings), count, age


def health_score(entry: Entry | Mapping[str, Any], now: datetime, *, accesses: int = 0,
                 governance_settings: config.Governance | None = None) -> Score:
    """Health (no query): 0.4 recency + 0.35 access frequency + 0.25 user_weight/10.

    `accesses` is the entry's count in access.json (see Scorer, which looks it up).
    """
    governance_settings = governance_settings or config.Governance()
    recency, frequency, weight, count, age = _parts(entry, now, accesses, governance_settings)
    total = (governance_settings.health_weight_recency * recency
             + governance_settings.health_weight_access * frequency
             + governance_settings.health_weight_user * weight / 10)
    return Score(total, recency, frequency, weight, count, age)


def retrieval_score(relevance: float, entry: Entry | Mapping[str, Any], now: datetime, *,
                    accesses: int = 0, governance_settings: config.Governance | None = None) -> Score:
    """Ranking with a query: 0.4 relevance + 0.25 recency + 0.2 access frequency + 0.15 user_weight/10.

    `relevance` is the search's own score, clamped to [0, 1].
    """
    governance_settings = governance_settings or config.Governance()
    relevance = min(max(float(relevance), 0.0), 1.0)
    recency, frequency, weight, count, age = _parts(entry, now, accesses, governance_settings)
    total = (governance_settings.retrieval_weight_relevance * relevance
             + governance_settings.retrieval_weight_recency * recency
             + governance_settings.retrieval_weight_access * frequency
             + governance_settings.retrieval_weight_user * weight / 10)
    return Score(total, recency, frequency, weight, count, age, relevance)


class Scorer:
    """Scores for one store: reads the settings and access.json once, for many entries.

        scorer = Scorer(store, rt.clock.now(), rt.settings.governance)
        scorer.retrieval(0.82, unit.fields, unit.record_id).total
    """

    def __init__(self, store: Store, now: datetime, governance_settings: config.Governance):
        """`now`: the moment ages count to; `governance_settings`: the store's [governance] (its runtime's
        clock and settings)."""
        from memctl.store import counters as access

        self.governance_settings = governance_settings
        self.now = now
        self.counts = access.load(store)

    def accesses(self, memory_id: str) -> int:
        entry = self.counts.get(memory_id)
        count = entry.get("count", 0) if isinstance(entry, dict) else 0
        return count if isinstance(count, int) and not isinstance(count, bool) else 0

    def health(self, entry: Entry | Mapping[str, Any], memory_id: str | None = None) -> Score:
        return health_score(entry, self.now, accesses=self.accesses(memory_id or _id_of(entry)),
                            governance_settings=self.governance_settings)

    def retrieval(self, relevance: float, entry: Entry | Mapping[str, Any], memory_id: str | None = None) -> Score:
        return retrieval_score(relevance, entry, self.now, accesses=self.accesses(memory_id or _id_of(entry)),
                               governance_settings=self.governance_settings)


def _id_of(entry: Entry | Mapping[str, Any]) -> str:
    return entry.id if isinstance(entry, Entry) else str(fields_of(entry).get("id", ""))
