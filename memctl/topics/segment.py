"""The built-in split (T10): which topic each message belongs to, without an LLM.

Two kinds of conversation, told apart by how many people speak:

* Two parties (a user and an agent): the subject moves in blocks. Every pair
  of messages gets a similarity mixing sentence vectors with lexical overlap
  (TF-IDF of words; of character bigrams for Chinese, which the bundled MiniLM
  reads little of), in standard deviations of the conversation's own
  similarities, plus a bonus for being near (smaller where subjects
  alternate). Blocks start as exchanges opened by the party that opens
  subjects; neighbouring blocks merge, most similar first (average linkage,
  contiguous); a later block whose subject came back rejoins the earlier
  cluster (where subjects alternate, the one two blocks back first). Each
  cluster is then matched against the topics of earlier splits: close enough
  to one, it returns there; otherwise it opens a new topic. On DialSeg711 dev
  this beat TextTiling depth cuts over the same similarities (ARI .686 vs
  .573) and a non-contiguous average linkage (.599).
* Many people at once (IRC): subjects interleave message by message, so each
  message follows the reply structure instead: naming someone puts it in that
  person's conversation; otherwise it continues the speaker's own recent one
  or, failing both, starts a new one.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from memctl.text.cjk import IDEOGRAPHIC_RUN, bigrams
from memctl.text.words import STOPWORDS

_WORD = re.compile(r"[^\W_]+")
_WORD_CHARS = re.compile(r"[^\W_]")
# Share of a pair's similarity from sentence vectors when both are readable (the rest is lexical):
# DialSeg711 dev ARI .684 at 1.0, .686 at 0.8, .681 at 0.6. Chinese keeps a floor of it, since
# MiniLM knows a few hundred Chinese characters: ZYS dev ARI .526 at floor 0, .546 at 0.3, .541 at 0.6.
VECTOR_SHARE = 0.8
VECTOR_FLOOR = 0.3


@dataclass
class Settings:
    """Tuned on the dev parts of ../shared/bench/topics (bench/README.md has the figures)."""
    near_bonus: float = 6.0        # added to the similarity of neighbours (in standard deviations), decaying
    near_decay: float = 1.0        # ... by e per this many messages apart
    alternation_scale: float = 0.2  # ... in full when neighbouring exchanges are this much more alike than ones two apart
    near_floor: float = 0.3        # ... and never less than this share of it
    alternation_bonus: float = 0.6  # a block's rejoin score with the cluster before the previous, where subjects alternate
    merge_threshold: float = 0.8   # neighbouring blocks merge while their mean similarity is above this
    rejoin_threshold: float = 1.2  # a later block rejoins an earlier one of this split above this
    return_threshold: float = 0.55  # a new block goes back to a topic of an earlier split above this cosine
    chunk: int = 400               # messages clustered at once (the similarity matrix is chunk x chunk)
    recent_speaker: int = 30       # many parties: a speaker's own conversation older than this is over
    mention_reach: int = 200       # many parties: how far back a named person's conversation is looked for


@dataclass
class TopicEvidence:
    """What is known of a topic when blocks are matched against it."""
    key: str
    vector: np.ndarray | None = None   # sum of its messages' vectors
    terms: Counter = field(default_factory=Counter)
    speakers: set = field(default_factory=set)
    size: int = 0
    _weighted: dict | None = None   # terms weighted by the split's IDF, kept until the topic grows

    def add(self, vector: np.ndarray | None, terms: Counter, speaker: str) -> None:
        if vector is not None:
            self.vector = vector.copy() if self.vector is None else self.vector + vector
        self.terms.update(terms)
        self._weighted = None
        if speaker:
            self.speakers.add(speaker)
        self.size += 1


def terms_of(text: str) -> Counter:
    """Content words (lower-cased, stop words dropped) and, for CJK, character bigrams."""
    terms: Counter = Counter()
    for run in IDEOGRAPHIC_RUN.findall(text):
        terms.update(bigrams(run))
    for word in _WORD.findall(IDEOGRAPHIC_RUN.sub(" ", text).lower()):
        if word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            terms[word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word] += 1
    return terms


def readable_share(text: str) -> float:
    """Share of the text outside CJK runs: the part MiniLM's vectors say something about."""
    cjk = sum(len(run) for run in IDEOGRAPHIC_RUN.findall(text))
    letters = len(_WORD_CHARS.findall(text))
    return 1.0 - cjk / letters if letters else 0.0


