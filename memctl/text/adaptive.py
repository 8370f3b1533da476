"""Adaptive retrieval (P7): does this message need a memory search at all?

Order of the checks, as in the design: memory words force a search; then
greetings, slash commands, acknowledgements, pure emoji and heartbeats are
skipped; then a short message without a question mark is skipped (CJK under
6 characters, other text under 15).
"""

from __future__ import annotations

import re

from memctl.text.cjk import has_cjk
from memctl.text.noise import GREETING, HEARTBEAT
from memctl.text.words import MEMORY_WORDS

_ACK_WORD = (r"(?:ok(?:ay)?|k|sure|yes|yep|yeah|no|nope|thanks?|thank you|thx|got it|cool|great|nice|fine"
             r"|alright|好的?|好啊|嗯+|對|对|是的?|謝謝|谢谢|收到|了解|知道了|沒問題|没问题|可以)")
_ACK = re.compile(rf"^\W*{_ACK_WORD}(?:[\s,.!~，。！]+{_ACK_WORD})*\W*$", re.IGNORECASE)
_SLASH = re.compile(r"^\s*/[A-Za-z_][\w-]*")
_EMOJI_ONLY = re.compile(r"^[\s\U0001F000-\U0001FAFF\u2600-\u27BF\uFE0F\u200D\u2B00-\u2BFF\U000E0000-\U000E007F]+$")


def skip_reason(message: str) -> str | None:
    """Why no search is needed for `message`, or None when one is."""
    text = message.strip()
    if MEMORY_WORDS.search(text):
        return None
    if not text:
        return "empty message"
    if HEARTBEAT.match(text):
        return "heartbeat"
    if _SLASH.match(text):
        return "slash command"
    if GREETING.match(text):
        return "greeting"
    if _ACK.match(text):
        return "acknowledgement"
    if _EMOJI_ONLY.match(text):
        return "emoji only"
    has_question = "?" in text or "？" in text
    is_cjk = has_cjk(text)
    if not has_question and len(text) < (6 if is_cjk else 15):
        return f"short message without a question mark (under {6 if is_cjk else 15} characters)"
    return None
