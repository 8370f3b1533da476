"""The built-in split (T10): which topic each message belongs to, without an LLM.

Two kinds of conversation, told apart by how many people speak:

* Two parties (a user and an agent): the subject moves in blocks. Every pair
  of messages gets a similarity mixing sentence vectors with lexical overlap
  (TF-IDF of words; of character bigrams for Chinese, which the bundled MiniLM
  reads little of), in standard deviations of the conversation's own
  similarities. Where the text is readable, or the user clearly opens the
  subjects, the units are exchanges opened by the party that opens subjects,
  followed in order: each goes to the topic it is most like (the one of the
  exchange before favoured unless the exchange passes over its question, then
  one left a little before, most of all on a question, or one sharing a rare
  name or number), or opens a new topic when none is close enough for how it
  begins: a reply ("Yes please", "Does it have parking?") never opens one, a
  greeting or a message introducing something opens one more easily, an
  announced switch ("Thanks! Now something else", "另外，...") leaves the
  topic and an announced return ("Going back to the billing issue",
  "回到剛才那個問題") goes to the dormant topic it names. What the method knows
  of a language is data: rules/segment.toml (English, Chinese in both scripts).
  Otherwise (mostly Chinese text where both parties open subjects) single
  messages: neighbours merge, most similar first (average linkage,
  contiguous, with a bonus for being near, never into an announced switch or
  return, less readily into a closed question offering a new subject: "do you
  like cooking?"; a message pointing back, "而且它边上…", stays with the block
  before; a block much shorter than the others joins its likelier neighbour),
  and a later block whose subject came back rejoins the earlier
  cluster (an announced return, the likeliest). Each
  cluster is then matched against the topics of earlier splits: close enough
  to one, it returns there; otherwise it opens a new topic.
* Many people at once (IRC): subjects interleave message by message, so each
  message follows the reply structure instead: naming someone puts it in that
  person's conversation; otherwise it continues the speaker's own recent one
  or, failing both, starts a new one.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from memctl.text.cjk import IDEOGRAPHIC_RUN, bigrams
from memctl.text.words import STOPWORDS, fold_plural

_WORD = re.compile(r"[^\W_]+")
_WORD_CHARS = re.compile(r"[^\W_]")
# Tuning values: what each does and the measurement that decided it; the values tried, pass by pass,
# are in bench/README.md ("Topic split (issue 11)", "Fourth pass", "The segmenter's constants").
# Share of a pair's similarity from sentence vectors when both are readable (the rest is lexical):
# DialSeg711 dev ARI .686, against .684 at 1.0 and .681 at 0.6.
VECTOR_SHARE = 0.8
# ... kept for text the vectors read little of (Chinese; MiniLM knows a few hundred characters):
# ZYS dev ARI .546, against .526 at 0 and .541 at 0.6.
VECTOR_FLOOR = 0.3
# Share of the similarity of two messages in exchanges from the vectors of their whole exchanges
# ("Yes please." reads as what it agrees to): interleaved dev ARI .582, against .543 at 0.
EXCHANGE_SHARE = 0.75
# Text the vectors read little of (Chinese) is followed in exchanges only when the user clearly opens
# the subjects: its messages this many standard deviations less like the message before them than the
# other party's. Per conversation, median: assistant ZH dev 1.59 (10th percentile .88), ZYS .24, KdConv
# .39 (90th .86), where exchanges for all cost ARI (ZYS .556 -> .312, KdConv .434 -> .233). At .8:
# assistant ZH .648 / 54%, ZYS .516; at 1.0 .633 / 53%, ZYS .531; at 1.3 .581 / 46%, ZYS .531.
OPENER_MARGIN = 1.0
# ... and, there too, the other party answers as an assistant does: at least twice as long, and asking
# back in under this share of its messages (a call centre's agent asks; 3 of the 4 ZYS dev calls
# that passed the margin had the agent asking in 33-50% of its messages, and lost ARI in exchanges).
ASKS_BACK = 0.3
# Readable text is followed in exchanges when one party leads: the other answers at LEAD_LENGTH times
# its length, or asks back in LEAD_ASKS of its messages (an agent asking what it needs), or the
# opener's messages are LEAD_MARGIN (cosine) less like the message before them. In open chit-chat
# (TIAGE) both parties open subjects and single messages merged do better: TIAGE dev ARI .315 -> .418,
# DialSeg711 .760 -> .761, interleaved .648 -> .648, assistant EN .851 -> .852 (per-conversation
# grid of 1.0-2.0 x .3-.45 x .08-.15; these three kept every other set within .001).
LEAD_LENGTH, LEAD_ASKS, LEAD_MARGIN = 1.5, 0.45, 0.15

# How an exchange's first message begins (_opening).
REPLY, PLAIN, INTRODUCES, GREETING = "reply", "plain", "introduces", "greeting"
# ... or announcing a change of subject: a new one, or going back to one left earlier.
SWITCH, RETURN = "switch", "return"


@dataclass
class Tuning:
    """The split's tuned constants (not settings: memctl.toml names none of them), tuned on the dev
    parts of ../shared/bench/topics (bench/README.md has the figures)."""
    # Exchanges, followed in order (two parties, readable text): scores in standard deviations of the
    # conversation's own similarities. Figures: DialSeg711 dev ARI, interleaved dev ARI / returns.
    # Added to an exchange's score with the topic of the one before: DialSeg711 .778 / interleaved
    # .582, against .739 / .593 at 1.0 and .781 / .535 at 1.5.
    stay_bonus: float = 1.25
    # ... that score being this much the previous exchange alone (set with stay_bonus, not tuned apart).
    stay_recent_share: float = 0.5
    # ... or this instead, when the exchange passes over the question that topic ended on ("What time
    # would you like?" - "Can I have the address please?"): returns 72% | 72% (halves), against 70% | 68% at 1.25.
    unanswered_stay: float = 0.0
    # Added to a topic whose last question a yes or a no answers, taken from one where it cannot (a
    # wh-question, a statement): DialSeg711 .793 (even half), against .778 at 0; at 1.0 the halves part.
    answer_bonus: float = 0.5
    # Added to a topic left on a question at the exchange before (an offer or question nobody took
    # up): interleaved .612 / 55%, against .596 / 53% with .75 for any topic left (third pass).
    return_bonus: float = 1.25
    # ... to one left on a statement: interleaved .673 / 72% (even half), against .651 / 66% at 0.
    left_bonus: float = 0.75
    # ... in text the vectors read little of (Chinese; between the two by readable share), where the
    # lexical similarity alone tells a returning subject less well: assistant ZH dev .646 / 54% ->
    # .693 / 65% at 1.25 (.682 / 59% at 1.0); for all text, DialSeg711 would lose .762 -> .749.
    left_bonus_unreadable: float = 1.25
    # ... each times this for each further exchange since: DialSeg711 / returns .793 / 72% (even half),
    # against .797 / 70% at .7 and .778 / 71% at .9. Issue 22, all dev sets (DialSeg711, interleaved /
    # returns, assistant EN / returns): .772, .655 / 68%, .863 / 79% at .8; .768, .656 / 69%, .867 / 82%
    # at .85; .757, .648 / 70%, .868 / 82% at .9 (agent chats come back after longer digressions).
    return_decay: float = 0.85
    # Taken instead from a topic closed with thanks or a goodbye: DialSeg711 .777, against .771 at 0
    # (.778 at 2; interleaved within .004). Issue 22, with every dev set (DialSeg711, interleaved /
    # returns): 1.0 .768, .656 / 69.4%; .75 .767, .658 / 70.0%; .6 .765, .660 / 70.3%; .5 .764, .660 /
    # 70.3% (the assistant sets unmoved): a "thanks" ends an exchange more often than a subject.
    closed_penalty: float = 0.6
    # Added to an earlier topic sharing a rare name or number with the exchange: DialSeg711 odd half
    # .772, against .759 at 1.0; at .5 interleaved even half .667, against .673.
    shared_name_bonus: float = 0.75
    # ... rare: in at most this many messages of the conversation (as set, not tuned).
    name_reach: int = 3
    # An exchange opens a new topic when no topic scores above the threshold for how it begins:
    # interleaved .582 at plain 1.5, introducing 2.5, against .566 at introducing 2.0. An announced
    # switch leaves the current topic and goes back to an earlier one only above the plain bar (set,
    # not tuned); an announced return always goes back when there is a topic to go back to (design 001).
    new_thresholds: dict = field(default_factory=lambda: {REPLY: -math.inf, PLAIN: 1.5, INTRODUCES: 2.5,
                                                          GREETING: 3.0, SWITCH: 1.5, RETURN: -math.inf})
    # Single messages, merged (Chinese; one speaker): blocks of neighbours, then rejoined.
    near_bonus: float = 6.0        # added to the similarity of neighbours (in standard deviations), decaying
    near_decay: float = 1.0        # ... by e per this many messages apart
    # ... in CJK text (between the two by the share outside CJK runs): with Chinese read by USE
    # (minilm-usem3), neighbours a few messages apart stay alike longer. With merge_threshold, ZYS /
    # KdConv ARI / Pk: decay 1, merge .5 .572 / .412 / .464; decay 2, merge 1.0 .569 / .472 / .428;
    # decay 1.75 .580 / .459 / .450; 2.5 .518 / .456 / .414 (read by MiniLM alone: .560 / .430 / .482
    # -> .553 / .469 / .437).
    near_decay_unreadable: float = 2.0
    # Neighbouring blocks merge while their mean similarity is above this. ZYS / KdConv / TIAGE dev ARI
    # (MiniLM): .8 .530 / .421 / .418; 1.0 for English, .5 for Chinese .559 / .430 / .440. With
    # near_decay_unreadable 2 (minilm-usem3), ZYS / KdConv at .9 .552 / .483 (Pk .410), .95 .559 /
    # .472 (.428), 1.0 .569 / .472 (.428): one for all text.
    merge_threshold: float = 1.0
    # Taken from a message's link to the one before when it ends on a closed question leaning on
    # nothing ("... do you like country music?", "have you ever been to disneyland?"): in open chat a
    # subject is offered so. TIAGE dev: 67 of 152 such messages start a new gold topic (44%), of
    # the others 19%; ARI (even / odd) .462 / .417 at 0, .467 / .424 at 1, .472 / .436 at 2,
    # .483 / .434 at 3, .489 / .435 at 4, .481 / .440 at 6 (tuned on the even half). Only questions
    # the rules read (_question: English), only merged single messages (not exchanges).
    offer_gap: float = 4.0
    # A block of merged messages shorter than this share of the conversation's mean block length is no
    # subject of its own: it joins the neighbour it is more like. ARI / Pk (even / odd), KdConv, ZYS,
    # TIAGE: 0 .497 / .402 (.362 / .442), .572, .462; .35 and .4 .499 / .393 (.353 / .433), .570, .462;
    # .5 .495 / .395, .571, .458; .6 .496 / .356 (.330 / .382), .564, .442 (TIAGE's subjects are short).
    short_block: float = 0.4
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
            terms[fold_plural(word)] += 1
    return terms


def readable_share(text: str) -> float:
    """Share of the text outside CJK runs: the part MiniLM's vectors say something about (the
    split's default for what the vectors read; split.readable_by asks the model)."""
    cjk = sum(len(run) for run in IDEOGRAPHIC_RUN.findall(text))
    letters = len(_WORD_CHARS.findall(text))
    return 1.0 - cjk / letters if letters else 0.0


