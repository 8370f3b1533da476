"""`memctl split` (T2, T3, T8): move older unsplit messages of a session into topic files.

The whole split - reading the session and the topics, choosing, writing -
happens under the store lock in one Transaction: two splits of one session
run one after the other and the second sees the first's topics, so no
message lands twice; a crash leaves the journal, and the next writer rolls
the half-written files back, so every message is either unsplit or in one topic.

A split sees only the topics of the session's scope (topicfile.in_scope): its
messages go to them or to new topics of that scope, never to another's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Literal

from memctl import clock, config
from memctl.errors import InputError
from memctl.store import jsonl
from memctl.store.memoryfile import check_field
from memctl.store.sessions import session_scope
from memctl.store.store import Store
from memctl.text.shape import Shape, shown
from memctl.text.tokens import count_tokens
from memctl.store import topicfile
from memctl.topics import segment
from memctl.store.topicfile import Topic
from memctl.topics.llm import Describer, Draft
from memctl.topics.summary import Background, background_of, summarise

if TYPE_CHECKING:
    from memctl.runtime import Runtime


@dataclass
class Assignment(Shape):
    """A message moved into a topic."""
    message_id: str = shown()
    topic_id: str = shown()
    action: Literal["active", "reactivated", "new"] = shown("What the topic was: active, brought back, or new.")


@dataclass
class SplitReport:
    session: str
    context_tokens: int
    threshold: int
    unsplit: int
    keep_recent: int = 0  # the last messages left in the main context, however far over the threshold
    assignments: list[Assignment] = field(default_factory=list)
    topics: dict[str, str] = field(default_factory=dict)   # topic id -> name, of the topics touched
    subtopics: list[str] = field(default_factory=list)


# Per message: (an existing topic id or a key naming a new topic, the new topic's name, its summary).
Choice = tuple[str, str | None, str | None]
Chooser = Callable[[list[dict], dict[str, Topic]], list[Choice]]


def session_messages(store: Store, session: str) -> list[dict]:
    path = store.session_file(session)
    if not path.exists():
        raise InputError(f"no session '{session}' (no {store.relative(path)})", source=str(path))
    messages, source = [], store.relative(path)
    for line in jsonl.read(path):
        if line.value is None:
            continue  # not a message at all: the index skips it too, and the store check names it
        topicfile.check_record({**line.value, "type": "message"}, source, line.number)
        messages.append(line.value)
    return messages


def scope_of_session(store: Store, session: str, messages: list[dict], expected: str | None = None) -> str:
    """The session's scope (global while it has no message). `expected` is the scope the caller
    serves (--scope): a session in another is an InputError, so a caller that names whose turn it
    is cannot be handed someone else's conversation by a wrong session id."""
    scope = session_scope(messages, store.relative(store.session_file(session))) or "global"
    if expected is not None and expected != scope:
        raise InputError(check_field("scope", expected) or f"session '{session}' is in scope {scope}, not {expected}",
                         source="--scope")
    return scope


def context_tokens(system_text: str, topics: dict[str, Topic], unsplit: list[dict]) -> int:
    """The main context as design 001 counts it: system prompt, topic results (the active topics'
    summaries), the unsplit messages (the newest of them is the new message)."""
    parts = [system_text] + [t.header.get("summary", "") for t in topics.values() if t.state == "active"]
    parts += [m.get("text", "") for m in unsplit]
    return sum(count_tokens(p) for p in parts if p)


