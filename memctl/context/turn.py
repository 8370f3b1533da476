"""`memctl context` (T5, G1, issue 21): everything an agent's next turn needs, under one token budget.

The sections, in the order they are printed (each only of the session's scope):

    system   the system prompt
    core     L0: memories with is_core or user_weight >= 9, always, at most [governance] layer_core_max
    memory   L1: the scope's own memories (not global ones), at most layer_scope_max; then the
             memories and daily-log entries the search finds for the message (current chain tails
             only, the search's own minimum, at most layer_query_max), the sections of the window's
             plan first when a section dominates the window (`state plan`)
    found    the session's messages the search ranks highest for the message, newest first
    topic    the topics scoring 0.3 or more, best first: referenced messages, then the summary
    unsplit  the messages in no topic, older than the recent ones
    recent   the last [topics] keep_recent messages, the new message last

A message is shown as `[HH:MM] who (id): text` under a line `[YYYY-MM-DD]` naming its day,
given once a run of messages of that day in a section, and its time once a run of lines of that
minute (`who (id): text` after the first), as chat programs group them: a full time stamp on every
line took ~14 of a LoCoMo message's 54 tokens (LoCoMo dev, context - by-score at 1k/2k/4k:
-.004/+.026/+.055 with it, +.035/+.042/+.093 with day lines; a time a run of its minute:
+.071/+.054/+.069 -> +.090/+.067/+.069; bench/README.md).
A message longer than one search unit (index/units.py CHUNK_TOKENS, 200) is shown as an excerpt,
marked "[…]" and `"excerpt": true`: a unit's length around its sentence sharing most of the new
message's terms, within the unit the search matched for a found one, else within the whole text
(its opening when none shares a term; the new message whole); `memctl show ID` has the rest. An assistant's reply is often
400 tokens, the room of several user turns where the evidence mostly is (LongMemEval).

No text appears twice: a memory is in one section; a message is shown once, with the
highest priority any part gives it, in the first section of: recent for the new message
and the last exchange, found, recent, topic, unsplit. The budget (tokens, cl100k) is never exceeded. What does not fit
is dropped whole, lowest priority first, and named in `dropped`; a memory whose text
does not fit is given as its summary first (G1):

    priority           part
    always             the system prompt, the new message (if they alone pass the budget: an error)
    0.99               a core memory (L0)
    0.95               a memory of the scope (L1)
    0.93 - 0.01 rank   a memory or log entry the search found
    0.90 - 0.5 r/F     a found message of rank r (of FOUND_HITS); F = budget / FALL_TOKENS
    0.88 ... 0.85      the last LAST_EXCHANGE messages before the new one
    0.8 s (hit/best)   a topic's referenced message (s: the topic's score)
    0.45 ... 0.30      the older recent messages, newest highest
    s / 4              a topic's summary
    0.25 ... 0.15      the unsplit messages, newest highest

Why this order (bench/README.md, "memctl context", issue 21): the topic context lost to the
last 20 messages plus the search's results packed by score on held-out LoCoMo (-.03 to -.06),
because the older recent messages and the topics' neighbours took the places of the search's
best hits; so the search's best hits come first, the last exchange stays for the
conversation's thread, and topics, the older recent messages and the unsplit ones fill.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memctl.errors import InputError
from memctl.text.shape import Shape, shown
from memctl.text.tokens import count_tokens

if TYPE_CHECKING:
    from memctl.runtime import Runtime

FOUND_HITS = 60      # the session's messages the search ranks for the message
# A found message's priority falls from 0.90 to 0.40 over budget / FALL_TOKENS ranks, about as many hits
# as the budget holds (was a fixed 45): a fixed fall let the topics' references and the older recent
# messages in at the same rank whatever the budget, so at 4k they took the places of hits 30-60. Over
# cached turns of both dev sets, tuned on the even-numbered questions (bench/README.md,
# "`memctl context`, the per-turn call"), context - by-score at 1k/2k/4k/8k, LoCoMo: 45 +.090/+.067/+.069/+.114, budget/30
# +.100/+.062/+.101/+.114 (/22 +.090/+.068/+.105/+.114, /40 +.094/+.073/+.095/+.114); LongMemEval
# (24 questions then): 45 -.021/+.042/+.042/+.021, /30 .000/+.062/+.062/+.021.
FALL_TOKENS = 30
# A found message's reply ranks with the hit this many places below it. 10 (was 25), measured over
# cached turns of LoCoMo dev (160 q) with LongMemEval dev: context - by-score at 1k/2k/4k
# +.006/+.022/+.060 with 25, +.013/+.022/+.060 with 10, +.004/+.029/+.054 with 8 (bench/README.md).
# The turn before a hit at the same lag gained nothing (1k -.002, 2k -.001).
REPLY_LAG = 10
TOPIC_WEIGHT = 0.8   # a topic referenced message: this times the topic's score times its share of the best hit
LAST_EXCHANGE = 2    # recent messages before the new one (the last exchange) that rank with the best hits
# Where a message shown by several parts goes: the first of these that holds it. "last" is the new
# message and the LAST_EXCHANGE before it (shown among the recent ones); an older recent message the
# search found is shown where the search ranks it, so that a newer statement it found comes before
# an older one however recent either is.
PLACE_ORDER = ("last", "found", "recent", "topic", "unsplit")


@dataclass
class Part:
    kind: str                 # system | core | memory | found | topic | summary | unsplit | recent
    text: str
    priority: float
    section: int              # index of the section it belongs to
    message: dict | None = None
    topic_id: str | None = None
    memory_id: str | None = None
    order: float = 0          # place within its section
    short: str | None = None  # a memory's summary: what is given when the text does not fit
    tokens: int = 0
    short_tokens: int = 0
    day: str | None = None    # a message's day: its section shows a line naming it once a run
    minute: str = ""          # a message's time of day: said once a run of messages of that minute

    @property
    def group(self):
        """Parts printed under one heading: the memories of a kind share theirs."""
        return self.kind if self.kind in ("core", "memory") else self.section

    def as_dropped(self) -> dict:
        out = {"kind": self.kind, "tokens": self.tokens}
        for key, value in (("topic_id", self.topic_id), ("memory_id", self.memory_id)):
            if value:
                out[key] = value
        if self.message:
            out["message_id"] = self.message["id"]
        return out


@dataclass
class Context(Shape):
    """The context for the next turn (`memctl context --json`; the MCP context tool adds "text")."""
    budget: int = shown("The token budget.")
    tokens: int = shown("The tokens it takes.", default=0)
    sections: list[dict] = shown('The parts, in order: {"kind": "system"|"core"|"memory"|"found"|"topic"|'
                                 '"unsplit"|"recent", "messages": [{"id", "role", "speaker", "text", "ts"}], core '
                                 'and memory: "id", "section", "score", "summary", "content", "text"; topic: '
                                 '"topic_id", "name", "score", "summary"}.', default_factory=list)
    activated: list[dict] = shown("Topics the round activated.", default_factory=list)
    made_dormant: list[dict] = shown("Topics the round made dormant.", default_factory=list)
    ambiguous: list[dict] = shown("Dormant topics an amnesia cue may mean: ask which.", default_factory=list)
    dropped: list[dict] = shown("Parts left out for the budget.", default_factory=list)
    text: str = shown("The context as one text (what `memctl context` prints; the MCP tool gives it).",
                      when="text", default="")


def message_view(message: dict) -> dict:
    return {"id": message["id"], "role": message.get("role"), "speaker": message.get("speaker"),
            "text": message.get("text", ""), "ts": message.get("ts"), **({"excerpt": True} if message.get("excerpt") else {})}


def excerpt(message: dict, matched: str | None = None, query: str = "") -> dict:
    """The message as the context shows it: whole when it is one search unit long, else a window of
    one unit's length marked "excerpt" (`memctl show ID` has the rest): around its sentence sharing
    most of the query's terms, of those the first in the unit the search matched (`matched`); its
    opening (or the matched unit's) when no sentence shares a term."""
    from memctl.index.units import CHUNK_TOKENS

    text = message.get("text", "")
    if len(text.encode()) <= CHUNK_TOKENS or count_tokens(text) <= CHUNK_TOKENS:
        return message
    start = text.find(matched.strip()) if matched and matched.strip() else -1
    unit = (start, start + len(matched.strip())) if start >= 0 else (0, 0)
    return {**message, "text": window(text, query, CHUNK_TOKENS, unit), "excerpt": True}


_SENTENCE = re.compile(r"[^\n]+?(?:[.!?。！？](?=\s)|[。！？]|$)", re.MULTILINE)


def window(text: str, query: str, limit: int, unit: tuple[int, int] = (0, 0)) -> str:
    """At most `limit` tokens of `text`: the sentence sharing most of the query's content terms (of
    equals, one within `unit`, the span the search matched, else the first; with no term shared, the
    unit's first or the text's first), then the sentences after and before it in turn while they fit,
    within the unit when it holds that sentence: a unit's window is often shorter than `limit`, and
    shorter excerpts let more hits in (LongMemEval dev, 24 questions, context - by-score at 1k/2k:
    -.021/+.021 growing over the whole text, .000/+.062 within the unit)."""
    from memctl.text.tokens import truncate_tokens
    from memctl.topics.segment import terms_of

    spans = [m.span() for m in _SENTENCE.finditer(text) if m.group().strip()]
    if not spans:
        return truncate_tokens(text, limit).strip()
    wanted = set(terms_of(query))

    def rank(n: int) -> tuple:
        start, end = spans[n]
        return (len(wanted.intersection(terms_of(text[start:end]))), unit[0] <= start < unit[1], -n)

    best = max(range(len(spans)), key=rank)
    inside = [n for n, (start, _) in enumerate(spans) if unit[0] <= start < unit[1]]
    lowest, highest = (inside[0], inside[-1]) if best in inside else (0, len(spans) - 1)
    first = last = best
    if count_tokens(text[slice(*spans[best])]) >= limit:
        return truncate_tokens(text[slice(*spans[best])], limit).strip()
    grown = True
    while grown:
        grown = False
        for n in (last + 1, first - 1):
            lo, hi = min(first, n), max(last, n)
            if lowest <= n <= highest and not first <= n <= last \
                    and count_tokens(text[spans[lo][0]:spans[hi][1]]) <= limit:
                first, last, grown = lo, hi, True
    return text[spans[first][0]:spans[last][1]].strip()


_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]\d\d:?\d\d)?$")


