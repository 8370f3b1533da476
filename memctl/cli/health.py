"""`memctl health`: scores of the memories (G4) and a check of the store, like git fsck."""

from __future__ import annotations

import sys

import click

from memctl.cli.output import EXIT_NOTHING, EXIT_OK, alert, json_lines, quiet, say


@click.group(invoke_without_command=True)
@click.pass_context
def health(ctx):
    """Health of the memories (scores) and of the store (check).

    Without a subcommand, runs `memctl health check`.

    \b
    Examples:
      memctl health                             check the store, like git fsck
      memctl health scores --sort health        weakest memories first
      memctl health check --fix                 repair what is safe to repair
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(health_check)


@health.command("scores")
@click.option("--sort", type=click.Choice(["health", "id", "age"]), default="health", show_default=True,
              help="health: weakest first; age: oldest first.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "line", "section", '
              '"status", "core", "health", "recency_decay", "access_frequency", "user_weight", "access_count", '
              '"age_days", "summary"}.')
@click.pass_obj
def health_scores(memory, sort, as_json):
    """Health score of every memory in MEMORY.md, with its parts (G4).

    \b
    health = 0.4 recency_decay + 0.35 access_frequency + 0.25 user_weight/10
    recency_decay = exp(-ln2/14 * days since created_at)
    access_frequency = min(access_count/20, 1)
    Prints one line a memory: health, status, age, access count, user
    weight (0-10), id, summary; a * marks core memories. Exit status
    1 when MEMORY.md holds no memory.

    \b
    Examples:
      memctl health scores
      memctl health scores --json | jq -r 'select(.health < 0.3) | .id'
    """
    rows = memory.health.scores(sort=sort).rows
    if as_json:
        json_lines(rows)
    else:
        for r in rows:
            age = "?" if r["age_days"] is None else f"{r['age_days']:.1f}d"
            click.echo(f"{r['health']:.3f}\t{r['status']}\t{age}\tacc {r['access_count']}\t"
                       f"uw {r['user_weight']:g}\t{r['id']}{'*' if r['core'] else ''}\t{r['summary']}")
    sys.exit(EXIT_OK if rows else EXIT_NOTHING)


@health.command("check")
@click.option("--fix", is_flag=True, help="Repair what is safe: roll back an unfinished transaction, drop "
              "expired pending memories, make permissions private, remove stale temp files.")
@click.option("-n", "--dry-run", is_flag=True, help="With --fix: say what would be repaired; change nothing.")
@click.option("--strict", is_flag=True, help="Warnings count as problems for the exit status too.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a problem: {"file", "line", "severity": '
              '"error"|"warning", "code", "message", "fixable"}.')
@click.pass_obj
def health_check(memory, fix, dry_run, strict, as_json):
    """Check every file of the store, like git fsck.

    Every store file must parse (MEMORY.md, sessions/*.jsonl,
    pending.jsonl, index_state.json, access.json, memctl.toml, ...); ids
    are unique across the store; supersedes links resolve and form no
    cycle; no canonical_topic has two current memories; pending memories
    have not expired; folders are 0700 and files 0600; no journal or temp
    file is left by a killed writer. Prints one problem a line,
    FILE:LINE: MESSAGE ("warning:" before the message for warnings).
    Exit status: 0 no errors (warnings allowed, unless --strict), 1
    problems found, 2 usage error or no store.

    \b
    Examples:
      memctl health check
      memctl health check --json | jq -r 'select(.severity == "error") | .file'
      memctl health check --fix --dry-run
    """
    if dry_run and not fix:
        raise click.UsageError("--dry-run goes with --fix (a check alone writes nothing)")
    problems = memory.health.check()
    if fix:
        for line in memory.health.fix(problems, dry_run=dry_run):
            say(f"memctl: {'would fix' if dry_run else 'fixed'}: {line}")
        if not dry_run:
            problems = memory.health.check()
    if as_json:
        json_lines(p.as_dict() for p in problems)
    else:
        for p in problems:
            click.echo(p.line_text())
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    failed = bool(errors or (strict and warnings))
    if not problems:
        say("memctl: health: ok")
    elif failed and quiet():
        # the problems themselves went nowhere: the one line names the first of them
        first = next(p for p in problems if p.severity == "error" or strict)
        alert(f"memctl: health: {errors} error(s), {warnings} warning(s); first: {first.line_text()}")
    elif failed:
        alert(f"memctl: health: {errors} error(s), {warnings} warning(s)")
    else:
        say(f"memctl: health: {errors} error(s), {warnings} warning(s)")
    sys.exit(EXIT_NOTHING if failed else EXIT_OK)
