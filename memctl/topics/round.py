"""The topics' part of a turn (T4, T6, T7, T11): which topics `memctl context` shows, and activation.

One call a turn (memctl/context/turn.py assembles the context from this and the rest):

1. The session's messages, the topics, the new message.
2. An amnesia cue in the new message ("did you forget", "你忘了", …) searches the
   dormant topics with the relaxed [topics] amnesia_threshold: one clear best
   match is activated; several close ones are returned under `ambiguous`.
3. Every active topic is evaluated (evaluate.py) against the new message.
4. Unless `record` is off: the scores go into the sliding averages, the
   graded activation decides (activation.py), headers of topics whose state
   changed are rewritten, and the round and its events are logged (log.py).
5. The topics to show: those with a score of 0.3 or more, by score descending;
   the unsplit messages and the last keep_recent messages (the new message last).

Everything is of the session's scope (topicfile.in_scope): its topics are the only
ones evaluated, activated or shown, the activation count is kept per scope, and
an explicit activation given a scope sees only that scope's topics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memctl import clock
from memctl.errors import InputError
from memctl.store import topicfile
from memctl.topics import activation, evaluate, log
from memctl.store.topicfile import Topic

if TYPE_CHECKING:
    from memctl.runtime import Runtime

NEW_MESSAGE_ID = "new"
AMBIGUOUS_WITHIN = 0.1   # a runner-up this close to the best amnesia match makes the match unclear


@dataclass
class TopicRound:
    """A turn's topics: the session's scope, its messages split into unsplit and recent (the new
    message last), the topics shown (best first) and what the round changed or could not decide."""

    scope: str
    topics: dict[str, Topic]
    shown: list[evaluate.Evaluation]
    unsplit: list[dict]
    recent: list[dict]
    new_message: dict
    activated: list[dict] = field(default_factory=list)
    made_dormant: list[dict] = field(default_factory=list)
    ambiguous: list[dict] = field(default_factory=list)
    evaluations: dict[str, evaluate.Evaluation] = field(default_factory=dict)
    messages: list[dict] = field(default_factory=list)  # the session's, before the new one
    message_hits: list = field(default_factory=list)    # the scope's messages the search ranks, best first
    more_hits: list = field(default_factory=list)       # the answers to the caller's `more` queries


def topic_round(rt: Runtime, retriever, session: str, message: str, *, record: bool = True,
                llm_command: str = "", say=None, scope: str | None = None, more=None,
                new_session: bool = False) -> TopicRound:
    """`scope`: the session must be in it (split.scope_of_session). `more`: given the session's
    scope, more queries to run in the same search batch (their answers: `more_hits`).
    `new_session`: a session not stored yet is one without messages (a client's first prompt), not
    an error."""
    from memctl.topics.split import scope_of_session, session_messages

    store, topics_settings = rt.store, rt.settings.topics
    unknown = new_session and not store.session_file(session).exists()
    messages = [] if unknown else session_messages(store, session)
    scope = scope_of_session(store, session, messages, scope)
    if not message.strip():
        raise InputError("give the new message (--message TEXT, or on stdin)", source="--message")
    with store.reading():
        every_topic = topicfile.load_topics(store)
    placed = {m["id"] for t in every_topic.values() for m in t.messages} | topicfile.archived_message_ids(store)
    topics = topicfile.in_scope(every_topic, scope)
    if messages and messages[-1].get("text", "").strip() == message.strip():
        new = messages.pop()  # already ingested: the same message, not twice
    else:
        new = {"id": NEW_MESSAGE_ID, "role": "user", "text": message, "ts": clock.format_ts(rt.clock.now())}
    keep = topics_settings.keep_recent
    recent = (messages[-(keep - 1):] if keep > 1 else []) + [new]
    recent_ids = {m["id"] for m in recent}
    unsplit = [m for m in messages if m["id"] not in placed and m["id"] not in recent_ids]

    turn = TopicRound(scope, topics, [], unsplit, recent, new, messages=messages)
    states = {tid: t.state for tid, t in topics.items() if t.state in ("active", "dormant")}
    cue = activation.amnesia_cue(message)
    recalled: dict[str, evaluate.Evaluation] = {}
    if cue:
        dormant = {tid: topics[tid] for tid, s in states.items() if s == "dormant"}
        recalled, turn.ambiguous = _deep_search(store, retriever, message, dormant, cue, topics_settings, scope)
    active = {tid: topics[tid] for tid, s in states.items() if s == "active"}
    turn.message_hits, summaries, turn.more_hits = evaluate.search(retriever, message, scope, len(active),
                                                                   more(scope) if more else ())
    evaluations = evaluate.builtin(store, retriever, message, active, scope, (turn.message_hits, summaries))
    if llm_command and active:
        evaluations = evaluate.with_llm(store, llm_command, topics_settings.llm_timeout, topics_settings.llm_parallel,
                                        unsplit + recent, active, evaluations)
        for e in evaluations.values():
            if e.fallback and say:
                say(f"memctl: topic {e.topic_id}: the LLM answer was not used ({e.fallback}); built-in score kept")
    evaluations.update(recalled)
    turn.evaluations = evaluations
    if record:
        _record_round(store, session, scope, states, evaluations, set(recalled), cue, topics_settings, turn,
                      clock.format_ts(rt.clock.now()))
    else:
        turn.activated = [{"topic_id": t, "name": topics[t].header.get("name", ""), "reason": "amnesia cue",
                           "score": round(recalled[t].relevance_score, 4)} for t in recalled]
    turn.shown = [e for e in evaluations.values() if e.relevance_score >= evaluate.REFERENCE_FROM
                  and (e.topic_id in active or e.topic_id in recalled)]
    turn.shown.sort(key=lambda e: (-e.relevance_score, -e.strength))
    return turn


def _deep_search(store, retriever, message, dormant, cue, topics_settings, scope):
    """The amnesia cue's search of dormant topics: (the clear match's evaluation, ambiguous reports)."""
    if not dormant:
        return {}, []
    found = evaluate.builtin(store, retriever, message, dormant, scope)
    ranked = sorted((e for e in found.values() if e.relevance_score >= topics_settings.amnesia_threshold),
                    key=lambda e: -e.strength)
    if not ranked:
        return {}, []
    best = ranked[0]
    close = [e for e in ranked[1:] if best.strength - e.strength < AMBIGUOUS_WITHIN]
    if close:
        candidates = [{"topic_id": e.topic_id, "name": e.name, "score": round(e.relevance_score, 4),
                       "summary": dormant[e.topic_id].header.get("summary", "")[:300]} for e in [best, *close]]
        return {}, [{"cue": cue, "candidates": candidates}]
    if best.relevance_score < evaluate.REFERENCE_FROM:  # relaxed: a weak but clear match still comes back
        topic = dormant[best.topic_id]
        best.relevance_score = evaluate.REFERENCE_FROM
        best.referenced_message_ids = [m["id"] for m in topic.messages[-evaluate.REFERENCED:]]
        best.summary = topic.header.get("summary", "")[:evaluate.SUMMARY_CHARS]
    return {best.topic_id: best}, []


def _record_round(store, session, scope, states, evaluations, recalled, cue, topics_settings, turn, now: str) -> None:
    """`states`: the scope's topics before the round; the graded activation ranks them alone. `now`:
    the round's stamp."""
    with store.transaction() as tx:
        topics = topicfile.load_topics(store)  # again, under the lock: a split may have written meanwhile
        states = {tid: s for tid, s in states.items() if tid in topics}
        part = activation.load_part(store)
        scores = {tid: e.relevance_score for tid, e in evaluations.items() if tid in topics}
        averages = activation.add_scores(part, scores, topics_settings.score_window)
        decision = activation.decide(states, averages, set(scores), topics_settings)
        forced = [t for t in recalled if t not in decision.active]  # the cue's match comes back whatever its average
        events = [{"at": now, "event": "round", "session": session, "scope": scope, "scores": {t: round(s, 4) for t, s in scores.items()},
                   "averages": {t: averages[t] for t in scores}, "activation_threshold": round(decision.activation_threshold, 4),
                   "dormancy_threshold": round(decision.dormancy_threshold, 4), "cue": cue}]
        changes = [(t, "active", "amnesia cue" if t in recalled else "score") for t in decision.activated + forced]
        changes += [(t, "dormant", "score") for t in decision.made_dormant if t not in recalled]
        for tid, state, reason in changes:
            topic = topics[tid]
            topic.header.update(state=state, updated=now)
            topicfile.write_topic(tx, store, topic, [], fresh=False)
            entry = {"topic_id": tid, "name": topic.header.get("name", ""), "reason": reason}
            if state == "active":
                turn.activated.append({**entry, "score": round(scores.get(tid, 0.0), 4)})
            else:
                turn.made_dormant.append({**entry, "average": averages.get(tid)})
            events.append({"at": now, "event": "activated" if state == "active" else "dormant", "topic": tid,
                           "reason": reason})
        activation.save_part(tx, store, part)
        log.append(tx, store, events)


