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
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                # The reader went away (memctl search | head): not an error of ours.
                sys.stderr.close()
                ctx.exit(EXIT_OK)
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"memctl: error: {where}{exc.strerror or exc}", err=True)
            ctx.exit(EXIT_ERROR)


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
        _json_lines(o.as_dict() for o in result.outcomes)
    else:
        for outcome in result.stored:
            click.echo(outcome.id)
    duplicates = sum(o.status == "duplicate" for o in result.outcomes)
    if duplicates:
        click.echo(f"memctl: {duplicates} already stored, skipped", err=True)
    if dry_run:
        click.echo(f"memctl: dry run: {len(result.stored)} would be stored, nothing written", err=True)


@cli.command()
@click.option("--rebuild", is_flag=True, help="Start over instead of updating what changed.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"units", "added", "changed", "removed", "embedded", "rebuilt", "reason"}.')
@click.pass_obj
def index(store, rebuild, as_json):
    """Bring the search index up to date with the store's files.

    The index (.index/) is derived: Tantivy for BM25, the units' vectors and
    their metadata. It is updated incrementally: files whose size and time
    are unchanged are not read, and only units whose text changed are
    embedded again. A search indexes first by itself when the files changed,
    so this command is for doing that work ahead of time (in cron, say) or
    for starting over with --rebuild.

    \b
    Examples:
      memctl index
      memctl index --rebuild --json
    """
    from .index import Index

    with _progress() as progress:
        report = Index(store).update(rebuild=rebuild, progress=progress)
    if as_json:
        _json_lines([report.as_dict()])
    else:
        rebuilt = f" (rebuilt: {report.reason})" if report.rebuilt else ""
        click.echo(f"{report.units} units: {report.added} added, {report.changed} changed, "
                   f"{report.removed} removed, {report.embedded} embedded{rebuilt}")


@cli.command()
@click.argument("query", required=False)
@click.option("-k", "--limit", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many results.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a result (JSON lines); schema below.")
@click.option("--batch", "batch", metavar="FILE|-", help='Many queries, one JSON object a line: {"id", "query", '
              '"k"?, "mode"?, "kind"?, "scope"?, "section"?, "source"?, "since"?, "until"?}.')
@click.option("--mode", type=click.Choice(["hybrid", "bm25", "vector"]), default="hybrid", show_default=True,
              help="Rank by both, by words only (fastest), or by meaning only.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["memory", "message", "log"]),
              help="Only results of this kind (repeatable).")
@click.option("--scope", "--workspace", "scope", metavar="SCOPE", help="Workspace scope, e.g. "
              "project:kestrel: only that scope and global are searched (G7).")
@click.option("--section", "sections", multiple=True, metavar="NAME", help="Only this MEMORY.md section "
              "(repeatable).")
@click.option("--source", "sources", multiple=True, metavar="PATH", help="Only this file, or folder with a "
              "trailing '/', relative to the store (repeatable).")
@click.option("--session", "sessions", multiple=True, metavar="ID", help="Only this session (repeatable).")
@click.option("--since", metavar="TIME", help="Only results at or after TIME (ISO 8601 date or time).")
@click.option("--until", metavar="TIME", help="Only results at or before TIME (a date means its whole day).")
@click.option("--plan", "plan_message", metavar="MESSAGE", help="Search the sections `memctl state plan "
              "MESSAGE` picks; QUERY defaults to MESSAGE.")
@click.option("--adaptive", is_flag=True, help="Skip greetings, acknowledgements, slash commands, emoji and "
              "short messages (exit 1, reason on stderr); memory words always search (P7).")
@click.option("--min-score", type=click.FloatRange(min=0), metavar="X",
              help="Drop results whose relevance (calibrated, 0-1, before age counts) is below X; "
              "0 keeps every candidate. [default: retrieval.hard_min_score, 0.2, and nothing at all "
              "when no result reaches retrieval.min_best_relevance, 0.35]")
@click.option("--rank", type=click.Choice(["pipeline", "mera"]), default="pipeline", show_default=True,
              help="pipeline: the scoring stages above; mera: G4 retrieval_score (0.4 relevance, 0.25 "
              "recency, 0.2 access, 0.15 user weight).")
@click.option("--include-archived", is_flag=True, help="Also search memories the lifecycle archived.")
@click.option("--layered", is_flag=True, help="Layered result (G1): L0 core, L1 workspace, L2 query, "
              "within --budget tokens.")
@click.option("--budget", type=click.IntRange(min=1), default=2000, show_default=True, metavar="TOKENS",
              help="Token budget of --layered.")
@click.option("--history", "history_id", metavar="ID", help="Print the version chain of memory ID, oldest "
              "first (supersedes links), instead of searching.")
@click.option("--explain", is_flag=True, help="Show every ranking stage's score for each result.")
@click.pass_obj
def search(store, query, k, as_json, batch, mode, kinds, scope, sections, sources, sessions, since, until,
           plan_message, adaptive, min_score, rank, include_archived, layered, budget, history_id, explain):
    """Find memories, messages and log entries: BM25 and meaning, fused.

    A minimum on calibrated relevance (meaning and the share of the
    query's words matched) drops what is unrelated, before age counts; the
    rest are ordered by fusing BM25 and vector scores (0.7 vector, 0.3 BM25,
    less vector for text the model cannot read), then recency, importance,
    length and time decay (which reorder, never erase), the noise filter and
    near-duplicate demotion; --explain shows each stage's factor and score. The query is taken
    as words: quotes, colons and AND are not syntax. Chinese, Japanese and
    Korean are matched by character and character pair, so a word inside a
    sentence is found.

    \b
    --json prints one object a result:
      {"id", "kind": "memory"|"message"|"log", "text", "score", "source",
       "lines": [first, last], "section", "session", "ts", "speaker", "scope",
       "fields"? (memories: schema fields), "explain"? (with --explain)}
    --batch prints one line a query: {"query_id", "results": [...]}.

    Exit status: 0 results, 1 none (or the query needs no search), 2 error.

    \b
    Examples:
      memctl search "which database does Kestrel use"
      memctl search -k 3 --json --scope project:kestrel "database choice"
      memctl search --mode bm25 --kind memory 淡水分店
      memctl search --json "what did we decide" | memctl state record -
      memctl search --batch queries.jsonl > answers.jsonl
      memctl search --adaptive "$USER_MESSAGE" || echo "no memory needed"
    """
    from .search import Query, search_store

    if history_id:
        _print_history(store, history_id, as_json)
        return
    if batch:
        if query or plan_message:
            raise click.UsageError("give either QUERY or --batch, not both")
        data, source = _read_input(batch)
        from .queries import parse_batch

        queries, ids = parse_batch(data, source, default=_query_options(k, mode, kinds, scope, sections,
                                                                       sources, sessions, since, until,
                                                                       min_score))
        answers = search_store(store, queries, say=_say)
        _json_lines({"query_id": query_id, "results": [r.as_dict(explain) for r in results]}
                    for query_id, results in zip(ids, answers))
        sys.exit(EXIT_OK if any(answers) else EXIT_NOTHING)

    if plan_message:
        from .state import plan

        sections = tuple(dict.fromkeys((*sections, *plan(store, plan_message).names)))
        query = query or plan_message
        if not sections:
            _say("memctl: the plan names no section; nothing to search")
            sys.exit(EXIT_NOTHING)
    if not query or not query.strip():
        raise click.UsageError("give a QUERY (or --batch FILE)")
    if adaptive:
        from .adaptive import skip_reason

        reason = skip_reason(query)
        if reason:
            _say(f"memctl: no search needed: {reason}")
            sys.exit(EXIT_NOTHING)
    if layered:
        _print_layered(store, query, scope, budget, as_json)
        return
    options = _query_options(k, mode, kinds, scope, sections, sources, sessions, since, until, min_score)
    if include_archived:
        options["filters"].exclude_status = ("deprecated", "superseded")
    (results,) = search_store(store, [Query(text=query, rank=rank, **options)], say=_say)
    if as_json:
        _json_lines(r.as_dict(explain) for r in results)
    else:
        for result in results:
            _print_result(result, explain)
    sys.exit(EXIT_OK if results else EXIT_NOTHING)


def _print_history(store, memory_id: str, as_json: bool) -> None:
    from . import memoryfile
    from .governance import chain
    from .lifecycle import load_deleted

    found = chain(memoryfile.load(store.memory_md), memory_id, load_deleted(store))
    if as_json:
        _json_lines(link.as_dict() for link in found.links)
    else:
        for link in found.links:
            summary = (link.entry.get("summary") or "") if link.entry is not None else ""
            created = (link.entry.get("created_at") or "") if link.entry is not None else ""
            click.echo(f"{link.id}  {link.status}  {created}  {summary}".rstrip())
    for problem in found.problems:
        _say(f"memctl: chain of {memory_id}: {problem}")


def _print_layered(store, query: str, workspace: str | None, budget: int, as_json: bool) -> None:
    from .layers import layered_search

    result = layered_search(store, query, workspace=workspace, budget=budget, say=_say)
    if as_json:
        _json_lines([result.as_dict()])
    else:
        names = {"L0": "core", "L1": f"workspace {workspace or '(none)'}", "L2": "query"}
        for layer, items in result.layers.items():
            note = f" ({result.trigger})" if layer == "L2" and result.trigger else (
                " (no trigger fired)" if layer == "L2" else "")
            click.echo(f"{layer} {names[layer]}{note}")
            for item in items:
                shown = " ".join(item["text"].split())
                click.echo(f"  {item['id']}  [{item['section']}]  {item['tokens']} tokens"
                           f"{' (summary)' if item['content'] == 'summary' else ''}")
                click.echo(f"    {shown}")
        click.echo(f"tokens: {result.tokens_used} / {result.budget}")
    if result.left_out:
        _say(f"memctl: over the budget, left out: {', '.join(result.left_out)}")
    found = any(result.layers.values())
    sys.exit(EXIT_OK if found else EXIT_NOTHING)


def _query_options(k, mode, kinds, scope, sections, sources, sessions, since, until, min_score) -> dict:
    from .queries import filters_from

    return {"k": k, "mode": mode, "min_score": min_score,
            "filters": filters_from(kinds=kinds, scope=scope, sections=sections, sources=sources,
                                    sessions=sessions, since=since, until=until)}


def _print_result(result, explain: bool) -> None:
    first, last = result.lines
    where = f"{result.source}:{first}" + (f"-{last}" if last != first else "")
    label = f"[{result.section}]" if result.section else (result.speaker or result.session or "")
    click.echo(f"{where}  {label}  {result.score:.3f}  {result.record_id or result.id}")
    snippet = " ".join(result.text.split())
    click.echo("    " + (snippet if len(snippet) <= 300 else snippet[:299] + "…"))
    if explain:
        for line in _explain_lines(result.explain):
            click.echo("    " + line)


def _explain_lines(stages: dict) -> list[str]:
    """The inputs, then each stage's own factor beside the running score."""
    inputs = "  ".join(f"{k}={stages[k]}" for k in ("bm25", "bm25_norm", "bm25_coverage", "cosine",
                                                    "cosine_calibrated", "vector_weight", "bm25_weight",
                                                    "unknown_share", "age_days") if k in stages)
    lines = [inputs, f"relevance {stages['relevance']} (the minimum judges this)",
             f"fused {stages['fused']} ({stages['fusion']})"]
    if "recency" in stages:
        lines += [f"recency     +{stages['recency_bonus']:<7} -> {stages['recency']}"]
        lines += [f"{name:<11} x{stages[name + '_factor']:<7} -> {stages[name]}"
                  for name in ("importance", "length", "time_decay")]
    lines += [f"{k} {v}" for k, v in stages.items() if k in ("mmr", "mera")]
    return lines


def _say(message: str) -> None:
    click.echo(message, err=True)


class _progress:
    """A rich progress bar on stderr, only when stderr is a terminal."""

    def __enter__(self):
        self._bar = None
        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import Progress

        self._bar = Progress(transient=True, console=Console(stderr=True))
        self._bar.start()
        self._tasks = {}
        return self._advance

    def _advance(self, what: str, done: int, total: int) -> None:
        if what not in self._tasks:
            self._tasks[what] = self._bar.add_task(what, total=total)
        self._bar.advance(self._tasks[what], done)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
        return False


def _later(name: str, summary: str, issue: str):
    @cli.command(name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                 help=f"{summary} ({issue}); not available yet in this version.", add_help_option=True)
    def command():
        click.echo(f"memctl: error: '{name}' is not available yet in memctl {__version__}", err=True)
        sys.exit(EXIT_ERROR)

    return command


split = _later("split", "Partition messages into topics", "T1-T12")


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
    """Data on stdout, one JSON object a line (a single object is a one-line stream)."""
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
    _print_reviewed(rows, as_json, dry_run, "confirmed")


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
    _print_reviewed(rows, as_json, dry_run, "rejected")


def _print_reviewed(rows: list[dict], as_json: bool, dry_run: bool, what: str) -> None:
    """The ids a review step handled (or JSON lines), and what a dry run would have done."""
    if as_json:
        _json_lines(rows)
    else:
        for row in rows:
            click.echo(row["id"])
    if dry_run:
        click.echo(f"memctl: dry run: {len(rows)} would be {what}, nothing written", err=True)


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


# -- state: the section-hit window (W1-W5) -------------------------------------

@cli.group(context_settings={"help_option_names": ["-h", "--help"]})
def state():
    """Which MEMORY.md sections recent turns used, and what to search next (W).

    memctl keeps the last N turns (3, 5 or 10; default 5) in index_state.json
    with the sections each turn used. When one section has at least the
    dominant threshold (default 0.7) of the hits, a turn searches only that
    section plus the sections the message names, instead of all of them.

    \b
    The loop an agent runs every turn:
      memctl state plan "$MESSAGE"                   # start: sections to search
      memctl search "$MESSAGE" --section ... --json  # search those sections
      memctl search ... --json | memctl state record -   # end: record the turn

    \b
    Examples:
      memctl state plan "what did we decide about the database?"
      memctl state record --hit 重要決定 --hit 待辦
      memctl state show
      memctl state config --window 10 --threshold 0.8
      memctl state reset --yes
    """


@state.command("record")
@click.argument("file", required=False, metavar="[FILE|-]")
@click.option("--hit", "hits", multiple=True, metavar="SECTION",
              help="A MEMORY.md section this turn used (repeatable).")
@click.option("--summary", metavar="TEXT", help="One-line summary of the current topic, written to "
              "MEMORY_TOPIC.md when the dominant section is (or becomes) the current topic.")
@click.option("-n", "--dry-run", is_flag=True, help="Compute and report the turn; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: {turn_id, ts, sections_hit, "
              "unknown_sections, window_size, turns_in_window, proportions, dominant, miss_count, "
              "suggestions, current_topic, topic_summary, topic_written, dry_run}.")
@click.pass_obj
def state_record(store, file, hits, summary, dry_run, as_json):
    """End a turn: record the sections it used.

    Sections come from --hit, and from `memctl search --json` output in FILE
    or on stdin with '-' (JSON lines, each a result naming its section, or a
    batch line {"query_id", "results": [...]}); results without a section
    are skipped. No sections at all records a turn that used none.

    Keeps the last window_size turns, recomputes each section's share of the
    hits, and counts the turns each MEMORY.md section went unused. Prints a
    suggestion (one a line) for each section unused miss_threshold turns in
    a row (memctl.toml [state], default 3): remove it from MEMORY.md or merge
    it. When one section has led topic_after_turns turns in a row (default
    3), it is written to MEMORY_TOPIC.md as the current topic.

    \b
    Examples:
      memctl state record --hit 重要決定 --hit 待辦
      memctl search "database choice" --json | memctl state record -
      memctl state record --hit Decisions --summary "Choosing the pcai database"
      memctl state record --dry-run --json --hit 待辦
    """
    from .state import hits_from_search_output, record

    sections = list(hits)
    if file is not None:
        data, source = _read_input(file)
        sections += hits_from_search_output(data, source)
    result = record(store, sections, summary=summary, dry_run=dry_run)
    if as_json:
        _json_lines([result.as_dict()])
    else:
        for suggestion in result.suggestions:
            click.echo(suggestion.text)
    if result.unknown_sections:
        click.echo(f"memctl: warning: not a heading of {store.relative(store.memory_md)}: "
                   f"{', '.join(result.unknown_sections)} (recorded all the same)", err=True)
    hit = ", ".join(result.turn.sections_hit) or "no sections"
    dominant = ", ".join(f"{s} {result.state.proportions.get(s, 0):.3f}" for s in result.state.dominant())
    click.echo(f"memctl: {'dry run: would record' if dry_run else 'recorded'} turn {result.turn.turn_id}: "
               f"{hit} ({len(result.state.turns)}/{result.state.window_size} turns in the window"
               f"{'; dominant: ' + dominant if dominant else ''})", err=True)
    if result.topic_written:
        click.echo(f"memctl: current topic: {result.state.current_topic} (MEMORY_TOPIC.md"
                   f"{' not written: dry run' if dry_run else ''})", err=True)


@state.command("plan")
@click.argument("message")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line per section: {"section", '
              '"reason": "dominant"|"keyword", "matched": [keywords], "proportion": number|null}.')
@click.pass_obj
def state_plan(store, message, as_json):
    """Start a turn: the MEMORY.md sections worth searching for MESSAGE.

    With a dominant section (its share of the window's hits is at least the
    threshold): that section, then the sections whose keywords appear in
    MESSAGE. Otherwise, and before any turn is recorded: the sections whose
    keywords appear in MESSAGE. A section's keywords are its heading's words
    (stopwords such as about/the/of left out) and those listed for it in
    memctl.toml:

    \b
      [state.keywords]
      "重要決定" = ["決定", "decision"]

    Latin words match case-insensitively as whole words; Chinese, Japanese
    and Korean keywords match anywhere in the message. Prints one section a
    line; exit status 1 when there is nothing to search. MESSAGE '-' reads
    the message from stdin.

    \b
    Examples:
      memctl state plan "上次的重要決定是什麼？"
      memctl state plan --json "what is left on the todo list?"
      for s in $(memctl state plan "$MSG"); do memctl search "$MSG" --section "$s"; done
    """
    from .state import plan

    if message == "-":
        data, source = _read_input("-")
        from .inputs import decode

        message = decode(data, source)
    result = plan(store, message)
    if as_json:
        _json_lines(p.as_dict() for p in result.sections)
    else:
        for p in result.sections:
            click.echo(p.section)
    if not result.sections:
        click.echo("memctl: no section to search: none is dominant and the message names none", err=True)
        sys.exit(EXIT_NOTHING)


@state.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the fields of "
              "index_state.json (window_size, dominant_threshold, turns, proportions, current_topic, "
              "topic_summary, last_updated, miss_count) plus dominant and suggestions.")
@click.pass_obj
def state_show(store, as_json):
    """Show the window: turns, each section's share, the dominant section, miss counts.

    Exit status 1 when there is no state yet.

    \b
    Examples:
      memctl state show
      memctl state show --json | jq .proportions
    """
    from .state import show

    shown = show(store)
    if shown is None:
        click.echo(f"memctl: no state yet: {store.state_file} does not exist "
                   "(memctl state record starts it)", err=True)
        sys.exit(EXIT_NOTHING)
    if as_json:
        _json_lines([shown])
        return
    click.echo(_state_table(store, shown))


@state.command("reset")
@click.option("-y", "--yes", is_flag=True, help="Do not ask; required when stdin is not a terminal.")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be reset; change nothing.")
@click.pass_obj
def state_reset(store, yes, dry_run):
    """Start the window over: forget all turns, shares, miss counts and the topic.

    Keeps the window size and threshold, and removes MEMORY_TOPIC.md. A
    corrupt index_state.json is replaced too: this is the way out when
    memctl refuses to read it.

    \b
    Examples:
      memctl state reset            # asks first
      memctl state reset --yes      # in scripts
      memctl state reset --dry-run
    """
    from .state import reset

    if not (yes or dry_run):
        if not sys.stdin.isatty():
            click.echo("memctl: error: state reset: stdin is not a terminal; pass --yes to confirm", err=True)
            sys.exit(EXIT_ERROR)
        click.confirm(f"Forget all turns, shares, miss counts and the topic in {store.state_file}?",
                      abort=True, err=True)
    result = reset(store, dry_run=dry_run)
    what = f"{result.turns} turn(s)" if result.readable else "an unreadable state file"
    if not result.had_state:
        what = "no state"
    topic = (", would remove MEMORY_TOPIC.md" if dry_run else ", removed MEMORY_TOPIC.md") if result.topic_removed else ""
    prefix = "dry run: would reset" if dry_run else "reset"
    click.echo(f"memctl: {prefix} {store.state_file}: had {what}{topic}; window "
               f"{result.state.window_size}, threshold {result.state.dominant_threshold}", err=True)


@state.command("config")
@click.option("-w", "--window", type=int, metavar="N", help="Turns in the window: 3, 5 or 10.")
@click.option("-t", "--threshold", type=float, metavar="X",
              help="Share of the hits that makes a section dominant: in (0, 1], e.g. 0.7.")
@click.option("-n", "--dry-run", is_flag=True, help="Check the values; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='Print {"window_size", "dominant_threshold"}.')
@click.pass_obj
def state_config(store, window, threshold, dry_run, as_json):
    """Show or set the window size and dominant threshold of index_state.json.

    A new state starts with memctl.toml [state] window_size and
    dominant_threshold; after that the state file holds them. A smaller
    window drops the oldest turns at once.

    \b
    Examples:
      memctl state config
      memctl state config --window 10 --threshold 0.8
    """
    from .state import configure

    result = configure(store, window=window, threshold=threshold, dry_run=dry_run)
    values = {"window_size": result.window_size, "dominant_threshold": result.dominant_threshold}
    if as_json:
        _json_lines([values])
    else:
        for key, value in values.items():
            click.echo(f"{key} {value}")
    if dry_run:
        click.echo("memctl: dry run: nothing written", err=True)


def _state_table(store, shown: dict) -> str:
    """`state show` for people: a header, the turns, then one row per section."""
    turns = shown["turns"]
    span = f" (turns {turns[0]['turn_id']}-{turns[-1]['turn_id']})" if turns else ""
    lines = [f"{store.state_file}: {len(turns)} of {shown['window_size']} turns{span}, "
             f"dominant threshold {shown['dominant_threshold']}"]
    dominant = ", ".join(f"{s} ({shown['proportions'].get(s, 0):.3f})" for s in shown["dominant"])
    lines.append(f"dominant: {dominant or '-'}")
    topic = shown["current_topic"]
    lines.append(f"current topic: {topic + ' - ' + shown['topic_summary'] if topic else '-'}")
    lines.append(f"last updated: {shown['last_updated'] or '-'}")
    lines.append("")
    rows = [("turn", "time", "sections hit")]
    rows += [(str(t["turn_id"]), t["ts"], ", ".join(t["sections_hit"]) or "-") for t in turns]
    lines += _columns(rows, right=(0,))
    lines.append("")
    hits: dict[str, int] = {}
    for t in turns:
        for s in t["sections_hit"]:
            hits[s] = hits.get(s, 0) + 1
    suggested = {s["section"] for s in shown["suggestions"]}
    names = list(dict.fromkeys(list(shown["proportions"]) + list(shown["miss_count"])))
    rows = [("section", "share", "hits", "missed", "")]
    rows += [(s, f"{shown['proportions'].get(s, 0):.3f}", str(hits.get(s, 0)),
              str(shown["miss_count"].get(s, "-")), "consider removing or merging" if s in suggested else "")
             for s in names]
    lines += _columns(rows, right=(1, 2, 3))
    return "\n".join(line.rstrip() for line in lines)


def _columns(rows, right=()) -> list[str]:
    import unicodedata

    def width(text: str) -> int:
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)

    widths = [max(width(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - width(cell))
            cells.append(pad + cell if i in right else cell + pad)
        out.append("  ".join(cells))
    return out


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