def speaker_of(message: dict) -> str:
    return str(message.get("speaker") or message.get("role") or "")


def many_parties(messages: list[dict]) -> bool:
    return len({speaker_of(m) for m in messages if m.get("role") != "system"}) > 2


def partition(messages: list[dict], vectors: np.ndarray | None, topics: list[TopicEvidence] | None = None,
              tuning: Tuning | None = None, embed: Callable[[list[str]], np.ndarray] | None = None,
              reads: Callable[[str], float] | None = None) -> list[str]:
    """A topic key for each message: an existing topic's key, or "new-N" for the Nth new topic.

    `vectors` are L2-normalised sentence vectors, one row a message (or None).
    `topics` are the topics that exist; the ones this call opens are added to it.
    `embed` gives the same model's vectors of other texts: whole exchanges are read with it.
    `reads` gives the share of a text the vectors read (readable_share: MiniLM's, by default).
    """
    tuning = tuning or Tuning()
    topics = topics if topics is not None else []
    if not messages:
        return []
    bags = [terms_of(m.get("text", "")) for m in messages]
    idf = _idf(bags)
    weighted = [{t: c * idf.get(t, 1.0) for t, c in bag.items()} for bag in bags]
    if many_parties(messages):
        return _by_replies(messages, vectors, bags, weighted, topics, tuning)
    keys: list[str] = []
    for start in range(0, len(messages), tuning.chunk):
        part = slice(start, start + tuning.chunk)
        keys += _by_blocks(messages[part], None if vectors is None else vectors[part],
                           bags[part], weighted[part], topics, tuning, idf, embed, reads or readable_share)
    return keys


