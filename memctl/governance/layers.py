"""Layered retrieval under a token budget (G1, G3).

    L0 core     is_core or user_weight >= 9, always, at most 10
    L1 scope    the workspace's own memories (not global ones), at most 5
    L2 query    found by hybrid search, at most 5, only when a G3 trigger fires:
                history words, a decision question, an entity L0/L1 do not cover,
                or every 5th layered search of the store

Layers fill the budget in that order (tokens counted with cl100k_base); a
memory whose text does not fit is given as its summary, and one whose
summary does not fit either is left out. Every layer respects scope
isolation (G7): only global memories and the workspace's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from memctl.config import Governance
from memctl.store import counters, memoryfile
from memctl.search.scores import Scorer, is_core
from memctl.store.status import active_tails
from memctl.store.store import Store
from memctl.text.words import MEMORY_WORDS
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:
    from memctl.runtime import Runtime

_DECISION = re.compile(r"選擇|选择|比較|比较|決策|决策|決定|决定|還是|还是|哪個|哪个|"
                       r"\b(?:which|should|compare|comparison|versus|vs\.?|choose|choice|decide|decision|better)\b",
                       re.IGNORECASE)
# Names of things: CamelCase, ALLCAPS, dotted or snake_case identifiers, capitalised words after
# the first, and quoted terms.
_ENTITY = re.compile(r"`([^`]+)`|\"([^\"]+)\"|\b([A-Z][a-z]+[A-Z]\w*|[A-Z]{2,}\w*|\w+[._]\w+|[A-Z][a-z]{2,})\b")
EVERY_NTH_TURN = 5


@dataclass
class LayerItem(Shape):
    """A memory placed in a layer."""
    id: str = shown("The memory's id.")
    section: str = shown("Its MEMORY.md section.")
    scope: str = shown()
    summary: str | None = shown()
    score: float | None = shown("L2: its search score.", omit="none")
    layer: Literal["L0", "L1", "L2"] = shown()
    content: Literal["full", "summary"] = shown("summary: the budget took its summary only.")
    text: str = shown("Its text, or its summary.")
    tokens: int = shown("The tokens it takes.")


@dataclass
class Layered(Shape):
    """The layered context of G1 within a token budget: L0 core memories, L1 the workspace's, L2 the
    query's (only when a G3 trigger fires)."""
    budget: int = shown("The token budget of all three layers together.")
    workspace: str | None = shown("The scope whose memories form L1.")
    trigger: str | None = shown("Why L2 ran, or null.")
    layers: dict[str, list[LayerItem]] = shown('"L0", "L1" and "L2", each a list of items.', default_factory=lambda: {
        "L0": [], "L1": [], "L2": []})
    tokens_used: int = shown(default=0)
    left_out: list[str] = shown("Ids of memories over the budget.", default_factory=list)

    key_order = ("budget", "tokens_used", "workspace", "trigger", "layers", "left_out")


def trigger(query: str, covered_text: str, turn: int) -> str | None:
    """Which G3 rule, if any, calls for the query layer (L2)."""
    if m := MEMORY_WORDS.search(query):
        return f"history word '{m.group(0)}'"
    if m := _DECISION.search(query):
        return f"decision question '{m.group(0)}'"
    covered = covered_text.lower()
    for m in _ENTITY.finditer(query):
        name = next(g for g in m.groups() if g)
        before = query[:m.start()].rstrip()
        if re.fullmatch(r"[A-Z][a-z]+", name) and (not before or before[-1] in ".?!:"):
            continue  # a capital at the start of a sentence is no sign of a name
        if name.lower() not in covered:
            return f"unresolved entity '{name}'"
    if turn % EVERY_NTH_TURN == 0:
        return f"every {EVERY_NTH_TURN}th turn (turn {turn})"
    return None


