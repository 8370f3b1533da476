"""How sure a search is that each result is relevant: a probability, from a logistic model over
signals the search computes anyway, fitted on dev data (bench/confidence_fit.py) and read from
rules/confidence.toml with its provenance (the data sets, the commit, the command).

p = 1 / (1 + exp(-(intercept + coefficients · features))), a candidate's features chosen by the fit
among FEATURES: for the default model, its own calibrated cosine (as far as the model reads the
query), its BM25 coverage, and how many units the store holds. Each is scale-free (cosines
calibrated per model, coverage a share of the query's own word weight), so a model the file has no
fit for is judged by the default model's fit. Nothing reads a word list.

The confidence orders nothing and drops nothing: the minimum stage decides what is returned
(subject.SubjectTest). It says how far to trust each result: on the held-out part of the dev
sets, the results of each bin of confidence were relevant within ~.05 of what it says (Brier
.0453 against the base rate's .0494; bench/README.md, "Issue 33: each result's confidence, and
refusals read from it").
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
    relevance_cosine: object  # each one's own calibrated cosine (0 unrelated, 1 paraphrase): float64 arrays
    coverage: object  # the share of the query's BM25 weight each matched
    relevance: object  # the fused relevance the minimum judges
    trust: float  # how far the model reads the query: its vector weight over the configured one, 0..1
    units: int  # the units of the store the filters allow


def _column(name: str, signals: Signals):
    """One feature of every candidate (an array), or of the query (a number, the same for each)."""
    if name == "meaning":
        return signals.trust * signals.relevance_cosine
    if name == "coverage":
        return signals.coverage
    if name == "relevance":
        return signals.relevance
    if name == "below_best":
        return float(signals.relevance.max()) - signals.relevance
    if name == "best_meaning":
        return signals.trust * float(signals.relevance_cosine.max())
    if name == "store_units":
        # the share of a store's results that answer falls as the store grows: 1 in 4 in a
        # store of four messages, ~1 in 20 of LoCoMo's top 10 (bench/README.md)
        return math.log10(1 + signals.units)
    raise ValueError(f"no feature {name!r}; known: {', '.join(FEATURES)}")


# What a fit may choose from (bench/confidence_fit.py --features); the rules file names its choice.
# The default model's: its own cosine, coverage and the store's size. How far below the query's best
# a result is lowered the Brier score a little (.0453 -> .0444 held out) but put an answer's evidence
# over an unrelated query's best result in fewer pairs (.815 -> .765), which is what a reader of the
# confidence compares (bench/README.md, "Issue 33: each result's confidence, and refusals read from
# it").
FEATURES = ("meaning", "coverage", "store_units", "relevance", "below_best", "best_meaning")


def features(signals: Signals, names: tuple[str, ...] = FEATURES):
    """The model's inputs, a row a candidate, in `names`' order (for fitting: bench/confidence_fit.py)."""
    import numpy as np

    n = len(signals.relevance)
    if not n:
        return np.zeros((0, len(names)))
    return np.column_stack([np.broadcast_to(np.asarray(_column(name, signals), dtype=np.float64), n)
                            for name in names])


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

        if not len(signals.relevance):
            return np.zeros(0)
        logit = self.intercept
        for name, coefficient in zip(self.features, self.coefficients):
            logit = logit + coefficient * _column(name, signals)
        return 1 / (1 + np.exp(-np.broadcast_to(logit, len(signals.relevance))))


@functools.lru_cache(maxsize=8)
def model_for(embedding_model: str) -> Model:
    """The fit of an embedding model ("": the default), else the default model's."""
    import tomllib

    with RULES.open("rb") as file:
        rules = tomllib.load(file)
    fits = rules["models"]
    fit = fits.get(embedding_model) or fits[rules["default"]]
    return Model(fit["model"], tuple(fit["features"]), tuple(fit["coefficients"]), fit["intercept"])
