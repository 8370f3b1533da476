"""`memctl context` (T5, with T4, T6, T7, T11): the main context for an agent's next turn.

One call a turn:

1. The session's messages, the topics, the new message.
2. An amnesia cue in the new message ("did you forget", "你忘了", …) searches the
   dormant topics with the relaxed [topics] amnesia_threshold: one clear best
   match is activated; several close ones are returned under `ambiguous`.
3. Every active topic is evaluated (evaluate.py) against the new message.
4. Unless `record` is off: the scores go into the sliding averages, the
   graded activation decides (activation.py), headers of topics whose state
   changed are rewritten, and the round and its events are logged (log.py).
5. The context, in design 001 §5's order: the system prompt, the topics with a
   score of 0.3 or more by score descending (their referenced messages verbatim,
   then the evaluation's summary), the unsplit messages, the last keep_recent
   messages (the new message last). No message appears twice.

The budget (tokens, cl100k) is never exceeded. What does not fit is dropped
whole - a message, or a topic's summary - lowest priority first, and every
dropped part is listed in `dropped`:

    priority  part
    inf       the system prompt, the new message (if they alone pass the budget: an error)
    s·(…)     a topic's referenced message: topic score s times the message's share of its best hit
    0.6…0.41  the recent messages, newest highest
    s/2       a topic's summary
    0.3…0.2   the unsplit messages older than the recent ones, newest highest

so a clearly relevant topic's messages (s ≥ 0.7) outrank the older recent
messages, and a weak topic's do not.

Everything is of the session's scope (topicfile.in_scope): its topics are the only
ones evaluated, activated or shown, the activation count is kept per scope, and
an explicit activation given a scope sees only that scope's topics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from memctl import clock
from memctl import config
from memctl.errors import InputError
from memctl.store.store import Store
from memctl.text.tokens import count_tokens
from memctl.store import topicfile
from memctl.topics import activation, evaluate, log
from memctl.store.topicfile import Topic

NEW_MESSAGE_ID = "new"
AMBIGUOUS_WITHIN = 0.1   # a runner-up this close to the best amnesia match makes the match unclear


@dataclass
class Part:
    kind: str                 # system | topic | summary | unsplit | recent
    text: str
    priority: float
    section: int              # index of the section it belongs to
    message: dict | None = None
    topic_id: str | None = None
    order: int = 0            # place within its section (conversation order)
    tokens: int = 0

    def as_dropped(self) -> dict:
        out = {"kind": self.kind, "tokens": self.tokens}
        if self.topic_id:
            out["topic_id"] = self.topic_id
        if self.message:
            out["message_id"] = self.message["id"]
        return out


@dataclass
class Context:
    budget: int
    tokens: int = 0
    sections: list[dict] = field(default_factory=list)
    activated: list[dict] = field(default_factory=list)
    made_dormant: list[dict] = field(default_factory=list)
    ambiguous: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    evaluations: dict[str, evaluate.Evaluation] = field(default_factory=dict)
    text: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "tokens": self.tokens, "sections": self.sections,
                "activated": self.activated, "made_dormant": self.made_dormant,
                "ambiguous": self.ambiguous, "dropped": self.dropped}


def message_view(message: dict) -> dict:
    return {"id": message["id"], "role": message.get("role"), "speaker": message.get("speaker"),
            "text": message.get("text", ""), "ts": message.get("ts")}


def render_message(message: dict) -> str:
    who = message.get("speaker") or message.get("role") or ""
    stamp = f"[{message['ts']}] " if message.get("ts") else ""
    return f"{stamp}{who} ({message['id']}): {message.get('text', '')}"


def build(store: Store, retriever, session: str, message: str, *, system_text: str = "", budget: int,
          record: bool = True, llm_command: str = "", say=None, scope: str | None = None,
          settings: config.Topics | None = None) -> Context:
    """`scope`: the session must be in it (split.scope_of_session). `settings`: [topics] as the
    store's Memory loaded them (else read from memctl.toml)."""
    from memctl.topics.split import scope_of_session, session_messages

    if budget < 1:
        raise InputError("must be a whole number >= 1", source="--budget")
    settings = settings or config.load(store.config_file).topics
    messages = session_messages(store, session)
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
        new = {"id": NEW_MESSAGE_ID, "role": "user", "text": message, "ts": clock.format_ts(clock.now())}
    keep = settings.keep_recent
    recent = (messages[-(keep - 1):] if keep > 1 else []) + [new]
    recent_ids = {m["id"] for m in recent}
    unsplit = [m for m in messages if m["id"] not in placed and m["id"] not in recent_ids]

    context = Context(budget)
    states = {tid: t.state for tid, t in topics.items() if t.state in ("active", "dormant")}
    cue = activation.amnesia_cue(message)
    recalled: dict[str, evaluate.Evaluation] = {}
    if cue:
        dormant = {tid: topics[tid] for tid, s in states.items() if s == "dormant"}
        recalled, context.ambiguous = _deep_search(store, retriever, message, dormant, cue, settings, scope)
    active = {tid: topics[tid] for tid, s in states.items() if s == "active"}
    evaluations = evaluate.builtin(store, retriever, message, active, scope)
    if llm_command and active:
        evaluations = evaluate.with_llm(store, llm_command, settings.llm_timeout, settings.llm_parallel,
                                        unsplit + recent, active, evaluations)
        for e in evaluations.values():
            if e.fallback and say:
                say(f"memctl: topic {e.topic_id}: the LLM answer was not used ({e.fallback}); built-in score kept")
    evaluations.update(recalled)
    context.evaluations = evaluations
    if record:
        _record_round(store, session, scope, states, evaluations, set(recalled), cue, settings, context)
    else:
        context.activated = [{"topic_id": t, "name": topics[t].header.get("name", ""), "reason": "amnesia cue",
                              "score": round(recalled[t].relevance_score, 4)} for t in recalled]
    shown = [e for e in evaluations.values() if e.relevance_score >= evaluate.REFERENCE_FROM
             and (e.topic_id in active or e.topic_id in recalled)]
    shown.sort(key=lambda e: (-e.relevance_score, -e.strength))
    _assemble(context, topics, system_text, shown, unsplit, recent, recent_ids, budget)
    return context


