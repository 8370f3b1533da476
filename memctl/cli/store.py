"""`memctl store`: the store as a whole (`store copy`: folder or PostgreSQL, either way)."""

from __future__ import annotations

import click

from memctl.cli.output import json_lines, say


@click.group()
def store():
    """The store as a whole: copy it between a folder and PostgreSQL.

    \b
    Examples:
      memctl store copy ~/agent/.memory postgresql://mei@db:5432/memory
      memctl store copy postgresql://mei@db:5432/memory /tmp/look
    """


@store.command()
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.option("-n", "--dry-run", is_flag=True, help="Check both stores and list what would be copied; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"source", "target", "dry_run", "files", '
              '"bytes", "kinds": {"notes", "sessions", "pending", "other"}, "paths"}.')
def copy(source, target, dry_run, as_json):
    """Copy a whole store from SRC into DST, each a folder or a PostgreSQL URL.

    DST must be new or empty: a copy never merges. Everything a person could
    read goes over (MEMORY.md, sessions, pending notes, daily logs, topics,
    state, settings, the cache's files); the index does not (it is rebuilt).
    One transaction of DST's: the copy lands whole or not at all, and
    folder -> PostgreSQL -> folder gives the same files back, byte for
    byte. A PostgreSQL URL's password is never printed.

    \b
    Examples:
      memctl store copy ~/agent/.memory postgresql://mei@db:5432/memory
      memctl store copy postgresql://mei@db:5432/memory /tmp/look    read it as files
      memctl store copy -n ~/agent/.memory postgresql://mei@db/memory

    Exit status: 0 copied (or, with -n, copyable), 2 a store missing,
    not empty, unreachable or holding a file memctl refuses.
    """
    from memctl.api import copy_store

    copied = copy_store(source, target, dry_run=dry_run)
    if as_json:
        json_lines([copied.as_dict()])
        return
    for path, size in copied.files.items():
        click.echo(f"{'would copy' if dry_run else 'copied'}\t{path}\t{size}")
    kinds = ", ".join(f"{count} {kind}" for kind, count in copied.kinds.items() if count)
    say(f"memctl: {'dry run: would copy' if dry_run else 'copied'} {len(copied.files)} file(s) "
        f"({kinds or 'none'}) from {copied.source} to {copied.target}")
