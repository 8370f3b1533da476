"""How sure a search is that each result is relevant: a probability, from a logistic model over
signals the search computes anyway, fitted on dev data (bench/confidence_fit.py) and read from
rules/confidence.toml with its provenance (the data sets, the commit, the command).

p = 1 / (1 + exp(-(intercept + coefficients · features))), a candidate's features being its own
calibrated cosine (as far as the model reads the query), its BM25 coverage and fused relevance,
how far its relevance stands below the query's best, the query's best calibrated cosine, and how
many units the store holds (FEATURES). Each is scale-free (cosines calibrated per
model, coverage a share of the query's own word weight), so a model the file has no fit for is
judged by the default model's fit. Nothing reads a word list.

The confidence orders nothing and drops nothing: the minimum stage decides what is returned
(subject.SubjectTest). It says how far to trust each result: on the held-out part of the dev
sets, results given .8 and above were relevant ~.8 of the time (bench/README.md, "Issue 33:
each result's confidence").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

RULES = Path(__file__).parent / "rules" / "confidence.toml"


@dataclass
class Signals:
    """What the model reads of one search's candidates (arrays: one entry a candidate)."""
    relevance_cosine: object  # each one's own calibrated cosine (0 unrelated, 1 paraphrase)
    coverage: object  # the share of the query's BM25 weight each matched
    relevance: object  # the fused relevance the minimum judges
    trust: float  # how far the model reads the query: its vector weight over the configured one, 0..1
    units: int  # the units of the store the filters allow


def _columns(signals: Signals) -> dict:
    import numpy as np

    meaning = signals.trust * np.asarray(signals.relevance_cosine, dtype=np.float64)
    relevance = np.asarray(signals.relevance, dtype=np.float64)
    n = len(relevance)
    return {
        "meaning": meaning,
        "coverage": np.asarray(signals.coverage, dtype=np.float64),
        "relevance": relevance,
        "below_best": (float(relevance.max()) if n else 0.0) - relevance,
        "best_meaning": np.full(n, float(meaning.max()) if n else 0.0),
        # the share of a store's results that answer falls as the store grows: 1 in 4 in a
        # store of four messages, ~1 in 20 of LoCoMo's top 10 (bench/README.md)
        "store_units": np.full(n, math.log10(1 + signals.units)),
    }


# Chosen on the check part (bench/README.md, "Issue 33: each result's confidence"): the query's
# best coverage, its word count and the model's trust alone added nothing (Brier .0396-.0397).
FEATURES = ("meaning", "coverage", "relevance", "below_best", "best_meaning", "store_units")


def features(signals: Signals, names: tuple[str, ...] = FEATURES):
    """The model's inputs, a row a candidate, in `names`' order."""
    import numpy as np

    columns = _columns(signals)
    if not len(signals.relevance):
        return np.zeros((0, len(names)))
    return np.column_stack([columns[name] for name in names])


@dataclass(frozen=True)
class Model:
    """One embedding model's fit: p = logistic(intercept + coefficients · features)."""
    model: str  # the embedding model it was fitted for
    features: tuple[str, ...]
    coefficients: tuple[float, ...]
    intercept: float

    def confidence(self, signals: Signals):
        """Each candidate's probability of being relevant."""
        import numpy as np

        logit = self.intercept + features(signals, self.features) @ np.asarray(self.coefficients)
        return 1 / (1 + np.exp(-logit))


@functools.lru_cache(maxsize=8)
def model_for(embedding_model: str) -> Model:
    """The fit of an embedding model ("": the default), else the default model's."""
    import tomllib

    with RULES.open("rb") as file:
        rules = tomllib.load(file)
    fits = rules["models"]
    fit = fits.get(embedding_model) or fits[rules["default"]]
    return Model(fit["model"], tuple(fit["features"]), tuple(fit["coefficients"]), fit["intercept"])
