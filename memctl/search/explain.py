"""`--explain` for a person: each ranking stage's own factor beside the running score.

A result's `explain` (the JSON schema) keeps the running score after each
stage under the stage's name; read alone, `importance=0.6079 length=0.6079`
says nothing about what length did. Here each stage is shown as what it did
(recency adds, the others multiply) and where the score stood after it.
"""

from __future__ import annotations

from typing import Any

from memctl.search.stages import STAGES


def explain_lines(explain: dict[str, Any]) -> list[str]:
    """Lines describing one result's ranking: fusion, then each stage, then MERA/MMR notes."""
    lines = []
    if "fused" in explain:
        if explain.get("fusion") == "rrf":
            how = "reciprocal rank fusion"
        else:
            how = (f"{explain['vector_weight']}·cosine {explain.get('cosine_calibrated', explain['cosine'])} + "
                   f"{explain['bm25_weight']}·bm25 {explain['bm25_norm']} (raw {explain['bm25']})")
        unknown = f"; unknown word pieces {explain['unknown_share']}" if "unknown_share" in explain else ""
        lines.append(f"fused {explain['fused']:.4f} = {how}{unknown}")
        if "cosine_reply" in explain:
            own, reply = explain["cosine_own"], explain["cosine_reply"]
            lines.append(f"cosine {explain['cosine']} = own {own}, raised towards its reply's {reply} (the reply's "
                         "vector reads this turn too)" if reply > own else
                         f"cosine {own}: its reply's {reply} is lower, no credit")
    if "relevance" in explain:
        lines.append(f"relevance {explain['relevance']:.4f} = calibrated own cosine "
                     f"{explain.get('relevance_cosine', explain['cosine_calibrated'])}, "
                     f"bm25 coverage {explain['bm25_coverage']} (the minimum judges this, before age)")
    if "confidence" in explain:
        lines.append(f"confidence {explain['confidence']:.4f} that it is relevant (a model fitted on dev data: "
                     "memctl/search/rules/confidence.toml; it orders nothing)")
    steps = []
    before = explain.get("fused")
    for name, acts in ((stage.name, stage.acts) for stage in STAGES if stage.acts):
        after = explain.get(name)
        if before is None:
            break
        if after is None:  # a stage that did not run (neighbours: chat turns only)
            continue
        if acts == "+":
            own = f"+{explain.get(name + '_bonus', after - before):.4f}"
        elif f"{name}_factor" in explain:
            own = f"×{explain[name + '_factor']:.3f}"
        else:
            own = f"×{after / before:.3f}" if before else "×-"
        steps.append(f"{name} {own} → {after:.4f}")
        before = after
    if steps:
        age = f" (age {explain['age_days']} days)" if "age_days" in explain else ""
        lines.append("  ".join(steps) + age)
    if "mera" in explain:
        mera = explain["mera"]
        parts = "  ".join(f"{k} {v}" for k, v in mera.items() if k != "score")
        lines.append(f"mera {mera.get('score')} from {parts}")
    if "newer_first" in explain:
        lines.append(f"newer first: {explain['newer_first']}")
    if "mmr" in explain:
        lines.append(f"mmr: {explain['mmr']}")
    return lines