def _similarities(readable: np.ndarray, vectors, weighted) -> np.ndarray:
    n = len(readable)
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


def _in_deviations(sim: np.ndarray) -> np.ndarray:
    """Similarities in standard deviations of the conversation's own (off the diagonal): Chinese
    bigrams and English vectors then share one threshold."""
    n = len(sim)
    if n <= 2:
        return sim
    off = ~np.eye(n, dtype=bool)
    return (sim - sim[off].mean()) / (sim[off].std() + 1e-9)


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


def _by_blocks(messages, vectors, bags, weighted, topics, tuning, idf, embed, reads) -> list[str]:
    """Clusters of this conversation (exchanges followed in order, or merged single messages), then
    each cluster matched to the topics that exist."""
    n = len(messages)
    texts = [m.get("text", "") for m in messages]
    # What the vectors read weighs each message's vectors against word overlap; the path, its
    # thresholds and the whole-exchange vectors' share were tuned where only the text outside CJK
    # runs was read (MiniLM) and stay on it. With minilm-usem3 (USE reads Chinese), the model's share
    # for everything: ZYS dev ARI .561 -> .345 (its calls went to exchanges); for the message mix and
    # the whole exchanges: ZYS .572, assistant ZH .660 / 63% -> .701 / 68%, ZH announced .842 -> .803;
    # for the message mix only: assistant ZH .715 / 69%, announced .799 (bench/README.md).
    readable = np.array([reads(text) for text in texts])
    outside_cjk = np.array([readable_share(text) for text in texts])
    sim = _in_deviations(_similarities(readable, vectors, weighted).astype(np.float64))
    exchanges = _exchanges([m.get("role") for m in messages], vectors, outside_cjk, sim, texts)
    if exchanges:
        if embed is not None and len(exchanges) > 2:
            whole = embed(["\n".join(texts[start:end]) for start, end in exchanges])
            unit = np.repeat(np.arange(len(exchanges)), [end - start for start, end in exchanges])
            share = EXCHANGE_SHARE * max(float(outside_cjk.mean()), VECTOR_FLOOR)
            sim = (1 - share) * sim + share * _in_deviations(whole @ whole.T)[np.ix_(unit, unit)]
        clusters = _followed(sim, exchanges, texts, tuning, float(outside_cjk.mean()))
    else:
        distance = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
        outside = float(outside_cjk.mean())
        decay = tuning.near_decay_unreadable + outside * (tuning.near_decay - tuning.near_decay_unreadable)
        sim += tuning.near_bonus * np.exp(-(distance - 1) / decay)
        for i in range(1, n):
            if _offers_subject(texts[i]):
                sim[i - 1, i] -= tuning.offer_gap
                sim[i, i - 1] -= tuning.offer_gap
        openings = [_opening(text) for text in texts]
        announced = {i for i, opening in enumerate(openings) if opening in (SWITCH, RETURN)}
        blocks = _merged_blocks(sim, tuning, [(i, i + 1) for i in range(n)], announced)
        blocks = _pointing_back_stays(blocks, texts, announced)
        blocks = _short_blocks_folded(sim, blocks, announced, tuning.short_block)
        clusters = _rejoined(sim, blocks, tuning, {i for i in announced if openings[i] == RETURN})
    existing = list(topics)
    keys = [""] * n
    for rows in clusters:
        vector = vectors[rows].sum(0) if vectors is not None else None
        terms = _add([weighted[i] for i in rows])
        best, best_score = None, tuning.return_threshold
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


