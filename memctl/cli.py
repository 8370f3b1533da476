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
review = _later("review", "P5, G5")
state = _later("state", "W1-W5")
health = _later("health", "G4, G5")


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
