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

# Words no topic is named by: the stopwords and the commonest function words and chat
# fillers ("3 nights from", "felt so", "plan something special" are no names), and the
# conjunctions and adverbs that end a clause's words ("times overnight because").
NAME_STOPWORDS = STOPWORDS | frozenset("""
after again all also any back before both down each even ever few from get gets getting go going gone gonna
got great here hey hi just let lot lots many more most much now off oh ok okay one only other out over own really
same so some something still than thank thanks there too under up very well wow yeah yes yet
although anyway actually because basically maybe perhaps please probably since sure though unless until
whether while like need needs want wants think know see feel make help thing things way bit kind
around having those often kinda wanna
""".split())


def fold_plural(word: str) -> str:
    """A lower-cased word without its plural s (rooms -> room; not glass, not bus)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


# Chinese characters that begin or end no name of a subject (particles, pronouns, the
# commonest verbs and measure words): a topic name is never 的好 or 我这.
CJK_FUNCTION_CHARS = frozenset("的了吗嗎呢吧啊呀嗯哦哈么麼个個是我你您他她它们們这這那就也都在有和与與或给給把被很还還吧嘛啦哪")

# Chinese words (simplified, as jieba cuts them) no topic is named by: question words, modal and
# commonest verbs, connectives and chat words ("需要 · 什么" is no name).
CJK_NAME_STOPWORDS = frozenset("""
什么 怎么 怎样 怎么样 为什么 哪里 哪些 多少 需要 可以 可能 应该 能够 知道 觉得 认为 希望 想要 一下 一个 一些 一点
这样 那样 如果 因为 所以 但是 而且 然后 还是 或者 已经 现在 没有 不是 就是 问题 时候 自己 非常 比较 其他 另外
对了 谢谢 您好 你好 好的 当然 请问 帮助 帮忙 告诉 提供 使用 包括 以下 以上 例如 比如 通过 进行 如何 方面
""".split())

# Words that ask for memory: a message with one of them always searches (P7) and
# calls for the query layer (G3).
MEMORY_WORDS = re.compile(
    r"記得|记得|上次|之前|以前|曾經|曾经|你忘了|我說過|我说过|歷史|历史|過去|过去|"
    r"\b(?:remember|recall|previously|last time|earlier|before|forgot|forget|we talked|you said|i told you"
    r"|i said|history|used to)\b",
    re.IGNORECASE)
