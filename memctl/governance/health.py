"""`memctl health`: each memory's health score (G4) and its parts; the store check is memctl/check.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memctl.search.scores import Scorer, is_core
from memctl.store import memoryfile
from memctl.store.status import status_of

if TYPE_CHECKING:
    from memctl.runtime import Runtime


def scores(rt: Runtime, *, sort: str = "health") -> list[dict]:
    """Health score and its parts for every memory in MEMORY.md.

    Sort: health (weakest first), id, age (oldest first; unknown age last).
    """
    store = rt.store
    doc = memoryfile.load(store.memory_md)
    scorer = Scorer(store, rt.clock.now(), rt.settings.governance)
    rows = []
    for entry in doc.entries:
        score = scorer.health(entry)
        rows.append({"id": entry.id, "line": entry.line, "section": entry.section,
                     "status": status_of(entry), "core": is_core(entry, scorer.governance_settings),
                     "health": round(score.total, 6), **{k: v for k, v in score.as_dict().items() if k != "score"},
                     "summary": memoryfile.summary_of(entry)})
    if sort == "id":
        rows.sort(key=lambda r: r["id"])
    elif sort == "age":
        rows.sort(key=lambda r: (r["age_days"] is None, -(r["age_days"] or 0), r["id"]))
    else:
        rows.sort(key=lambda r: (r["health"], r["id"]))
    return rows
