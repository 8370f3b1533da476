"""Built-in topic names and summaries (T10): extractive, within the summary budget.

The name is the topic's most distinctive phrases: word sequences that many
of the topic's messages use and few other topics do - tf-idf with the topics
as the documents - the longest form of a phrase kept when its parts mostly
occur inside it ("Acorn Guest House", not "acorn · guest · house"). Chinese
is cut into words by jieba (its dictionary reads simplified characters, so
traditional text is mapped to simplified one character for one by zhconv and
the name keeps the characters written): 營業時間, not the character windows
上十點到 or 子郵件寄. jieba is imported, and its dictionary loaded (about half
a second), only when a topic with Chinese text is named. A name already
given to another topic of the scope gives way to the topic's next phrases, so
no two topics share one.

The summary is the topic's sentences that carry most - near its centre (by the same TF-IDF
terms the split uses), and more so when they record a decision, a date, a
name or a number (rules/summary.toml) - each whole, attributed to its speaker
with the day it was said, in conversation order, within the budget. No
sentence of its own opens it ("X and Y talked about …"): the header has the
name, the dates and the count, and words every summary shares made the daily
review's summary vectors of unrelated topics close enough to relate them.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Iterable

from memctl.text.cjk import CJK, CJK_CHAR, HAN, IDEOGRAPHIC_RUN, KANA
from memctl.text.words import CJK_FUNCTION_CHARS, CJK_NAME_STOPWORDS, NAME_STOPWORDS, fold_plural
from memctl.topics.segment import terms_of

NAME_PHRASES = 2      # phrases in a name: the second only if it scores at least SECOND_SHARE of the first
SECOND_SHARE = 0.5
NAME_TRIES = 8        # phrases tried in a name before a taken name gets a number
MAX_WORDS = 3         # words in a phrase
MAX_CHARS = 4         # characters in a phrase of a run with kana (Japanese: character windows)
MAX_CJK_CHARS = 8     # characters in a Chinese phrase of up to MAX_WORDS words
INSIDE_SHARE = 0.75   # a phrase found inside a longer one at least this often gives way to it
# punctuation and CJK end a word sequence; a point inside a number ("version 2.4") does not
_CLAUSE = re.compile(r"[^\w\s'’.-]+|\.(?!\d)|" + IDEOGRAPHIC_RUN.pattern)
_WORD = re.compile(r"([^\W_]+(?:\.\d+)*)(?:['’]([^\W_]+))?")
_HIRAGANA = re.compile("[\u3040-\u309f]")
_KANA = re.compile(f"[{KANA}]")
_HAN_WORD = re.compile(f"[{HAN}]+")


@functools.cache
def _chinese_segmenter():
    """jieba and zhconv, imported on first use: a command that names no Chinese topic never loads them."""
    import logging

    import jieba
    import zhconv

    jieba.setLogLevel(logging.WARNING)   # it logs its dictionary load to stderr, where only memctl speaks
    return jieba, zhconv


def chinese_words(run: str) -> list[tuple[str, str]]:
    """The words of a run of Chinese characters: (simplified form, as written)."""
    jieba, zhconv = _chinese_segmenter()
    simple = zhconv.convert(run, "zh-hans")
    if len(simple) != len(run):   # zhconv's table maps one for one; should a phrase not, read it as written
        simple = run
    words, at = [], 0
    for word in jieba.lcut(simple):
        words.append((word, run[at:at + len(word)]))
        at += len(word)
    return words


def _names_a_subject(word: str) -> bool:
    """A Chinese word (simplified) a name may hold: two characters or more, no particle or pronoun at
    either end (jieba's guesses at unknown words sometimes take one in: 启的, 我想问), not a stopword."""
    return (len(word) > 1 and _HAN_WORD.fullmatch(word) is not None and word not in CJK_NAME_STOPWORDS
            and word[0] not in CJK_FUNCTION_CHARS and word[-1] not in CJK_FUNCTION_CHARS)


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
    """Candidate phrases of a text: key (lower case; Chinese simplified, a space between words) -> the form
    written. Runs of up to MAX_WORDS content words within a clause; in Chinese, of up to MAX_WORDS words
    that name a subject (`_names_a_subject`), written together."""
    found: dict[str, str] = {}
    for run in IDEOGRAPHIC_RUN.findall(text):
        if _KANA.search(run):
            _character_windows(run, found)
            continue
        words = chinese_words(run)
        for start in range(len(words)):
            for end in range(start + 1, min(start + MAX_WORDS, len(words)) + 1):
                if not _names_a_subject(words[end - 1][0]):
                    break
                written = "".join(w for _, w in words[start:end])
                if len(written) > MAX_CJK_CHARS:
                    break
                if all(_names_a_subject(simple) for simple, _ in words[start:end]):
                    found.setdefault(" ".join(simple for simple, _ in words[start:end]), written)
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


def _character_windows(run: str, found: dict[str, str]) -> None:
    """Japanese (a run with kana), which jieba does not read: runs of 2 to MAX_CHARS characters without a
    Chinese function character and neither starting nor ending with hiragana (particles)."""
    for size in range(2, MAX_CHARS + 1):
        for start in range(len(run) - size + 1):
            piece = run[start:start + size]
            if not (CJK_FUNCTION_CHARS.intersection(piece) or _HIRAGANA.match(piece[0])
                    or _HIRAGANA.match(piece[-1])):
                found.setdefault(piece, piece)


def ranked_phrases(messages: list[dict], background: Background) -> list[tuple[str, str, float]]:
    """The topic's candidate phrases, most distinctive first: (key, the form written most, score)."""
    counts: Counter = Counter()
    forms: dict[str, Counter] = {}
    for m in messages:
        for key, form in phrases_of(m.get("text", "")).items():
            counts[key] += 1
            forms.setdefault(key, Counter())[form] += 1
    candidates = {k: c for k, c in counts.items() if not k.replace(" ", "").isdigit()}
    inside_of: Counter = Counter()   # per phrase, the most messages a longer phrase holding it is in
    for longer, c in candidates.items():
        for part in _parts(longer):
            if part in candidates:
                inside_of[part] = max(inside_of[part], c)
    kept = {k: c for k, c in candidates.items() if inside_of[k] < INSIDE_SHARE * c}
    topics = max(background.topics, 1)

    # tf-idf with the topics as documents, times the square root of the phrase's length: a phrase
    # repeated whole is more specific than a word (LoCoMo conv-26: "loving home", "guinea pig", "stained
    # glass window"; a linear weight let two-word chance phrases win: "last week", "help make").
    def score(key: str) -> float:
        spread = max(background.phrases.get(key, 0), 1)
        return kept[key] * math.log((topics + 1) / spread) * math.sqrt(_words(key))

    # A phrase in one message only is as likely chance as a subject, and a date says when, not what
    # ("下個月一號 · 大安分館", "明天早上七點 · 電子郵件" named the day first): both come after the others.
    dated = _cues().date
    scores = {k: score(k) for k in kept}
    scored = sorted(kept, key=lambda k: (kept[k] == 1, bool(dated.search(k.replace(" ", ""))), -scores[k], k))
    return [(k, forms[k].most_common(1)[0][0], scores[k]) for k in scored]


def topic_name(messages: list[dict], background: Background, taken: Iterable[str] = ()) -> str:
    """The topic's NAME_PHRASES most distinctive phrases, " · " between them, sharing no word; never one
    of the names `taken` (other topics'): then the best phrase with another second one, or the next
    phrases, and only when NAME_TRIES of them are all taken, the name with a number."""
    return _name_of(ranked_phrases(messages, background), taken)


def _name_of(ranked: list[tuple[str, str, float]], taken: Iterable[str]) -> str:
    if not ranked:
        return ""
    forms = {key: form for key, form, _ in ranked}
    taken_folded = {name.casefold() for name in taken}
    first_choice = None
    for lead, _, lead_score in ranked[:NAME_TRIES]:
        others = [(key, value) for key, _, value in ranked if not _overlap(key, lead)]
        usual = [lead] + [key for key, value in others[:1] if value >= SECOND_SHARE * lead_score]
        tries = [usual, [lead]] + [[lead, key] for key, _ in others[:NAME_TRIES]]
        for keys in tries:
            name = " · ".join(forms[k] for k in keys[:NAME_PHRASES])
            first_choice = first_choice or name
            if name.casefold() not in taken_folded:
                return name
    number = 2
    while f"{first_choice} ({number})".casefold() in taken_folded:
        number += 1
    return f"{first_choice} ({number})"


def _parts(phrase: str) -> list[str]:
    """The shorter phrases `phrase` holds (`_inside` it): its runs of fewer words; a Japanese window's
    shorter windows."""
    if _KANA.search(phrase) and " " not in phrase:
        return [phrase[i:j] for i in range(len(phrase)) for j in range(i + 2, len(phrase) + 1) if j - i < len(phrase)]
    words = phrase.split()
    return [" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)
            if j - i < len(words)]


def _overlap(one: str, other: str) -> bool:
    """Two phrases sharing a word ("CI pipeline", "pipeline cache"), Chinese ones one in the other, Japanese
    windows a character pair."""
    if set(one.split()) & set(other.split()):
        return True
    if _inside(one, other) or _inside(other, one):
        return True
    if _HAN_WORD.match(one) and _HAN_WORD.match(other):   # 产品设计 holds the word 设计
        one, other = one.replace(" ", ""), other.replace(" ", "")
        return one in other or other in one
    return bool(_KANA.search(one + other) and IDEOGRAPHIC_RUN.fullmatch(one) and IDEOGRAPHIC_RUN.fullmatch(other)
                and {one[i:i + 2] for i in range(len(one) - 1)} & {other[i:i + 2] for i in range(len(other) - 1)})


def _words(key: str) -> float:
    """Length of a phrase in words; Chinese in characters over two, what a word averages (单元测试 says
    more than 遇到, though jieba cuts both as one word); a Japanese window in character pairs."""
    if _KANA.search(key):
        return max(1, len(key) - 1)
    if _HAN_WORD.match(key):
        return max(1.0, len(key.replace(" ", "")) / 2)
    return key.count(" ") + 1


def _inside(short: str, long: str) -> bool:
    """`short` is words of `long` (a Japanese window: characters of it)."""
    if _KANA.search(long) and " " not in long:
        return short in long
    return f" {short} " in f" {long} "


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


# A sentence's weight is its closeness to the topic's centre times 1 + these for what it records (none
# tuned: read on hand-written assistant chats, bench/README 'Topic names and summaries (issue 22)').
DECISION_BONUS = 1.0
DATE_BONUS = 0.5
NAME_BONUS = 0.25
QUESTION_SHARE = 0.5     # a question asks; the answer records
SAME_TERMS = 0.7         # a sentence sharing this much of its terms with a chosen one repeats it
LONGEST_SENTENCE = 300   # bytes; a longer sentence is cut at a clause mark
MIN_WORDS, MIN_CJK = 4, 6  # shorter sentences ("Thanks!", "好的") record nothing
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^\sa-z])|(?<=[。！？；])|\n+")
_LIST_MARK = re.compile(r"^\s*(?:[-*•>#]+|\d+[.)])\s+")
_CODE_CHARS = re.compile(r"[{}\[\]();=<>$|\\`]")
_WRITTEN_CLOSE = re.compile(f"[{CJK}\u3000-\u303f\uff00-\uffef]")   # no space after these: 。，）
_CLAUSE_MARK = re.compile(r"[,;:，；：、]")
_NAME_OR_NUMBER = re.compile(r"(?<=\s)[A-Z][\w-]+|\d")
RULES = resources.files("memctl.topics") / "rules" / "summary.toml"


