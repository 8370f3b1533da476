"""`memctl ingest` and `memctl index`: files in, index up to date."""

from __future__ import annotations

import sys

import click

from memctl.api.params import INGEST, click_options
from memctl.cli.output import dry_run_note, json_lines, progress, read_input, say
from memctl.text.clip import clip


@click.command()
@click.argument("file", default="-", metavar="[FILE|-]")
@click_options(INGEST)
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line for each record: "
              '{"id", "kind", "status", "line", "file"?, "reason"?, "supersedes"?, "conflicts"?, '
              '"similar"?, "duplicate_of"?}.')
@click.pass_obj
def ingest(memory, file, as_json, **declared):
    """Store messages or notes from a file or stdin.

    All or nothing: any bad record stops the run with one line naming the
    file, line and field, and the store is left as it was. Prints the id of
    each stored record, one a line. Records with an id already in the store
    and the same text are skipped; the same id with other text is an error.
    A record without an id gets one from its content (and time, or its place
    among equal messages), so the same export imported twice stores nothing
    new.

    \b
    Accepted input:
      JSON lines     {"id"?, "session"?, "scope"?, "role"?, "speaker"?, "text"|"content", "ts"?, ...}
      JSON           a list of such objects, an OpenAI-style list of {"role", "content"},
                     or a session object {"ID", "Messages": [...], "LastUpdate"}
      Markdown       notes in MEMORY.md form (sections are headings)
      text           one message a line; with --kind memory, one note a paragraph
      chatgpt        ChatGPT's conversations.json (a data export): a session a conversation
      claude         Claude's conversations.json (a data export): a session a conversation
    Notes may carry section and the schema fields summary, memory_class,
    scope, canonical_topic, supersedes, status, claims, is_core,
    enforcement_level, user_weight, importance, created_at.

    Version chains (G6): a note that supersedes others (--supersedes or its
    own supersedes field) marks them deprecated in the same write. A note
    whose canonical_topic already has a current memory, or that nearly
    repeats one (governance.near_duplicate_similarity of its words), is
    refused as a conflict naming that memory (exit 2, nothing written) unless
    --add or --supersedes says which you mean. A note with the text of a
    current memory of its scope is not written again (exit 0, said on stderr).

    Scopes: a session is in one scope, a person's or a project's (--scope),
    kept on each of its messages. Topics, context and scoped searches of one
    scope never show another's messages: two people's sessions in one store
    belong in two scopes (user:alice, user:bob); sessions in no scope share
    'global'.

    \b
    Examples:
      memctl ingest chat.jsonl
      memctl ingest --session telegram_42 -f json history.json
      memctl ingest --scope user:alice --session alice alice.jsonl
      memctl ingest ~/Downloads/chatgpt-export/conversations.json
      echo '{"text": "Prefers tea", "section": "About me"}' | memctl ingest --kind memory -
      memctl ingest --pending --ttl 48 notes.md
      echo '{"text": "Kestrel moves to CockroachDB"}' | memctl ingest --kind memory --supersedes mem-kestrel-db -
    """
    if file == "-" and sys.stdin.isatty():
        what = "notes" if declared["kind"] == "memory" or declared["pending"] else "messages"
        say(f"memctl: reading {what} from the terminal; end with Ctrl-D (or give a FILE)")
    data, source = read_input(file)

    def report_noise(outcome, text):
        say(f"memctl: skipped {source}:{outcome.line} ({outcome.reason}): {clip(text, 60)}")

    result = memory.ingest(data, source=source, on_noise=report_noise, **declared)
    for warning in result.warnings:
        say(f"memctl: warning: {warning}")
    _say_conflicts(result)
    if as_json:
        json_lines(o.as_dict() for o in result.outcomes)
    else:
        for outcome in result.stored:
            click.echo(outcome.id)
    _say_not_stored(result, source)
    if declared["dry_run"]:
        dry_run_note(len(result.stored), "stored")


def _say_conflicts(result) -> None:
    """A warning for each record stored although its subject already has a current memory (--add, or pending)."""
    for outcome in result.stored:
        report = outcome.governance
        if report is not None and report.conflicts:
            if outcome.kind == "pending":
                ids = ", ".join(f"'{i}'" for i in report.conflicts)
                say(f"memctl: warning: '{outcome.id}': canonical_topic '{report.topic}' already has "
                    f"current memory {ids}; confirm with --add, or --supersedes {report.conflicts[0]}")
            else:
                say(f"memctl: warning: {report.warning(outcome.id)}")


def _say_not_stored(result, source: str) -> None:
    """The records not stored because the store holds them already: notes a current memory says, and the count
    of records stored before."""
    for outcome in result.outcomes:
        if outcome.governance is not None and outcome.governance.duplicate_of:
            say(f"memctl: {source}:{outcome.line}: current memory '{outcome.governance.duplicate_of}' says "
                "the same; nothing stored")
    duplicates = sum(o.status == "duplicate" for o in result.outcomes)
    if duplicates:
        say(f"memctl: {duplicates} already stored, skipped")


@click.command()
@click.option("--rebuild", is_flag=True, help="Start over instead of updating what changed.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"units", "added", "changed", "removed", "embedded", "files_read", "rebuilt", '
                   '"reason", "skipped": ["FILE:LINE: why" of each line passed over]}.')
@click.pass_obj
def index(memory, rebuild, as_json):
    """Bring the search index up to date with the store's files.

    The index (.index/) is derived: Tantivy for BM25, the units' vectors and
    their metadata. It is updated incrementally: files whose size, time and
    inode are unchanged are not read, and only units whose text changed are
    embedded again; a change of embedding model embeds everything again. A search indexes first by itself when the files changed,
    so this command is for doing that work ahead of time (in cron, say) or
    for starting over with --rebuild.

    \b
    Examples:
      memctl index
      memctl index --rebuild --json
    """
    with progress() as advance:
        report = memory.index(rebuild=rebuild, progress=advance)
    for note in report.skipped_notes():
        say(note)
    if as_json:
        json_lines([report.as_dict()])
    else:
        rebuilt = f" (rebuilt: {report.reason})" if report.rebuilt else ""
        click.echo(f"{report.units} units: {report.added} added, {report.changed} changed, "
                   f"{report.removed} removed, {report.embedded} embedded, "
                   f"{report.files_read} files read{rebuilt}")