def split(rt: Runtime, session: str, *, system_text: str = "", keep_recent: int | None = None,
          force: bool = False, dry_run: bool = False, choose: Chooser | None = None,
          describe: Describer | None = None, progress: Callable[[str, int, int], None] | None = None,
          scope: str | None = None) -> SplitReport:
    """Split the session if its context is over the threshold (or `force`); `choose` (where messages
    go) and `describe` (names and summaries) are the LLM path, built-in when None. A bad LLM answer
    raises LLMAnswerError and nothing is written. `scope`: the session must be in it. `progress(stage,
    done, total)` hears how far the built-in steps are (`done` counted since its last call)."""
    from memctl.topics.llm import LLMAnswerError

    store, settings = rt.store, rt.settings
    topics_settings = settings.topics
    keep = topics_settings.keep_recent if keep_recent is None else keep_recent
    with store.transaction(dry_run=dry_run) as tx:
        messages = session_messages(store, session)
        session_in = scope_of_session(store, session, messages, scope)
        every_topic = topicfile.load_topics(store)
        placed = {m["id"] for t in every_topic.values() for m in t.messages} | topicfile.archived_message_ids(store)
        topics = topicfile.in_scope(every_topic, session_in)
        unsplit = [m for m in messages if m["id"] not in placed]
        tokens = context_tokens(system_text, topics, unsplit)
        threshold = int(topics_settings.context_limit * topics_settings.split_at)
        report = SplitReport(session, tokens, threshold, len(unsplit), keep)
        if not (force or tokens > threshold):
            return report
        older = unsplit[:len(unsplit) - keep] if keep else unsplit
        if not older:
            return report
        try:
            chosen = (choose or builtin_chooser(settings.embedding, progress))(older, topics)
            _apply(tx, store, topics_settings, older, chosen, topics, report, describe, session_in,
                   clock.format_ts(rt.clock.now()), progress)
        except LLMAnswerError as exc:  # the transaction rolls back what was written
            raise LLMAnswerError(f"{exc}; nothing was split") from None
    return report


def builtin_chooser(embedding_settings: config.Embedding,
                    progress: Callable[[str, int, int], None] | None = None) -> Chooser:
    def choose(messages: list[dict], topics: dict[str, Topic]) -> list[Choice]:
        known = [t for t in topics.values() if t.state != "archived" and t.messages]
        model = embedder(embedding_settings)
        texts = [m.get("text", "") for m in messages] + [t.header.get("summary", "") for t in known]
        # embedding is most of a long split's time (3,180 messages: most of 52 s)
        vectors = model.embed(texts, progress=(lambda n: progress("embedding", n, len(texts))) if progress else None)
        evidence = []
        for row, topic in enumerate(known, len(messages)):
            item = segment.TopicEvidence(key=topic.id)
            for m in topic.messages:
                item.add(None, segment.terms_of(m.get("text", "")), segment.speaker_of(m))
            item.vector = vectors[row]  # the summary stands for the topic's messages, not re-embedded
            evidence.append(item)
        keys = segment.partition(messages, vectors[:len(messages)], evidence, embed=model.embed, reads=readable_by(model))
        return [(key, None, None) for key in keys]

    return choose


def builtin_describer(background: Background, budget: int, taken: Iterable[str] = (),
                      progress: Callable[[str, int, int], None] | None = None) -> Describer:
    """Extractive summaries (summary.py); a topic keeps the name it was given when it opened, and a new
    one is named unlike the `taken` names (the scope's other topics') and the ones named before it."""
    names = set(taken)

    def describe(drafts: list[Draft]) -> list[tuple[str, str]]:
        described = []
        for draft in drafts:
            found, summary = summarise(draft.messages, background, budget, names - {draft.name})
            described.append((draft.name or found, summary))
            names.add(draft.name or found)
            if progress:
                progress("summarising", 1, len(drafts))
        return described

    return describe


def readable_by(model) -> Callable[[str], float]:
    """Share of a text the model's vectors read, for the split's mix of vectors and word overlap: all
    of it where the model knows every word piece (Chinese read by USE in the default usem3-minilm),
    else the text outside CJK runs (MiniLM knows a few hundred Chinese characters)."""
    from memctl.topics import segment

    return lambda text: 1.0 if model.unknown_share(text) == 0 else segment.readable_share(text)


def embedder(embedding_settings: config.Embedding):
    """The sentence model the split reads messages with: the index's ([embedding] model, any
    backend of embedders.py), of the default one space each text's finest model alone
    (embedders.FinestOf: what the split's constants were tuned on)."""
    from memctl.index.embedders import open_embedder

    model = open_embedder(embedding_settings)
    return model.finest() if hasattr(model, "finest") else model