def day_and_time(ts) -> tuple[str | None, str]:
    """(the day a message was said, its time of day to the minute, with its offset unless UTC);
    (None, "") without a time stamp, (None, ts) for one that is not ISO 8601."""
    if not isinstance(ts, str) or not ts:
        return None, ""
    match = _STAMP.match(ts)
    if not match:
        return None, ts
    day, minute, offset = match.groups()
    return day, minute + ("" if offset in (None, "Z", "+00:00", "+0000") else offset)


def render_line(message: dict, stamp: bool = True) -> str:
    """A message as the context shows it, under a line naming its day: the time of day only. A full
    ISO stamp is ~14 of a LoCoMo message's 54 rendered tokens; the day, shared by a run of
    messages, is said once."""
    who = message.get("speaker") or message.get("role") or ""
    minute = day_and_time(message.get("ts"))[1] if stamp else ""
    return f"{stamp_of(minute)}{who} ({message['id']}): {message.get('text', '')}" + (" […]" if message.get("excerpt") else "")


def day_line(day: str) -> str:
    return f"[{day}]"


def stamp_of(minute: str) -> str:
    return f"[{minute}] " if minute else ""


def _message_lines(messages: list[dict]) -> list[str]:
    """The messages of a section, a day line wherever the day changes, the time of day wherever it
    changes from the line before."""
    lines, day, minute = [], None, None
    for message in messages:
        said, at = day_and_time(message.get("ts"))
        if said is not None and said != day:
            lines.append(day_line(said))
            minute = None
        lines.append(render_line(message, stamp=(said, at) != (day, minute)))
        day, minute = said, at
    return lines


