"""The `memctl` command line: parse, call the library, print.

Imports of anything heavier than click happen inside the commands, so that
`memctl --help` and `memctl ingest` start fast; memctl runs once per agent turn.
"""

from __future__ import annotations

import sys

import click

from . import __version__

EXIT_OK, EXIT_NOTHING, EXIT_ERROR = 0, 1, 2


class MemctlGroup(click.Group):
    """Turns library errors into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context):
        from .errors import MemctlError

        try:
            return super().invoke(ctx)
        except MemctlError as exc:
            click.echo(f"memctl: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # The reader went away (memctl search | head): not an error of ours.
            sys.stderr.close()
            ctx.exit(EXIT_OK)


@click.group(cls=MemctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="memctl")
@click.option("--store", "store_path", metavar="DIR", type=click.Path(file_okay=False),
              help="The memory store. [default: $MEMCTL_STORE, else ./.memory]")
@click.pass_context
def cli(ctx: click.Context, store_path: str | None) -> None:
    """Long-term memory for LLM agents, kept in plain files.

    A store is a directory of files a person can read and edit: MEMORY.md
    (long-term memory, sections are its headings), memory/YYYY-MM-DD.md
    (daily logs), sessions/*.jsonl (messages), pending.jsonl, memctl.toml.
    Everything under .index/ is derived and can be deleted.

    \b
    Examples:
      memctl ingest chat.jsonl                  store a chat's messages
      memctl ingest --kind memory notes.md      add notes to MEMORY.md
      echo "I moved to Taipei" | memctl ingest -
      memctl --store ~/agent/.memory search "where does Bob live"

    Exit status: 0 found or done, 1 nothing found, 2 usage or input error.
    """
    from .store import Store

    ctx.obj = Store.locate(store_path)


@cli.command()
@click.argument("file", default="-", metavar="[FILE|-]")
@click.option("-f", "--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "jsonl", "json", "md", "text"]),
              help="Input format; auto goes by the file name, then by the content.")
@click.option("--kind", default="auto", show_default=True, type=click.Choice(["auto", "message", "memory"]),
              help="message: chat messages into sessions/ and the daily log. memory: notes into "
                   "MEMORY.md. auto: memory for Markdown and --pending, else message.")
@click.option("--session", metavar="ID", help="Session of messages that name none. [default: the file "
              "name, or 'default' for stdin]")
@click.option("--section", metavar="NAME", help="MEMORY.md section of notes that name none. "
              "[default: memctl.toml ingest.default_section, 'General']")
@click.option("--pending", is_flag=True, help="Hold notes in pending.jsonl until confirmed "
              "(memctl review) instead of writing MEMORY.md.")
@click.option("--ttl", type=click.FloatRange(min=0, min_open=True), metavar="HOURS",
              help="Hours a pending note waits for confirmation. [default: 24]")
@click.option("--keep-noise", is_flag=True, default=None,
              help="Keep greetings, refusals, memory questions and text under 5 characters.")
@click.option("--supersedes", "supersedes", multiple=True, metavar="ID",
              help="The note replaces memory ID (repeatable): ID becomes deprecated, the note lists it "
                   "in 'supersedes'. Needs an input of one note.")
@click.option("--add", "allow_conflict", is_flag=True,
              help="Write a note even when its canonical_topic already has a current memory "
                   "(otherwise that is refused; a warning remains).")
@click.option("-n", "--dry-run", is_flag=True, help="Check and report; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line for each record: "
              '{"id", "kind", "status", "line", "file"?, "reason"?, "supersedes"?, "conflicts"?, '
              '"similar"?}.')
@click.pass_obj
def ingest(store, file, fmt, kind, session, section, pending, ttl, keep_noise, supersedes, allow_conflict,
           dry_run, as_json):
    """Store messages or notes from a file or stdin.

    All or nothing: any bad record stops the run with one line naming the
    file, line and field, and the store is left as it was. Prints the id of
    each stored record, one a line. Records with an id already in the store
    and the same text are skipped; the same id with other text is an error.

    \b
    Accepted input:
      JSON lines     {"id"?, "session"?, "role"?, "speaker"?, "text"|"content", "ts"?, ...}
      JSON           a list of such objects, an OpenAI-style list of {"role", "content"},
                     or a session object {"ID", "Messages": [...], "LastUpdate"}
      Markdown       notes in MEMORY.md form (sections are headings)
      text           one message a line; with --kind memory, one note a paragraph
    Notes may carry section and the schema fields summary, memory_class,
    scope, canonical_topic, supersedes, status, claims, is_core,
    enforcement_level, user_weight, importance, created_at.

    Version chains (G6): a note that supersedes others (--supersedes or its
    own supersedes field) marks them deprecated in the same write. A note
    whose canonical_topic already has a current memory is refused (exit 2,
    nothing written) unless --add or --supersedes says which you mean.

    \b
    Examples:
      memctl ingest chat.jsonl
      memctl ingest --session telegram_42 -f json history.json
      echo '{"text": "Prefers tea", "section": "About me"}' | memctl ingest --kind memory -
      memctl ingest --pending --ttl 48 notes.md
      echo '{"text": "Kestrel moves to CockroachDB"}' | memctl ingest --kind memory --supersedes mem-kestrel-db -
    """
    from .ingest import ingest as run_ingest

    data, source = _read_input(file)

    def report_noise(outcome, text):
        click.echo(f"memctl: skipped {source}:{outcome.line} ({outcome.reason}): {_clip(text)}", err=True)

    result = run_ingest(store, data, source=source, fmt=fmt, kind=kind, session=session, pending=pending,
                        keep_noise=keep_noise, ttl_hours=ttl, section=section, dry_run=dry_run,
                        on_noise=report_noise, supersedes=list(supersedes), allow_conflict=allow_conflict)
    for outcome in result.stored:
        report = outcome.governance
        if report is not None and report.conflicts:
            if outcome.kind == "pending":
                ids = ", ".join(f"'{i}'" for i in report.conflicts)
                click.echo(f"memctl: warning: '{outcome.id}': canonical_topic '{report.topic}' already has "
                           f"current memory {ids}; confirm with --add, or --supersedes {report.conflicts[0]}",
                           err=True)
            else:
                click.echo(f"memctl: warning: {report.warning(outcome.id)}", err=True)
    if as_json:
        import orjson

        out = b"".join(orjson.dumps(o.as_dict()) + b"\n" for o in result.outcomes)
        sys.stdout.buffer.write(out)
    else:
        for outcome in result.stored:
            click.echo(outcome.id)
    duplicates = sum(o.status == "duplicate" for o in result.outcomes)
    if duplicates:
        click.echo(f"memctl: {duplicates} already stored, skipped", err=True)
    if dry_run:
        click.echo(f"memctl: dry run: {len(result.stored)} would be stored, nothing written", err=True)


def _later(name: str, issue: str):
    @cli.command(name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                 help=f"({issue}) Not available yet in this version.", add_help_option=True)
    def command():
        click.echo(f"memctl: error: '{name}' is not available yet in memctl {__version__}", err=True)
        sys.exit(EXIT_ERROR)

    return command


index = _later("index", "C3")
search = _later("search", "C4")
split = _later("split", "T1-T12")
state = _later("state", "W1-W5")


# -- review (P5, G5) ---------------------------------------------------------
@cli.group()
def review():
    """Review what memory holds: pending memories and the lifecycle.

    Every review subcommand first drops pending memories whose time ran
    out (P5), and names each on stderr.

    \b
    Examples:
      memctl review pending                     what waits for confirmation
      memctl review confirm mem-3f2a9c0d1e      write it to MEMORY.md
      memctl review reject mem-3f2a9c0d1e
      memctl review lifecycle --dry-run         what demotion/archiving would do
    """


def _json_lines(rows) -> None:
    import orjson

    sys.stdout.buffer.write(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    sys.stdout.flush()


def _drop_expired(store, dry_run: bool) -> None:
    from .pending import drop_expired

    for item in drop_expired(store, dry_run=dry_run):
        verb = "would drop" if dry_run else "dropped"
        click.echo(f"memctl: {verb} expired pending memory '{item['id']}' (expired {item['expires_at']})",
                   err=True)


def _hours(value) -> str:
    if value is None:
        return "?"
    return f"{value:.1f}h" if abs(value) < 48 else f"{value / 24:.1f}d"


@review.command("pending")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "line", "section", '
              '"summary", "text", "pending_since", "expires_at", "age_hours", "left_hours"}.')
@click.pass_obj
def review_pending(store, as_json):
    """List pending memories with their age and the time left to confirm them.

    Prints one line a memory: id, age, time left, [section] summary.
    Exit status 1 when nothing is pending.

    \b
    Examples:
      memctl review pending
      memctl review pending --json | jq -r 'select(.left_hours < 2) | .id'
    """
    from .pending import listing

    _drop_expired(store, dry_run=False)
    rows = listing(store)
    if as_json:
        _json_lines(rows)
    else:
        for row in rows:
            click.echo(f"{row['id']}\tage {_hours(row['age_hours'])}\tleft {_hours(row['left_hours'])}\t"
                       f"[{row['section']}] {row['summary'] or _clip(row['text'] or '')}")
    sys.exit(EXIT_OK if rows else EXIT_NOTHING)


@review.command("confirm")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@click.option("--add", "allow_conflict", is_flag=True,
              help="Write even when a memory's canonical_topic already has a current memory.")
@click.option("--supersedes", multiple=True, metavar="OLD",
              help="The (one) confirmed memory replaces OLD, which becomes deprecated. Repeatable.")
@click.option("-n", "--dry-run", is_flag=True, help="Check and report; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "status": '
              '"confirmed"|"duplicate", "file", "supersedes"?, "conflicts"?, "similar"?}.')
@click.pass_obj
def review_confirm(store, ids, allow_conflict, supersedes, dry_run, as_json):
    """Write pending memories to MEMORY.md and take them off the pending list.

    All or nothing, in one transaction: an unknown or expired id, a bad
    field, or a canonical_topic that already has a current memory (without
    --add or --supersedes) stops with exit 2 and changes nothing. Prints the
    ids confirmed.

    \b
    Examples:
      memctl review confirm mem-3f2a9c0d1e mem-77aa01b2c3
      memctl review confirm mem-3f2a9c0d1e --supersedes mem-kestrel-db
      memctl review pending --json | jq -r .id | xargs memctl review confirm
    """
    from .pending import confirm

    _drop_expired(store, dry_run=dry_run)
    rows = confirm(store, list(ids), dry_run=dry_run, allow_conflict=allow_conflict,
                   supersedes=list(supersedes))
    for row in rows:
        if row.get("conflicts"):
            names = ", ".join(f"'{i}'" for i in row["conflicts"])
            click.echo(f"memctl: warning: '{row['id']}': its canonical_topic already has current memory {names}; "
                       f"added anyway (--add)", err=True)
    if as_json:
        _json_lines(rows)
    else:
        for row in rows:
            click.echo(row["id"])
    if dry_run:
        click.echo(f"memctl: dry run: {len(rows)} would be confirmed, nothing written", err=True)


@review.command("reject")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@click.option("-n", "--dry-run", is_flag=True, help="Check and report; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "status": "rejected"}.')
@click.pass_obj
def review_reject(store, ids, dry_run, as_json):
    """Drop pending memories without writing them to MEMORY.md.

    An unknown or expired id stops with exit 2 and changes nothing. Prints
    the ids rejected.

    \b
    Examples:
      memctl review reject mem-3f2a9c0d1e
    """
    from .pending import reject

    _drop_expired(store, dry_run=dry_run)
    rows = reject(store, list(ids), dry_run=dry_run)
    if as_json:
        _json_lines(rows)
    else:
        for row in rows:
            click.echo(row["id"])
    if dry_run:
        click.echo(f"memctl: dry run: {len(rows)} would be rejected, nothing written", err=True)


@review.command("lifecycle")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--hard", is_flag=True, help="Delete memories archived too long outright, instead of moving "
              "them to deleted/YYYY-MM.md.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "action": '
              '"status"|"delete"|"stamp", "from", "to", "health", "line", "mode"?, "file"?}.')
@click.pass_obj
def review_lifecycle(store, dry_run, hard, as_json):
    """Demote, archive and delete memories by their health score (G5).

    \b
    health < 0.3              active -> low_priority (still searched)
    health < 0.15             -> archived (not searched by default)
    health >= 0.3 again       low_priority -> active
    archived over 60 days     -> deleted: moved to deleted/YYYY-MM.md
                              (soft), or removed with --hard
    Core memories (is_core, or user_weight >= 9) are never demoted;
    deprecated versions are kept for their chain. Thresholds are in the
    [governance] table of memctl.toml. Each change is stamped in the
    entry (status_changed_at) and logged to governance.log.jsonl. Prints
    one line a change: id, from -> to, health.

    \b
    Examples:
      memctl review lifecycle --dry-run
      memctl review lifecycle --json | jq -r 'select(.to == "archived") | .id'
      0 3 * * *  memctl --store ~/agent/.memory review lifecycle 2>>~/agent/memctl.log
    """
    from .lifecycle import run

    _drop_expired(store, dry_run=dry_run)
    changes = run(store, dry_run=dry_run, hard=hard)
    if as_json:
        _json_lines(c.as_dict() for c in changes)
    else:
        for c in changes:
            health = "" if c.health is None else f" (health {c.health:.3f})"
            where = f", {c.mode}" + (f": {c.file}" if c.file else "") if c.action == "delete" else ""
            what = "archived, 60-day clock starts now" if c.action == "stamp" else f"{c.before} -> {c.after}"
            click.echo(f"{c.id}: {what}{where}{health}")
    verb = "would change" if dry_run else "changed"
    click.echo(f"memctl: lifecycle: {len(changes)} {verb}" + (", nothing written" if dry_run else ""), err=True)


# -- health (G4, G5, store check) -------------------------------------------
@cli.group(invoke_without_command=True)
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
def health_scores(store, sort, as_json):
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
    from .health import scores

    rows = scores(store, sort=sort)
    if as_json:
        _json_lines(rows)
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
def health_check(store, fix, dry_run, strict, as_json):
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
    from .health import check, fix as run_fix

    if dry_run and not fix:
        raise click.UsageError("--dry-run goes with --fix (a check alone writes nothing)")
    problems = check(store)
    if fix:
        for line in run_fix(store, problems, dry_run=dry_run):
            click.echo(f"memctl: {'would fix' if dry_run else 'fixed'}: {line}", err=True)
        if not dry_run:
            problems = check(store)
    if as_json:
        _json_lines(p.as_dict() for p in problems)
    else:
        for p in problems:
            click.echo(p.line_text())
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    if problems:
        click.echo(f"memctl: health: {errors} error(s), {warnings} warning(s)", err=True)
    else:
        click.echo("memctl: health: ok", err=True)
    sys.exit(EXIT_NOTHING if errors or (strict and warnings) else EXIT_OK)


def _read_input(file: str) -> tuple[bytes, str]:
    from .errors import InputError

    if file == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        with open(file, "rb") as fh:
            return fh.read(), file
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), source=file) from None


def _clip(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def main() -> None:
    try:
        cli(prog_name="memctl")
    except KeyboardInterrupt:
        sys.exit(130)
