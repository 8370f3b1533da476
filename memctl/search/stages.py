"""The ranking stages of a search, in the order they run: STAGES is the one place that order
lives. --explain (explain.py), the table below (scripts/gen_docs.py prints it) and the
rounding of the numbers a result shows follow from it. Each stage is configured in memctl.toml
[retrieval].

[[[cog import cog, gen_docs; cog.out(gen_docs.stage_table()) ]]]
fusion        orders: weighted w_vec·cal(cosine) + w_bm25·BM25/max(best BM25, 0.5·ideal) (0.7 /
              0.3), or rrf Σ w/(k + rank) scaled to [0, 1]; and judges: relevance, calibrated, 0..1:
              w_vec·cal(own cosine) + w_bm25·coverage, where cal() maps the model's cosines onto one
              scale (embedders.py) and coverage is the share of the query's BM25 weight a result
              matched (lexical.Hits)
neighbours    + 0.4 · (the better fused score of the turns right before and after − own), chat turns
              only, when that is above their own
date          + 0.2 for a chat turn or log entry said in a period the query names
confidence    each candidate's probability of being relevant: a logistic model over its calibrated
              own cosine, its coverage and the store's units (confidence.py, fitted on dev data:
              rules/confidence.toml); orders nothing
minimum       nothing when the store does not know the subject (subject.SubjectTest: no candidate's
              own calibrated cosine, in the finest model it and the query share, reaches
              subject_min_cosine (0.5; in a store of fewer than 600 units, less:
              SubjectTest.min_cosine), none matches subject_min_coverage (0.4) of the query's BM25
              weight, none has min_best_relevance (0.38), no two hold subject_min_words (0.55) of
              its words' idf, and, of a query in two scripts, no unit of one holds
              subject_min_coverage of the query's names in it); else every result stays
              (hard_min_score, 0 by default, is a floor on relevance; --min-score replaces the test
              by a floor)
noise         drops refusals, greetings, questions about the memory itself
recency       + exp(−age_days / 14) · 0.10
importance    × (0.7 + 0.3 · importance)
length        × 1 / (1 + 0.5 · log2(max(chars / 500, 1)))
time_decay    × (0.5 + 0.5 · exp(−age_days / 60)), not for evergreen memories (policy)
final         the results kept, best first (ties by id)
mera          with --rank mera: reordered by the governance's retrieval score
mmr           a result whose cosine to a better one is > 0.85 and half of whose content words that
              one holds moves after the rest
newer_first   a later chat message naming a rare word of a top result, or a later memory restating
              it (cosine >= 0.75, every query word it holds), moves right above it
[[[end]]]

The design's order drops below 0.35 after the time decay. With that order a relevant turn
1,198 days old fuses to 0.42, decays to 0.19 and is gone: LoCoMo recall@10 with those defaults
was 0.02. Here the minimum judges relevance alone and age only reorders what passed; and it
judges a calibrated score, because max-normalised BM25 makes the best keyword hit 1.0
whatever it matched.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple

import orjson

from memctl.search.candidates import Candidates, moment_of, micros
from memctl.search.subject import Evidence, SubjectTest

if TYPE_CHECKING:
    from datetime import datetime

    from memctl import config
    from memctl.index import lexical
    from memctl.search.candidates import IndexRows, RowFacts, UnitWords
    from memctl.search.queries import Query
    from memctl.store.store import Store

# The results an agent reads first: the newer fact is settled among these whatever k is, so a
# search for 50 orders its first 10 as a search for 10 does (the benches ask for 50).
FIRST_PAGE = 10


class SearchRun:
    """What one search's stages read besides the candidates: the settings, BM25's hits, every
    row's cosine to the query, the weights of the two, the periods the query names, and the
    open index's pieces kept between searches (its rows' facts and replies, its units' words,
    its vectors)."""

    def __init__(self, settings: config.Settings, store: Store, rows: IndexRows, words: UnitWords, vectors,
                 bm25: lexical.Hits, cosines, vector_rows: list[int], weights: tuple[float, float, float | None],
                 periods: list, calibration: Callable[[], tuple[float, float]], now: datetime,
                 judged: Callable | None = None, compared: int = 0):
        self.settings = settings
        self.retrieval = settings.retrieval
        self.store = store
        self.rows = rows
        self.words = words
        self.vectors = vectors
        self.bm25 = bm25
        self.cosines = cosines  # every row's cosine to the query; None when it was not embedded
        self.vector_rows = vector_rows  # the rows of the vectors' candidates
        self.vector_weight, self.bm25_weight, self.unknown = weights
        self.periods = periods
        self.calibration = calibration  # the model's cosine floor and ceiling, read when fusing cosines
        self.now = now  # this search's moment (its runtime's clock): what ages count to
        # rows -> their own calibrated cosines as one model of a vector of several reads them
        # (search.judged_cosines); None: the whole vector's cosine, calibrated
        self.judged = judged
        self.compared = compared  # the units the filters allow (0: not known)

        self._facts: RowFacts | None = None
        self._age = None

    def facts(self, found: Candidates) -> RowFacts:
        """The candidates' row facts (gathering learned them: the same object for the whole search)."""
        if self._facts is None:
            self._facts = self.rows.row_facts(found)
        return self._facts

    def age_days(self, found: Candidates):
        """Each candidate's age in days at this search's moment (0 for one with no time)."""
        import numpy as np

        if self._age is None:
            facts, rows = self.facts(found), found.rows
            age = np.where(facts.timed[rows], (micros(self.now) - facts.micros[rows]) / 1e6 / 86400, 0.0)
            self._age = np.maximum(0.0, age)
        return self._age