# The routing prompt lists at most this many topics, the built-in search's best first: at the ~1 KB a
# summary ([topics] summary_bytes) that is about 15k tokens, one call of a cheap model.
ROUTE_CANDIDATES = 50
# An explicit query names its subject: a topic holding fewer than this share of the query's content
# terms is not about it, however high one shared rare word scores ("zebra migration in kenya" found a
# topic on a database migration at 0.66; bench/README 'Topic names and summaries (issue 22)').
QUERY_COVERED = 0.5


def activate(rt: Runtime, retriever, query: str, *, include_archived: bool = False,
             llm_command: str = "", scope: str | None = None) -> dict[str, Any]:
    """Explicit activation (T7): a topic id, or the topics whose summaries and messages match `query`.
    Ranked like the index window of design §4.7: with few topics active more of the matches are taken;
    a built-in match holds at least QUERY_COVERED of the query's content terms.
    With an LLM command the §6.3 routing prompt ranks the ROUTE_CANDIDATES topics the built-in search
    ranks highest; a bad answer leaves the built-in ranking (`fallback` says why).
    The search runs outside the store lock (the index refreshes under it); the change, inside.
    With a `scope`, only its topics (archived ones included) are searched, counted and activated."""
    from memctl.topics import llm
    from memctl.topics.daily import restore_archived

    store, topics_settings = rt.store, rt.settings.topics
    now = clock.format_ts(rt.clock.now())
    if include_archived:
        with store.transaction() as tx:
            restore_archived(tx, store, query, now, scope)
    with store.reading():
        topics = topicfile.in_scope(topicfile.load_topics(store), scope)
    active_count = sum(1 for t in topics.values() if t.state == "active")
    method, fallback, no_match_reason = "id", None, None
    if query in topics:
        chosen, candidates = [query], []
    else:
        searchable = {tid: t for tid, t in topics.items() if t.state != "active"}
        found = evaluate.builtin(store, retriever, query, searchable, scope) if searchable else {}
        threshold, _ = activation.thresholds(active_count, topics_settings)
        ranked = sorted(found.values(), key=lambda e: -e.strength)
        method = "builtin"
        wanted = _query_terms(query)
        candidates = [{"topic_id": e.topic_id, "name": e.name, "score": round(e.relevance_score, 4)}
                      for e in ranked if e.relevance_score >= topics_settings.amnesia_threshold
                      and _covers(wanted, searchable[e.topic_id])]
        if llm_command and searchable:
            listed = {e.topic_id: searchable[e.topic_id] for e in ranked[:ROUTE_CANDIDATES]}
            try:
                matches, no_match_reason = llm.route(store, llm_command, topics_settings.llm_timeout, query, listed)
                method = "llm"
                order = sorted(matches, key=lambda m: -llm.RELEVANCE[m[1]])   # stable: the answer's order within a level
                candidates = [{"topic_id": tid, "name": topics[tid].header.get("name", ""),
                               "score": llm.RELEVANCE[level], "relevance": level, "reason": reason}
                              for tid, level, reason in order]
            except llm.LLMAnswerError as exc:
                fallback = str(exc)
        places_left = max(1, topics_settings.active_target - active_count)
        chosen = [c["topic_id"] for rank, c in enumerate(candidates[:places_left])
                  if rank == 0 or c["score"] >= threshold]
    with store.transaction() as tx:
        current = topicfile.load_topics(store)
        events = []
        for tid in chosen:
            topic = current.get(tid)
            if topic is not None and topic.state != "active":
                topic.header.update(state="active", updated=now)
                topicfile.write_topic(tx, store, topic, [], fresh=False)
                events.append({"at": now, "event": "activated", "topic": tid, "reason": "explicit"})
        log.append(tx, store, events)
    return {"activated": [{"topic_id": t, "name": topics[t].header.get("name", "")} for t in chosen],
            "candidates": candidates, "method": method, "fallback": fallback, "no_match_reason": no_match_reason}


def _query_terms(query: str) -> set[str]:
    """The query's content terms: its words, and of Chinese (read as character pairs) the pairs without
    a particle or pronoun (我们, 说的, 是什 are across or outside the words that say what it is about)."""
    from memctl.text.words import CJK_FUNCTION_CHARS
    from memctl.topics.segment import terms_of

    return {t for t in terms_of(query) if not CJK_FUNCTION_CHARS.intersection(t)}


def _covers(wanted: set[str], topic: Topic) -> bool:
    """Whether the topic (its name, summary and messages) holds QUERY_COVERED of the `wanted` terms."""
    from memctl.topics.segment import terms_of

    if not wanted:
        return True
    held: set[str] = set()
    for text in _texts(topic):
        held |= wanted.intersection(terms_of(text))
    return len(held) >= QUERY_COVERED * len(wanted)


def _texts(topic: Topic) -> list[str]:
    return [topic.header.get("name", ""), topic.header.get("summary", "")] + [m.get("text", "") for m in topic.messages]