@dataclass
class _Cues:
    decision: re.Pattern
    date: re.Pattern


@functools.cache
def _cues() -> _Cues:
    with RULES.open("rb") as file:
        table = tomllib.load(file)
    joined = {name: "|".join(alternative for language in table.values() if name in language
                             for alternative in language[name]["pattern"]) for name in ("decision", "date")}
    return _Cues(**{name: re.compile(pattern, re.IGNORECASE) for name, pattern in joined.items()})


@dataclass
class _Sentence:
    message: int
    position: int
    text: str
    terms: Counter
    weight: float = 0.0


def summarise(messages: list[dict], background: Background, budget: int,
              taken: Iterable[str] = ()) -> tuple[str, str]:
    """(name, summary) of a topic's messages; the summary within `budget` UTF-8 bytes, sentences only.
    `taken`: names of other topics, which the name is not (topic_name)."""
    texts = [m.get("text", "") for m in messages]
    ranked = ranked_phrases(messages, background)
    name = _name_of(ranked, taken) or (" ".join(texts[0].split())[:40] if texts else "topic")
    sentences = _sentences(texts, strict=True) or _sentences(texts, strict=False)
    _weigh(sentences, background)
    chosen: list[_Sentence] = []
    summary = ""
    for sentence in sorted(sentences, key=lambda s: -s.weight):
        if budget - len(summary.encode()) < len(sentence.text.encode()) + 4 \
                or any(_repeats(sentence.terms, other.terms) for other in chosen):
            continue
        trial = sorted(chosen + [sentence], key=lambda s: (s.message, s.position))
        written = "\n".join(_lines(messages, trial))   # a speaker and day are written once a run
        if len(written.encode()) <= budget:
            chosen, summary = trial, written
    return name, summary


