"""`memctl state`: the section-hit window of index_state.json and the per-turn plan (W1-W5)."""

from __future__ import annotations

import sys

import click

from memctl.cli.output import EXIT_ERROR, EXIT_NOTHING, alert, columns, json_lines, quiet, read_input, say


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def state():
    """Which MEMORY.md sections recent turns used, and what to search next (W).

    memctl keeps the last N turns (3, 5 or 10; default 5) in index_state.json
    with the sections each turn used. When one section has at least the
    dominant threshold (default 0.7) of the hits, a turn searches only that
    section plus the sections the message names, instead of all of them.

    \b
    The loop an agent runs every turn:
      memctl state plan -- "$MESSAGE"                   # start: sections to search
      memctl search --section ... --json -- "$MESSAGE"  # search those sections
      memctl search ... --json | memctl state record -  # end: record the turn

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
def state_record(memory, file, hits, summary, dry_run, as_json):
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
    data, source = read_input(file) if file is not None else (None, None)
    result = memory.state.record(hits, search_output=data, source=source, summary=summary, dry_run=dry_run)
    if as_json:
        json_lines([result.as_dict()])
    else:
        for suggestion in result.suggestions:
            click.echo(suggestion.text)
    if result.unknown_sections:
        say(f"memctl: warning: not a heading of {memory.store.relative(memory.store.memory_md)}: "
            f"{', '.join(result.unknown_sections)} (recorded all the same)")
    hit = ", ".join(result.turn.sections_hit) or "no sections"
    dominant = ", ".join(f"{s} {result.state.proportions.get(s, 0):.3f}" for s in result.state.dominant())
    say(f"memctl: {'dry run: would record' if dry_run else 'recorded'} turn {result.turn.turn_id}: "
        f"{hit} ({len(result.state.turns)}/{result.state.window_size} turns in the window"
        f"{'; dominant: ' + dominant if dominant else ''})")
    if result.topic_written:
        say(f"memctl: current topic: {result.state.current_topic} (MEMORY_TOPIC.md"
            f"{' not written: dry run' if dry_run else ''})")


@state.command("plan")
@click.argument("message")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a line per section: {"section", '
              '"reason": "dominant"|"keyword", "matched": [keywords], "proportion": number|null}.')
@click.pass_obj
def state_plan(memory, message, as_json):
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
      for s in $(memctl state plan -- "$MSG"); do memctl search --section "$s" -- "$MSG"; done
    """
    if message == "-":
        from memctl.api import read_text

        message = read_text("-")
    result = memory.state.plan(message)
    if as_json:
        json_lines(p.as_dict() for p in result.sections)
    else:
        for p in result.sections:
            click.echo(p.section)
    if not result.sections:
        say("memctl: no section to search: none is dominant and the message names none")
        sys.exit(EXIT_NOTHING)


@state.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the fields of "
              "index_state.json (window_size, dominant_threshold, turns, proportions, current_topic, "
              "topic_summary, last_updated, miss_count) plus dominant and suggestions.")
@click.pass_obj
def state_show(memory, as_json):
    """Show the window: turns, each section's share, the dominant section, miss counts.

    Exit status 1 when there is no state yet.

    \b
    Examples:
      memctl state show
      memctl state show --json | jq .proportions
    """
    shown = memory.state.show().fields
    if shown is None:
        say(f"memctl: no state yet: {memory.store.named(str(memory.store.state_file))} does not exist (memctl state record starts it)")
        sys.exit(EXIT_NOTHING)
    if as_json:
        json_lines([shown])
        return
    click.echo(_state_table(memory.store, shown))


@state.command("reset")
@click.option("-y", "--yes", is_flag=True, help="Do not ask; required when stdin is not a terminal.")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be reset; change nothing.")
@click.pass_obj
def state_reset(memory, yes, dry_run):
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
    state_file = memory.store.named(str(memory.store.state_file))
    if not (yes or dry_run):
        if not sys.stdin.isatty() or quiet():  # no one to ask, or the question would not be seen
            alert("memctl: error: state reset: " + ("--quiet asks nothing" if quiet() else "stdin is not a terminal")
                  + "; pass --yes to confirm")
            sys.exit(EXIT_ERROR)
        click.confirm(f"Forget all turns, shares, miss counts and the topic in {state_file}?",
                      abort=True, err=True)
    result = memory.state.reset(dry_run=dry_run)
    what = f"{result.turns} turn(s)" if result.readable else "an unreadable state file"
    if not result.had_state:
        what = "no state"
    topic = (", would remove MEMORY_TOPIC.md" if dry_run else ", removed MEMORY_TOPIC.md") if result.topic_removed else ""
    prefix = "dry run: would reset" if dry_run else "reset"
    say(f"memctl: {prefix} {state_file}: had {what}{topic}; window "
        f"{result.state.window_size}, threshold {result.state.dominant_threshold}")


@state.command("config")
@click.option("-w", "--window", type=int, metavar="N", help="Turns in the window: 3, 5 or 10.")
@click.option("-t", "--threshold", type=float, metavar="X",
              help="Share of the hits that makes a section dominant: in (0, 1], e.g. 0.7.")
@click.option("-n", "--dry-run", is_flag=True, help="Check the values; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='Print {"window_size", "dominant_threshold"}.')
@click.pass_obj
def state_config(memory, window, threshold, dry_run, as_json):
    """Show or set the window size and dominant threshold of index_state.json.

    A new state starts with memctl.toml [state] window_size and
    dominant_threshold; after that the state file holds them. A smaller
    window drops the oldest turns at once.

    \b
    Examples:
      memctl state config
      memctl state config --window 10 --threshold 0.8
    """
    result = memory.state.configure(window=window, threshold=threshold, dry_run=dry_run)
    values = {"window_size": result.window_size, "dominant_threshold": result.dominant_threshold}
    if as_json:
        json_lines([values])
    else:
        for key, value in values.items():
            click.echo(f"{key} {value}")
    if dry_run:
        say("memctl: dry run: nothing written")


def _state_table(store, shown: dict) -> str:
    """`state show` for people: a header, the turns, then one row per section."""
    turns = shown["turns"]
    span = f" (turns {turns[0]['turn_id']}-{turns[-1]['turn_id']})" if turns else ""
    lines = [f"{store.named(str(store.state_file))}: {len(turns)} of {shown['window_size']} turns{span}, "
             f"dominant threshold {shown['dominant_threshold']}"]
    dominant = ", ".join(f"{s} ({shown['proportions'].get(s, 0):.3f})" for s in shown["dominant"])
    lines.append(f"dominant: {dominant or '-'}")
    topic = shown["current_topic"]
    lines.append(f"current topic: {topic + ' - ' + shown['topic_summary'] if topic else '-'}")
    lines.append(f"last updated: {shown['last_updated'] or '-'}")
    lines.append("")
    rows = [("turn", "time", "sections hit")]
    rows += [(str(t["turn_id"]), t["ts"], ", ".join(t["sections_hit"]) or "-") for t in turns]
    lines += columns(rows, right=(0,))
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
    lines += columns(rows, right=(1, 2, 3))
    return "\n".join(line.rstrip() for line in lines)
