"""Whether the store knows what a query asks about: the decision of the minimum stage.

A search returns nothing when no candidate is about the query. The decision reads only the
signals in `Evidence`, which the minimum stage gathers, so that another test (a calibrated
relevance model, say) replaces `SubjectTest` without touching the stages around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from memctl import config
    from memctl.index import lexical


@dataclass
class Evidence:
    """What the subject test reads of one search's candidates (arrays: one entry a candidate)."""
    relevance: object  # the fused relevance, 0..1, rounded to 4 digits
    relevance_cosine: object  # each one's own calibrated cosine (0 unrelated, 1 paraphrase)
    coverage: object  # the share of the query's BM25 weight each matched
    vector_weight: float  # the vector weight this query got (it shrinks for text the model cannot read)
    bm25: lexical.Hits  # BM25's hits (by unit id) and the query's words' idf
    units: list[dict]  # the candidates' units
    terms_of: Callable[[dict], frozenset[str]]  # a unit's analysed content words
    query: str
    compared: int = 0  # the units the query's vector was compared with (0: not known)


class SubjectTest:
    """The store knows the subject when one candidate's meaning or words match the query well
    (knows_subject), two units together hold enough of its rare words (words_known), or, of a
    query written in two scripts, a unit of one holds the query's names in it (named_in_its_script)."""

    def __init__(self, retrieval: config.Retrieval):
        self.retrieval = retrieval

    def knows(self, evidence: Evidence) -> bool:
        return (self.knows_subject(evidence) or self.words_known(evidence)
                or self.named_in_its_script(evidence))

    def knows_subject(self, evidence: Evidence) -> bool:
        """Whether some candidate is about the query: its own meaning or its words match it well.

        The minimum judges the query, not each result against the best: on LongMemEval an
        evidence turn ranked in the top 10 may hold half the best one's relevance, and a cut
        there cost .159 of all@10. What tells a store that knows the subject from one that
        does not is the strongest evidence of either kind: the best own calibrated cosine
        (the cosine clause counts in proportion to the vector weight, which shrinks for text
        the model cannot read), the best BM25 coverage, or, where both are middling, the
        best relevance (their weighted sum, the old test). Each is scale-free: the cosine
        calibrated per model (0 unrelated, 1 paraphrase), the coverage a share of the
        query's own weight. The thresholds: bench/README.md, "The minimum".
        """
        import numpy as np

        retrieval = self.retrieval
        trust = evidence.vector_weight / retrieval.vector_weight if retrieval.vector_weight > 0 else 0.0
        meaning = evidence.relevance_cosine * min(1.0, trust)
        return bool(np.any((meaning >= self.min_cosine(evidence.compared))
                           | (evidence.coverage >= retrieval.subject_min_coverage)
                           | (evidence.relevance >= retrieval.min_best_relevance)))

    def min_cosine(self, compared: int) -> float:
        """The calibrated cosine a candidate needs, in a store of `compared` units: subject_min_cosine
        from subject_reference_units on, lower below, by as much as the best cosine of unrelated
        text falls there. The best of n unrelated cosines grows about as √(2 ln n) (the maximum
        of n draws): MiniLM's median best of 1, 4, 20, 100 and 600 unrelated messages is .08,
        .17, .28, .38, .49 (bench/README.md, "Issue 33, third pass"), .167 a unit of √(2 ln n)
        from 4 to 600; the slope, subject_size_slope, is the most the dev sets' unrelated queries
        allow ("fourth pass"). A store of four messages met the one of 600 turns' threshold, and
        a paraphrase of its fact at .34 was no answer."""
        import math

        retrieval = self.retrieval
        if compared <= 0 or compared >= retrieval.subject_reference_units:
            return retrieval.subject_min_cosine
        spread = math.sqrt(2 * math.log(retrieval.subject_reference_units)) - math.sqrt(2 * math.log(compared))
        return max(0.0, retrieval.subject_min_cosine - retrieval.subject_size_slope * spread)

    def words_known(self, evidence: Evidence) -> bool:
        """Whether two units together hold subject_min_words of the query's word weight (idf).

        A question that joins two facts ("Which happened first, the meeting with Rachel or the
        pride parade?") finds each in its own turn, and no one turn holds enough of its words or
        meaning for knows_subject. Counted as a set (a word held or not), not by BM25: BM25's
        coverage rewards a short turn that repeats a common word, and a pair of such turns
        covered half of other conversations' questions. Only BM25's candidates can hold a word.
        Measured (bench/README.md, "Dates, twins and two-turn subjects"): LongMemEval dev keeps the pride
        parade question; unrelated queries returning anything 2.1 % -> 3.3 %.
        """
        weights = evidence.bm25.weights
        total = sum(weights.values())
        if total <= 0:
            return False
        held = [set(weights) & evidence.terms_of(unit) for unit in evidence.units if unit["id"] in evidence.bm25.scores]
        if not held:
            return False
        first = max(held, key=lambda words: sum(weights[w] for w in words))
        second = max(held, key=lambda words: sum(weights[w] for w in words - first))
        return sum(weights[w] for w in first | second) >= self.retrieval.subject_min_words * total

    def named_in_its_script(self, evidence: Evidence) -> bool:
        """Whether a unit written in one script holds subject_min_coverage of the query's words of
        that script, when the query is written in two: "Kestrel 的菜谱存在哪个数据库？" over the
        English note "Kestrel stores its recipes in PostgreSQL". The two meet in one space
        (embedders.OneSpace), but across scripts a pair passes on its meaning only at USE's cosine
        0.58 (embedders.ACROSS_CALIBRATION: below it, Chinese chat excerpts found English
        conversations that never spoke of them); that note's is .41 ("Lena 住在哪里？" over Lena's:
        .45), and the Chinese words, which no English text can hold, leave its coverage at ~1/20:
        a bilingual user's question that names an English project, person or tool found nothing. Judged on the words (idf) of the
        unit's own script only, as words_known counts them: held or not.
        """
        from memctl.index import lexical
        from memctl.text.cjk import has_cjk

        weights = evidence.bm25.weights
        # Of the Latin words, those written as names are: "Kestrel", "PostgreSQL", "iPhone", not "OK",
        # "Hi" or "bug", with which a Chinese sentence often says what an English one would not
        # ("OK 我们明天见" returned "I'm doing OK" from a LoCoMo store); a number is of no script.
        names = lexical.content_terms(" ".join(_NAME_WORD.findall(evidence.query)))
        by_script = {True: {w for w in weights if has_cjk(w)}, False: {w for w in weights if w in names}}
        if not (by_script[True] and by_script[False]):
            return False
        for unit in evidence.units:
            if unit["id"] not in evidence.bm25.scores:
                continue
            cjk, latin = has_cjk(unit["text"]), _LATIN_WORD.search(unit["text"]) is not None
            if cjk == latin:  # written in both (judged as any unit is) or in neither
                continue
            script = by_script[cjk]
            held = script & evidence.terms_of(unit)
            if sum(weights[w] for w in held) >= self.retrieval.subject_min_coverage * sum(weights[w] for w in script):
                return True
        return False


_LATIN_WORD = re.compile(r"[A-Za-z]{2}")  # two letters of the Latin script: a word, not a unit or a digit
# A word written as a name: three or more Latin letters or digits, one of them a capital
_NAME_WORD = re.compile(r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*[A-Z])[A-Za-z][A-Za-z0-9]{2,}(?![A-Za-z0-9])")