class Stage:
    """One step of the ranking. `name`: its key in --explain (the running score after it);
    `acts`: "+" adds to the score, "×" multiplies it, "" neither (how explain_lines shows it);
    `rounding`: the --explain numbers it leaves unrounded, and the digits a returned result
    shows of each (rounding ~20 numbers of each of ~400 candidates took 2.5 ms a warm 6k search);
    `summary`: its line of the table above."""

    name = ""
    acts = ""
    rounding: dict[str, int] = {}
    summary = ""

    def runs(self, query: Query, run: SearchRun) -> bool:
        return True

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        raise NotImplementedError


class Fusion(Stage):
    """Two scores a candidate: `fused` orders, `relevance` is what the minimum judges.

    Both read the cosine through the model's calibration (0 at the cosine of unrelated text, 1
    at a close paraphrase), so one threshold and one weighting mean the same for every model.
    BM25 enters `fused` divided by the best hit's score, or by bm25_full_coverage of the score
    of a hit holding every query word (Hits.ideal) when that is more: the best keyword hit
    leads in full only when it holds that share of the query's weight. Plain max-normalising
    gave a chat line sharing one word of a question in other words the whole BM25 weight over
    the fact it asks about. At 0.5: the paraphrase set, gate off, dev hit@3 .412 -> .487,
    MADial en R@5 .736 -> .760, LoCoMo R@10 .783 -> .780 (0.7: .500, .774, .775; bench/README.md,
    "Issue 33, third pass"). Not in --mode bm25: no vectors take the weight there.
    `relevance` reads BM25 as the share of the query's weight matched (Hits.coverage). A message's cosine
    gains context_weight of what its reply's vector (which reads it as the turn before) scores
    above its own, as BM25 counts the turn before at that weight: a reply's vector is evidence
    for both turns, and whose words matched it cannot tell. That credit orders; relevance reads
    the message's own cosine (LoCoMo dev: unrelated queries returning anything 3.75% with the
    credit, 3.1% without; recall@10 .743 / .741).
    """

    name = "fusion"
    rounding = {"cosine_own": 4, "cosine_reply": 4, "bm25": 4, "bm25_norm": 4, "cosine": 4, "cosine_calibrated": 4,
                "fused": 4, "unknown_share": 3}
    summary = ("orders: weighted w_vec·cal(cosine) + w_bm25·BM25/max(best BM25, 0.5·ideal) (0.7 / 0.3), or rrf Σ "
               "w/(k + rank) "
               "scaled to [0, 1]; and judges: relevance, calibrated, 0..1: w_vec·cal(own cosine) + "
               "w_bm25·coverage, where cal() maps the model's cosines onto one scale (embedders.py) and coverage "
               "is the share of the query's BM25 weight a result matched (lexical.Hits)")

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        import numpy as np

        retrieval, bm25, cosines = run.retrieval, run.bm25, run.cosines
        vector_weight, bm25_weight = run.vector_weight, run.bm25_weight
        scores = bm25.scores
        # with no vectors to take the weight (bm25 mode), the best hit leads as before
        full = retrieval.bm25_full_coverage if vector_weight > 0 else 0.0
        top_bm25 = max(max(scores.values(), default=0.0), full * bm25.ideal) or 1.0
        raw = found.bm25
        coverage = np.minimum(1.0, raw / bm25.ideal) if bm25.ideal > 0 else np.zeros(len(found))
        total = (vector_weight + bm25_weight) or 1.0
        if cosines is not None and len(found):
            cosine, meaning, own_meaning = self._cosines(found, run)
        else:
            cosine = meaning = own_meaning = np.zeros(len(found))
        if retrieval.fusion == "rrf":
            fused = self._rrf(found, run)
        else:
            fused = (vector_weight * meaning + bm25_weight * raw / top_bm25) / total
        found.score = fused
        found.vector_weight = round(vector_weight, 4)
        found.coverage = rounded(coverage, 4)
        found.relevance_cosine = rounded(own_meaning, 4)
        # The numbers later stages judge, rounded now as they were always judged (as Python
        # rounds: rounded); the others when a result is made (rounding).
        found.relevance = rounded((vector_weight * own_meaning + bm25_weight * coverage) / total, 4)
        for name, values in (("bm25", raw), ("bm25_norm", raw / top_bm25), ("bm25_coverage", found.coverage),
                             ("cosine", cosine), ("cosine_calibrated", meaning),
                             ("relevance_cosine", found.relevance_cosine), ("vector_weight", found.vector_weight),
                             ("bm25_weight", round(bm25_weight, 4)), ("fusion", retrieval.fusion), ("fused", fused),
                             ("relevance", found.relevance)):
            found.explain(name, values)
        if run.unknown is not None:
            found.explain("unknown_share", run.unknown)

    @staticmethod
    def _cosines(found: Candidates, run: SearchRun):
        """Each candidate's cosine with its reply's credit, that calibrated, and its own calibrated."""
        import numpy as np

        floor, ceiling = run.calibration()
        span = ceiling - floor
        own = run.cosines[found.rows].astype(np.float64)
        reply = run.rows.reply_cosines(found, run.cosines)
        answered = ~np.isnan(reply)
        cosine = np.where(answered, own + run.retrieval.context_weight * np.maximum(0.0, reply - own), own)
        meaning = np.minimum(1.0, np.maximum(0.0, (cosine - floor) / span))
        own_meaning = (run.judged(found.rows) if run.judged is not None
                       else np.minimum(1.0, np.maximum(0.0, (own - floor) / span)))
        found.explain("cosine_own", own, answered)
        found.explain("cosine_reply", reply, answered)
        return cosine, meaning, own_meaning

    @staticmethod
    def _rrf(found: Candidates, run: SearchRun):
        """Reciprocal rank fusion, scaled to [0, 1]: Σ w / (rrf_k + rank) over BM25's and the vectors' ranks."""
        import numpy as np

        k, scores, cosines = run.retrieval.rrf_k, run.bm25.scores, run.cosines
        vector_weight, bm25_weight = run.vector_weight, run.bm25_weight
        bm25_rank = {uid: r for r, uid in enumerate(sorted(scores, key=scores.get, reverse=True), 1)}
        cos_rank = {}
        if cosines is not None:  # the vector candidates, then the others, as ties stand
            ranked = list(dict.fromkeys([*run.vector_rows, *found.rows.tolist()]))
            cosine_of = dict(zip(ranked, cosines[ranked].tolist()))
            cos_rank = {row: r for r, row in enumerate(sorted(cosine_of, key=cosine_of.get, reverse=True), 1)}
        best = (vector_weight + bm25_weight) / (k + 1)
        return np.array([((bm25_weight / (k + bm25_rank[uid]) if uid in bm25_rank else 0.0)
                          + (vector_weight / (k + cos_rank[row]) if row in cos_rank else 0.0)) / best
                         for uid, row in zip(found.ids, found.rows.tolist())])


