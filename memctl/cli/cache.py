"""`memctl cache`: the shared working memory for tool outputs (H1-H5), on the command line.

Light: `memctl cache run` answers a hit in one short process, importing
nothing heavier than click and orjson; consolidate and search import the
ingest and search machinery when they run.
"""

from __future__ import annotations

import functools
import sys

import click

from memctl.cli.output import EXIT_NOTHING, EXIT_OK, columns, json_lines, read_input, say

_SCOPE_HELP = "The run whose agents share the cache (a debate, a job). [env: MEMCTL_CACHE_SCOPE]"
_AGENT_HELP = "Who is calling, kept with what it stores. [env: MEMCTL_AGENT]"
_ENTRY_SCHEMA = ('{"id", "key", "scope", "tool", "args", "output" | "output_base64", "stderr_tail", "exit_code", '
                 '"agent", "created_at", "expires_at", "duration_ms", "negative", "access_count", "consolidated"}')


def _scope_option(required: bool = True):
    return click.option("--scope", required=required, envvar="MEMCTL_CACHE_SCOPE", metavar="SCOPE",
                        help=_SCOPE_HELP if required else "Only this scope. [default: every scope]")


def _call_options(func):
    """--tool, --args and a trailing argv: what names one tool call."""
    func = click.argument("argv", nargs=-1, metavar="[-- ARGV...]")(func)
    func = click.option("--args", "args_json", metavar="JSON",
                        help="The call's arguments as JSON; keyed canonically (sorted keys, 1.0 = 1, "
                             "whitespace collapsed). [default: the argv after --, exactly]")(func)
    return click.option("--tool", required=True, metavar="NAME", help="The tool's name.")(func)


def _call_args(cache, args_json, argv):
    from memctl.errors import InputError

    if args_json is not None:
        return cache.parse_args(args_json)
    if not argv:
        raise InputError("give --args JSON or the call's argv after --", source="--args", field="args")
    return list(argv)


@click.group()
@click.option("--backend", metavar="URL", help="files (in the store) or redis://host:port/db. "
              "[default: $MEMCTL_CACHE_BACKEND, your config.toml's [cache] backend, 'files']")
@click.pass_context
def cache(ctx, backend):
    """Shared working memory for tool outputs: a call made by one agent is answered
    from the cache for every agent of the same run (scope).

    Empty and failed results are cached too (with [cache] negative_ttl), so
    nobody repeats a call known to come back empty. When several agents miss
    the same call at once, one runs it and the others wait for its result.
    What proves useful is consolidated into long-term memory (MEMORY.md),
    searchable with `memctl search --tool/--agent` and `memctl cache search`.

    The cache lives in the store (cache/<scope>/) or, for agents on several
    machines, on a Redis server: --backend redis://host:6379/0, or [cache]
    backend in your own ~/.config/memctl/config.toml (a store's memctl.toml
    may not name a server to send your tools' outputs to).

    \b
    Examples:
      memctl cache run --scope debate-7 --tool stock -- ./stock.sh 2330
      memctl cache get --scope debate-7 --tool search --args '{"q": "TSMC"}'
      memctl cache stats
      memctl cache consolidate --scope debate-7
      memctl cache clear --scope debate-7
    """
    ctx.meta[_BACKEND_KEY] = backend


_BACKEND_KEY = "memctl.cache.backend"  # the group's --backend, for the command that runs


def _pass_cache(command):
    """Hand the command `memory.cache` on the group's --backend, made when the command runs: `memctl cache
    run --help` reads no settings and opens no backend."""

    @click.pass_context
    def with_cache(ctx, *args, **kwargs):
        return ctx.invoke(command, ctx.obj.cache.on(ctx.meta[_BACKEND_KEY]), *args, **kwargs)

    return functools.update_wrapper(with_cache, command)


@cache.command("run", context_settings={"allow_interspersed_args": False})
@_scope_option()
@click.option("--tool", required=True, metavar="NAME", help="The tool's name; part of the key.")
@click.option("--args", "args_json", metavar="JSON", help="Key on these JSON arguments (canonical form) instead "
              "of the command's argv.")
# --ttl and --timeout are plain floats here: the library checks them (check_seconds), so an MCP
# client and a Python caller meet the same rule and message as the command line.
@click.option("--ttl", type=float, metavar="SECONDS",
              help="How long this result is served, up to ten years. [default: cache.ttl, or cache.negative_ttl "
                   "for an empty or failed result]")