def render_memory(section: dict, text: str) -> str:
    where = section.get("section") or section.get("source") or ""
    return f"- ({where}, {section['id']}) {text}" + (" [summary]" if section.get("content") == "summary" else "")


def build(rt: Runtime, retriever, session: str, message: str, *, system_text: str = "", budget: int,
          record: bool = True, llm_command: str = "", say=None, scope: str | None = None,
          new_session: bool = False, leave_out: frozenset[str] = frozenset()) -> Context:
    """The context of the session's next turn. `record`: the topics' round is recorded (activation,
    the log); off, nothing is written. `scope`: the session must
    be in it. `new_session`: a session not stored yet has no messages (topic_round). `leave_out`:
    kinds of parts not given at all (a client that holds the conversation itself needs no "recent"
    nor "unsplit" messages); the budget goes to the rest."""
    from memctl.governance.layers import core_and_scope
    from memctl.index.filters import Filters
    from memctl.search.queries import Query
    from memctl.store import memoryfile
    from memctl.topics.round import topic_round

    if budget < 1:
        raise InputError("must be a whole number >= 1", source="--budget")
    store, settings = rt.store, rt.settings
    with store.reading():
        doc = memoryfile.load(store.memory_md)
    governance_settings = settings.governance
    layers = {}  # the session's scope -> its core and scope memories, chosen once (they read access counts)

    def core_and_scope_of(session_scope: str) -> tuple[list, list]:
        if session_scope not in layers:
            workspace = session_scope if session_scope != "global" else None
            layers[session_scope] = core_and_scope(store, doc, workspace, governance_settings, rt.clock.now())
        return layers[session_scope]

    def memory_query(session_scope: str) -> tuple:
        """The session's messages as `memctl search` ranks them (the topics' own message query
        leaves its neighbours and date stages out), then the memories and daily-log entries of the
        scope (a global session: global only; no filter would be every scope), asked in the
        topics' search batch."""
        found_query = Query(text=message, k=FOUND_HITS, min_score=0.0,
                            filters=Filters(kinds=("message",), scopes=(session_scope,)))
        if not governance_settings.layer_query_max:
            return (found_query,)
        core, scoped = core_and_scope_of(session_scope)
        workspace = session_scope if session_scope != "global" else None
        return (found_query, Query(text=message, k=governance_settings.layer_query_max + len(core) + len(scoped),
                                   filters=Filters(kinds=("memory", "log"), scopes=(workspace or "global",))))

    turn = topic_round(rt, retriever, session, message, record=record, llm_command=llm_command, say=say,
                       scope=scope, more=memory_query, new_session=new_session)
    memories, found = _memories_and_found(rt, doc, turn, message, core_and_scope_of(turn.scope))
    context = Context(budget, activated=turn.activated, made_dormant=turn.made_dormant, ambiguous=turn.ambiguous)
    _assemble(context, turn, system_text, memories, found, budget, leave_out)
    return context


