"""Consolidation (H3): cached tool results that proved useful become long-term memories.

An item qualifies when its access count reached [cache] consolidate_min_access
(2: someone used it again), or always with everything=True (the end of a
round). It is written to MEMORY.md through `ingest` — one transaction for
the lot, governance applied — as a note in the [cache] section with its
source (tool, agent), time (created_at: when the tool ran) and run
(cache_scope), then the index is brought up to date (embedded and indexed).

Never twice: the memory id is derived from the scope, key and output, and
ingest treats a known id with the same text as a no-op; after writing, the
entry is marked with the memory id, so later passes skip it without reading
MEMORY.md. A crash between the two leaves a mark missing, and the next pass
finds the memory already stored.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import TYPE_CHECKING, Any

import orjson

from memctl import config
from memctl.cache.backend import CacheError, Consolidated, Entry
from memctl.errors import MemctlError
from memctl.programs import ProgramFailed, program_argv, run_program
from memctl.store.memoryfile import SUMMARY_MAX
from memctl.text.clip import clip

if TYPE_CHECKING:
    from memctl.cache import Cache


# Seconds a summary_command may take on one item (its whole process group is killed after).
SUMMARY_TIMEOUT = 120.0


def consolidate(cache: "Cache", scope: str, *, everything: bool = False, dry_run: bool = False,
                only: list[Entry] | None = None, index: bool = True) -> list[Consolidated]:
    from memctl.ingest.ingest import ingest

    cache_settings = cache.settings
    entries = only if only is not None else list(cache.backend.entries(scope))
    chosen = [e for e in entries if everything or e.access_count >= cache_settings.consolidate_min_access]
    out = [Consolidated(e.key, e.tool, e.consolidated, "marked", e.access_count) for e in chosen if e.consolidated]
    todo = [e for e in chosen if not e.consolidated]
    if not todo:
        return out
    notes = {memory_id(e): e for e in todo}
    data = b"".join(orjson.dumps(note(e, memory_id, cache_settings)) + b"\n" for memory_id, e in notes.items())
    result = ingest(cache.runtime, data, source=f"cache:{scope}", fmt="jsonl", kind="memory", keep_noise=True,
                    dry_run=dry_run, allow_conflict=True)
    for outcome in result.outcomes:
        entry = notes[outcome.id]
        out.append(Consolidated(entry.key, entry.tool, outcome.id, outcome.status, entry.access_count))
    if not dry_run:
        cache.backend.mark_consolidated([(notes[o.id], o.id) for o in result.outcomes])
        for outcome in result.outcomes:
            notes[outcome.id].consolidated = outcome.id
    if index and not dry_run and result.stored:
        from memctl.index import open_index

        open_index(cache.runtime).update()
    return out


def memory_id(entry: Entry) -> str:
    digest = hashlib.sha1(b"\x1f".join([entry.scope.encode(), entry.key.encode(), entry.output])).hexdigest()
    return f"cache-{digest[:16]}"


def note(entry: Entry, memory_id: str, cache_settings: config.Cache) -> dict[str, Any]:
    """The note an entry becomes: what was asked, what came back (summarised), where from."""
    call = f"{entry.tool} {_call_args(entry.args)}"
    if entry.exit_code != 0:
        last = entry.stderr_tail.strip().split("\n")[-1] if entry.stderr_tail.strip() else ""
        found = f"failed with exit status {entry.exit_code}" + (f": {last}" if last else "")
    elif not entry.output.strip():
        found = "returned nothing"
    else:
        found = summarise(entry.text, cache_settings)
    text = f"{call}\n{found}"
    return {"id": memory_id, "text": text, "section": cache_settings.section,
            "summary": clip(f"{entry.tool}: {found}", SUMMARY_MAX),
            "memory_class": "episodic", "created_at": entry.created_at, "access_count": entry.access_count,
            "tool": entry.tool, **({"agent": entry.agent} if entry.agent else {}), "cache_scope": entry.scope}


def summarise(text: str, cache_settings: config.Cache) -> str:
    """The [cache] summary_command's answer, else the output's first lines up to summary_chars."""
    command = cache_settings.summary_command
    if command:
        try:
            argv = program_argv(command, "[cache] summary_command")
        except MemctlError as exc:
            raise CacheError(str(exc)) from None
        try:
            summary = run_program(argv, text.encode(), SUMMARY_TIMEOUT).decode(errors="replace").strip()
        except ProgramFailed as exc:
            raise CacheError(f"[cache] summary_command: {exc}") from None
        if not summary:
            raise CacheError(f"[cache] summary_command: '{argv[0]}' printed nothing")
        return summary
    budget = cache_settings.summary_chars
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        line = line.rstrip()
        if not line.strip():
            continue
        if used + len(line) > budget:
            if not kept:
                kept.append(clip(line, budget))
            else:
                kept.append("…")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept)


def _call_args(args: Any) -> str:
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        return shlex.join(args)
    return orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()