class Neighbours(Stage):
    """A chat turn moves neighbour_weight of the way up to the better fused score of the turns
    right before and after it in its session, when those are candidates.

    Evidence comes in runs: the question asked a turn earlier, the detail added a turn later
    ("I went to the pride parade." / "It was last Saturday, with Rachel."), and a turn's own
    words rarely hold all of what the query asks. A turn next to a strong hit is likelier
    evidence than a lone turn of the same score elsewhere. Never past its neighbour: a run of
    turns would otherwise outrank the one memory saying the same (the demo store's Chinese
    memory fell below two turns repeating it). Orders only: relevance, which the minimum
    judges, is the turn's own. Measured (bench/README.md, "Neighbouring turns"): LoCoMo dev
    recall@10 .741 -> .760 at 0.4 (0.6: .764, temporal .838 -> .823), LongMemEval dev all@10
    unchanged (.800); memories (MADial) untouched. Not for a caller that sums a run's hits
    itself (Query.neighbours).
    """

    name = "neighbours"
    acts = "+"
    rounding = {"neighbours_bonus": 4, "neighbours": 4}
    summary = ("+ 0.4 · (the better fused score of the turns right before and after − own), chat turns only, "
               "when that is above their own")

    def runs(self, query: Query, run: SearchRun) -> bool:
        return run.retrieval.neighbour_weight > 0 and query.neighbours

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        import numpy as np

        messages = np.flatnonzero(found.messages)
        lines = run.facts(found).line[found.rows[messages]]
        by_line = np.argsort(lines, kind="stable")
        in_order = lines[by_line]
        nobody = len(found)  # the position of a fused score 0.0, for a turn with no neighbour among them

        def at(wanted):  # the candidate at each wanted line (the last found, if several), else nobody
            place = np.maximum(np.searchsorted(in_order, wanted, side="right") - 1, 0)
            return np.where(in_order[place] == wanted, messages[by_line[place]], nobody)

        fused = np.append(found.score, 0.0)
        bonus = np.zeros(len(found))
        if len(messages):
            bonus[messages] = run.retrieval.neighbour_weight * np.maximum(
                0.0, np.maximum(fused[at(lines - 1)], fused[at(lines + 1)]) - fused[messages])
        found.score = found.score + bonus
        found.explain("neighbours_bonus", bonus, found.messages)
        found.explain("neighbours", found.score, found.messages)


