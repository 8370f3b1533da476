"""The one definition of CJK text: which characters are Chinese, Japanese or Korean.

Every stage that treats CJK text differently (the Tantivy tokenizer, query
character pairs, token estimates, similarity bigrams, heading keywords, the
short-message rule) builds its pattern from these ranges.

Han and kana are written without spaces between words, so they are
IDEOGRAPHIC: a character is the unit of matching. Hangul puts spaces between
words, so it is CJK but not IDEOGRAPHIC: a Korean word stays whole.
"""

from __future__ import annotations

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