def speaker_of(message: dict) -> str:
    return str(message.get("speaker") or message.get("role") or "")


def many_parties(messages: list[dict]) -> bool:
    return len({speaker_of(m) for m in messages if m.get("role") != "system"}) > 2


def partition(messages: list[dict], vectors: np.ndarray | None, topics: list[TopicEvidence] | None = None,
              settings: Settings | None = None) -> list[str]:
    """A topic key for each message: an existing topic's key, or "new-N" for the Nth new topic.

    `vectors` are L2-normalised sentence vectors, one row a message (or None).
    `topics` are the topics that exist; the ones this call opens are added to it.
    """
    settings = settings or Settings()
    topics = topics if topics is not None else []
    if not messages:
        return []
    bags = [terms_of(m.get("text", "")) for m in messages]
    idf = _idf(bags)
    weighted = [{t: c * idf.get(t, 1.0) for t, c in bag.items()} for bag in bags]
    if many_parties(messages):
        return _by_replies(messages, vectors, bags, weighted, topics, settings)
    keys: list[str] = []
    for start in range(0, len(messages), settings.chunk):
        part = slice(start, start + settings.chunk)
        keys += _by_blocks(messages[part], None if vectors is None else vectors[part],
                           bags[part], weighted[part], topics, settings, idf)
    return keys


def _similarities(messages, vectors, weighted) -> np.ndarray:
    n = len(messages)
    readable = np.array([readable_share(m.get("text", "")) for m in messages])
    vocabulary: dict[str, int] = {}
    for bag in weighted:
        for t in bag:
            vocabulary.setdefault(t, len(vocabulary))
    lexical = np.zeros((n, max(1, len(vocabulary))), dtype=np.float32)
    for i, bag in enumerate(weighted):
        for t, v in bag.items():
            lexical[i, vocabulary[t]] = v
    lexical /= np.linalg.norm(lexical, axis=1, keepdims=True) + 1e-9
    lex = lexical @ lexical.T
    if vectors is None:
        return lex
    share = VECTOR_SHARE * np.maximum(np.sqrt(np.outer(readable, readable)), VECTOR_FLOOR)
    return share * (vectors @ vectors.T) + (1 - share) * lex


def _idf(bags: list[Counter]) -> dict[str, float]:
    documents: Counter = Counter()
    for bag in bags:
        documents.update(bag.keys())
    total = len(bags) + 1
    return {t: math.log(total / (1 + df)) + 1.0 for t, df in documents.items()}


def _cosine(a: dict, b: dict) -> float:
    if not a or not b:
        return 0.0
    if len(a) > len(b):
        a, b = b, a
    dot = sum(v * b.get(t, 0.0) for t, v in a.items())
    if not dot:
        return 0.0
    return dot / math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))


def _add(bags: list[dict]) -> dict:
    total: dict = {}
    for bag in bags:
        for t, v in bag.items():
            total[t] = total.get(t, 0.0) + v
    return total


