"""Graded activation (T6) and the amnesia cue (T7).

Each round (one `memctl context` call that records) every evaluated topic's
relevance score is added to its last `score_window` (5) scores; the topic's
sliding average is their mean. Topics are ranked by it, and with n topics
active before the round:

    activation threshold = threshold_base + threshold_step × n   (0.2 + 0.03 n)
    dormancy threshold   = activation threshold / 2

    n = 3  -> 0.29 / 0.145   lenient: few active, keep nearly everything
    n = 10 -> 0.50 / 0.25
    n = 18 -> 0.74 / 0.37    strict: many active, keep only the clearly relevant

(The design's §4.7 table shows 0.2 / 0.4 / 0.7; SPEC T6 and the issue give the
formula, which is what is implemented; base and step are settings.)

An active topic stays while its average is at or over the dormancy threshold;
a dormant topic scored this round (an amnesia cue's deep search, an explicit
activation) becomes active at or over the activation threshold. Then the
count is kept in [active_min, active_max]: above active_target only topics
over the activation threshold keep their place past rank active_target
(the band between the two thresholds holds only while few are active);
above active_max the lowest ranked go; below active_min the best ranked of
those just made dormant stay.

The state is a file of its own, topics/activation.json, which only this module
writes (it used to be a part of index_state.json, the section window's file,
so two owners rewrote one file; a store of that time is read from there until
the first round writes the new file):

    {
      "rounds": 12,                                 rounds recorded so far
      "topics": {"t-…": {"scores": [0.8, 0.7], "average": 0.75, "round": 12}}
    }

A topic's active / dormant / archived state itself is its file's header
(the split reactivates topics through it), so the two never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from memctl import config
from memctl.errors import InputError
from memctl.store.store import Store, read_file

# Amnesia cues (T7): the user says the agent should know this already.
AMNESIA_CUES = re.compile(
    r"你忘了|你忘記了|你忘记了|忘了嗎|忘了吗|我之前(?:跟你)?(?:說|说)過|我之前(?:跟你)?(?:說|说)过|我(?:們|们)(?:之前|上次)(?:討論|讨论|聊)"
    r"|上次(?:說|说|聊|討論|讨论)(?:過|过)?的"
    r"|\bwe (?:talked|spoke|discussed|chatted) about (?:this|that|it)(?: \w+)? before\b"
    r"|\b(?:did|have) you forg[eo]t(?:ten)?\b|\byou forgot\b|\bi (?:told|already told) you\b"
    r"|\bas i (?:said|mentioned) (?:before|earlier)\b|\bremember (?:when|what) (?:i|we)\b",
    re.IGNORECASE)


def amnesia_cue(message: str) -> str | None:
    """The cue in `message` that says the user expects the agent to remember, or None."""
    found = AMNESIA_CUES.search(message or "")
    return found.group(0) if found else None


def thresholds(active_count: int, topics_settings: config.Topics) -> tuple[float, float]:
    """(activation, dormancy) thresholds with `active_count` topics active."""
    activation = topics_settings.threshold_base + topics_settings.threshold_step * active_count
    return activation, activation / 2


@dataclass
class Decision:
    active: list[str]                      # active after the round, best ranked first
    activated: list[str] = field(default_factory=list)
    made_dormant: list[str] = field(default_factory=list)
    activation_threshold: float = 0.0
    dormancy_threshold: float = 0.0


def decide(states: dict[str, str], averages: dict[str, float], scored: set[str],
           topics_settings: config.Topics) -> Decision:
    """Which topics are active after a round. `states`: id -> active | dormant (archived topics are
    left out by the caller); `averages`: the sliding averages; `scored`: the topics scored this round."""
    before = [t for t, s in states.items() if s == "active"]
    activation, dormancy = thresholds(len(before), topics_settings)
    ranked = sorted(states, key=lambda t: (-averages.get(t, 0.0), t))
    kept = []
    for topic in ranked:
        average = averages.get(topic)
        if states[topic] == "active":
            if average is None or average >= dormancy:  # never scored yet: a new topic keeps its place
                kept.append(topic)
        elif topic in scored and average is not None and average >= activation:
            kept.append(topic)
    if len(kept) > topics_settings.active_target:
        kept = [t for rank, t in enumerate(kept)
                if rank < topics_settings.active_target or averages.get(t, 1.0) >= activation]
    kept = kept[:topics_settings.active_max]
    if len(kept) < topics_settings.active_min:
        for topic in ranked:
            if len(kept) >= topics_settings.active_min:
                break
            if states[topic] == "active" and topic not in kept:
                kept.append(topic)
        kept.sort(key=ranked.index)
    return Decision(kept, [t for t in kept if states[t] != "active"],
                    [t for t in before if t not in kept], activation, dormancy)


def add_scores(part: dict[str, Any], scores: dict[str, float], window: int) -> dict[str, float]:
    """Append this round's scores to `part` (the topic_activation object); the new averages."""
    part["rounds"] = part.get("rounds", 0) + 1
    topics = part.setdefault("topics", {})
    for topic, score in scores.items():
        entry = topics.setdefault(topic, {"scores": []})
        entry["scores"] = (entry["scores"] + [round(float(score), 4)])[-window:]
        entry["average"] = round(sum(entry["scores"]) / len(entry["scores"]), 4)
        entry["round"] = part["rounds"]
    return averages_of(part)