@click.option("--refresh", is_flag=True, help="Run the command even when the cache has its result.")
@click.option("--agent", envvar="MEMCTL_AGENT", default="", metavar="ID", help=_AGENT_HELP)
@click.option("--timeout", type=float, metavar="SECONDS",
              help="Longest wait for another agent's run of the same call. [default: cache.wait_timeout]")
@click.option("--json", "as_json", is_flag=True, help=f"Print the entry instead of the output: {_ENTRY_SCHEMA[:-1]}, "
              '"hit", "waited"}.')
@click.argument("command", nargs=-1, required=True, metavar="-- COMMAND [ARGS...]")
@_pass_cache
def cache_run(cache, scope, tool, args_json, ttl, refresh, agent, timeout, as_json, command):
    """Run COMMAND once per scope and TTL; every later call gets its stored output.

    On a hit prints the stored stdout and the last lines of its stderr, and
    exits with the stored exit status; on a miss runs the command, stores
    all that, and prints it the same way. The key is the tool's name and the
    command's argv (or --args, canonicalised).

    \b
    Examples:
      memctl cache run --scope debate-7 --tool stock -- ./stock.sh 2330
      memctl cache run --scope job-1 --tool grep --ttl 60 -- grep -rn TODO src/
      memctl cache run --scope debate-7 --tool search --args '{"q": "TSMC"}' -- ./search.py TSMC
    """
    args = cache.parse_args(args_json) if args_json is not None else None
    result = cache.run(scope, tool, list(command), args=args, ttl=ttl, refresh=refresh, agent=agent,
                         timeout=timeout)
    entry = result.entry
    if as_json:
        json_lines([result.as_dict()])
    else:
        sys.stdout.buffer.write(entry.output)
        sys.stdout.flush()
        if entry.stderr_tail:
            click.echo(entry.stderr_tail, err=True)
    sys.exit(entry.exit_code)


@cache.command("get")
@_scope_option()
@_call_options
@click.option("--json", "as_json", is_flag=True, help=f"Print the entry: {_ENTRY_SCHEMA}.")
@_pass_cache
def cache_get(cache, scope, tool, args_json, argv, as_json):
    """The stored result of a tool call, for tools that are not commands.

    An agent framework calls get before its own tool call and put after it.
    Prints the stored output (or the entry with --json) and counts a hit;
    exit status 1, a miss, when there is none.

    \b
    Examples:
      memctl cache get --scope debate-7 --tool search --args '{"q": "TSMC", "limit": 5}' --json
      memctl cache get --scope debate-7 --tool stock -- ./stock.sh 2330
    """
    entry = cache.get(scope, tool, _call_args(cache, args_json, argv))
    if entry is None:
        sys.exit(EXIT_NOTHING)
    if as_json:
        json_lines([entry.as_dict()])
    else:
        sys.stdout.buffer.write(entry.output)
        sys.stdout.flush()
    sys.exit(EXIT_OK)


@cache.command("put")
@_scope_option()
@_call_options
@click.option("--input", "source", default="-", show_default=True, metavar="FILE|-",
              help="The tool's output.")
@click.option("--exit-code", type=int, default=0, show_default=True,
              help="The call's status, 0 to 255; not 0 makes a negative result (cached with cache.negative_ttl).")
@click.option("--error", default="", metavar="TEXT", help="The call's error message, kept as its stderr.")
@click.option("--ttl", type=float, metavar="SECONDS",
              help="How long it is served, up to ten years. [default: cache.ttl or cache.negative_ttl]")
@click.option("--agent", envvar="MEMCTL_AGENT", default="", metavar="ID", help=_AGENT_HELP)
@click.option("--json", "as_json", is_flag=True, help=f"Print the stored entry: {_ENTRY_SCHEMA}.")
@_pass_cache
def cache_put(cache, scope, tool, args_json, argv, source, exit_code, error, ttl, agent, as_json):
    """Store the result of a tool call made outside memctl.

    The output is read from --input (stdin by default), as bytes. An empty
    output or a non-zero --exit-code is a negative result: stored too.

    \b
    Examples:
      echo '{"price": 1032}' | memctl cache put --scope debate-7 --tool stock --args '{"symbol": "2330"}'
      memctl cache put --scope debate-7 --tool stock --args '{"symbol": "3444"}' --exit-code 1 \\
          --error "no such company" --input /dev/null
    """
    output, _ = read_input(source)
    entry = cache.put(scope, tool, _call_args(cache, args_json, argv), output, exit_code=exit_code, error=error,
                        agent=agent, ttl=ttl)
    if as_json:
        json_lines([entry.as_dict()])
    else:
        click.echo(entry.key)