def _by_blocks(messages, vectors, bags, weighted, topics, settings, idf) -> list[str]:
    """Contiguous average-linkage clustering, then each cluster matched to the topics that exist."""
    n = len(messages)
    sim = _similarities(messages, vectors, weighted).astype(np.float64)
    if n > 2:  # in standard deviations of this conversation's own similarities: Chinese bigrams and
        off = ~np.eye(n, dtype=bool)  # English vectors then share one threshold
        sim = (sim - sim[off].mean()) / (sim[off].std() + 1e-9)
    readable = np.array([readable_share(m.get("text", "")) for m in messages])
    units = _exchanges([m.get("role") for m in messages], vectors, readable)
    distance = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    nearness = _nearness_trust(sim, units, settings)
    sim += settings.near_bonus * nearness * np.exp(-(distance - 1) / settings.near_decay)
    alternation = (1 - nearness) / (1 - settings.near_floor)
    existing = list(topics)
    keys = [""] * n
    for rows in _clusters(sim, settings, units, alternation):
        vector = vectors[rows].sum(0) if vectors is not None else None
        terms = _add([weighted[i] for i in rows])
        best, best_score = None, settings.return_threshold
        for topic in existing:
            score = _topic_similarity(topic, vector, terms, idf, float(readable[rows].mean()))
            if score > best_score:
                best, best_score = topic, score
        if best is None:
            best = TopicEvidence(key=f"new-{sum(t.key.startswith('new-') for t in topics) + 1}")
            topics.append(best)
        for i in rows:
            best.add(vectors[i] if vectors is not None else None, bags[i], speaker_of(messages[i]))
            keys[i] = best.key
    return keys


def _nearness_trust(sim: np.ndarray, units: list[tuple[int, int]], settings: Settings) -> float:
    """How far to trust nearness here (0..1): in a conversation whose subjects alternate, an exchange
    is about as like the one after next as like the next, and the bonus for neighbours glues
    alternating subjects together. Scaled by how much more alike neighbouring exchanges are than
    exchanges two apart (DialSeg711 dev: median .41 standard deviations; the interleaved data .19).
    Interleaved dev ARI .378 -> .405 and Pk .416 -> .327; DialSeg711 .702 -> .705."""
    if len(units) < 4 or len(units) == len(sim):
        return 1.0   # single messages as units (Chinese, several speakers in a row): no exchange lags
    lags = [np.mean([sim[a:b, c:e].mean() for (a, b), (c, e) in zip(units, units[d:])]) for d in (1, 2)]
    return float(np.clip((lags[0] - lags[1]) / settings.alternation_scale, settings.near_floor, 1.0))


def _clusters(sim: np.ndarray, settings: Settings, units: list[tuple[int, int]],
              alternation: float) -> list[list[int]]:
    """Clusters of message rows, in order of their first message."""
    return _rejoined(sim, _merged_blocks(sim, settings, units), settings, alternation)


def _exchanges(roles: list, vectors: np.ndarray | None, readable: np.ndarray) -> list[tuple[int, int]]:
    """Exchanges no cut splits: each starts at a message of the party that opens subjects here.

    That party is the one whose messages are least like the message before them (sentence vectors):
    on DialSeg711 dev 97% of gold boundaries fall before a user message and this finds the opener in
    174 of 178 conversations; cutting only there took ARI .687 -> .702, Pk .263 -> .247. On ZYS
    (Chinese, the agent opens) the vectors read too little to tell (56 of 127, ARI .546 -> .539), so
    mostly unreadable conversations keep single messages as units."""
    n = len(roles)
    singles = [(i, i + 1) for i in range(n)]
    if vectors is None or len(set(roles)) != 2 or readable.mean() < 0.5:
        return singles
    before: dict = {role: [] for role in set(roles)}
    for i in range(1, n):
        if roles[i] != roles[i - 1]:
            before[roles[i]].append(float(vectors[i - 1] @ vectors[i]))
    if not all(before.values()):
        return singles
    opener = min(before, key=lambda role: np.mean(before[role]))
    starts = [0] + [i for i in range(1, n) if roles[i] == opener and roles[i - 1] != opener]
    return list(zip(starts, starts[1:] + [n]))