class Dates(Stage):
    """A chat turn or log entry said in a period the query names ranks higher: + date_weight.

    "What dish did Nate make on 9 November, 2022?": the turns of that day hold the answer, and
    the date is in their timestamp, not their words. Orders only, like the neighbours stage.
    """

    name = "date"
    acts = "+"
    rounding = {"date_bonus": 4, "date": 4}
    summary = "+ 0.2 for a chat turn or log entry said in a period the query names"

    def runs(self, query: Query, run: SearchRun) -> bool:
        return bool(run.periods)

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        import numpy as np

        from memctl.search.dates import within

        bonus = np.zeros(len(found))
        dated = np.zeros(len(found), dtype=bool)
        for at, unit in enumerate(found.units):
            moment = moment_of(unit["ts"]) if unit["kind"] in ("message", "log") else None
            if moment is not None:
                dated[at] = True
                bonus[at] = run.retrieval.date_weight if within(moment, run.periods) else 0.0
        found.score = found.score + bonus
        found.explain("date_bonus", bonus, dated)
        found.explain("date", found.score, dated)


class Confidence(Stage):
    """Each candidate's probability of being relevant (confidence.Model, fitted on dev data and read
    from rules/confidence.toml), from the signals fusion gave it and the store's size. It orders
    nothing and drops nothing; every result shows it."""

    name = "confidence"
    rounding = {"confidence": 4}
    summary = ("each candidate's probability of being relevant: a logistic model over its calibrated own cosine, "
               "its coverage and the store's units (confidence.py, fitted on dev data: rules/confidence.toml); "
               "orders nothing")

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        from memctl.search import confidence

        retrieval = run.retrieval
        trust = min(1.0, found.vector_weight / retrieval.vector_weight) if retrieval.vector_weight > 0 else 0.0
        signals = confidence.Signals(found.relevance_cosine, found.coverage, found.relevance, trust, run.compared)
        found.confidence = confidence.model_for(run.settings.embedding.model).confidence(signals)
        found.explain("confidence", found.confidence)


