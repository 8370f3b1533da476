"""Built-in topic names and summaries (T10): extractive, within the summary budget.

The name is the topic's most distinctive phrases: word sequences (and, in
ideographic text, character sequences) that many of the topic's messages use
and few other topics do - tf-idf with the topics as the documents - the
longest form of a phrase kept when its parts mostly occur inside it ("Acorn
Guest House", not "acorn · guest · house"; 创业板, not 创业 · 业板). The
summary is a line of keywords, then the messages nearest the topic's centre
(by the same TF-IDF terms the split uses), in conversation order, each cut
to fit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

from memctl.text.cjk import IDEOGRAPHIC_RUN
from memctl.text.words import CJK_FUNCTION_CHARS, NAME_STOPWORDS, fold_plural
from memctl.topics.segment import terms_of

NAME_PHRASES = 2      # phrases in a name: the second only if it scores at least SECOND_SHARE of the first
SECOND_SHARE = 0.5
MAX_WORDS = 3         # words in a phrase (alphabetic scripts)
MAX_CHARS = 4         # characters in a phrase (ideographic scripts)
INSIDE_SHARE = 0.75   # a phrase found inside a longer one at least this often gives way to it
_CLAUSE = re.compile(r"[^\w\s'’-]+|" + IDEOGRAPHIC_RUN.pattern)   # punctuation and CJK end a word sequence
_WORD = re.compile(r"([^\W_]+)(?:['’]([^\W_]+))?")
_HIRAGANA = re.compile("[\u3040-\u309f]")


@dataclass
class Background:
    """What makes a topic's words distinctive: in how many messages of all topics each term is, and in
    how many topics each phrase is."""
    terms: Counter = field(default_factory=Counter)
    messages: int = 0
    phrases: Counter = field(default_factory=Counter)
    topics: int = 0


def background_of(topics: Iterable[list[dict]]) -> Background:
    """The background of every topic's messages (one list of messages a topic)."""
    background = Background()
    for messages in topics:
        seen: set[str] = set()
        for m in messages:
            text = m.get("text", "")
            background.terms.update(set(terms_of(text)))
            background.messages += 1
            seen.update(phrases_of(text))
        background.phrases.update(seen)
        background.topics += 1
    return background


# A split reads every topic's messages for the background, then the touched topics' again for names.
@lru_cache(maxsize=16384)
def phrases_of(text: str) -> dict[str, str]:
    """Candidate phrases of a text: key (lower case) -> the form written. Runs of up to MAX_WORDS content
    words within a clause; in ideographic text, runs of 2 to MAX_CHARS characters without a Chinese
    function character (的, 了, 您, …) and neither starting nor ending with hiragana (Japanese particles)."""
    found: dict[str, str] = {}
    for run in IDEOGRAPHIC_RUN.findall(text):
        for size in range(2, MAX_CHARS + 1):
            for start in range(len(run) - size + 1):
                piece = run[start:start + size]
                if not (CJK_FUNCTION_CHARS.intersection(piece) or _HIRAGANA.match(piece[0])
                        or _HIRAGANA.match(piece[-1])):
                    found.setdefault(piece, piece)
    for clause in _CLAUSE.split(text):
        # "health's" is health; "they're", "don't" are no content words
        pairs = _WORD.findall(clause)
        words = [word for word, _ in pairs]
        content = [(not suffix or suffix.lower() == "s") and word.lower() not in NAME_STOPWORDS
                   and (len(word) > 1 or word.isdigit()) for word, suffix in pairs]
        for start in range(len(words)):
            for end in range(start + 1, min(start + MAX_WORDS, len(words)) + 1):
                if not content[end - 1]:
                    break
                if all(content[start:end]):
                    phrase = " ".join(words[start:end])
                    found.setdefault(" ".join(fold_plural(w.lower()) for w in words[start:end]), phrase)
    return found