def layered_search(rt: Runtime, query: str, *, workspace: str | None, budget: int, say=None,
                   retriever=None) -> Layered:
    """L0 core, L1 workspace, then L2 query results when a G3 trigger fires; `retriever` is
    an open search.Retriever to reuse (a server's), else one is made for this search."""
    from memctl.search.queries import Query
    from memctl.search import open_retriever
    from memctl.index.filters import Filters
    from memctl.text.tokens import count_tokens

    store, governance_settings = rt.store, rt.settings.governance
    doc = memoryfile.load(store.memory_md)
    core, scoped = core_and_scope(store, doc, workspace, governance_settings, rt.clock.now())
    core_ids = {e.id for e in core}

    result = Layered(budget=budget, workspace=workspace,
                     trigger=trigger(query, "\n".join(e.text for e in core + scoped), counters.turns(store) + 1))
    for entry in core:
        _place(result, "L0", _entry_item(entry), count_tokens)
    for entry in scoped:
        _place(result, "L1", _entry_item(entry), count_tokens)
    if result.trigger:
        taken = core_ids | {e.id for e in scoped}
        filters = Filters(kinds=("memory",), scopes=(workspace,) if workspace else ())
        retriever = retriever or open_retriever(rt, say=say)
        (found,) = retriever.search([Query(text=query, k=governance_settings.layer_query_max + len(taken),
                                           filters=filters)])
        for hit in [r for r in found if r.record_id not in taken][:governance_settings.layer_query_max]:
            entry = doc.find(hit.record_id)
            if entry is not None:
                item = _entry_item(entry)
                item["score"] = round(hit.score, 6)
                _place(result, "L2", item, count_tokens)
    counters.count_turn(store)  # only once the search succeeded: a failed one (exit 2) leaves the store as it was
    return result


def core_and_scope(store: Store, doc: memoryfile.Document, workspace: str | None,
                   governance_settings: Governance,
                   now: datetime) -> tuple[list[memoryfile.Entry], list[memoryfile.Entry]]:
    """The L0 core memories and the L1 memories of `workspace` (current chain tails of global and
    the workspace only), each layer best first (health at `now`) and at most its [governance] limit."""
    tails = set(active_tails(doc))
    visible = [e for e in doc.entries if e.id in tails and _in_scope(e, workspace)]
    scorer = Scorer(store, now, governance_settings)
    # is_core is the hard switch, user_weight the ranking (G1): flagged entries first.
    core = sorted((e for e in visible if is_core(e, governance_settings)),
                  key=lambda e: (e.get("is_core") is not True, -scorer.health(e).user_weight,
                                 -scorer.health(e).recency_decay, e.id))
    core = core[:governance_settings.layer_core_max]
    core_ids = {e.id for e in core}
    scoped = [e for e in visible if workspace and e.get("scope") == workspace and e.id not in core_ids]
    scoped = sorted(scoped, key=lambda e: (-scorer.health(e).total, e.id))[:governance_settings.layer_scope_max]
    return core, scoped


def _in_scope(entry: memoryfile.Entry, workspace: str | None) -> bool:
    scope = entry.get("scope", "global")
    return scope == "global" or (workspace is not None and scope == workspace)


def _entry_item(entry: memoryfile.Entry) -> dict[str, Any]:
    return {"id": entry.id, "section": entry.section, "scope": entry.get("scope", "global"),
            "summary": entry.get("summary"), "text": entry.text}


def _place(result: Layered, layer: str, item: dict[str, Any], count_tokens) -> None:
    """Add the full text if it fits the budget left, else the summary, else leave it out."""
    left = result.budget - result.tokens_used
    for content in ("full", "summary"):
        text = item["text"] if content == "full" else item.get("summary")
        if not text:
            continue
        tokens = count_tokens(text)
        if tokens <= left:
            result.layers[layer].append(LayerItem(item["id"], item["section"], item["scope"], item["summary"],
                                                  item.get("score"), layer, content, text, tokens).as_dict())
            result.tokens_used += tokens
            return
    result.left_out.append(item["id"])