def _memories_and_found(rt: Runtime, doc, turn, message: str, layers: tuple[list, list]) -> tuple[list[dict], list[tuple[dict, float, str]]]:
    """(the memory sections: core, scope, found; the session's messages the topics' search found, with
    their scores and the text of the unit matched, best first). The search is `memctl search`'s, in the topics' batch. `layers`: the
    scope's core and scope memories."""
    from memctl.store.status import active_tails
    from memctl.store.topicfile import archived_message_ids
    from memctl.window.state import plan

    store, governance_settings = rt.store, rt.settings.governance
    with store.reading():
        archived = archived_message_ids(store)
    core, scoped = layers
    message_hits, memory_hits = turn.more_hits[0], (turn.more_hits[1] if len(turn.more_hits) > 1 else [])
    score = {r.record_id: r.score for r in memory_hits}
    sections = [_memory_section("core", e, "core", score.get(e.id)) for e in core]
    sections += [_memory_section("memory", e, "scope", score.get(e.id)) for e in scoped]
    taken = {e.id for e in core + scoped}
    tails = set(active_tails(doc))
    window = plan(rt, message) if memory_hits else None
    focus = set(window.names) if window and window.dominant else set()
    # The window's plan focuses, it does not filter: a dominant section's hits come first.
    ranked = sorted(memory_hits, key=lambda r: r.section not in focus) if focus else memory_hits
    for result in ranked:
        if len(sections) - len(core) - len(scoped) >= governance_settings.layer_query_max or result.record_id in taken:
            continue
        if result.kind == "memory":
            entry = doc.find(result.record_id)
            if entry is None or entry.id not in tails:
                continue  # superseded or gone since the index was written: never shown
            sections.append(_memory_section("memory", entry, "search", result.score))
        elif result.scope != turn.scope:
            continue  # what was said in another scope's session, a global one's too: its own context's
        else:
            sections.append({"kind": "memory", "id": result.record_id, "section": None, "scope": result.scope,
                             "source": result.source, "score": round(result.score, 4), "summary": None,
                             "found_by": "search", "text": result.text})
        taken.add(result.record_id)
    # The session's own messages among the scope's the search ranked; archived topics are shown only
    # on request (T12), so their messages are not found either.
    by_id = {m["id"]: m for m in turn.messages if m["id"] not in archived}
    found = [(by_id[r.record_id], r.score, r.text) for r in message_hits if r.record_id in by_id][:FOUND_HITS]
    return sections, found