class Minimum(Stage):
    """Nothing when the store does not know the subject (subject.SubjectTest, on the signals it
    reads: Evidence); else the results whose relevance reaches hard_min_score. With --min-score
    the caller's floor on each result's relevance replaces the subject test.

    It judges relevance alone, before age: the design's literal order (decay, then the minimum)
    drops every relevant memory older than a few months, since at 1,198 days a score is halved.
    Age only moves a result among those that passed.
    """

    name = "minimum"
    summary = ("nothing when the store does not know the subject (subject.SubjectTest: no candidate's own "
               "calibrated cosine, in the finest model it and the query share, reaches subject_min_cosine (0.5; in a "
               "store of fewer than 600 units, less: SubjectTest.min_cosine), "
               "none matches subject_min_coverage (0.4) of the query's BM25 weight, none has min_best_relevance "
               "(0.38), no two hold subject_min_words (0.55) of its words' idf, and, of a query in two scripts, no "
               "unit of one holds subject_min_coverage of the query's names in it); else every result stays (hard_min_score, 0 by default, is a floor on "
               "relevance; --min-score replaces the test by a floor)")

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        if query.min_score is None:
            floor = run.retrieval.hard_min_score
            evidence = Evidence(found.relevance, found.relevance_cosine, found.coverage, found.vector_weight,
                                run.bm25, found.units, run.words.terms_of, query.text, run.compared)
            if not SubjectTest(run.retrieval).knows(evidence):
                found.stopped = True
                return
        else:
            floor = query.min_score
            if max(found.relevance.tolist(), default=0.0) < floor:
                found.stopped = True
                return
        found.kept = found.relevance >= floor


class Noise(Stage):
    """Refusals, greetings and questions about the memory itself (text.noise) are dropped."""

    name = "noise"
    summary = "drops refusals, greetings, questions about the memory itself"

    def runs(self, query: Query, run: SearchRun) -> bool:
        return run.retrieval.filter_noise

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        found.kept = found.kept & ~run.facts(found).noise[found.rows]


class Recency(Stage):
    name = "recency"
    acts = "+"
    rounding = {"recency_bonus": 4, "recency": 4}
    summary = "+ exp(−age_days / 14) · 0.10"

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        import numpy as np

        retrieval = run.retrieval
        # math.exp, not numpy's: numpy's may differ in the last digit, and scores stay Python's.
        age = run.age_days(found)
        recency = (np.array([math.exp(x) for x in (-age / retrieval.recency_decay_days).tolist()])
                   * retrieval.recency_weight)
        found.score = found.score + recency
        found.explain("recency_bonus", recency)
        found.explain("recency", found.score)


class Importance(Stage):
    name = "importance"
    acts = "×"
    rounding = {"importance_factor": 4, "importance": 4}
    summary = "× (0.7 + 0.3 · importance)"

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        factor = run.facts(found).importance[found.rows]
        found.score = found.score * factor
        found.explain("importance_factor", factor)
        found.explain("importance", found.score)


class Length(Stage):
    name = "length"
    acts = "×"
    rounding = {"length_factor": 4, "length": 4}
    summary = "× 1 / (1 + 0.5 · log2(max(chars / 500, 1)))"

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        factor = run.facts(found).length[found.rows]
        found.score = found.score * factor
        found.explain("length_factor", factor)
        found.explain("length", found.score)