def _exchanges(roles: list, vectors: np.ndarray | None, readable: np.ndarray,
               sim: np.ndarray, texts: list[str]) -> list[tuple[int, int]] | None:
    """Exchanges no cut splits: each starts at a message of the party that opens subjects here.

    That party is the one whose messages are least like the message before them (sentence vectors):
    on DialSeg711 dev 97% of gold boundaries fall before a user message and this finds the opener in
    174 of 178 conversations (cutting only there: ARI .687 -> .702). Where the vectors read little
    (Chinese) the mixed similarity `sim` tells, and exchanges are kept only when it tells clearly
    (OPENER_MARGIN) and the opener is the user, as in a chat with an assistant: on ZYS the agent
    opens and on KdConv both parties do, and there single messages stay the units (None); assistant
    ZH dev ARI .478 -> .633, returns 26% -> 53%, ZYS .556 -> .530, KdConv .434 -> .421 (issue 22)."""
    n = len(roles)
    if vectors is None or len(set(roles)) != 2:
        return None
    unreadable = readable.mean() < 0.5
    before: dict = {role: [] for role in set(roles)}
    for i in range(1, n):
        if roles[i] != roles[i - 1]:
            before[roles[i]].append(sim[i - 1, i] if unreadable else float(vectors[i - 1] @ vectors[i]))
    if not all(before.values()):
        return None
    means = {role: float(np.mean(found)) for role, found in before.items()}
    opener = min(means, key=means.get)
    answerer = next(role for role in means if role != opener)
    margin = means[answerer] - means[opener]
    length = {role: np.mean([len(texts[i]) for i in range(n) if roles[i] == role]) for role in means}
    asks = float(np.mean([texts[i].rstrip().endswith(("?", "？")) for i in range(n) if roles[i] == answerer]))
    if unreadable:
        leads = (opener == "user" and margin >= OPENER_MARGIN and length[answerer] >= 2 * length[opener]
                 and asks < ASKS_BACK)
    else:
        leads = length[answerer] >= LEAD_LENGTH * length[opener] or asks >= LEAD_ASKS or margin >= LEAD_MARGIN
    if not leads:
        return None
    # Every message of the opener starts one, also in a run of them: "We decided: Redis Streams..."
    # then "My cat knocked the laptop off the desk..." (the demo chat) are two subjects. On the
    # interleaved dev set, which has 24 such runs, ARI .612 -> .619; DialSeg711 has none.
    starts = [0] + [i for i in range(1, n) if roles[i] == opener]
    return list(zip(starts, starts[1:] + [n]))


