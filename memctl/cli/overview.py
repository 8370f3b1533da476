"""`memctl show`, `memctl status`, `memctl config`: what the store holds and how memctl is set (memctl/overview.py)."""

from __future__ import annotations

import sys

import click

from memctl.cli.output import EXIT_OK, columns, json_lines


def _value(value) -> str:
    import orjson

    return value if isinstance(value, str) and value else orjson.dumps(value).decode()


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"id", "kind": "message"|"memory"|'
              '"pending"|"log"|"topic", "scope", "file", "line", "text", "fields", "chain"? (memories: every '
              'version, oldest first), "topics"? (messages: the topics holding it)}.')
@click.option("--scope", metavar="SCOPE", help="Only a record of this scope (global, user:NAME or project:NAME); "
              "one of another scope is not there (exit 1), nor are the versions and topics of other scopes "
              "it links to. Give it whenever the id came from someone else.")
@click.pass_obj
def show(memory, record_id, as_json, scope):
    """Show one message, memory, pending note, log entry or topic by its id.

    Prints where it lives (file:line), its fields, its text, and what it
    belongs to: a memory's version chain (oldest first, > marks it), the
    topics holding a message. Ids are in every search result and listing.

    \b
    Examples:
      memctl show m-3f2a9c0d1e2f4a5b      a message and the topics holding it
      memctl show mem-kestrel-db          a memory and its version chain
      memctl show t-1a2b3c4d5e6f --json | jq .fields.message_ids
      memctl show mem-kestrel-db --scope user:alice   exit 1: not alice's

    Exit status: 0 found, 1 no such id, 2 not an id.
    """
    shown = memory.show(record_id, scope=scope)
    if as_json:
        json_lines([shown.as_dict()])
        sys.exit(EXIT_OK)
    click.echo(f"{shown.kind} {shown.id}  {shown.file}:{shown.line}" + (f"  [{shown.scope}]" if shown.scope else ""))
    for key, value in shown.fields.items():
        if key != "message_ids":
            click.echo(f"  {key}: {_value(value)}")
    click.echo("")
    click.echo(shown.text)
    if shown.chain is not None and len(shown.chain) > 1:
        click.echo("\nchain, oldest first:")
        for link in shown.chain:
            mark = ">" if link["id"] == shown.id else " "
            click.echo(f"{mark} {link['id']}  {link['status']}  {link.get('summary', '')}".rstrip())
    if shown.topics:
        click.echo("\nin topics:")
        for topic in shown.topics:
            click.echo(f"  {topic['id']}  {topic['state']}  {topic['name']}")
    if shown.kind == "topic" and shown.fields.get("message_ids"):
        click.echo(f"\nmessages: {' '.join(shown.fields['message_ids'])}")
    sys.exit(EXIT_OK)


@click.command()
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"store", "counts": {"messages", '
              '"sessions", "memories": {"current", "superseded", "archived", "deleted"}, "pending": {"waiting", '
              '"expired"}, "topics": {"active", "dormant", "archived"}, "cache_entries" (null on redis)}, '
              '"scopes": {scope: {"messages", "memories", "topics"}}, "sizes": {"total_bytes", "index_bytes"}, '
              '"index": {"built", "updated_at", "units", "model", "fresh"}, "model"}.')
@click.pass_obj
def status(memory, as_json):
    """The store at a glance: what it holds, by kind and scope, and its index.

    Counts messages and sessions; memories current, superseded, archived
    and deleted (deleted/); pending notes waiting and expired; topics
    active, dormant and archived; tool-cache entries. Then the same by
    scope, the bytes on disk (the derived .index/ among them), when the
    index was last updated and with which model, and whether it is fresh
    (a search updates a stale one by itself). Reads only; loads no model.

    \b
    Examples:
      memctl status
      memctl status --json | jq .counts.memories

    Exit status: 0, or 2 when there is no store.
    """
    data = memory.status().as_dict()
    if as_json:
        json_lines([data])
        sys.exit(EXIT_OK)
    counts, index = data["counts"], data["index"]
    memories, topics, pending = counts["memories"], counts["topics"], counts["pending"]
    cache = "?" if counts["cache_entries"] is None else counts["cache_entries"]
    click.echo(f"store     {data['store']}")
    click.echo(f"messages  {counts['messages']} in {counts['sessions']} session(s)")
    click.echo(f"memories  {memories['current']} current, {memories['superseded']} superseded, "
               f"{memories['archived']} archived, {memories['deleted']} deleted")
    click.echo(f"pending   {pending['waiting']} waiting, {pending['expired']} expired")
    click.echo(f"topics    {topics['active']} active, {topics['dormant']} dormant, {topics['archived']} archived")
    click.echo(f"cache     {cache} entries")
    if data["scopes"]:
        rows = [["scope", "messages", "memories", "topics"]] + [
            [scope, str(n["messages"]), str(n["memories"]), str(n["topics"])] for scope, n in data["scopes"].items()]
        for line in columns(rows, right=(1, 2, 3)):
            click.echo(f"  {line}")
    sizes = data["sizes"]
    click.echo(f"size      {_bytes(sizes['total_bytes'])} ({_bytes(sizes['index_bytes'])} of it .index/)")
    if index["built"]:
        click.echo(f"index     {index['units']} units, updated {index['updated_at']}, "
                   f"{'fresh' if index['fresh'] else 'stale (the next search updates it)'}, model {index['model']}")
    else:
        click.echo("index     not built yet (the first search builds it)")
    click.echo(f"model     {data['model']}")
    sys.exit(EXIT_OK)


def _bytes(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


@click.command()
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"table", "key", "value", '
              '"source", "ignored"? (a program setting the store may not name: why)}.')
@click.pass_obj
def config(memory, as_json):
    """The effective settings, each with where its value came from.

    A value comes from, first to last: a flag (for the one command it is
    given to, so not shown here), the environment (MEMCTL_<TABLE>_<KEY>),
    the store's memctl.toml, the user's config.toml
    ($XDG_CONFIG_HOME/memctl/config.toml), or the default. A setting that
    names a program to run ([topics] llm_command, [cache] summary_command,
    an [embedding] model directory) is read only from the user: one named
    in the store's memctl.toml is listed last, marked ignored.

    \b
    Examples:
      memctl config
      memctl config | grep -v default            what is not at its default
      memctl config --json | jq -r 'select(.table == "retrieval") | "\\(.key)=\\(.value)"'

    Exit status: 0, or 2 when a settings file is invalid (naming its line).
    """
    rows = memory.config()
    if as_json:
        json_lines(rows)
        sys.exit(EXIT_OK)
    table = [[f"{r['table']}.{r['key']}", _value(r["value"]),
              f"IGNORED ({r['source']}): {r['ignored']}" if "ignored" in r else r["source"]] for r in rows]
    for line in columns(table):
        click.echo(line.rstrip())
    sys.exit(EXIT_OK)