def _merged_blocks(sim: np.ndarray, settings: Settings, blocks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Neighbouring blocks (at first the exchanges) merge, most similar first (mean similarity of their
    messages), while above merge_threshold; only the two scores beside a merge change, so this is O(n) merges of O(block) work."""
    n = len(blocks)

    def link(a, b):
        return sim[a[0]:a[1], b[0]:b[1]].mean()

    scores = [link(blocks[k], blocks[k + 1]) for k in range(n - 1)]
    while scores:
        k = int(np.argmax(scores))
        if scores[k] < settings.merge_threshold:
            break
        blocks[k] = (blocks[k][0], blocks[k + 1][1])
        del blocks[k + 1], scores[k]
        if k < len(scores):
            scores[k] = link(blocks[k], blocks[k + 1])
        if k > 0:
            scores[k - 1] = link(blocks[k - 1], blocks[k])
    return blocks


def _rejoined(sim: np.ndarray, blocks: list[tuple[int, int]], settings: Settings,
              alternation: float) -> list[list[int]]:
    """A block whose subject came back rejoins the earlier cluster it continues (mean similarity above
    rejoin_threshold); the cluster it was just refused a merge with is not a candidate. Where subjects
    alternate (0..1), the cluster before the previous one is the likeliest to come back: bonus
    alternation_bonus x alternation (interleaved dev ARI .405 -> .419, returns 15% -> 20%; DialSeg711
    .705 -> .702; .6 of the bonus was best, 1.0 .419 / .696, 1.5 .369 / .681)."""
    clusters: list[list[int]] = []
    previous: list[int] = []
    recent: list[int | None] = [None, None]   # the clusters of the last two blocks, older first
    for start, end in blocks:
        rows = list(range(start, end))
        best, best_score = None, settings.rejoin_threshold
        for c, cluster in enumerate(clusters):
            if cluster == previous:
                continue  # a neighbour the merge already refused
            score = sim[np.ix_(cluster, rows)].mean()
            if c == recent[0]:
                score += settings.alternation_bonus * alternation
            if score > best_score:
                best, best_score = c, score
        if best is None:
            clusters.append(rows)
            best = len(clusters) - 1
        else:
            clusters[best] += rows
        recent = [recent[1], best]
        previous = rows
    return clusters


def _topic_similarity(topic: TopicEvidence, vector, terms: dict, idf: dict, trust: float) -> float:
    if topic._weighted is None:
        topic._weighted = {t: c * idf.get(t, 1.0) for t, c in topic.terms.items()}
    lexical = _cosine(topic._weighted, terms)
    if vector is None or topic.vector is None:
        return lexical
    semantic = float(vector @ topic.vector / (np.linalg.norm(vector) * np.linalg.norm(topic.vector) + 1e-9))
    return trust * semantic + (1 - trust) * lexical


def _by_replies(messages, vectors, bags, weighted, topics, settings) -> list[str]:
    nicks = {speaker_of(m).lower(): speaker_of(m) for m in messages if m.get("role") != "system"}
    for topic in topics:
        nicks.update({s.lower(): s for s in topic.speakers})
    last_seen: dict[str, tuple[int, TopicEvidence]] = {}
    keys: list[str] = []
    for i, message in enumerate(messages):
        speaker = speaker_of(message)
        chosen = None
        if message.get("role") != "system":
            for name in _mentions(message.get("text", ""), nicks, speaker):
                seen = last_seen.get(name.lower())
                if seen and i - seen[0] <= settings.mention_reach:
                    chosen = seen[1]
                    break
            if chosen is None:
                own = last_seen.get(speaker.lower())
                if own and i - own[0] <= settings.recent_speaker:
                    chosen = own[1]
        if chosen is None:
            chosen = TopicEvidence(key=f"new-{sum(t.key.startswith('new-') for t in topics) + 1}")
            topics.append(chosen)
        chosen.add(vectors[i] if vectors is not None else None, bags[i], speaker)
        if message.get("role") != "system":
            last_seen[speaker.lower()] = (i, chosen)
        keys.append(chosen.key)
    return keys


def _mentions(text: str, nicks: dict[str, str], speaker: str) -> list[str]:
    """Known names in the text, the addressee (a name at the start) first."""
    body = re.sub(r"^\[[^\]]*\]\s*<[^>]*>\s*", "", text)
    found = []
    for word in re.findall(r"[\w\-\[\]\\^{}|`]+", body):
        name = nicks.get(word.lower())
        if name and name.lower() != speaker.lower() and name not in found:
            found.append(name)
    return found

