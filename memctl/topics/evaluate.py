"""Topic evaluation (T4): how much each topic matters to what is being said now.

Every evaluated topic gets a relevance_score in 0..1 meaning what design 001
§4.2 says: 0.3 maybe weakly related, 0.5 moderately, 0.7 clearly related. At
0.3 and above it also gets referenced_message_ids (only the messages that
matter) and a summary of at most 2,000 characters.

Built-in: one hybrid search (BM25 + vectors, the index's own vectors) over
the messages and one over the topic summaries (`kind: topic` units); a topic's
raw score is its best message hit plus a fifth of its second (a topic that
answers twice is more likely the subject), or its summary's score if higher.
The raw score is mapped linearly so that RAW_WEAK becomes 0.3 and RAW_CLEAR 0.7
(clamped to 0..1). Both were read off LoCoMo dev conv-26 (40 questions, 19
topics after the bench's splits): raw scores of topics holding none of the
question's evidence had 90th percentile 0.274 (-> RAW_WEAK, so 0.3 means "maybe
weakly"), topics holding evidence a median of 0.336 (-> RAW_CLEAR, "clearly").
The referenced messages are the topic's hits within half the best hit's score
(at most REFERENCED), each with the message after it (the answer to a question
usually follows it).

With an LLM command: design 001 §6.1's prompt (prompts/evaluate.md, overridable
from the store's prompts/), one call per topic, [topics] llm_parallel at once.
Answers are parsed strictly; a topic whose answer is bad (no <topic_result>, a
score outside 0..1, an id not in the topic, a summary over 2,000 characters,
a failure or time-out) gets the built-in result and the reason in `fallback`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from memctl.store.store import Store
from memctl.text.shape import ABSENT, Shape, derived, hidden, shown
from memctl.store.topicfile import Topic, topic_path

REFERENCE_FROM = 0.3    # §4.2: from this score on, referenced messages and a summary
SUMMARY_CHARS = 2000
REFERENCED = 6
RAW_WEAK, RAW_CLEAR = 0.27, 0.336
MESSAGE_HITS = 80


@dataclass
class TopicRef(Shape):
    name: str = shown()
    file: str = shown("The topic's file, relative to the store.")


@dataclass
class Evaluation(Shape):
    """How relevant a topic is to the message (§4.2); from REFERENCE_FROM on, with its referenced
    messages and summary."""
    topic_id: str = shown()
    name: str = hidden()
    file: str = hidden()
    relevance_score: float = shown("0-1.", digits=4)
    referenced_message_ids: list[str] = hidden(default_factory=list)
    summary: str = hidden(default="")
    method: str = hidden(default="builtin")
    fallback: str | None = hidden(default=None)
    message_scores: dict[str, float] = hidden(default_factory=dict)  # why each reference was taken
    strength: float = hidden(default=0.0)  # the score before clamping to 0..1: ranks topics that all score 1.0

    @derived()
    def topic_ref(self) -> TopicRef:
        return TopicRef(self.name, self.file)

    @derived("The messages it refers to (relevant topics only).", name="referenced_message_ids", optional=True)
    def referenced(self) -> list[str]:
        return self.referenced_message_ids if self.relevance_score >= REFERENCE_FROM else ABSENT

    @derived("Its summary (relevant topics only).", name="summary", optional=True)
    def summary_shown(self) -> str:
        return self.summary if self.relevance_score >= REFERENCE_FROM else ABSENT


def calibrated(raw: float) -> float:
    """0.3 at RAW_WEAK, 0.7 at RAW_CLEAR, linear, not clamped (see `Evaluation.strength`)."""
    return 0.3 + (raw - RAW_WEAK) * 0.4 / (RAW_CLEAR - RAW_WEAK)


def search(retriever, text: str, scope: str | None = None, topics: int = 10,
           more: tuple = ()) -> tuple[list, list, list]:
    """(the scope's messages, its topic summaries, the answers to `more` queries) the search ranks
    for `text`, in one batch: what the built-in evaluation scores topics by, and `memctl context`
    takes its found messages and memories from (one index refresh a turn, not two). `scope` keeps
    other scopes' messages from taking the search's places."""
    from memctl.index.filters import Filters
    from memctl.search.queries import Query

    scopes = (scope,) if scope else ()
    messages, summaries, *answers = retriever.search(
        # A topic is a run of turns and its raw score already adds its second hit: the search's
        # neighbours stage would count the run twice (RAW_WEAK/RAW_CLEAR were set without it).
        [Query(text=text, k=MESSAGE_HITS, filters=Filters(kinds=("message",), scopes=scopes), min_score=0.0,
               neighbours=False),
         Query(text=text, k=max(10, topics), filters=Filters(kinds=("topic",), scopes=scopes), min_score=0.0),
         *more], count_access=False)
    return messages, summaries, answers


def raw_scores(retriever, text: str, topics: dict[str, Topic], scope: str | None = None,
               searched: tuple[list, list] | None = None) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(raw score per topic, hit score per message id per topic) from one message and one topic search
    (`searched`, else run here). Only the topics' own messages count."""
    owner = {m["id"]: tid for tid, t in topics.items() for m in t.messages}
    messages, summaries = searched or search(retriever, text, scope, len(topics))[:2]
    hits: dict[str, dict[str, float]] = {tid: {} for tid in topics}
    for result in messages:
        tid = owner.get(result.record_id)
        if tid is not None and result.record_id not in hits[tid]:
            hits[tid][result.record_id] = result.score
    summary_score = {r.record_id: r.score for r in summaries if r.record_id in topics}
    raw = {}
    for tid in topics:
        ranked = sorted(hits[tid].values(), reverse=True) + [0.0, 0.0]
        raw[tid] = max(ranked[0] + ranked[1] / 5, summary_score.get(tid, 0.0))
    return raw, hits


def builtin(store: Store, retriever, text: str, topics: dict[str, Topic],
            scope: str | None = None, searched: tuple[list, list] | None = None) -> dict[str, Evaluation]:
    """The built-in evaluation of `topics` (all of `scope`, when given) against `text`; `searched`:
    search()'s answer for them, if run already."""
    if not topics:
        return {}
    raw, hits = raw_scores(retriever, text, topics, scope, searched)
    results = {}
    for tid, topic in topics.items():
        strength = calibrated(raw[tid])
        score = max(0.0, min(1.0, strength))
        evaluation = Evaluation(tid, topic.header.get("name", ""), store.relative(topic_path(store, tid)), score,
                                strength=strength)
        if score >= REFERENCE_FROM:
            evaluation.referenced_message_ids, evaluation.message_scores = _references(topic, hits[tid])
            evaluation.summary = topic.header.get("summary", "")[:SUMMARY_CHARS]
        results[tid] = evaluation
    return results


def _references(topic: Topic, hits: dict[str, float]) -> tuple[list[str], dict[str, float]]:
    if not hits:
        return [], {}
    best = max(hits.values())
    order = [m["id"] for m in topic.messages]
    position = {mid: i for i, mid in enumerate(order)}
    chosen: dict[str, float] = {}
    for mid, score in sorted(hits.items(), key=lambda item: -item[1])[:REFERENCED]:
        if score < best / 2:
            break
        chosen.setdefault(mid, score)
        after = position[mid] + 1
        if after < len(order):
            chosen.setdefault(order[after], score * 0.9)  # the reply, ranked just below its question
    return sorted(chosen, key=position.get), chosen


# -- the LLM path ----------------------------------------------------------------

def with_llm(store: Store, command: str, timeout: float, parallel: int, unsplit: list[dict],
             topics: dict[str, Topic], fallback: dict[str, Evaluation]) -> dict[str, Evaluation]:
    """One §6.1 call per topic, `parallel` at once; a bad answer keeps the built-in result (`fallback`)."""
    from memctl.topics.llm import LLMAnswerError, ask, command_argv, fill, message_list, template

    argv = command_argv(command)
    prompt_template = template(store, "evaluate")

    def one(tid: str) -> Evaluation:
        topic = topics[tid]
        file = store.relative(topic_path(store, tid))
        prompt = fill(prompt_template, {"name": topic.header.get("name", ""), "summary": topic.header.get("summary", ""),
                                        "file": file, "topic_messages": message_list(topic.messages),
                                        "unsplit_messages": message_list(unsplit)})
        where = f"LLM evaluation of topic {tid}"
        try:
            score, ids, summary = parse(ask(argv, prompt, timeout, where), {m["id"] for m in topic.messages}, where)
        except LLMAnswerError as exc:
            kept = fallback[tid]
            kept.fallback = str(exc)
            return kept
        return Evaluation(tid, topic.header.get("name", ""), file, score, ids, summary, "llm", strength=score)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return dict(zip(topics, pool.map(one, list(topics))))


def parse(answer: str, topic_ids: set[str], where: str) -> tuple[float, list[str], str]:
    """(score, referenced ids, summary) from a §6.1 answer; LLMAnswerError says what is wrong."""
    from memctl.topics.llm import LLMAnswerError, elements, only_element, only_fraction

    body = only_element(answer, "topic_result", where)
    score = only_fraction(body, "relevance_score", where)
    listed = elements(body, "referenced_messages")
    ids = [line.strip() for line in (listed[0] if listed else "").splitlines() if line.strip()]
    unknown = [i for i in ids if i not in topic_ids]
    if unknown:
        raise LLMAnswerError(f"{where}: <referenced_messages> names {unknown[0]!r}, not a message of this topic")
    summaries = elements(body, "summary")
    summary = summaries[0].strip() if summaries else ""
    if len(summary) > SUMMARY_CHARS:
        raise LLMAnswerError(f"{where}: <summary> has {len(summary)} characters, over {SUMMARY_CHARS}")
    if score >= REFERENCE_FROM and not ids:
        raise LLMAnswerError(f"{where}: a score of {score:g} needs <referenced_messages>")
    return score, list(dict.fromkeys(ids)), summary