def _sentences(texts: list[str], strict: bool) -> list[_Sentence]:
    """The sentences of the messages, code blocks left out; `strict`: only those that can record
    something (MIN_WORDS words or MIN_CJK Chinese characters, not code, not a colon opening a list)."""
    found = []
    for index, text in enumerate(texts):
        for position, piece in enumerate(_SENTENCE_END.split(_FENCE.sub("\n", text))):
            sentence = " ".join(_LIST_MARK.sub("", piece).split())
            if not sentence:
                continue
            if strict and (len(CJK_CHAR.findall(sentence)) < MIN_CJK and len(_WORD.findall(sentence)) < MIN_WORDS
                           or len(_CODE_CHARS.findall(sentence)) > 0.06 * len(sentence)
                           or sentence.endswith((":", "：")) or sentence.startswith(("import ", "from ", "$ "))):
                continue
            found.append(_Sentence(index, position, _cut(sentence, LONGEST_SENTENCE), terms_of(sentence)))
    return found


def _weigh(sentences: list[_Sentence], background: Background) -> None:
    """Each sentence's weight: closeness to the topic's centre (its terms, each by its tf-idf over the
    background's messages, a term counted at most 3 times in a sentence), per square root of the
    sentence's length, times 1 + the bonuses for a decision, a date, a name or number it records."""
    cues = _cues()
    centre: Counter = Counter()
    for sentence in sentences:
        centre.update(sentence.terms)
    documents = background.messages
    weight = {t: math.log((documents + 1) / (1 + background.terms.get(t, 0))) for t in centre}
    for sentence in sentences:
        bag = sentence.terms
        closeness = (sum(min(c, 3) * centre[t] * weight[t] ** 2 for t, c in bag.items()) / math.sqrt(sum(bag.values()))
                     if bag else 0.0)
        bonus = (1 + DECISION_BONUS * bool(cues.decision.search(sentence.text))
                 + DATE_BONUS * bool(cues.date.search(sentence.text))
                 + NAME_BONUS * bool(_NAME_OR_NUMBER.search(sentence.text)))
        question = QUESTION_SHARE if sentence.text.endswith(("?", "？")) else 1.0
        sentence.weight = closeness * bonus * question


