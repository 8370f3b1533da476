"""`memctl review daily` (T12, P8): the offline forgetting that keeps the topic set healthy.

Run once a day (cron). In one Transaction (or, with dry_run, as a plan only):

- Compress: every topic touched in the last day gets a tighter summary
  (COMPRESSED_SHARE of [topics] summary_bytes) and an importance in 0..1
  (log-scaled message count, and its sliding average when it has one).
- Archive: a dormant topic not updated for [topics] archive_after_days (7), or
  a dormant one-off question and answer (ONE_OFF messages at most, not touched
  today), moves to topics/archived/YYYY-MM/<id>.jsonl (the month it was last
  updated) as its header only: summary, state "archived", archived_at, and
  message_ids, so that its messages stay placed and never return to the main
  context as unsplit. Normal activation never sees it; `topics activate
  --include-archived` brings it back (with its messages, copied again from
  the sessions).
- Merge: two live topics whose summaries are the same subject (cosine of
  their summary vectors >= MERGE_SIMILARITY, or the same name) become one:
  the smaller one's messages move into the larger, its file goes, and
  links.jsonl gets {"from": old, "to": kept, "kind": "merged-into"}, through
  which `Memory.topic(old)` still resolves.
- Related: pairs of live topics whose summary vectors are close but not the
  same subject (cosine >= RELATED_SIMILARITY and in the store's top
  RELATED_PERCENTILE) get {"kind": "related"} in links.jsonl, once a pair.
- With an LLM command ([topics] llm_command, `--llm`): the merges and the
  related pairs come from one call of prompts/review.md, the compressed
  summaries and importances from one call of prompts/compress.md per topic
  (llm_parallel at once); answers are parsed strictly (llm.py) and a bad one
  changes nothing (LLMAnswerError, exit 2). Idle-session summaries stay built-in.
- Idle sessions (P8): a session whose last message is older than [topics]
  idle_hours and has no auto-summary up to that message gets one line in
  auto_summaries.jsonl: {"session", "until", "at", "keywords": 3-5, "summary"}.

Scopes stay apart (topicfile.in_scope): topics merge and link only within one
scope, the store's share of close pairs is each scope's own, the background a
summary's keywords stand out from is its scope's topics, and an archived
header keeps its scope (an archived header written before scopes is in the
scope of the sessions it names). A topic in no scope is neither merged nor linked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import orjson

from memctl import clock
from memctl import config
from memctl.errors import InputError
from memctl.store import jsonl
from memctl.store.store import Store
from memctl.text.shape import Shape, shown
from memctl.store import topicfile
from memctl.topics import activation, log
from memctl.store.topicfile import Topic
from memctl.topics.summary import Background, background_of, distinctive_terms, summarise

if TYPE_CHECKING:
    from datetime import datetime

    from memctl.runtime import Runtime
    from memctl.store.store import Transaction

AUTO_SUMMARIES = "auto_summaries.jsonl"
COMPRESSED_SHARE = 0.6
ONE_OFF = 2
MERGE_SIMILARITY = 0.85
# Related: LoCoMo conv-26's 43 topics (903 pairs of summary vectors) have a 99th percentile of 0.72,
# and its pairs above 0.72 read as related ("adoption · loving home" / "process · provide",
# "LGBTQ activist" / "support group"). MiniLM reads little Chinese, so Chinese summaries are all
# alike (ZYS: median 0.65, 99th percentile 0.85): the percentile keeps the links to the closest pairs.
RELATED_SIMILARITY = 0.72
RELATED_PERCENTILE = 99


@dataclass
class DailyReport(Shape):
    """What the daily topic review did (or, dry, would do)."""
    dry_run: bool = shown()
    compressed: list[dict] = shown('{"topic_id", "importance"}', default_factory=list)
    archived: list[dict] = shown('{"topic_id", "reason", "to"}', default_factory=list)
    merged: list[dict] = shown('{"topic_id", "into", "similarity" | "reason"}', default_factory=list)
    related: list[dict] = shown('{"topic_id", "with", "similarity" | "reason"}', default_factory=list)
    idle_summaries: list[dict] = shown('Idle sessions summarised: {"session", "keywords", ...}',
                                       default_factory=list)


def restore_archived(tx, store: Store, query: str, now: str, scope: str | None = None) -> dict[str, Topic]:
    """Archived topics (of `scope`, if given) made dormant again, with their messages from the sessions:
    the one whose id is `query`, else those whose name or summary contains one of its words (explicit
    requests only). A restored topic is written with its scope."""
    from memctl.topics.split import session_messages

    words = [w.lower() for w in query.split() if len(w) > 2]
    restored = {}
    for header in topicfile.archived_topics(store, scope=scope):
        text = f"{header.get('name', '')} {header.get('summary', '')}".lower()
        if header["id"] != query and not any(w in text for w in words):
            continue
        wanted = set(header.get("message_ids", []))
        messages = []
        for session in header.get("sessions", []):
            messages += [topicfile.record(m) for m in session_messages(store, session) if m["id"] in wanted]
        restored_header = {k: v for k, v in header.items() if k not in ("message_ids", "sessions", "archived_at")}
        restored_header.update(state="dormant", updated=now, messages=len(messages))
        was_in = topicfile.archived_scope(store, header)
        if was_in is not None:  # a topic archived before scopes comes back in its sessions' scope
            restored_header["scope"] = was_in
        topic = Topic(restored_header, messages, 1)
        topicfile.rewrite_topic(tx, store, topic)
        tx.delete(topicfile.archived_path(store, header))
        restored[topic.id] = topic
    return restored




def review(rt: Runtime, *, dry_run: bool = False, llm_command: str = "",
           progress: Callable[[str, int, int], None] | None = None) -> DailyReport:
    """The review in one Transaction; with an LLM command the merges, related links and compressed
    summaries come from it, and a bad answer raises LLMAnswerError with nothing written. `progress(stage,
    done, total)` hears how far the built-in steps are (`done` counted since its last call)."""
    from memctl.topics import llm

    store, now_moment = rt.store, rt.clock.now()
    report = DailyReport(dry_run)
    try:
        with rt.store.transaction(dry_run=dry_run) as tx:
            topics = topicfile.load_topics(store)
            averages = activation.averages_of(activation.load_part(store))
            run = _ReviewRun(tx, store, rt.settings, now_moment, clock.format_ts(now_moment), report,
                             _backgrounds(topics), llm_command, progress, events=[])
            live = {tid: t for tid, t in topics.items() if t.messages}
            # Merge first: an archived topic is no longer there to merge into.
            merges, related = run.find_links(live)
            run.merge_and_link(live, merges, related)
            run.compress(run.archive_idle(live), averages)
            report.idle_summaries = _idle_summaries(tx, store, rt.settings.topics, now_moment, run.backgrounds)
            if not dry_run:
                log.append(tx, store, run.events)
    except llm.LLMAnswerError as exc:  # the transaction rolled back what was written
        raise llm.LLMAnswerError(f"{exc}; nothing was changed") from None
    return report


@dataclass
class _ReviewRun:
    """One daily review's steps, in its transaction, with what they report and log."""
    tx: Transaction
    store: Store
    settings: config.Settings
    now_moment: datetime
    now: str
    report: DailyReport
    backgrounds: dict[str | None, Background]
    llm_command: str
    progress: Callable[[str, int, int], None] | None
    events: list[dict]  # the topic log's events of the run, appended once at its end

    def find_links(self, live: dict[str, Topic]) -> tuple[list, list]:
        """(the merges: (gone, kept, detail), the related pairs: (one, other, detail)), within each scope."""
        from memctl.topics import llm

        merges, related = [], []
        for group in _by_scope(live):
            if self.llm_command:
                found = llm.review_links(self.store, self.llm_command, self.settings.topics.llm_timeout, group)
                merges += [(gone, keep, {"reason": why}) for gone, keep, why in found[0]]
                related += [(one, other, {"reason": why}) for one, other, why in found[1]]
            else:
                found = _similar_pairs(group, self.settings.embedding, self.progress)
                merges += found[0]
                related += found[1]
        return merges, related

    def merge_and_link(self, live: dict[str, Topic], merges: list, related: list) -> None:
        """Each merge done (the gone topic leaves `live`), each related pair not linked yet linked."""
        store, now = self.store, self.now
        for gone, keep, detail in merges:
            _merge(self.tx, store, live[keep], live[gone], self.backgrounds[live[keep].scope], self.settings.topics, now)
            self.report.merged.append({"topic_id": gone, "into": keep, **detail})
            self.events.append({"at": now, "event": "merged", "topic": gone, "into": keep, "reason": "daily review"})
        if related:
            linked = {frozenset((r["from"], r["to"])) for r in topicfile.read_index(store, topicfile.LINKS)
                      if r.get("kind") == "related"}
            fresh = [(one, other, detail) for one, other, detail in related if frozenset((one, other)) not in linked]
            topicfile.append_index(self.tx, store, topicfile.LINKS, [{"from": one, "to": other, "kind": "related",
                                                                      "at": now} for one, other, _ in fresh])
            self.report.related = [{"topic_id": one, "with": other, **detail} for one, other, detail in fresh]
        for gone, _, _ in merges:
            live.pop(gone)

    def archive_idle(self, live: dict[str, Topic]) -> list[Topic]:
        """Each dormant topic idle too long, or a one-off, archived; returns the topics touched in the last
        day, to compress."""
        archive_after_days, now = self.settings.topics.archive_after_days, self.now
        compress = []
        for tid, topic in live.items():
            age = clock.age_days(topic.header.get("updated"), self.now_moment)
            one_off = len(topic.messages) <= ONE_OFF and age >= 1
            if topic.state == "dormant" and (age > archive_after_days or one_off):
                reason = "one-off question and answer" if one_off and age <= archive_after_days \
                    else f"dormant {age:.0f} days"
                kept_scope = {"scope": topic.scope} if topic.scope else {}  # a topic from before scopes gains it
                header = {**topic.header, **kept_scope, "state": "archived", "archived_at": now,
                          "message_ids": [m["id"] for m in topic.messages],
                          "sessions": sorted({m.get("session") for m in topic.messages if m.get("session")})}
                path = topicfile.archived_path(self.store, header)
                self.tx.replace(path, orjson.dumps(header) + b"\n")
                self.tx.delete(topicfile.topic_path(self.store, tid))
                self.report.archived.append({"topic_id": tid, "reason": reason, "to": self.store.relative(path)})
                self.events.append({"at": now, "event": "archived", "topic": tid, "reason": reason})
            elif age < 1:
                compress.append(topic)
        return compress

    def compress(self, compress: list[Topic], averages: dict[str, float]) -> None:
        """Each topic given its tighter summary and its importance (with its sliding average when it has one)."""
        from memctl.topics import llm

        topics_settings = self.settings.topics
        budget = int(topics_settings.summary_bytes * COMPRESSED_SHARE)
        if self.llm_command:
            compressed = llm.compressor(self.store, self.llm_command, topics_settings.llm_timeout,
                                        topics_settings.llm_parallel, budget)(
                [llm.Draft(t.id, t.messages, t.messages, t.header.get("name", ""), t.header.get("summary", ""))
                 for t in compress])
        else:
            compressed = []
            for topic in compress:
                compressed.append((summarise(topic.messages, self.backgrounds[topic.scope], budget)[1],
                                   min(1.0, math.log1p(len(topic.messages)) / math.log(50))))
                if self.progress:
                    self.progress("compressing", 1, len(compress))
        for topic, (summary, importance) in zip(compress, compressed):
            if topic.id in averages:
                importance = (importance + averages[topic.id]) / 2
            topic.header.update(summary=summary, importance=round(importance, 3), reviewed=self.now)
            topicfile.write_topic(self.tx, self.store, topic, [], fresh=False)
            self.report.compressed.append({"topic_id": topic.id, "importance": round(importance, 3)})