def _deep_search(store, retriever, message, dormant, cue, settings, scope):
    """The amnesia cue's search of dormant topics: (the clear match's evaluation, ambiguous reports)."""
    if not dormant:
        return {}, []
    found = evaluate.builtin(store, retriever, message, dormant, scope)
    ranked = sorted((e for e in found.values() if e.relevance_score >= settings.amnesia_threshold),
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


def _record_round(store, session, scope, states, evaluations, recalled, cue, settings, context) -> None:
    """`states`: the scope's topics before the round; the graded activation ranks them alone."""
    now = clock.format_ts(clock.now())
    with store.transaction() as tx:
        topics = topicfile.load_topics(store)  # again, under the lock: a split may have written meanwhile
        states = {tid: s for tid, s in states.items() if tid in topics}
        part = activation.load_part(store)
        scores = {tid: e.relevance_score for tid, e in evaluations.items() if tid in topics}
        averages = activation.add_scores(part, scores, settings.score_window)
        decision = activation.decide(states, averages, set(scores), settings)
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
                context.activated.append({**entry, "score": round(scores.get(tid, 0.0), 4)})
            else:
                context.made_dormant.append({**entry, "average": averages.get(tid)})
            events.append({"at": now, "event": "activated" if state == "active" else "dormant", "topic": tid,
                           "reason": reason})
        activation.save_part(tx, store, part)
        log.append(tx, store, events)


def _assemble(context: Context, topics: dict[str, Topic], system_text, shown, unsplit, recent, recent_ids,
              budget) -> None:
    sections: list[dict] = []
    parts: list[Part] = []
    system_text = system_text.rstrip()  # a file's last newline; the blank line between sections is ours
    if system_text:
        sections.append({"kind": "system", "messages": [], "text": system_text})
        parts.append(Part("system", system_text, math.inf, 0))
    for evaluation in shown:
        topic = topics[evaluation.topic_id]
        by_id = {m["id"]: m for m in topic.messages}
        index = len(sections)
        sections.append({"kind": "topic", "topic_id": evaluation.topic_id, "name": evaluation.name,
                         "score": round(evaluation.relevance_score, 4), "summary": evaluation.summary,
                         "file": evaluation.file, "messages": []})
        best = max(evaluation.message_scores.values(), default=1.0) or 1.0
        for order, mid in enumerate(evaluation.referenced_message_ids):
            if mid in by_id and mid not in recent_ids:
                share = evaluation.message_scores.get(mid, best) / best
                parts.append(Part("topic", render_message(by_id[mid]), evaluation.relevance_score * share, index,
                                  by_id[mid], evaluation.topic_id, order))
        if evaluation.summary:
            parts.append(Part("summary", f"Summary: {evaluation.summary}", evaluation.relevance_score / 2, index,
                              topic_id=evaluation.topic_id))
    if unsplit:
        index = len(sections)
        sections.append({"kind": "unsplit", "messages": []})
        for age, m in enumerate(reversed(unsplit)):
            parts.append(Part("unsplit", render_message(m), 0.3 - 0.1 * age / len(unsplit), index, m,
                              order=len(unsplit) - age))
    index = len(sections)
    sections.append({"kind": "recent", "messages": []})
    for age, m in enumerate(reversed(recent)):
        priority = math.inf if age == 0 else 0.6 - 0.19 * age / len(recent)
        parts.append(Part("recent", render_message(m), priority, index, m, order=len(recent) - age))

    for part in parts:
        part.tokens = count_tokens(part.text)
    kept = _fit(parts, sections, budget)
    context.dropped = [p.as_dropped() for p in parts if id(p) not in kept]
    parts.sort(key=lambda p: (p.section, p.order))
    for part in parts:
        if id(part) in kept and part.message is not None:
            sections[part.section]["messages"].append(message_view(part.message))
    for part in parts:
        if part.kind == "summary" and id(part) not in kept:
            sections[part.section]["summary"] = None
    live = [i for i, s in enumerate(sections) if s["kind"] == "system" or s["messages"] or s.get("summary")]
    context.text = _render([sections[i] for i in live])
    context.tokens = count_tokens(context.text)
    for s in sections:
        s.pop("text", None)
        if s["kind"] != "topic":
            continue
        if s.get("summary") is None:
            s["summary"] = ""
    context.sections = [sections[i] for i in live]
    if system_text:
        context.sections[0]["text"] = system_text


HEADINGS = {"unsplit": "# Unsplit messages", "recent": "# Recent messages"}


def _render(sections: list[dict]) -> str:
    blocks = []
    for s in sections:
        if s["kind"] == "system":
            blocks.append(s["text"])
        elif s["kind"] == "topic":
            lines = [f"# Topic: {s['name']} (score {s['score']:.2f}, {s['file']})"]
            lines += [render_message(m) for m in s["messages"]]
            if s.get("summary"):
                lines.append(f"Summary: {s['summary']}")
            blocks.append("\n".join(lines))
        else:
            blocks.append("\n".join([HEADINGS[s["kind"]]] + [render_message(m) for m in s["messages"]]))
    return "\n\n".join(blocks) + "\n"


def _fit(parts: list[Part], sections: list[dict], budget: int) -> set[int]:
    """Ids of the parts kept: by priority, each taken whole while the rendered context stays within budget."""
    must = [p for p in parts if p.priority == math.inf]
    kept = {id(p) for p in must}
    heading_cost = 12  # a section's heading and the blank line before it, generously
    used = sum(p.tokens + 1 for p in must) + heading_cost * len({p.section for p in must})
    if used > budget:
        raise InputError(f"the system prompt and the new message alone take {used} tokens, over the budget "
                         f"of {budget}", source="--budget")
    opened = {p.section for p in must}
    for part in sorted((p for p in parts if p.priority != math.inf), key=lambda p: -p.priority):
        cost = part.tokens + 1 + (heading_cost + 20 if part.section not in opened else 0)
        if used + cost <= budget:
            kept.add(id(part))
            used += cost
            opened.add(part.section)
    # The estimate above errs high; the exact count of the rendered text decides.
    while True:
        text = _render(_sections_with(parts, sections, kept))
        if count_tokens(text) <= budget:
            return kept
        lowest = min((p for p in parts if id(p) in kept and p.priority != math.inf), key=lambda p: p.priority)
        kept.discard(id(lowest))


def _sections_with(parts, sections, kept) -> list[dict]:
    out = []
    for index, s in enumerate(sections):
        chosen = sorted((p for p in parts if p.section == index and id(p) in kept and p.message), key=lambda p: p.order)
        copy = {**s, "messages": [p.message for p in chosen]}
        if s["kind"] == "topic":
            copy["summary"] = s["summary"] if any(p.kind == "summary" and p.section == index and id(p) in kept
                                                  for p in parts) else None
        if s["kind"] == "system" or copy["messages"] or copy.get("summary"):
            out.append(copy)
    return out


# The routing prompt lists at most this many topics, the built-in search's best first: at the ~1 KB a
# summary ([topics] summary_bytes) that is about 15k tokens, one call of a cheap model.
ROUTE_CANDIDATES = 50
# An explicit query names its subject: a topic holding fewer than this share of the query's content
# terms is not about it, however high one shared rare word scores ("zebra migration in kenya" found a
# topic on a database migration at 0.66; bench/README 'Topic names and summaries (issue 22)').
QUERY_COVERED = 0.5


def activate(store: Store, retriever, query: str, *, include_archived: bool = False,
             llm_command: str = "", scope: str | None = None, settings: config.Topics | None = None) -> dict[str, Any]:
    """Explicit activation (T7): a topic id, or the topics whose summaries and messages match `query`.
    Ranked like the index window of design §4.7: with few topics active more of the matches are taken;
    a built-in match holds at least QUERY_COVERED of the query's content terms.
    With an LLM command the §6.3 routing prompt ranks the ROUTE_CANDIDATES topics the built-in search
    ranks highest; a bad answer leaves the built-in ranking (`fallback` says why).
    The search runs outside the store lock (the index refreshes under it); the change, inside.
    With a `scope`, only its topics (archived ones included) are searched, counted and activated."""
    from memctl.topics import llm
    from memctl.topics.daily import restore_archived

    settings = settings or config.load(store.config_file).topics
    now = clock.format_ts(clock.now())
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
        threshold, _ = activation.thresholds(active_count, settings)
        ranked = sorted(found.values(), key=lambda e: -e.strength)
        method = "builtin"
        wanted = _query_terms(query)
        candidates = [{"topic_id": e.topic_id, "name": e.name, "score": round(e.relevance_score, 4)}
                      for e in ranked if e.relevance_score >= settings.amnesia_threshold
                      and _covers(wanted, searchable[e.topic_id])]
        if llm_command and searchable:
            listed = {e.topic_id: searchable[e.topic_id] for e in ranked[:ROUTE_CANDIDATES]}
            try:
                matches, no_match_reason = llm.route(store, llm_command, settings.llm_timeout, query, listed)
                method = "llm"
                order = sorted(matches, key=lambda m: -llm.RELEVANCE[m[1]])   # stable: the answer's order within a level
                candidates = [{"topic_id": tid, "name": topics[tid].header.get("name", ""),
                               "score": llm.RELEVANCE[level], "relevance": level, "reason": reason}
                              for tid, level, reason in order]
            except llm.LLMAnswerError as exc:
                fallback = str(exc)
        room = max(1, settings.active_target - active_count)
        chosen = [c["topic_id"] for rank, c in enumerate(candidates[:room]) if rank == 0 or c["score"] >= threshold]
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
