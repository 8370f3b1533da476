"""What every way of writing a note shares: the schema fields a note must have (G2).

ingest, confirming a pending memory and governance all complete notes the
same way, so the rule lives here rather than in any one of them.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from memctl import clock
from memctl.errors import InputError
from memctl.store.memoryfile import SUMMARY_MAX, check_field
from memctl.text.clip import clip


def complete_note(fields: dict, text: str, section: str, settings: Any, source: str, line: int,
                  now: datetime) -> dict:
    """Fill a note's required schema fields with defaults ([ingest] `settings`, a config.Ingest:
    store/ sits below config) and check every field; a note without a time is made `now`."""
    fields.setdefault("scope", settings.default_scope)
    # A scoped note's id holds its scope: the same words in two scopes are two notes, and one
    # scope's ingest must not be told (nor lose its note because) another already says them.
    # Global notes keep the id they always had.
    scoped = () if fields["scope"] == "global" else (fields["scope"],)
    fields.setdefault("id", derived_id("mem", section, text, *scoped))
    fields.setdefault("summary", clip(text, SUMMARY_MAX))
    fields.setdefault("memory_class", settings.default_memory_class)
    if "created_at" in fields:
        fields["created_at"] = normal_ts(fields["created_at"], source, line, "created_at")
    else:
        fields["created_at"] = clock.format_ts(now)
    for name, value in fields.items():
        problem = check_field(name, value)
        if problem:
            raise InputError(problem, source=source, line=line, field=name)
    if "enforcement_level" in fields and fields["memory_class"] != "policy":
        raise InputError("applies to policy memories only", source=source, line=line, field="enforcement_level")
    return {"id": fields["id"], "section": section, "text": text, "fields": fields}


def derived_id(prefix: str, *parts: Any) -> str:
    """A stable id from content, so that ingesting the same input twice is a no-op."""
    digest = hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}-{digest[:16]}"


def normal_ts(value: Any, source: str, line: int, name: str) -> str:
    try:
        return clock.format_ts(clock.parse_ts(value))
    except (ValueError, TypeError, OverflowError, OSError) as exc:
        raise InputError(f"not a time ({exc}); use ISO 8601 or Unix seconds",
                         source=source, line=line, field=name) from None