def _memory_section(kind: str, entry, found_by: str, score: float | None) -> dict:
    return {"kind": kind, "id": entry.id, "section": entry.section, "scope": entry.get("scope", "global"),
            "source": "MEMORY.md", "score": None if score is None else round(score, 4),
            "summary": entry.get("summary") or None, "found_by": found_by, "text": entry.text}


def _assemble(context: Context, turn, system_text: str, memories: list[dict], found: list[tuple[dict, float, str]],
              budget: int, leave_out: frozenset[str] = frozenset()) -> None:
    system_text = system_text.rstrip()  # a file's last newline; the blank line between sections is ours
    gathered = _Gathering()
    gathered.add_system(system_text)
    gathered.add_memories(memories)
    gathered.claim_found(turn, found, budget)
    gathered.claim_topics(turn)
    gathered.claim_unsplit(turn)
    gathered.claim_recent(turn)
    gathered.add_messages({message["id"]: text for message, _score, text in found}, turn.new_message.get("text", ""))

    # Left out after the claims: a message the client holds (the last exchange) is not given as found either.
    parts = [p for p in gathered.parts if p.kind not in leave_out]
    for part in parts:
        part.tokens = count_tokens(part.text)
        part.short_tokens = count_tokens(part.short) if part.short else 0
    chosen = _fit(parts, gathered.sections, budget)
    context.dropped = [p.as_dropped() for p in parts if id(p) not in chosen]
    kept = _sections_with(parts, gathered.sections, chosen)
    context.text = _render(kept)
    context.tokens = count_tokens(context.text)
    _fill_section_views(kept, found, system_text)
    context.sections = kept