class TimeDecay(Stage):
    name = "time_decay"
    acts = "×"
    rounding = {"time_decay_factor": 4, "time_decay": 4, "age_days": 2}
    summary = "× (0.5 + 0.5 · exp(−age_days / 60)), not for evergreen memories (policy)"

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        import numpy as np

        floor = run.retrieval.time_decay_floor
        age = run.age_days(found)
        decay = np.array([math.exp(x) for x in (-age / run.retrieval.time_decay_days).tolist()])
        factor = np.where(run.facts(found).dated[found.rows], floor + (1 - floor) * decay, 1.0)
        found.score = found.score * factor
        found.explain("time_decay_factor", factor)
        found.explain("time_decay", found.score)
        found.explain("age_days", age)


class Final(Stage):
    name = "final"
    rounding = {"final": 4}
    summary = "the results kept, best first (ties by id)"

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        import numpy as np

        score = found.score
        found.explain("final", score)
        # Best first, ties by id: numpy's sort, and Python's key sort only when two scores tie (a
        # key sort of ~430 candidates was ~0.1 ms a warm search).
        ranked = np.flatnonzero(found.kept)
        ranked = ranked[np.argsort(-score[ranked], kind="stable")]
        if np.any(np.diff(score[ranked]) == 0):
            found.order = sorted(ranked.tolist(), key=lambda at: (-score[at], found.ids[at]))
        else:
            found.order = ranked.tolist()


class Mera(Stage):
    """Order by the governance's retrieval score, relevance being the fused search score (0..1)."""

    name = "mera"
    summary = "with --rank mera: reordered by the governance's retrieval score"

    def runs(self, query: Query, run: SearchRun) -> bool:
        return query.rank == "mera"

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        from memctl.search.scores import Scorer

        scorer = Scorer(run.store, run.now, run.settings.governance)
        fused = found.explained["fused"][0]
        found.score = found.score.copy()  # the time decay's explain keeps the one it had
        for at in found.order:
            unit = found.units[at]
            fields = orjson.loads(unit["fields"] or "{}") if unit["kind"] == "memory" else {"created_at": unit["ts"]}
            score = scorer.retrieval(round(float(fused[at]), 4), fields, unit["record_id"] or unit["id"])
            found.note(at, "mera", score.as_dict())
            found.score[at] = score.total
        final = found.score.tolist()
        found.order.sort(key=lambda at: (-final[at], found.ids[at]))


class MMR(Stage):
    """Demote a result whose cosine to a better kept one passes the threshold.

    In rank order, each result against the ones kept so far, until k records are kept: nothing
    after them can be among the k returned. Comparing all pairs in one matrix product took 4.8 ms
    of a warm 6k search for ~400 candidates, a pairwise Python loop over all of them 0.40 s once.
    Adjacent turns of one session are never twins: each is embedded with the turn before it, so
    their vectors share a turn's text by construction.
    """

    name = "mmr"
    summary = ("a result whose cosine to a better one is > 0.85 and half of whose content words that one holds "
               "moves after the rest")

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        if run.cosines is None:
            for at in found.order:
                found.note(at, "mmr", "skipped: no vectors in bm25 mode")
            return
        found.order = self._demoted(found, query.k, run)

    @staticmethod
    def _demoted(found: Candidates, k: int, run: SearchRun) -> list[int]:
        import numpy as np

        threshold = run.retrieval.mmr_threshold
        vectors, units, order = run.vectors, found.units, found.order
        kept: list[int] = []
        kept_vectors = np.empty((0, vectors.shape[1]), dtype=np.float32)
        demoted: list[int] = []
        records: set[str] = set()
        for place, at in enumerate(order):
            if len(records) >= k:
                return kept + order[place:] + demoted
            unit = units[at]
            vector = np.asarray(vectors[unit["row"]], dtype=np.float32)
            twin = next((units[kept[j]] for j in np.flatnonzero(kept_vectors @ vector > threshold)
                         if not _adjacent(units[kept[j]], unit) and _repeats(unit, units[kept[j]], run)), None)
            if twin is not None:
                found.note(at, "mmr", f"demoted: cosine > {threshold} to {twin['record_id'] or twin['id']}")
                demoted.append(at)
                continue
            kept.append(at)
            kept_vectors = np.vstack([kept_vectors, vector])
            records.add(unit["record_id"] or unit["id"])
        return kept + demoted