def _backgrounds(topics: dict[str, Topic]) -> dict[str | None, Background]:
    """Per scope, the background its summaries' keywords stand out from: its own topics' messages."""
    return {scope: background_of(t.messages for t in topics.values() if t.scope == scope)
            for scope in {t.scope for t in topics.values()}}


def _by_scope(live: dict[str, Topic]) -> list[dict[str, Topic]]:
    """The live topics that may merge or link with each other: those of one scope, at least two."""
    groups: dict[str, dict[str, Topic]] = {}
    for tid, topic in live.items():
        if topic.scope is not None:
            groups.setdefault(topic.scope, {})[tid] = topic
    return [groups[scope] for scope in sorted(groups) if len(groups[scope]) > 1]


def _similar_pairs(live: dict[str, Topic], embedding_settings: config.Embedding,
                   progress: Callable[[str, int, int], None] | None = None):
    """The built-in review: (merges, related) as (id, other id, detail). Topics whose summary vectors
    have a cosine >= MERGE_SIMILARITY (or the same name) merge, the smaller into the larger; pairs at
    or over RELATED_SIMILARITY, and among the top RELATED_PERCENTILE of the pairs of `live` (one scope's
    topics), are related."""
    import numpy as np

    from memctl.topics.split import embedder

    ids = list(live)
    step = (lambda n: progress("embedding summaries", n, len(ids))) if progress else None
    vectors = embedder(embedding_settings).embed([live[t].header.get("summary", "") for t in ids], progress=step)
    similarity = vectors @ vectors.T
    pairs = similarity[np.triu_indices(len(ids), 1)]
    related_from = max(RELATED_SIMILARITY, float(np.percentile(pairs, RELATED_PERCENTILE)))
    merges, related = [], []
    taken: set[str] = set()
    for i, first in enumerate(ids):
        for j in range(i + 1, len(ids)):
            second = ids[j]
            if first in taken or second in taken:
                continue
            cosine = round(float(similarity[i, j]), 4)
            name = live[first].header.get("name")
            if cosine >= MERGE_SIMILARITY or (name and name == live[second].header.get("name")):
                keep, gone = (first, second) if len(live[first].messages) >= len(live[second].messages) \
                    else (second, first)
                taken.add(gone)
                merges.append((gone, keep, {"similarity": cosine}))
            elif cosine >= related_from:
                related.append((first, second, {"similarity": cosine}))
    return merges, [r for r in related if r[0] not in taken and r[1] not in taken]