# The word lists and patterns _opening, _question and the rest read English with are data:
# rules/segment.toml, each with where it came from, what measured it and whether it is the
# benchmark's domain vocabulary rather than language. Read and compiled at the first split.
RULES = Path(__file__).parent / "rules" / "segment.toml"
_FIRST_WORDS = re.compile(r"[a-z']+")
# Questions and how a reply takes them up (_question, _takes_up, _leaves_unanswered).
WH, CHOICE, YES_NO = "wh", "choice", "yes-no"
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*")


@dataclass(frozen=True)
class Rules:
    """The word lists (frozensets) and patterns (compiled) of RULES, every language's together: a
    list named in several languages is their union (words) or alternation (patterns)."""
    reply_words: frozenset
    reply_phrases: frozenset
    greetings: frozenset
    introduces: re.Pattern
    refers_back: re.Pattern
    refers_nowhere: re.Pattern
    answers: re.Pattern
    leans_back: re.Pattern      # a reply's first characters where words are not spaced (Chinese)
    acknowledgement: re.Pattern
    discourse: re.Pattern
    switch: re.Pattern
    returns: re.Pattern
    wh_words: frozenset
    choice_words: frozenset
    yes_or_no: frozenset
    acknowledges: frozenset     # yes_or_no and the words that only acknowledge
    request_words: frozenset
    thanks: frozenset
    closing: re.Pattern
    points_back: re.Pattern     # words pointing back wherever they stand (Chinese; _pointing_back_stays)
    name_or_number: re.Pattern


@functools.cache
def _rules() -> Rules:
    """Every language's lists at once: a message is read by the ones its words match (an English
    pattern finds nothing in Chinese and the other way round), so mixed conversations need no
    language guess."""
    with RULES.open("rb") as file:
        tables = tomllib.load(file)
    words: dict[str, set] = {}
    patterns: dict[str, list] = {}
    for table in tables.values():
        for name, rule in table.items():
            if "words" in rule:
                words.setdefault(name, set()).update(rule["words"])
            else:
                patterns.setdefault(name, []).extend(rule["pattern"])
    compiled = {name: frozenset(found) for name, found in words.items()}
    compiled.update({name: re.compile("|".join(found)) for name, found in patterns.items()})
    compiled["acknowledges"] |= compiled["yes_or_no"]
    return Rules(**compiled)