@cache.command("stats")
@_scope_option(required=False)
@click.option("--json", "as_json", is_flag=True, help='One JSON object a scope and tool: {"scope", "tool", '
              '"hits", "misses", "negative_hits", "keys", "negative_keys", "bytes", "consolidated"}.')
@_pass_cache
def cache_stats(cache, scope, as_json):
    """Hits, misses, negative hits, keys and bytes per scope and tool.

    Hits and misses count calls since the scope began; keys and bytes are
    what is stored now (unexpired). Exit status 1 when the cache is empty.

    \b
    Examples:
      memctl cache stats
      memctl cache stats --scope debate-7 --json
    """
    rows = cache.stats(scope).rows
    if as_json:
        json_lines(rows)
    elif rows:
        names = ("scope", "tool", "hits", "misses", "negative_hits", "keys", "bytes", "consolidated")
        table = [list(names)] + [[str(row[n]) for n in names] for row in rows]
        for line in columns(table, right=range(2, len(names))):
            click.echo(line.rstrip())
    sys.exit(EXIT_OK if rows else EXIT_NOTHING)


@cache.command("clear")
@_scope_option()
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be removed (and consolidated); change nothing.")
@click.option("--json", "as_json", is_flag=True, help='Print {"scope", "entries", "consolidated": [...], '
              '"dry_run"}.')
@_pass_cache
def cache_clear(cache, scope, dry_run, as_json):
    """End a run: remove the scope's entries and counters.

    Where memctl.toml [cache] consolidate_on has "clear" (the default), what
    qualifies is consolidated into long-term memory first.

    \b
    Examples:
      memctl cache clear --scope debate-7
      memctl cache clear --scope debate-7 --dry-run
    """
    report = cache.clear(scope, dry_run=dry_run)
    if as_json:
        json_lines([report.as_dict()])
    else:
        verb = "would remove" if dry_run else "removed"
        say(f"memctl: {verb} {report.entries} entries of scope {scope}; {len(report.consolidated)} consolidated")


@cache.command("consolidate")
@_scope_option()
@click.option("--all", "everything", is_flag=True, help="Every item, not only those accessed at least "
              "cache.consolidate_min_access times (the end of a round).")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object an item: {"key", "tool", "memory_id", '
              '"status": "stored"|"duplicate"|"marked", "access_count"}.')
@_pass_cache
def cache_consolidate(cache, scope, everything, dry_run, as_json):
    """Write what proved useful to long-term memory, once.

    Items accessed at least cache.consolidate_min_access times (2), or all
    with --all, become memories in MEMORY.md (section cache.section, "Tool
    results"): the call, a summary of its output (its first lines, or
    cache.summary_command's answer), with tool, agent, cache_scope and
    created_at; then they are indexed. An item is marked consolidated and is
    never written twice. Prints the memory ids written.

    \b
    Examples:
      memctl cache consolidate --scope debate-7
      memctl cache consolidate --scope debate-7 --all --json
    """
    rows = cache.consolidate(scope, everything=everything, dry_run=dry_run)
    if as_json:
        json_lines(r.as_dict() for r in rows)
    else:
        for row in rows:
            if row.status == "stored":
                click.echo(row.memory_id)
        done = sum(r.status == "stored" for r in rows)
        say(f"memctl: {'would write' if dry_run else 'wrote'} {done} memories; "
             f"{len(rows) - done} consolidated before")
    sys.exit(EXIT_OK if rows else EXIT_NOTHING)


@cache.command("search")
@click.argument("query")
@_scope_option(required=False)
@click.option("--tool", "tools", multiple=True, metavar="NAME", help="Only what this tool found (repeatable).")
@click.option("--agent", "agents", multiple=True, metavar="ID", help="Only what this agent found (repeatable).")
@click.option("-k", "--limit", "k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object a result, as `memctl search --json`.")
@_pass_cache
def cache_search(cache, query, scope, tools, agents, k, as_json):
    """Search what the run's agents already found (consolidated tool results).

    Before calling a slow tool, an agent asks whether a teammate has already
    looked it up. Searches long-term memories consolidated from the cache,
    by meaning and words, within --scope (else every run).

    \b
    Examples:
      memctl cache search --scope debate-7 "TSMC share price last month"
      memctl cache search --scope debate-7 --tool stock --json 2330
    """
    from memctl.cli.search import _print_result

    results = cache.search(query, scope=scope, tools=tools, agents=agents, k=k)
    if as_json:
        json_lines(r.as_dict() for r in results)
    else:
        for result in results:
            _print_result(result, False)
    sys.exit(EXIT_OK if results else EXIT_NOTHING)