def _merge(tx, store, keep: Topic, gone: Topic, background, topics_settings, now) -> None:
    keep.messages = sorted(keep.messages + gone.messages, key=lambda m: (m.get("ts") or "", m["id"]))
    _, summary = summarise(keep.messages, background, topics_settings.summary_bytes)
    from memctl.text.tokens import count_tokens

    keep.header.update(summary=summary, messages=len(keep.messages), updated=now,
                       tokens=sum(count_tokens(m.get("text", "")) for m in keep.messages))
    topicfile.rewrite_topic(tx, store, keep)
    tx.delete(topicfile.topic_path(store, gone.id))
    topicfile.append_index(tx, store, topicfile.LINKS, [{"from": gone.id, "to": keep.id, "kind": "merged-into", "at": now}])


def merged_into(store: Store, topic_id: str) -> str | None:
    """Where a merged topic went (following merges of merges), or None."""
    links = {r["from"]: r["to"] for r in topicfile.read_index(store, topicfile.LINKS) if r.get("kind") == "merged-into"}
    seen = set()
    while topic_id in links and topic_id not in seen:
        seen.add(topic_id)
        topic_id = links[topic_id]
    return topic_id if seen else None


def session_summary(messages: list[dict], background: Background) -> tuple[list[str], str]:
    """An idle session's 3-5 keywords and summary (P8), built in: what the daily review appends to
    auto_summaries.jsonl, and what forget writes anew when a summarised message is forgotten."""
    texts = [m.get("text", "") for m in messages]
    keywords = distinctive_terms(texts, background.terms, max(background.messages, 1), 5)
    if len(keywords) < 3:
        keywords = (keywords + distinctive_terms(texts, background.terms, max(background.messages, 1) + 1000, 5))[:5]
    _, summary = summarise(messages, background, 400)
    return list(dict.fromkeys(keywords))[:5], summary