def topic_name(messages: list[dict], background: Background) -> str:
    """The topic's NAME_PHRASES most distinctive phrases, " · " between them."""
    counts: Counter = Counter()
    forms: dict[str, Counter] = {}
    for m in messages:
        for key, form in phrases_of(m.get("text", "")).items():
            counts[key] += 1
            forms.setdefault(key, Counter())[form] += 1
    # A phrase in one message only is as likely chance as a subject: taken only when nothing repeats.
    candidates = {k: c for k, c in counts.items() if not k.replace(" ", "").isdigit()}
    if any(c > 1 for c in candidates.values()):
        candidates = {k: c for k, c in candidates.items() if c > 1}
    longer = sorted(candidates, key=len, reverse=True)
    kept = {k: c for k, c in candidates.items()
            if not any(len(o) > len(k) and _inside(k, o) and candidates[o] >= INSIDE_SHARE * c for o in longer)}
    topics = max(background.topics, 1)

    # tf-idf with the topics as documents, times the square root of the phrase's length: a phrase
    # repeated whole is more specific than a word (LoCoMo conv-26: "loving home", "guinea pig", "stained
    # glass window"; a linear weight let two-word chance phrases win: "last week", "help make").
    def score(key: str) -> float:
        spread = max(background.phrases.get(key, 0), 1)
        return kept[key] * math.log((topics + 1) / spread) * math.sqrt(_words(key))

    chosen: list[str] = []
    for key in sorted(kept, key=lambda k: (-score(k), k)):
        if len(chosen) == NAME_PHRASES or (chosen and score(key) < SECOND_SHARE * score(chosen[0])):
            break
        if not any(_overlap(key, c) for c in chosen):
            chosen.append(key)
    return " · ".join(forms[k].most_common(1)[0][0] for k in chosen)


def _overlap(one: str, other: str) -> bool:
    """One phrase inside the other, or (ideographic) two windows of one longer run sharing a character pair."""
    if _inside(one, other) or _inside(other, one):
        return True
    return bool(IDEOGRAPHIC_RUN.fullmatch(one) and IDEOGRAPHIC_RUN.fullmatch(other)
                and {one[i:i + 2] for i in range(len(one) - 1)} & {other[i:i + 2] for i in range(len(other) - 1)})


def _words(key: str) -> int:
    """Length of a phrase in words; an ideographic one in character pairs."""
    return max(1, len(key) - 1) if IDEOGRAPHIC_RUN.fullmatch(key) else key.count(" ") + 1


def _inside(short: str, long: str) -> bool:
    if " " in long or " " in short or not IDEOGRAPHIC_RUN.fullmatch(long):
        return f" {short} " in f" {long} "
    return short in long


def distinctive_terms(texts: list[str], background: Counter, documents: int, limit: int) -> list[str]:
    """Terms frequent here and rare in the background (document frequencies over `documents` documents),
    each as the texts write it most often ("Redis", not the folded "redi"); no word that names
    nothing ("from", "just")."""
    counts: Counter = Counter()
    written: dict[str, Counter] = {}
    for text in texts:
        counts.update(set(terms_of(text)))
        for word in _WORD.findall(IDEOGRAPHIC_RUN.sub(" ", text)):
            written.setdefault(fold_plural(word[0].lower()), Counter())[word[0]] += 1
    scored = {t: c * math.log((documents + 1) / (1 + background.get(t, 0))) for t, c in counts.items()
              if len(t) > 1 and t not in NAME_STOPWORDS}
    chosen = [t for t, _ in sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:limit]]
    return [written[t].most_common(1)[0][0] if t in written else t for t in chosen]


def summarise(messages: list[dict], background: Background, budget: int) -> tuple[str, str]:
    """(name, summary) of a topic's messages; the summary within `budget` UTF-8 bytes."""
    texts = [m.get("text", "") for m in messages]
    keywords = distinctive_terms(texts, background.terms, background.messages, 12)
    name = topic_name(messages, background) or (" ".join(texts[0].split())[:40] if texts else "topic")
    documents = background.messages
    bags = [terms_of(t) for t in texts]
    centre: Counter = Counter()
    for bag in bags:
        centre.update(bag)
    weight = {t: math.log((documents + 1) / (1 + background.terms.get(t, 0))) for t in centre}

    def closeness(bag: Counter) -> float:
        if not bag:
            return 0.0
        return sum(min(c, 3) * centre[t] * weight[t] ** 2 for t, c in bag.items()) / math.sqrt(sum(bag.values()))

    lines = [f"Keywords: {', '.join(keywords)}"] if keywords else []
    used = len("\n".join(lines).encode())
    chosen = []
    for index in sorted(range(len(texts)), key=lambda i: -closeness(bags[i])):
        speaker = messages[index].get("speaker") or messages[index].get("role") or ""
        line = f"{speaker}: {' '.join(texts[index].split())}" if speaker else " ".join(texts[index].split())
        room = budget - used - 1
        if room < 40:
            break
        if len(line.encode()) > room:
            line = line.encode()[:room - 3].decode("utf-8", errors="ignore") + "…"
        chosen.append((index, line))
        used += len(line.encode()) + 1
    lines += [line for _, line in sorted(chosen)]
    return name, "\n".join(lines)

