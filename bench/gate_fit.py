"""The subject test's thresholds against every dev set at once, from the signals bench/confidence_fit.py
recorded (issue #33): what each variant keeps of the answers and lets through of unrelated queries.

    MEMCTL_FIT_CACHE=DIR python bench/confidence_fit.py collect     (records each clause's verdict too)
    MEMCTL_FIT_CACHE=DIR python bench/gate_fit.py [--grid]

A variant is the test with other thresholds: a candidate's own calibrated cosine ≥ the size-dependent
minimum (SubjectTest.min_cosine: `cosine` at `reference` units and above, lower by `slope` per unit of
√(2 ln n) below), or its BM25 coverage ≥ `coverage`, or its fused relevance ≥ `relevance`; the clauses
that read words (two units' words, names in two scripts) are taken as recorded. Positives are scored
by their data set's measure (0 when refused), unrelated queries by the share answered with anything.
`--grid` searches the thresholds on the fit part for the most answers kept with every source's
unrelated share at most --unrelated, and prints the best beside the recorded test on both parts.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from confidence_fit import key_of, load_records, metric  # noqa: E402


def min_cosine(n: int, cosine: float, reference: int, slope: float) -> float:
    if n <= 0 or n >= reference:
        return cosine
    return max(0.0, cosine - slope * (math.sqrt(2 * math.log(reference)) - math.sqrt(2 * math.log(max(n, 1)))))


def verdicts(records, variant: dict | None) -> np.ndarray:
    if variant is None:
        return np.array([bool(r["old_gate"]) for r in records])
    out = []
    for r in records:
        if not len(r.get("relevance_cosine", ())):
            out.append(False)
            continue
        meaning = r["relevance_cosine"] * r["trust"]
        out.append(bool(np.any(meaning >= min_cosine(r["units"], variant["cosine"], variant["reference"], variant["slope"]))
                        or np.any(r["coverage"] >= variant["coverage"]) or np.any(r["relevance"] >= variant["relevance"])
                        or r.get("words_known") or r.get("named")))
    return np.array(out)


def scores(records, passed) -> dict[str, float]:
    by_key: dict[str, list[float]] = {}
    for r, ok in zip(records, passed):
        key = key_of(r)
        if key.endswith("unrelated"):
            by_key.setdefault(key, []).append(float(bool(ok and r["ranked"])))
        else:
            by_key.setdefault(key, []).append(metric(r, r["ranked"] if ok else []))
    return {key: float(np.mean(values)) for key, values in sorted(by_key.items())}


def table(parts: dict[str, list[dict]], variants: dict[str, dict | None]) -> None:
    for title, part in parts.items():
        columns = {name: scores(part, verdicts(part, v)) for name, v in variants.items()}
        keys = next(iter(columns.values()))
        counts = {key: sum(1 for r in part if key_of(r) == key) for key in keys}
        print(f"\n### {title}\n\n| set | n | " + " | ".join(columns) + " |\n| --- | --- | "
              + " | ".join("---" for _ in columns) + " |")
        for key in keys:
            print(f"| {key} | {counts[key]} | " + " | ".join(f"{columns[c][key]:.3f}" for c in columns) + " |")


def grid(fitting, limit: float):
    best = None
    for cosine, slope, coverage, relevance in itertools.product(
            (0.40, 0.45, 0.5, 0.55), (0.0, 0.05, 0.11, 0.15, 0.2, 0.25), (0.4, 0.5, 0.6, 0.7, 1.01), (0.38, 0.45, 1.01)):
        variant = {"cosine": cosine, "reference": 600, "slope": slope, "coverage": coverage, "relevance": relevance}
        s = scores(fitting, verdicts(fitting, variant))
        if any(v > limit for k, v in s.items() if k.endswith("unrelated")):
            continue
        kept = np.mean([v for k, v in s.items() if not k.endswith("unrelated")])
        if best is None or kept > best[0]:
            best = (kept, variant)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--unrelated", type=float, default=0.05)
    parser.add_argument("--variant", action="append", default=[], metavar="COS,SLOPE,COVERAGE,RELEVANCE")
    args = parser.parse_args()
    records = [r for r in load_records() if "words_known" in r]
    parts = {"fit part": [r for r in records if r["split"] in ("fit", "dev")],
             "check part (held out)": [r for r in records if r["split"] in ("check", "heldout")]}
    variants: dict[str, dict | None] = {"recorded test": None}
    for text in args.variant:
        cosine, slope, coverage, relevance = (float(x) for x in text.split(","))
        variants[text] = {"cosine": cosine, "reference": 600, "slope": slope, "coverage": coverage, "relevance": relevance}
    if args.grid:
        found = grid(parts["fit part"], args.unrelated)
        if found:
            print(f"best on the fit part (answers kept, mean over sets {found[0]:.3f}): {found[1]}")
            variants["best"] = found[1]
    table(parts, variants)


if __name__ == "__main__":
    main()
