"""`memctl context`, `memctl topics activate|log`, `memctl review daily`: parse, call `memctl.Memory`, print."""

from __future__ import annotations

import sys

import click

from memctl.api.params import ACTIVATE, CONTEXT, TOPICS_SCOPE, click_options
from memctl.cli.output import EXIT_NOTHING, EXIT_OK, columns, json_lines, progress, read_input, say
from memctl.text.clip import clip


# --session and --scope of the commands that look into one scope's topics (here and in topics.py).
scope_options = click_options(TOPICS_SCOPE)


@click.command()
@click.option("--session", required=True, metavar="ID", help="The session the next turn belongs to.")
@click.option("--message", metavar="TEXT", help="The new message. [default: stdin]")
@click.option("--system", "system_file", metavar="FILE", help="The system prompt, first in the context.")
@click_options(CONTEXT)
@click.option("--llm", "llm_command", metavar="CMD", help="Evaluate topics with this command (design 001 §6.1 "
              "prompt on stdin). [default: [topics] llm_command, else built-in]")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"budget", "tokens", "sections": [{"kind": '
              '"system" | "core" | "memory" | "found" | "topic" | "unsplit" | "recent", "messages": [{"id", "role", '
              '"speaker", "text", "ts", "score"?}], core and memory: "id", "section", "scope", "source", "score", '
              '"summary", "content": "full" | "summary", "found_by", "text"; topic: "topic_id", "name", "score", '
              '"summary", "file"}], "activated", "made_dormant", "ambiguous", "dropped": [{"kind", "tokens", '
              '"message_id"? | "memory_id"? | "topic_id"?}]}.')
@click.pass_obj
def context(memory, session, message, system_file, budget, no_record, llm_command, scope, as_json):
    """Everything the agent's next turn needs, in one call a turn, within --budget tokens.

    \b
    In this order (docs/context.md):
      the system prompt (--system)
      core memories: is_core or user_weight >= 9, always (at most 10)
      memories: the session's scope's own (at most 5), then those the search
        finds for the message in MEMORY.md and the daily logs (current
        versions only; the window's dominant section first)
      earlier messages the search finds in the session, newest first
      the topics relevant to the message (score >= 0.3, best first)
      the unsplit messages, then the last 20 messages (the new one last)

    No text twice. Never over --budget tokens (cl100k): when it is tight a
    memory is given as its summary, then whole parts go, lowest priority
    first (core memories and the search's best hits last), each named on
    stderr and under "dropped".

    A plain call records the turn: the topics' scores and activation
    (topics/activation.json, topic headers, the tuning log). --no-record
    builds the same context and writes nothing.

    An amnesia cue ("did you forget", "你忘了") searches dormant topics: a
    clear match is activated, unclear ones are listed under "ambiguous" so
    the agent can ask which was meant. Only the session's scope is read: its
    memories (and global ones), topics and its own messages. An agent serving
    one person passes --scope too, so that a wrong session id is refused.

    \b
    Examples:
      memctl context --session s1 --message "what did we pick for the cache?"
      echo "did you forget the Kyoto plan?" | memctl context --session s1 --json
      memctl context --session s1 --system prompt.md --budget 4000 --no-record
      memctl context --session bob --scope user:bob --message "where did I bank?"

    Exit status: 0 the context was printed, 2 error.
    """
    if message is None:
        message = read_input("-")[0].decode("utf-8", errors="replace")
    system_text = read_input(system_file)[0].decode("utf-8", errors="replace") if system_file else ""
    built = memory.context(session, message, system_text=system_text, budget=budget, no_record=no_record,
                           llm_command=llm_command, scope=scope)
    _report_dropped(built.dropped)
    for item in built.activated:
        say(f"memctl: activated topic {item['topic_id']} ({clip(item['name'], 40)}): {item['reason']}")
    for item in built.made_dormant:
        say(f"memctl: topic {item['topic_id']} ({clip(item['name'], 40)}) is dormant now")
    for item in built.ambiguous:
        names = "; ".join(f"{c['topic_id']} {clip(c['name'], 30)}" for c in item["candidates"])
        say(f"memctl: '{item['cue']}': not clear which topic is meant: {names}")
    if as_json:
        json_lines([built.as_dict()])
    else:
        sys.stdout.write(built.text)
    sys.exit(EXIT_OK)


def _report_dropped(dropped: list[dict]) -> None:
    """One stderr line per kind of part dropped, naming each: nothing leaves the context silently."""
    if not dropped:
        return
    by_kind: dict[str, list[str]] = {}
    for part in dropped:
        label = part.get("message_id") or part.get("memory_id") or f"summary of {part['topic_id']}"
        by_kind.setdefault(part["kind"], []).append(f"{label} ({part['tokens']})")
    for kind, labels in by_kind.items():
        say(f"memctl: over budget: dropped {len(labels)} {kind} part(s): {', '.join(labels)}")


@click.command("activate")
@click.argument("query", metavar="QUERY|ID")
@click_options(ACTIVATE)
@click.option("--llm", "llm_command", metavar="CMD", help="Route with this command (design 001 §6.3 prompt on "
              "stdin); a bad answer falls back to the built-in search. [default: [topics] llm_command, else built-in]")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"activated": [{"topic_id", "name"}], '
              '"candidates": [{"topic_id", "name", "score", "relevance"?, "reason"?}], "method": "id" | "builtin" | '
              '"llm", "fallback": why the LLM answer was not used | null, "no_match_reason": the LLM\'s | null}.')