def _opening(text: str) -> str:
    """How a message begins a turn: RETURN when it announces going back to an earlier subject ("Going
    back to the billing issue", "回到剛才那個問題"), SWITCH when it announces a new one, also after
    an acknowledgement ("Thanks! Now can you ...", "Ok, next thing:", "好的，另外"); else what follows
    an acknowledgement decides: REPLY when it answers or points back ("Yes please", "That works", "How
    about Friday?", "Does it have parking?") or is only an acknowledgement, GREETING, INTRODUCES
    (something new, pointing back to nothing), or PLAIN."""
    rules = _rules()
    lowered = text.lower().strip()
    acknowledged = rules.acknowledgement.match(lowered)
    rest = lowered[acknowledged.end():] if acknowledged else lowered
    marker = rules.discourse.match(rest)
    rest = rest[marker.end():] if marker else rest
    if rules.returns.match(lowered) or rules.returns.match(rest):
        return RETURN
    if rules.switch.match(lowered) or rules.switch.match(rest):
        return SWITCH
    if not _WORD.search(rest) or rules.leans_back.match(rest) or rules.closing.match(rest):
        return REPLY
    if next(iter(_FIRST_WORDS.findall(lowered[:10])), "") in rules.yes_or_no:
        return REPLY  # a yes or a no answers, whatever follows ("Yes please, I need a table for 6")
    words = _FIRST_WORDS.findall(rest[:40])[:2]
    if words and (words[0] in rules.reply_words or " ".join(words) in rules.reply_phrases):
        return REPLY
    if words and words[0] in rules.greetings and not acknowledged:
        return GREETING
    # It leans on something said before if it points back ("it", "their", "one of them", "this
    # guesthouse") or answers ("no preference", "after 13:30 is fine"), before it introduces anything
    # ("I need a train. The train should leave..." introduces its own referent).
    introduced = rules.introduces.search(rest)
    pointing = rules.refers_back.search(rules.refers_nowhere.sub(lambda nowhere: " " * len(nowhere.group()), rest))
    limit = introduced.start() if introduced else len(rest)
    if any(match and match.start() <= limit for match in (pointing, rules.answers.search(rest))):
        return REPLY
    if introduced and not pointing:
        return INTRODUCES
    return REPLY if acknowledged else PLAIN


def _question(text: str) -> str | None:
    """The kind of question a message ends on: WH ("What time?"), CHOICE ("A museum or a
    nightclub?"), YES_NO ("Shall I book it?"), or None."""
    stripped = text.strip().lower()
    if not stripped.endswith("?"):
        return None
    last = re.split(r"(?<=[.!?])\s+", stripped)[-1]
    words = _FIRST_WORDS.findall(last)
    if words and words[0] in _rules().wh_words:
        return WH
    return CHOICE if any(f" {word} " in last for word in _rules().choice_words) else YES_NO


def _offers_subject(text: str) -> bool:
    """Whether a message ends on a closed question that leans on nothing said before ("i love it. do
    you like country music?"), as a speaker offers a new subject; not "what kind of work do you do?"
    (a wh-question asks about the subject at hand) nor "have you been to it?" (points back)."""
    if _question(text) != YES_NO:
        return False
    last = [part for part in _SENTENCE_END.split(text.strip()) if part.strip()][-1]
    return _opening(last) != REPLY


def _takes_up(question: str | None, first_word: str) -> int:
    """+1 when a reply beginning so answers a yes-no question, -1 when a yes or a no cannot answer
    what was said last (a wh-question, a statement), else 0."""
    if first_word not in _rules().yes_or_no:
        return 0
    if question == YES_NO:
        return 1
    return 0 if question == CHOICE else -1


def _leaves_unanswered(question: str | None, first_word: str) -> bool:
    """Whether a reply beginning so passes over the question the exchange before ended on: thanks
    after any question; a yes, an acknowledgement, a request or a question of its own after a
    wh-question."""
    if question is None:
        return False
    rules = _rules()
    if first_word in rules.thanks:
        return True
    return question == WH and (first_word in rules.acknowledges or first_word in rules.request_words)


