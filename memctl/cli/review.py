"""`memctl review`: pending memories (P5), the lifecycle (G5) and the daily topic review (T12)."""

from __future__ import annotations

import sys

import click

from memctl.api.params import REVIEW_SCOPE, click_options
from memctl.cli.output import EXIT_NOTHING, EXIT_OK, columns, dry_run_note, hours, json_lines, progress, say
from memctl.text.clip import clip


@click.group()
def review():
    """Review what memory holds: pending memories and the lifecycle.

    Every review subcommand first drops pending memories whose time ran
    out (P5), and names each on stderr.

    \b
    Examples:
      memctl review pending                     what waits for confirmation
      memctl review pending --scope user:bob    what waits for bob
      memctl review confirm mem-3f2a9c0d1e      write it to MEMORY.md
      memctl review reject mem-3f2a9c0d1e
      memctl review lifecycle --dry-run         what demotion/archiving would do
    """

def _print_reviewed(rows: list[dict], as_json: bool, dry_run: bool, what: str) -> None:
    """The ids a review step handled (or JSON lines), and what a dry run would have done."""
    if as_json:
        json_lines(rows)
    else:
        for row in rows:
            click.echo(row["id"])
    if dry_run:
        dry_run_note(len(rows), what)


@review.command("pending")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "line", "section", '
              '"summary", "text", "pending_since", "expires_at", "age_hours", "left_hours"}.')
@click_options(REVIEW_SCOPE)
@click.pass_obj
def review_pending(memory, as_json, scope):
    """List pending memories with their age and the time left to confirm them.

    Prints one line a memory: id, age, time left, [section] summary.
    Exit status 1 when nothing is pending.

    \b
    Examples:
      memctl review pending
      memctl review pending --json | jq -r 'select(.left_hours < 2) | .id'
    """
    reviewed = memory.review.pending(scope=scope)
    rows = reviewed.rows
    if as_json:
        json_lines(rows)
    else:
        for row in rows:
            click.echo(f"{row['id']}\tage {hours(row['age_hours'])}\tleft {hours(row['left_hours'])}\t"
                       f"[{row['section']}] {row['summary'] or clip(row['text'] or '', 60)}")
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
@click_options(REVIEW_SCOPE)
@click.pass_obj
def review_confirm(memory, ids, allow_conflict, supersedes, dry_run, as_json, scope):
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
    reviewed = memory.review.confirm(ids, dry_run=dry_run, allow_conflict=allow_conflict, supersedes=supersedes,
                                     scope=scope)
    rows = reviewed.rows
    for row in rows:
        if row.get("conflicts"):
            names = ", ".join(f"'{i}'" for i in row["conflicts"])
            say(f"memctl: warning: '{row['id']}': its canonical_topic already has current memory {names}; "
                f"added anyway (--add)")
    _print_reviewed(rows, as_json, dry_run, "confirmed")


@review.command("reject")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@click.option("-n", "--dry-run", is_flag=True, help="Check and report; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "status": "rejected"}.')
@click_options(REVIEW_SCOPE)
@click.pass_obj
def review_reject(memory, ids, dry_run, as_json, scope):
    """Drop pending memories without writing them to MEMORY.md.

    An unknown or expired id stops with exit 2 and changes nothing. Prints
    the ids rejected.

    \b
    Examples:
      memctl review reject mem-3f2a9c0d1e
    """
    reviewed = memory.review.reject(ids, dry_run=dry_run, scope=scope)
    _print_reviewed(reviewed.rows, as_json, dry_run, "rejected")


@review.command("lifecycle")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--hard", is_flag=True, help="Delete memories archived too long outright, instead of moving "
              "them to deleted/YYYY-MM.md.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line: {"id", "action": '
              '"status"|"delete"|"stamp", "from", "to", "health", "line", "mode"?, "file"?}.')
