"""Built-in topic names and summaries (T10): extractive, within the summary budget.

The name is the topic's three most distinctive terms; the summary is a line
of keywords, then the messages nearest the topic's centre (by the same
TF-IDF terms the split uses), in conversation order, each cut to fit.
"""

from __future__ import annotations

import math
from collections import Counter

from memctl.topics.segment import terms_of


def distinctive_terms(texts: list[str], background: Counter, documents: int, limit: int) -> list[str]:
    """Terms frequent here and rare in the background (document frequencies over `documents` documents)."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(set(terms_of(text)))
    scored = {t: c * math.log((documents + 1) / (1 + background.get(t, 0))) for t, c in counts.items()
              if len(t) > 1}
    return [t for t, _ in sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:limit]]


def summarise(messages: list[dict], background: Counter, documents: int, budget: int) -> tuple[str, str]:
    """(name, summary) of a topic's messages; the summary within `budget` UTF-8 bytes."""
    texts = [m.get("text", "") for m in messages]
    keywords = distinctive_terms(texts, background, documents, 12)
    name = " · ".join(keywords[:3]) or (" ".join(texts[0].split())[:40] if texts else "topic")
    bags = [terms_of(t) for t in texts]
    centre: Counter = Counter()
    for bag in bags:
        centre.update(bag)
    weight = {t: math.log((documents + 1) / (1 + background.get(t, 0))) for t in centre}

    def closeness(bag: Counter) -> float:
        if not bag:
            return 0.0
        return sum(min(c, 3) * centre[t] * weight[t] ** 2 for t, c in bag.items()) / math.sqrt(sum(bag.values()))

    lines = [f"Keywords: {', '.join(keywords)}"] if keywords else []
    used = len("\n".join(lines).encode())
    chosen = []
    for index in sorted(range(len(texts)), key=lambda i: -closeness(bags[i])):
        speaker = messages[index].get("speaker") or messages[index].get("role") or ""
        line = f"{speaker}: {' '.join(texts[index].split())}" if speaker else " ".join(texts[index].split())
        room = budget - used - 1
        if room < 40:
            break
        if len(line.encode()) > room:
            line = line.encode()[:room - 3].decode("utf-8", errors="ignore") + "…"
        chosen.append((index, line))
        used += len(line.encode()) + 1
    lines += [line for _, line in sorted(chosen)]
    return name, "\n".join(lines)