def _rare_names(texts: list[str], reach: int) -> list[set[str]]:
    """Per message, its names and numbers that at most `reach` messages of the conversation have."""
    name_or_number = _rules().name_or_number
    names = [{(word or number).lower() for word, number in name_or_number.findall(text) if len(word or number) > 2}
             for text in texts]
    count = Counter(name for found in names for name in found)
    return [{name for name in found if count[name] <= reach} for found in names]


def _followed(sim: np.ndarray, exchanges: list[tuple[int, int]], texts: list[str],
              tuning: Tuning, readable: float = 1.0) -> list[list[int]]:
    """Exchanges in order, each to the topic it is most like or to a new one.

    An exchange's score with a topic is its mean similarity with the topic's messages; the topic of
    the exchange before gets stay_bonus (its similarity there partly with that exchange alone), or
    only unanswered_stay when the exchange passes over the question it ended on; a topic left on an
    unanswered question a few exchanges ago return_bonus, one left otherwise left_bonus, less for each
    exchange since (after a digression, the subject left hanging is the likeliest to come back); a
    topic closed with thanks or a goodbye loses closed_penalty. A yes or a no favours the topic whose
    last question it answers (answer_bonus).
    An earlier topic that shares a rare name or number with the exchange gets shared_name_bonus.
    A new topic opens when no score passes the threshold of how the exchange begins: a reply
    never opens one; a greeting or a message introducing something new opens one more easily. An
    exchange announcing a switch ("Ok, next thing: ...") cannot stay; one announcing a return ("Back
    to ...") gets no stay bonus and goes to the topic that scores best, never to a new one.
    Against merging neighbouring exchanges and then rejoining (the way single messages go),
    DialSeg711 dev ARI .703 -> .782, interleaved .420 -> .619; bench/README.md has what each piece of
    evidence adds."""
    rare = _rare_names(texts, tuning.name_reach)
    left_bonus = tuning.left_bonus_unreadable + readable * (tuning.left_bonus - tuning.left_bonus_unreadable)
    clusters: list[list[int]] = []
    left_at: list[int] = []     # per cluster: the exchange it last had
    closed: list[bool] = []     # per cluster: its last exchange closed the subject
    question: list = []         # per cluster: the kind of question its last message asks (or None)
    names: list[set] = []       # per cluster: its rare names and numbers
    current = None
    previous: list[int] = []    # the exchange before
    for k, (start, end) in enumerate(exchanges):
        rows = list(range(start, end))
        named = set().union(*(rare[i] for i in rows))
        opening = _opening(texts[start])
        first_word = next(iter(_FIRST_WORDS.findall(texts[start].lower()[:30])), "")
        unanswered = current is not None and not closed[current] and _leaves_unanswered(question[current], first_word)
        best, best_score = None, tuning.new_thresholds[opening]
        for c, cluster in enumerate(clusters):
            score = sim[np.ix_(cluster, rows)].mean()
            if c == current:
                if opening == SWITCH:
                    continue  # it says it leaves this one
                if opening != RETURN:  # a return goes where its content and the time since leaving say
                    recent = sim[np.ix_(previous, rows)].mean()
                    stay = tuning.unanswered_stay if unanswered else tuning.stay_bonus
                    score += tuning.stay_recent_share * (recent - score) + stay
            elif closed[c]:
                score -= tuning.closed_penalty
            else:
                left = tuning.return_bonus if question[c] else left_bonus
                score += left * tuning.return_decay ** (k - left_at[c] - 2)
            score += tuning.answer_bonus * _takes_up(question[c], first_word)
            if c != current and named & names[c]:
                score += tuning.shared_name_bonus
            if score > best_score:
                best, best_score = c, score
        if best is None:
            clusters.append(rows)
            left_at.append(k)
            closed.append(False)
            question.append(None)
            names.append(set())
            best = len(clusters) - 1
        else:
            clusters[best] = clusters[best] + rows
        names[best] |= named
        left_at[best] = k
        closed[best] = any(_rules().closing.search(texts[i].lower()) for i in rows)
        question[best] = _question(texts[end - 1])
        current, previous = best, rows
    return clusters