@click.pass_obj
def activate(memory, query, include_archived, llm_command, session, scope, as_json):
    """Activate a topic by id, or the dormant topics whose summaries match QUERY.

    A built-in match holds at least half of QUERY's words (in its name,
    summary or messages): a query about something no topic covers
    activates nothing and exits 1.

    With an LLM command the design 001 §6.3 routing prompt picks among the
    topics the built-in search ranks highest; if its answer is not valid,
    the built-in ranking is used and stderr says why.

    \b
    Examples:
      memctl topics activate t-9da459f266e0
      memctl topics activate "the Kyoto trip" --include-archived
      memctl topics activate "the Kyoto trip" --session alice
      memctl topics activate "the Kyoto trip" --llm "llm -m gpt-4o-mini"

    Exit status: 0 a topic was activated, 1 none matched, 2 error.
    """
    found = memory.topics.activate(query, include_archived=include_archived, llm_command=llm_command,
                                   scope=scope, session=session)
    if found.fallback:
        say(f"memctl: the LLM routing answer was not used ({found.fallback}); built-in search of the topics")
    if as_json:
        json_lines([found.as_dict()])
    else:
        for item in found.activated:
            click.echo(f"{item['topic_id']}  {item['name']}")
    if not found.activated:
        say(f"memctl: no topic matches '{query}'" + (f": {found.no_match_reason}" if found.no_match_reason else ""))
        sys.exit(EXIT_NOTHING)


@click.command("log")
@click.option("--since", metavar="DATE", help="Only events at or after this ISO date or time.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object an event: {"at", "event": "round" | '
              '"activated" | "dormant" | "archived" | "merged", ...} (docs/topics.md).')
@click.pass_obj
def topics_log(memory, since, as_json):
    """The tuning log: every round's relevance scores and every activation event.

    Exit status: 0 events printed, 1 none, 2 error.
    """
    events = memory.topics.log(since=since).events
    if not events:
        say("memctl: no events")
        sys.exit(EXIT_NOTHING)
    if as_json:
        json_lines(events)
        return
    for event in events:
        if event["event"] == "round":
            scores = " ".join(f"{t}={s:.2f}" for t, s in sorted(event["scores"].items(), key=lambda i: -i[1]))
            click.echo(f"{event['at']}  round    {event.get('session', '')}  {scores}"
                       + (f"  cue: {event['cue']}" if event.get("cue") else ""))
        else:
            click.echo(f"{event['at']}  {event['event']:<9}{event['topic']}  {event.get('reason', '')}"
                       + (f" -> {event['into']}" if event.get("into") else ""))


@click.command("daily")
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
