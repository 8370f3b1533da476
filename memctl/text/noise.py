"""The noise filter (P6): text that is not worth remembering or returning.

Four kinds: an AI's refusal, a question about memory itself, a greeting or
heartbeat, and text under five characters. Greetings and memory questions are
noise only when they are the whole message: "Hi! I just moved to Taipei" is
kept, a bare "hello" is not, since dropping the first would lose a fact.
"""

from __future__ import annotations

import re

MIN_CHARS = 5

_REFUSAL = re.compile(
    r"\bi (?:do not|don'?t) have (?:any )?(?:relevant )?(?:information|data|memor(?:y|ies)|records?)\b"
    r"|\bi (?:do not|don'?t) (?:recall|remember) (?:any|that|anything)\b"
    r"|\bi (?:was not|wasn'?t) able to find\b"
    r"|\bno (?:relevant )?memories (?:were )?found\b"
    r"|\bi (?:do not|don'?t) have access to\b"
    r"|\bas an ai(?: language model)?\b"
    r"|我(?:沒有|没有)(?:相關|相关)?的?(?:資料|资料|資訊|资讯|信息|記憶|记忆|紀錄|记录)"
    r"|我(?:不記得|不记得|無法回答|无法回答|找不到相關|找不到相关)",
    re.IGNORECASE,
)
_META_QUESTION = re.compile(
    r"^\W*(?:(?:do|can|did) you (?:still )?(?:remember|recall)(?: anything| that| what| me)?"
    r"|what did i (?:tell|say to|mention to) you"
    r"|have i (?:told|mentioned to) you"
    r"|你(?:還|还)?(?:記得|记得)(?:嗎|吗|我嗎|我吗)?"
    r"|你(?:記不記得|记不记得))\W*$",
    re.IGNORECASE,
)
# Shared with adaptive retrieval (P7), which skips the same greetings and heartbeats.
GREETING = re.compile(
    r"^\W*(?:hi|hello|hey|yo|howdy|greetings|good (?:morning|afternoon|evening|night)"
    r"|你好|您好|哈囉|哈啰|嗨|早安|午安|晚安|早上好|晚上好)"
    r"(?: there| all| everyone)?\W*$",
    re.IGNORECASE,
)
HEARTBEAT = re.compile(r"^\W*heartbeat(?:_ok)?\b|^\W*ping\W*$", re.IGNORECASE)


def noise_reason(text: str, role: str | None = None) -> str | None:
    """Why `text` is noise ('refusal', 'meta-question', 'greeting', 'too short'), or None.

    Refusals are an assistant's words; a user saying "I don't have any data on
    that laptop" is a fact, so user text is never taken for a refusal.
    """
    stripped = text.strip()
    if GREETING.match(stripped) or HEARTBEAT.match(stripped):
        return "greeting"
    if _META_QUESTION.match(stripped):
        return "meta-question"
    if role not in ("user", "human") and _REFUSAL.search(stripped):
        return "refusal"
    if len(stripped) < MIN_CHARS:
        return "too short"
    return None