def _merged_blocks(sim: np.ndarray, tuning: Tuning, blocks: list[tuple[int, int]],
                   announced: set[int]) -> list[tuple[int, int]]:
    """Neighbouring blocks (at first single messages) merge, most similar first (mean similarity of their
    messages), while above merge_threshold, never into a message that announces a switch or a return
    (`announced`); only the two scores beside a merge change, so this is O(n) merges of O(block) work."""
    n = len(blocks)

    def link(a, b):
        return -math.inf if b[0] in announced else sim[a[0]:a[1], b[0]:b[1]].mean()

    scores = [link(blocks[k], blocks[k + 1]) for k in range(n - 1)]
    while scores:
        k = int(np.argmax(scores))
        if scores[k] < tuning.merge_threshold:
            break
        blocks[k] = (blocks[k][0], blocks[k + 1][1])
        del blocks[k + 1], scores[k]
        if k < len(scores):
            scores[k] = link(blocks[k], blocks[k + 1])
        if k > 0:
            scores[k - 1] = link(blocks[k - 1], blocks[k])
    return blocks


def _pointing_back_stays(blocks: list[tuple[int, int]], texts: list[str],
                         announced: set[int]) -> list[tuple[int, int]]:
    """A block that would begin with a message pointing back anywhere in it ("挺好，而且它边上就是798艺术区":
    "it" is the subject before; rules' points_back) begins after it: the message that brings in a
    new subject by way of the old one stays with the old one. Not an announced switch or return, nor
    a closed question offering a subject (_offers_subject), and a block keeps at least one message."""
    points_back = _rules().points_back
    for k in range(len(blocks) - 1):
        (start, _), (first, end) = blocks[k], blocks[k + 1]
        text = texts[first]
        if end - first > 1 and first not in announced and points_back.search(text) and not _offers_subject(text):
            blocks[k], blocks[k + 1] = (start, first + 1), (first + 1, end)
    return blocks


def _short_blocks_folded(sim: np.ndarray, blocks: list[tuple[int, int]], announced: set[int],
                         share: float) -> list[tuple[int, int]]:
    """Blocks shorter than `share` of the mean block length (taken before folding) join the neighbour
    they are more like (mean similarity), in order; a block an announced switch or return begins
    stays, and nothing joins it from the left."""
    limit = share * sum(end - start for start, end in blocks) / max(1, len(blocks))
    k = 0
    while len(blocks) > 1 and k < len(blocks):
        start, end = blocks[k]
        if end - start >= limit or start in announced:
            k += 1
            continue
        left = sim[start:end, blocks[k - 1][0]:blocks[k - 1][1]].mean() if k > 0 else -math.inf
        right = (sim[start:end, blocks[k + 1][0]:blocks[k + 1][1]].mean()
                 if k + 1 < len(blocks) and blocks[k + 1][0] not in announced else -math.inf)
        if left == right == -math.inf:
            k += 1
        elif left >= right:
            blocks[k - 1] = (blocks[k - 1][0], end)
            del blocks[k]
        else:
            blocks[k + 1] = (start, blocks[k + 1][1])
            del blocks[k]
    return blocks


def _rejoined(sim: np.ndarray, blocks: list[tuple[int, int]], tuning: Tuning,
              returning: set[int]) -> list[list[int]]:
    """A block whose subject came back rejoins the earlier cluster it continues (mean similarity above
    rejoin_threshold, or the likeliest when it begins by announcing a return: `returning`); the
    cluster it was just refused a merge with is not a candidate."""
    clusters: list[list[int]] = []
    previous: list[int] = []
    for start, end in blocks:
        rows = list(range(start, end))
        best, best_score = None, -math.inf if start in returning else tuning.rejoin_threshold
        for c, cluster in enumerate(clusters):
            if cluster == previous:
                continue  # a neighbour the merge already refused
            score = sim[np.ix_(cluster, rows)].mean()
            if score > best_score:
                best, best_score = c, score
        if best is None:
            clusters.append(rows)
        else:
            clusters[best] += rows
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


def _by_replies(messages, vectors, bags, weighted, topics, tuning) -> list[str]:
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
                if seen and i - seen[0] <= tuning.mention_reach:
                    chosen = seen[1]
                    break
            if chosen is None:
                own = last_seen.get(speaker.lower())
                if own and i - own[0] <= tuning.recent_speaker:
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