class _Gathering:
    """The sections of one context and the parts that may fill them, gathered in section order.
    A message is claimed by every part that would show it and becomes one part, placed in the first
    of PLACE_ORDER among its claims, with the highest priority any claim gave it."""

    def __init__(self) -> None:
        self.sections: list[dict] = []
        self.parts: list[Part] = []
        self.claims: dict[str, dict] = {}

    def open(self, section: dict) -> int:
        self.sections.append(section)
        return len(self.sections) - 1

    def claim(self, kind: str, message: dict, priority: float, section: int, order: float, topic_id=None) -> None:
        held = self.claims.get(message["id"])
        if held is None:
            self.claims[message["id"]] = {"kind": kind, "message": message, "priority": priority, "section": section,
                                          "order": order, "topic_id": topic_id}
            return
        held["priority"] = max(held["priority"], priority)
        if PLACE_ORDER.index(kind) < PLACE_ORDER.index(held["kind"]):
            held.update(kind=kind, section=section, order=order, topic_id=topic_id)

    def add_system(self, system_text: str) -> None:
        if system_text:
            self.parts.append(Part("system", system_text, math.inf,
                                   self.open({"kind": "system", "messages": [], "text": system_text})))

    def add_memories(self, memories: list[dict]) -> None:
        rank_in = {"core": 0, "scope": 0, "search": 0}
        for memory in memories:
            rank = rank_in[memory["found_by"]]
            rank_in[memory["found_by"]] += 1
            priority = {"core": 0.99, "scope": 0.95, "search": 0.93}[memory["found_by"]] - 0.01 * rank
            index = self.open({**memory, "messages": []})
            short = memory["summary"] if memory["summary"] and memory["summary"] != memory["text"] else None
            self.parts.append(Part(memory["kind"], memory["text"], priority, index, memory_id=memory["id"], short=short))

    def claim_found(self, turn, found: list[tuple[dict, float, str]], budget: int) -> None:
        if not found:
            return
        index = self.open({"kind": "found", "messages": []})
        fall = budget / FALL_TOKENS
        following = {m["id"]: n for m, n in zip(turn.messages, turn.messages[1:])}
        position = {m["id"]: n for n, m in enumerate(turn.messages)}
        for rank, (message, _score, _text) in enumerate(found):
            # Kept by rank, shown newest first: where a later statement corrects an earlier one the
            # agent reads the correction first (LongMemEval knowledge-update: newest shown before the
            # outdated one 0 of 1 by rank; bench/README.md).
            newest_first = -position.get(message["id"], rank)
            self.claim("found", message, 0.9 - 0.5 * rank / fall, index, newest_first)
            reply = following.get(message["id"])
            if reply is not None and rank + REPLY_LAG < FOUND_HITS:  # shown right after its hit
                self.claim("found", reply, 0.9 - 0.5 * (rank + REPLY_LAG) / fall, index, newest_first + 0.5)

    def claim_topics(self, turn) -> None:
        for evaluation in turn.shown:
            topic = turn.topics[evaluation.topic_id]
            by_id = {m["id"]: m for m in topic.messages}
            index = self.open({"kind": "topic", "topic_id": evaluation.topic_id, "name": evaluation.name,
                               "score": round(evaluation.relevance_score, 4), "summary": evaluation.summary,
                               "file": evaluation.file, "messages": []})
            best = max(evaluation.message_scores.values(), default=1.0) or 1.0
            for order, mid in enumerate(evaluation.referenced_message_ids):
                if mid in by_id:
                    share = evaluation.message_scores.get(mid, best) / best
                    self.claim("topic", by_id[mid], TOPIC_WEIGHT * evaluation.relevance_score * share, index, order,
                               evaluation.topic_id)
            if evaluation.summary:
                self.parts.append(Part("summary", f"Summary: {evaluation.summary}", evaluation.relevance_score / 4,
                                       index, topic_id=evaluation.topic_id))

    def claim_unsplit(self, turn) -> None:
        if not turn.unsplit:
            return
        index = self.open({"kind": "unsplit", "messages": []})
        for age, m in enumerate(reversed(turn.unsplit)):
            self.claim("unsplit", m, 0.25 - 0.1 * age / len(turn.unsplit), index, len(turn.unsplit) - age)

    def claim_recent(self, turn) -> None:
        recent = turn.recent
        index = self.open({"kind": "recent", "messages": []})
        for age, m in enumerate(reversed(recent)):
            if age == 0:
                priority = math.inf
            elif age <= LAST_EXCHANGE:
                priority = 0.88 - 0.03 * (age - 1) / LAST_EXCHANGE
            else:
                priority = 0.45 - 0.15 * (age - LAST_EXCHANGE) / len(recent)
            self.claim("last" if age <= LAST_EXCHANGE else "recent", m, priority, index, len(recent) - age)

    def add_messages(self, matched: dict[str, str], query: str) -> None:
        """A part for each claimed message, where its claims placed it. `matched`: a found message's id ->
        the text of the unit the search matched."""
        for held in self.claims.values():
            # A long message (an assistant's reply, a pasted text) is shown by its excerpt: one is the
            # room of several user turns (LongMemEval all turns: replies median 391 tokens). Not the new one.
            message = held["message"] if held["priority"] == math.inf else excerpt(
                held["message"], matched.get(held["message"]["id"]), query)
            day, minute = day_and_time(message.get("ts"))
            self.parts.append(Part("recent" if held["kind"] == "last" else held["kind"], render_line(message, stamp=False),
                                   held["priority"], held["section"], message, held["topic_id"], order=held["order"],
                                   day=day, minute=minute))


def _fill_section_views(kept: list[dict], found: list[tuple[dict, float, str]], system_text: str) -> None:
    """The kept sections as the JSON form gives them: their messages as views, a found one with its score."""
    score = {m["id"]: sc for m, sc, _text in found}
    for s in kept:
        if s["kind"] == "topic" and s.get("summary") is None:
            s["summary"] = ""
        if s["kind"] == "found":
            # A hit's reply, shown after it, has no score of its own: null.
            s["messages"] = [{**message_view(m), "score": round(score[m["id"]], 4) if m["id"] in score else None}
                             for m in s["messages"]]
        else:
            s["messages"] = [message_view(m) for m in s["messages"]]
        if s["kind"] == "system":
            s["text"] = system_text


