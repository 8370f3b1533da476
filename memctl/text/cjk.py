"""The one definition of CJK text: which characters are Chinese, Japanese or Korean.

Every stage that treats CJK text differently (the Tantivy tokenizer, query
character pairs, token estimates, similarity bigrams, heading keywords, the
short-message rule) builds its pattern from these ranges.

Han and kana are written without spaces between words, so they are
IDEOGRAPHIC: a character is the unit of matching. Hangul puts spaces between
words, so it is CJK but not IDEOGRAPHIC: a Korean word stays whole.
"""

from __future__ import annotations

import functools
import re

# Han: radicals, CJK symbols that act as characters (々 〇 〡-〩 〸-〻), extension A,
# the unified block, compatibility ideographs and the supplementary planes.
HAN = ("\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3038-\u303b\u3400-\u4dbf\u4e00-\u9fff"
       "\uf900-\ufaff\U00020000-\U0003134f")
KANA = "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9d"   # hiragana, katakana (with half-width)
BOPOMOFO = "\u3100-\u312f\u31a0-\u31bf"
HANGUL = "\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7ff"

IDEOGRAPHIC = HAN + KANA + BOPOMOFO
CJK = IDEOGRAPHIC + HANGUL

CJK_CHAR = re.compile(f"[{CJK}]")
IDEOGRAPHIC_RUN = re.compile(f"[{IDEOGRAPHIC}]+")


def has_cjk(text: str) -> bool:
    return CJK_CHAR.search(text) is not None


def bigrams(run: str) -> list[str]:
    """Adjacent character pairs of a run of ideographic text (a single character stands alone)."""
    return [run] if len(run) < 2 else [run[i:i + 2] for i in range(len(run) - 1)]


HAN_CHAR = re.compile(f"[{HAN}]")
KANA_CHAR = re.compile(f"[{KANA}]")


def simplified(text: str) -> str:
    """`text` with each character only Traditional Chinese writes in its Simplified form, so
    that a sentence in either script reads the same ("會議紀要" -> "会议纪要").

    Character for character, from zhconv's tables (MediaWiki's): its phrase conversion also
    rewrites Simplified text ("那么正义" became "那幺正义", after the phrase 么正), while a
    character that only Traditional text uses changes nothing written in Simplified.
    Characters both scripts use (干, 么) stay as written.
    """
    if HAN_CHAR.search(text) is None:
        return text
    return text.translate(_traditional_only())


@functools.cache
def _traditional_only() -> dict[int, str]:
    """zhconv's Traditional-only characters and their Simplified forms (its table loads in
    ~27 ms, once a process, and only for text with Han characters)."""
    from zhconv import zhconv

    if not zhconv.zhcdicts:
        zhconv.loaddict()
    tables = zhconv.zhcdicts
    return {ord(traditional): simple for traditional, simple in tables["zh2Hans"].items()
            if len(traditional) == 1 and len(simple) == 1 and traditional in tables["TRADONLY"]}
