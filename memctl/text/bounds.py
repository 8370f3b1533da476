"""The one bound on a text a search reads, for every face alike (#31).

A query, the user's message of a turn (context, state plan, search --plan) or
a --batch line's query: its every line is embedded, and a text of several
lines whole as well (split_query_lines), so its cost grows with its length.
10,000 characters in lines of 10 took 1.0 s warm (16,000 messages, 2 cores
under load), before the whole was embedded too (USE: 0.74 s CPU for 10,000
characters whole, 0.71 s for them in lines of 10; bench/README.md "Cited measurements"); 10 MB held the
server for 124 s, and a 6.5 MB `memctl search --batch` line 39 s and 868 MB.
A longer text is refused with one line (exit 2), so the agent sends the gist.
"""

from __future__ import annotations

from memctl.errors import InputError

MAX_QUERY_CHARS = 10_000


def within_bound(text: str, source: str, *, line: int | None = None, field: str | None = None) -> str:
    """`text` if a search may read it; else InputError naming where it came from (an argument, or a
    file's line and field)."""
    if len(text) > MAX_QUERY_CHARS:
        raise InputError(f"{len(text):,} characters; a search reads at most {MAX_QUERY_CHARS:,}: send the gist",
                         source=source, line=line, field=field)
    return text


def need_query(query: str | None, source: str = "query") -> str:
    """A text to search for: not empty, and within the one bound of every face."""
    if not query or not query.strip():
        raise InputError(f"give a {source}", source=source)
    return within_bound(query, source)
