"""Word lists shared by every stage: stopwords and the words that ask for memory.

One list each, so that a query, a similarity check and a heading keyword
agree on what carries no content, and so that adaptive retrieval (P7), the
layered search's history trigger (G3) and amnesia cues agree on what asks
for memory.
"""

from __future__ import annotations

import re

# Words that carry no content: dropped from queries (in the index they still count
# towards document length, as BM25 expects), from similarity, and from heading
# keywords ("About Bob" is about Bob, not about "about"). The query list plus
# "about": the union of the three lists this replaced also dropped after, before,
# from, all, ... and cost LoCoMo recall@10 0.003 (0.710 -> 0.707 with defaults).
STOPWORDS = frozenset("""
a about am an and are as at be been being but by can could did do does for had has have he her him his how
i if in into is it its me my no not of on or our she should such that the their them then there these they
this to was we were what when where which who whom why will with would you your
""".split())

# Words that ask for memory: a message with one of them always searches (P7) and
# calls for the query layer (G3).
MEMORY_WORDS = re.compile(
    r"記得|记得|上次|之前|以前|曾經|曾经|你忘了|我說過|我说过|歷史|历史|過去|过去|"
    r"\b(?:remember|recall|previously|last time|earlier|before|forgot|forget|we talked|you said|i told you"
    r"|i said|history|used to)\b",
    re.IGNORECASE)