class NewerFirst(Stage):
    """A later statement on the subject of a top result ranks right above it.

    Chat: "Harbor uses MySQL 8", then in a later session "we switched from MySQL to PostgreSQL":
    the second rarely names what the question names ("which database does Harbor use"), but it
    names what the first answered: a word of the top result that the query does not hold and few
    units of the store hold (at most newer_rare_share of them, and at least 2). Memories: "The
    Kestrel deploy key is in 1Password", then a note written later, "We rotated the Kestrel
    deploy key; it now lives in Vault": it restates the first, as close in meaning as a
    paraphrase (the cosine of their vectors at least newer_twin_cosine) and holding every word
    of the query the first holds, so "The Osprey deploy key is in 1Password vault Infra", a note
    of the same form on another subject, is none. (Two memories joined by a supersedes link never
    meet here: only a chain's current version is searched.) A candidate so linked to a top result, of its
    kind and later than it (a chat message of a later session: a reply in the same conversation
    is not an update; a message later than a memory is as often the talk it was written from),
    moves right above it (the best ranked, if several). From below the first page it comes only
    with newer_pull_share (0.8) of the older one's relevance. --explain says which link and which
    result. After MMR, which would otherwise demote the newer of two twins. Not when the query
    names a period: it asks about then, not the latest.

    Measured (bench/README.md, "The newer fact" and "Issue 33, newer facts and spread evidence"):
    LongMemEval dev all@10 .767 -> .800 (one temporal question), LoCoMo dev recall@10 -.003;
    pulling any later candidate up cost LoCoMo .028 (a later turn naming the same pet is rarely
    an update there). Each link on the other kind cost: the word link on memories MADial en
    recall@5 .719 -> .693 (a later memory of a user naming a rare word of another is another
    event), the restating link on chat LoCoMo recall@10 .782 -> .779 (a later session repeating
    a subject is rarely an update there).
    """

    name = "newer_first"
    summary = ("a later chat message naming a rare word of a top result, or a later memory restating it (cosine "
               ">= 0.75, every query word it holds), moves right above it")

    def runs(self, query: Query, run: SearchRun) -> bool:
        return run.retrieval.newer_first and not run.periods

    def apply(self, found: Candidates, query: Query, run: SearchRun) -> None:
        from memctl.index import lexical

        order = found.order
        page = min(query.k, FIRST_PAGE)
        top = order[:page]
        if not top:
            return
        facts = run.facts(found)
        most = max(2, int(run.words.documents * run.retrieval.newer_rare_share))
        asked = lexical.content_terms(query.text)
        twins = run.cosines is not None  # restating is read from the vectors
        moved: set[int] = set()
        ranked = None  # the candidates in the order, as arrays (made again after a move)
        in_top = [found.units[older] for older in top]
        dated = {unit["row"] for unit in in_top if facts.timed[unit["row"]] and facts.message[unit["row"]]}
        run.words.rare_terms_of_each([unit for unit in in_top if unit["row"] in dated], most)
        for older in top:
            unit = found.units[older]
            row = unit["row"]
            if older in moved or not facts.timed[row]:
                continue
            if facts.message[row]:
                link = Link(unit, rare=run.words.rare_terms_of(unit, most) - asked)
                if not link.rare:
                    continue
            elif facts.memory[row] and twins:
                link = Link(unit, asked=run.words.terms_of(unit) & asked)
            else:
                continue
            if ranked is None:
                ranked = self._ranked(found, facts)
            if self._pull_up(found, older, link, page, moved, ranked, run):
                ranked = None

    @staticmethod
    def _ranked(found: Candidates, facts: RowFacts):
        """The order's candidates' rows, relevance, whether a timed message / memory, time and session."""
        rows = found.rows[found.order]
        timed = facts.timed[rows]
        return (rows, found.relevance[found.order], facts.message[rows] & timed, facts.memory[rows] & timed,
                facts.micros[rows], facts.session[rows])

    @staticmethod
    def _pull_up(found: Candidates, older: int, link: Link, page: int, moved: set[int], ranked,
                 run: SearchRun) -> bool:
        """Move the best later candidate `link` joins to `older` right above it, if any; whether one moved.

        From below the page, only a statement about as relevant as the one it updates. Tested
        on arrays, the words last: ~1,250 pairs a warm 6k search, each a Python test, took ~1.5 ms.
        """
        import numpy as np

        order, units, facts = found.order, found.units, run.facts(found)
        old = link.unit
        row = old["row"]
        rows, relevance, messages, memories, times, sessions = ranked
        at = order.index(older)
        below = min(max(page, at + 1), len(order))
        reach = relevance >= run.retrieval.newer_pull_share * found.relevance[older]
        reach[:below] = False
        reach[at + 1:below] = True
        later = reach & (times > facts.micros[row])
        later &= (messages & (sessions != facts.session[row])) if link.rare else memories
        places = np.flatnonzero(later)
        cosines = (run.vectors[rows[places]] @ np.asarray(run.vectors[row], dtype=np.float32) if not link.rare
                   else np.zeros(len(places)))
        for place, cosine in zip(places.tolist(), cosines.tolist()):
            newer = order[place]
            if newer in moved:
                continue
            new = units[newer]
            words = run.words.terms_of(new)
            if link.rare:
                shared = sorted(link.rare & words)
                if not shared:
                    continue
                how = f"names '{shared[0]}' as it does"
            elif cosine >= run.retrieval.newer_twin_cosine and link.asked <= words:
                how = f"restates it (cosine {cosine:.2f}, every word of the query it holds)"
            else:
                continue
            del order[place]
            order.insert(at, newer)
            moved.add(newer)
            found.note(newer, "newer_first", f"moved above {old['record_id'] or old['id']}: later "
                                             f"({new['ts']} > {old['ts']}) and {how}")
            found.note(older, "newer_first", f"below {new['record_id'] or new['id']}, a later statement")
            return True
        return False