@click.pass_obj
def review_lifecycle(memory, dry_run, hard, as_json):
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
    changes = memory.review.lifecycle(dry_run=dry_run, hard=hard).changes
    if as_json:
        json_lines(c.as_dict() for c in changes)
    else:
        for c in changes:
            health = "" if c.health is None else f" (health {c.health:.3f})"
            where = f", {c.mode}" + (f": {c.file}" if c.file else "") if c.action == "delete" else ""
            what = "archived, 60-day clock starts now" if c.action == "stamp" else f"{c.before} -> {c.after}"
            click.echo(f"{c.id}: {what}{where}{health}")
    verb = "would change" if dry_run else "changed"
    say(f"memctl: lifecycle: {len(changes)} {verb}" + (", nothing written" if dry_run else ""))


@review.command("daily")
@click.option("-n", "--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option("--llm", "llm_command", metavar="CMD", help="Merge, link and compress with this command (prompts "
              "review.md and compress.md on stdin); a bad answer changes nothing, exit 2. "
              "[default: [topics] llm_command, else built-in]")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"dry_run", "compressed": [{"topic_id", '
              '"importance"}], "archived": [{"topic_id", "reason", "to"}], "merged": [{"topic_id", "into", '
              '"similarity" | "reason"}], "related": [{"topic_id", "with", "similarity" | "reason"}], '
              '"idle_summaries": [{"session", "until", "at", "keywords", "summary"}]}.')
@click.pass_obj
def daily(memory, dry_run, llm_command, as_json):
    """Daily topic review, for cron: compress today's topics, archive old dormant ones, merge duplicates.

    Topics dormant more than [topics] archive_after_days (7), or dormant
    one-off questions, move to topics/archived/YYYY-MM/ as summary only;
    topics on the same subject are merged (the old id still resolves) and
    close ones linked as related; sessions idle over [topics] idle_hours get
    a keyword summary in auto_summaries.jsonl.

    \b
    Examples:
      memctl review daily --dry-run                       the plan
      memctl review daily                                 do it
      memctl review daily --llm "llm -m gpt-4o-mini" -n   the LLM's plan

    Exit status: 0 done, 2 error (a bad LLM answer: nothing changed).
    """
    with progress() as advance:
        report = memory.review.daily(dry_run=dry_run, llm_command=llm_command, progress=advance)
    # A dry run's table is the plan ("would merge"), a run's what it did ("merged").
    verb = {name: (f"would {name}" if dry_run else done) for name, done in
            (("merge", "merged"), ("relate", "related"), ("archive", "archived"), ("compress", "compressed"),
             ("summarise", "summarised"))}
    if as_json:
        json_lines([report.as_dict()])
    else:
        def why(item: dict) -> str:
            return f"similarity {item['similarity']:.2f}" if "similarity" in item else clip(item["reason"], 60)

        rows = [("ACTION", "TOPIC", "DETAIL")]
        rows += [(verb["merge"], m["topic_id"], f"into {m['into']} ({why(m)})") for m in report.merged]
        rows += [(verb["relate"], r["topic_id"], f"with {r['with']} ({why(r)})") for r in report.related]
        rows += [(verb["archive"], a["topic_id"], f"{a['reason']} -> {a['to']}") for a in report.archived]
        rows += [(verb["compress"], c["topic_id"], f"importance {c['importance']:.2f}") for c in report.compressed]
        rows += [(verb["summarise"], s["session"], ", ".join(s["keywords"])) for s in report.idle_summaries]
        if len(rows) > 1:
            click.echo("\n".join(columns(rows)))
    counts = [(len(report.merged), "merge", "topic(s)"), (len(report.related), "relate", "pair(s)"),
              (len(report.archived), "archive", "topic(s)"), (len(report.compressed), "compress", "topic(s)"),
              (len(report.idle_summaries), "summarise", "idle session(s)")]
    said = ", ".join(f"{verb[name]} {n} {what}" for n, name, what in counts if n)
    if dry_run:
        say(f"memctl: review daily: dry run: {said or 'nothing would change'}; nothing written")
    else:
        say(f"memctl: review daily: {said or 'nothing changed'}")