def averages_of(part: dict[str, Any]) -> dict[str, float]:
    return {t: e["average"] for t, e in part.get("topics", {}).items()}


def check_part(part: Any, source: str) -> dict[str, Any]:
    """The topic_activation object, checked; InputError naming the field when it is not valid."""
    if part is None:
        return {"rounds": 0, "topics": {}}
    where = "topic_activation"
    if not isinstance(part.get("rounds", 0), int):
        raise InputError("must be a whole number", source=source, field=f"{where}.rounds")
    topics = part.get("topics", {})
    if not isinstance(topics, dict):
        raise InputError("must be an object of topic id: {scores, average}", source=source, field=f"{where}.topics")
    for topic, entry in topics.items():
        scores = entry.get("scores") if isinstance(entry, dict) else None
        if not (isinstance(scores, list) and scores and all(isinstance(s, (int, float)) and 0 <= s <= 1
                                                             for s in scores)):
            raise InputError("must hold scores: a list of numbers from 0 to 1", source=source,
                             field=f"{where}.topics.{topic}.scores")
        entry["average"] = round(sum(scores) / len(scores), 4)  # the scores are the truth
    return {"rounds": part.get("rounds", 0), "topics": topics}


FILE_NAME = "activation.json"
_FORMER_HOME = "index_state.json"  # its "topic_activation" part, before the file of its own


def load_part(store: Store) -> dict[str, Any]:
    """The checked activation state: topics/activation.json, else the part a store of an
    earlier version kept in index_state.json, else a fresh one."""
    path = store.path("topics", FILE_NAME)
    for source, pick in ((path, lambda data: data), (store.path(_FORMER_HOME), _former_part)):
        try:
            data = orjson.loads(read_file(source))
        except FileNotFoundError:
            continue
        except orjson.JSONDecodeError as exc:
            if source != path:
                continue  # the window's file: its own check reports it
            raise InputError(f"not valid JSON ({exc})", source=store.relative(source)) from None
        part = pick(data) if isinstance(data, dict) else None
        if source == path and part is None:
            raise InputError("expected a JSON object", source=store.relative(source))
        if part is not None:
            return check_part(part, store.relative(source))
    return check_part(None, store.relative(path))


def _former_part(data: dict) -> Any:
    return data.get("topic_activation")


def save_part(tx, store: Store, part: dict[str, Any]) -> None:
    tx.replace(store.path("topics", FILE_NAME), orjson.dumps(part))
