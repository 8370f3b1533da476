"""Scores of a message -> topic mapping against gold labels (used by bench/topics.py).

ARI is the main score: topics may return later, which segment metrics cannot
see. Pk and WindowDiff follow segeval: segments are the contiguous runs of a
label, the window is half the mean gold segment length.
"""

from __future__ import annotations

from collections import Counter
from math import comb


def ari(gold: list, predicted: list) -> float:
    n = len(gold)
    if n < 2:
        return 1.0
    pairs = Counter(zip(gold, predicted))
    index = sum(comb(c, 2) for c in pairs.values())
    rows = sum(comb(c, 2) for c in Counter(gold).values())
    cols = sum(comb(c, 2) for c in Counter(predicted).values())
    expected = rows * cols / comb(n, 2)
    best = (rows + cols) / 2
    if best == expected:
        return 1.0 if index == expected else 0.0
    return (index - expected) / (best - expected)


def _runs(labels: list) -> list[int]:
    run, out = 0, []
    for i, label in enumerate(labels):
        if i and label != labels[i - 1]:
            run += 1
        out.append(run)
    return out


def _window(gold: list) -> int:
    runs = _runs(gold)
    return max(2, round(len(gold) / (runs[-1] + 1) / 2))


def pk(gold: list, predicted: list) -> float:
    ref, hyp, k = _runs(gold), _runs(predicted), _window(gold)
    probes = [(ref[i] == ref[i + k]) != (hyp[i] == hyp[i + k]) for i in range(len(gold) - k)]
    return sum(probes) / len(probes) if probes else 0.0


def window_diff(gold: list, predicted: list) -> float:
    ref, hyp, k = _runs(gold), _runs(predicted), _window(gold)
    probes = [(ref[i + k] - ref[i]) != (hyp[i + k] - hyp[i]) for i in range(len(gold) - k)]
    return sum(probes) / len(probes) if probes else 0.0


def returns(gold: list, predicted: list) -> tuple[int, int]:
    """(returning runs sent back to their label's first topic, returning runs): a run's topic is its commonest."""
    first: dict = {}
    back = total = 0
    start = 0
    for i in range(1, len(gold) + 1):
        if i == len(gold) or gold[i] != gold[start]:
            topic = Counter(predicted[start:i]).most_common(1)[0][0]
            if gold[start] in first:
                total += 1
                back += topic == first[gold[start]]
            else:
                first[gold[start]] = topic
            start = i
    return back, total