def _apply(tx, store: Store, topics_settings: config.Topics, messages: list[dict], chosen: list[Choice],
           topics: dict[str, Topic], report: SplitReport, describe: Describer | None, scope: str, now: str,
           progress: Callable[[str, int, int], None] | None = None) -> None:
    """Write the choice: `chosen` gives per message an existing topic id or a new-topic key (and maybe a name).
    `topics` are those of `scope`, the session's; every topic written is marked with it and stamped `now`."""
    by_key: dict[str, Topic] = {}
    fresh: set[str] = set()
    added: dict[str, list[dict]] = {}
    states_before = {tid: t.state for tid, t in topics.items()}
    given: dict[str, str] = {}
    for message, (key, name, summary) in zip(messages, chosen):
        topic = topics.get(key) or by_key.get(key)
        if topic is None:
            tid = topicfile.topic_id(message["id"])
            topic = Topic({"type": "topic", "id": tid, "name": name or "", "summary": "", "parent": None,
                           "children": [], "state": "active", "scope": scope, "created": now, "updated": now,
                           "messages": 0, "tokens": 0}, [], 1)
            by_key[key] = topics[tid] = topic
            fresh.add(tid)
            if summary:
                given[tid] = summary
        action = "new" if topic.id in fresh else (
            "reactivated" if states_before.get(topic.id) != "active" else "active")
        topic.messages.append(topicfile.record(message))
        added.setdefault(topic.id, []).append(topicfile.record(message))
        report.assignments.append(Assignment(message["id"], topic.id, action))
    describe = describe or builtin_describer(background_of(t.messages for t in topics.values()),
                                             topics_settings.summary_bytes,
                                             (t.header.get("name", "") for t in topics.values()), progress)
    described = describe([Draft(tid, topics[tid].messages, topics[tid].messages if tid in fresh else new,
                                topics[tid].header.get("name", ""), given.get(tid) or topics[tid].header.get("summary", ""))
                          for tid, new in added.items()])
    for (tid, new), (name, summary) in zip(added.items(), described):
        topic = topics[tid]
        topic.header.update(name=name, summary=summary, state="active", scope=scope,
                            updated=now, messages=len(topic.messages),
                            tokens=sum(count_tokens(m.get("text", "")) for m in topic.messages))
        topicfile.write_topic(tx, store, topic, new, fresh=tid in fresh)
        report.topics[tid] = topic.header["name"]
        if topic.header["tokens"] > topics_settings.topic_limit:
            report.subtopics += _into_subtopics(tx, store, topics_settings, topic, topics, describe, now)
    stamps = [m.get("ts") for m in messages if m.get("ts")]
    topicfile.append_index(tx, store, topicfile.TIME_INDEX, [{"from": min(stamps, default=None), "to": max(stamps, default=None),
                                                      "topics": sorted(added), "at": now}])


def _into_subtopics(tx, store, topics_settings, topic: Topic, topics, describe: Describer, now) -> list[str]:
    """T8: a topic past topic_limit tokens hands its messages to sub-topics (children with `parent`),
    cut where its subject moves (the built-in split), each at most half the limit; the parent keeps
    its header and summary."""
    pieces: list[list[dict]] = [[]]
    size = 0
    half = topics_settings.topic_limit // 2
    keys = segment.partition(topic.messages, None, [])
    for index, message in enumerate(topic.messages):
        tokens = count_tokens(message.get("text", ""))
        moved = index and keys[index] != keys[index - 1]
        if pieces[-1] and (size + tokens > half or (moved and size > half // 2)):
            pieces.append([])
            size = 0
        pieces[-1].append(message)
        size += tokens
    if len(pieces) < 2:
        return []
    children = []
    links = []
    ids = [topicfile.topic_id(piece[0]["id"] + "/" + topic.id) for piece in pieces]
    described = describe([Draft(tid, piece, piece, "", "") for tid, piece in zip(ids, pieces)])
    for tid, piece, (name, summary) in zip(ids, pieces, described):
        child = Topic({"type": "topic", "id": tid, "name": name,
                       "summary": summary, "parent": topic.id, "children": [], "state": "active",
                       "scope": topic.header["scope"], "created": now, "updated": now, "messages": len(piece),
                       "tokens": sum(count_tokens(m.get("text", "")) for m in piece)}, list(piece), 1)
        topics[child.id] = child
        topicfile.write_topic(tx, store, child, piece, fresh=True)
        children.append(child.id)
        links.append({"from": topic.id, "to": child.id, "kind": "parent", "at": now})
    topic.messages = []
    topic.header.update(children=topic.header.get("children", []) + children, messages=0, tokens=0, updated=now)
    topicfile.rewrite_topic(tx, store, topic)
    topicfile.append_index(tx, store, topicfile.LINKS, links)
    return children
