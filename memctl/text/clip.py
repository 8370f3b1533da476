"""The one rule for showing text short: on one line, cut with an ellipsis.

Summaries written into MEMORY.md (at most memoryfile.SUMMARY_MAX characters),
summaries shown for memories that have none, and one-line listings all cut
text this way.
"""

from __future__ import annotations


def clip(text: str, width: int) -> str:
    """`text` with its whitespace collapsed to single spaces, at most `width` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
