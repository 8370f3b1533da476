"""`memctl forget`: take something out of every file of the store (memctl/forget.py)."""

from __future__ import annotations

import sys

import click

from memctl.api.params import FORGET, click_options
from memctl.cli.output import EXIT_NOTHING, EXIT_OK, alert, columns, json_lines, say


@click.command()
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click_options(FORGET)
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"applied", "dry_run", "needs_yes", '
              '"forgotten": [{"id", "kind", "scope", "file", "line", "preview"? (only when nothing was '
              'written)}], "files", "regenerated", "repointed": [{"id", "supersedes"}], "remaining", "index"}.')
@click.pass_obj
def forget(memory, ids, session, match, scope, yes, dry_run, as_json):
    """Forget messages, memories or notes: their text leaves every file of the store.

    Choose by id (a message, a memory, a pending note, a daily-log entry, or a
    topic: all its messages), by --session, or by --match TEXT. The text is
    taken out of sessions/, the daily logs, MEMORY.md and deleted/ (an entry
    that superseded a forgotten one now supersedes what that one superseded),
    pending.jsonl, topic files and the archive (their names and summaries
    written anew by the built-in method), auto_summaries.jsonl and .index/
    (written anew, so no byte of it stays) - all in one transaction. The
    governance log records each id forgotten and when, never the text.

    A topic, --session and --match can reach many records: without --yes
    they only list what they would forget (with a preview), and write
    nothing. Ids of single records are forgotten at once. -n lists and
    writes nothing, always. A file that still holds a forgotten text
    afterwards (a tool output in cache/, a message repeating a forgotten
    memory) is named on stderr.

    \b
    Examples:
      memctl forget m-3f2a9c0d1e2f4a5b               one message, at once
      memctl forget --match "555-867-5309"           list what holds it
      memctl forget --match "555-867-5309" --yes     ... and forget it all
      memctl forget --session s1 -n                  what forgetting s1 takes
      memctl forget mem-kestrel-db --scope project:kestrel

    Exit status: 0 forgotten (or listed), 1 nothing chosen or an unknown id,
    2 usage error.
    """
    found = memory.forget(ids, session=session, match=match, scope=scope, yes=yes, dry_run=dry_run)
    if as_json:
        json_lines([found.as_dict()])
    elif found.records:
        rows = [["forgot" if found.applied else "would forget", r.kind, r.id,
                 f"{r.file}:{r.line}" if r.line else r.file, r.scope] for r in found.records]
        if not found.applied:
            rows = [row + [r.preview] for row, r in zip(rows, found.records)]
        for line in columns(rows):
            click.echo(line.rstrip())
    if not found.records:
        say("memctl: nothing to forget: nothing matched")
        sys.exit(EXIT_NOTHING)
    if found.applied:
        parts = [f"{len(found.files)} file(s) rewritten or removed"]
        if found.regenerated:
            parts.append(f"{len(found.regenerated)} summary(ies) written anew")
        if found.repointed:
            parts.append(f"{len(found.repointed)} chain link(s) relinked")
        say(f"memctl: forgot {len(found.records)}: {', '.join(parts)}; index: {found.index}")
        if found.remaining:  # said under --quiet too: the text is not gone from there
            alert(f"memctl: warning: a forgotten text is still in {', '.join(found.remaining)}: not memctl's to "
                "rewrite; edit it by hand, or forget it there with --match")
    elif found.needs_yes:  # said under --quiet too: a cron line must not believe it forgot
        alert(f"memctl: {len(found.records)} would be forgotten; nothing was written: run again with --yes "
            "to forget them")
    else:
        say(f"memctl: dry run: {len(found.records)} would be forgotten, nothing written")
    sys.exit(EXIT_OK)