def _repeats(terms: Counter, other: Counter) -> bool:
    if not terms:
        return False
    return len(terms.keys() & other.keys()) >= SAME_TERMS * len(terms.keys())


def _lines(messages: list[dict], chosen: list[_Sentence]) -> list[str]:
    """One line a message: its speaker, the day when it differs from the line before, its chosen sentences."""
    lines, day, previous = [], "", -1
    for sentence in chosen:
        message = messages[sentence.message]
        if lines and sentence.message == previous:
            lines[-1] += ("" if _WRITTEN_CLOSE.match(lines[-1][-1:]) else " ") + sentence.text
            continue
        said = _day(message)
        lines.append(f"{_speaker(message)}{f' ({said})' if said and said != day else ''}: {sentence.text}")
        day, previous = said or day, sentence.message
    return lines


def _speaker(message: dict) -> str:
    """Who said it: the speaker's name, or the role capitalised ("User", "Assistant")."""
    speaker = str(message.get("speaker") or message.get("role") or "").strip()
    return speaker[:1].upper() + speaker[1:] if speaker.islower() and speaker in ("user", "assistant", "system") \
        else speaker or "Someone"


def _day(message: dict) -> str:
    """The day a message was written (its ts, ISO), or ""."""
    ts = str(message.get("ts") or "")
    return ts[:10] if re.match(r"\d{4}-\d{2}-\d{2}", ts) else ""


def _cut(text: str, limit: int) -> str:
    """`text` within `limit` UTF-8 bytes: whole, else up to its last clause mark (or word) that fits, and "…"."""
    if len(text.encode()) <= limit:
        return text
    head = text.encode()[:max(0, limit - 3)].decode("utf-8", errors="ignore")
    marks = [m.start() for m in _CLAUSE_MARK.finditer(head)]
    if marks and marks[-1] > len(head) // 2:
        head = head[:marks[-1]]
    elif " " in head[len(head) // 2:]:
        head = head[:head.rindex(" ")]
    return head.rstrip() + "…"