def _fit(parts: list[Part], sections: list[dict], budget: int) -> dict[int, str]:
    """The parts kept, id -> "full" or "summary": by priority, each taken whole (a memory as its summary
    when its text does not fit) while the rendered context stays within budget."""
    must = [p for p in parts if p.priority == math.inf]
    chosen = {id(p): "full" for p in must}
    heading_of = {p.group: _heading_tokens(sections[p.section]) for p in parts}
    # A day line is paid by the first message of its day kept in a section (a little under when a
    # section's order comes back to a day: the exact count below settles it).
    days = {(p.section, p.day) for p in must if p.day}
    stamps = {(p.section, p.day, p.minute) for p in must if p.minute}
    used = (sum(p.tokens + 1 for p in must) + sum(heading_of[g] for g in {p.group for p in must})
            + sum(count_tokens(day_line(day)) + 1 for _, day in days)
            + sum(count_tokens(stamp_of(minute)) for _, _, minute in stamps))
    if used > budget:
        raise InputError(f"the system prompt and the new message alone take {used} tokens, over the budget "
                         f"of {budget}", source="--budget")
    opened = {p.group for p in must}
    for part in sorted((p for p in parts if p.priority != math.inf), key=lambda p: -p.priority):
        heading = heading_of[part.group] if part.group not in opened else 0
        if part.day and (part.section, part.day) not in days:
            heading += count_tokens(day_line(part.day)) + 1
        if part.minute and (part.section, part.day, part.minute) not in stamps:
            heading += count_tokens(stamp_of(part.minute))
        for content, tokens in (("full", part.tokens), ("summary", part.short_tokens if part.short else None)):
            if tokens is not None and used + tokens + 1 + heading <= budget:
                chosen[id(part)] = content
                used += tokens + 1 + heading
                opened.add(part.group)
                if part.day:
                    days.add((part.section, part.day))
                if part.minute:
                    stamps.add((part.section, part.day, part.minute))
                break
    # The estimate above errs high; the exact count of the rendered text decides: the lowest part
    # kept gives way, a memory first to its summary.
    # Counting the whole text is the cost here, so each round gives way by as many tokens as it is over.
    while (over := count_tokens(_render(_sections_with(parts, sections, chosen))) - budget) > 0:
        kept = sorted((p for p in parts if id(p) in chosen and p.priority != math.inf), key=lambda p: p.priority)
        for lowest in kept:
            if chosen[id(lowest)] == "full" and lowest.short:
                chosen[id(lowest)] = "summary"
                over -= lowest.tokens - lowest.short_tokens
            else:
                was = chosen.pop(id(lowest))
                over -= (lowest.short_tokens if was == "summary" else lowest.tokens) + 1
            if over <= 0:
                break
    return chosen


def _heading_tokens(section: dict) -> int:
    """What opening a section costs: its heading line and the blank line before it (a little over)."""
    if section["kind"] == "system":
        return 2
    if section["kind"] == "topic":
        return count_tokens(f"# Topic: {section['name']} (score 0.00, {section['file']})") + 3
    return count_tokens(HEADINGS[section["kind"]]) + 3


def _sections_with(parts: list[Part], sections: list[dict], chosen: dict[int, str]) -> list[dict]:
    out = []
    for index, s in enumerate(sections):
        mine = [p for p in parts if p.section == index and id(p) in chosen]
        copy = {**s, "messages": [p.message for p in sorted(mine, key=lambda p: p.order) if p.message]}
        if s["kind"] == "topic":
            copy["summary"] = s["summary"] if any(p.kind == "summary" for p in mine) else None
        if s["kind"] in ("core", "memory"):
            if not mine:
                continue
            copy["content"] = chosen[id(mine[0])]
            copy["text"] = s["text"] if copy["content"] == "full" else s["summary"]
        if s["kind"] in ("system", "core", "memory") or copy["messages"] or copy.get("summary"):
            out.append(copy)
    return out


HEADINGS = {"core": "# Core memories (always apply)", "memory": "# Memories", "found": "# Earlier messages found",
            "unsplit": "# Unsplit messages", "recent": "# Recent messages"}


def _render(sections: list[dict]) -> str:
    blocks: list[list[str]] = []
    previous = None
    for s in sections:
        if s["kind"] == "system":
            blocks.append([s["text"]])
        elif s["kind"] in ("core", "memory"):
            if previous != s["kind"]:
                blocks.append([HEADINGS[s["kind"]]])
            blocks[-1].append(render_memory(s, s["text"]))
        elif s["kind"] == "topic":
            lines = [f"# Topic: {s['name']} (score {s['score']:.2f}, {s['file']})"]
            lines += _message_lines(s["messages"])
            if s.get("summary"):
                lines.append(f"Summary: {s['summary']}")
            blocks.append(lines)
        else:
            blocks.append([HEADINGS[s["kind"]]] + _message_lines(s["messages"]))
        previous = s["kind"]
    return "\n\n".join("\n".join(lines) for lines in blocks) + "\n"