def _idle_summaries(tx, store, topics_settings, now_moment, backgrounds) -> list[dict]:
    from memctl.topics.split import scope_of_session, session_messages

    done = set()
    for line in jsonl.read(store.path(AUTO_SUMMARIES)):
        if line.value is None:
            continue  # torn or not JSON: the store check names it, the next append mends a torn end
        for key in ("session", "until"):
            if not isinstance(line.value.get(key), str):
                raise InputError("must be text", source=AUTO_SUMMARIES, line=line.number, field=key)
        done.add((line.value["session"], line.value["until"]))
    lines = []
    for path in store.listing(store.sessions_dir, "*.jsonl"):
        messages = session_messages(store, path.stem)
        if not messages or not messages[-1].get("ts"):
            continue
        session, last = path.stem, messages[-1]
        if clock.age_days(last["ts"], now_moment) * 24 < topics_settings.idle_hours or (session, last["id"]) in done:
            continue
        background = backgrounds.get(scope_of_session(store, session, messages)) or Background()
        keywords, summary = session_summary(messages, background)
        lines.append({"session": session, "until": last["id"], "at": clock.format_ts(now_moment),
                      "keywords": keywords, "summary": summary})
    if lines:
        tx.append(store.path(AUTO_SUMMARIES), b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return lines