class Link(NamedTuple):
    """What joins a top result to a later statement on its subject (NewerFirst): a chat message's
    `rare` words, those the query lacks and few units hold (the later one names one of them); a
    memory's `asked`, the query's words it holds (the later one, as close as a paraphrase, holds
    them all)."""

    unit: dict
    rare: frozenset[str] = frozenset()
    asked: frozenset[str] = frozenset()


STAGES: list[Stage] = [Fusion(), Neighbours(), Dates(), Confidence(), Minimum(), Noise(), Recency(), Importance(), Length(),
                       TimeDecay(), Final(), Mera(), MMR(), NewerFirst()]
# The digits each --explain number a stage leaves unrounded is shown with (Candidates.explain_of).
ROUNDING = {name: digits for stage in STAGES for name, digits in stage.rounding.items()}


def rank(found: Candidates, query: Query, run: SearchRun) -> None:
    """Every stage that runs for this query, in order, until one finds nothing to return."""
    for stage in STAGES:
        if found.stopped:
            return
        if stage.runs(query, run):
            stage.apply(found, query, run)


def _adjacent(one: dict, other: dict) -> bool:
    """Adjacent messages of one session file (see MMR)."""
    return (one["kind"] == "message" and other["kind"] == "message" and one["source"] == other["source"]
            and abs(one["line_start"] - other["line_start"]) == 1)


def _repeats(unit: dict, better: dict, run: SearchRun) -> bool:
    """Whether `unit` says in words little that `better` does not: at least mmr_word_overlap
    of its content words are `better`'s."""
    words = run.words.terms_of(unit)
    if not words:
        return True
    return len(words & run.words.terms_of(better)) / len(words) >= run.retrieval.mmr_word_overlap


def rounded(values, digits: int):
    """round(x, digits) of each, as Python rounds it (the exact decimal, half to even).

    numpy's round (multiply, round to integer, divide) picks the same decimal except where
    the scaled number lies within its float error of a half; there Python's round decides.
    Python's round over ~430 candidates' three judged numbers cost ~0.3 ms a warm search."""
    import numpy as np

    scale = 10.0 ** digits
    scaled = values * scale
    out = np.rint(scaled) / scale
    for at in np.flatnonzero(np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6).tolist():
        out[at] = round(float(values[at]), digits)
    return out
