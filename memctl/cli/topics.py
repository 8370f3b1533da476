"""`memctl split` and `memctl topics` (list, show, activate, log): parse, call `memctl.Memory`, print."""

from __future__ import annotations

import sys

import click

from memctl.api.params import ACTIVATE, TOPICS_SCOPE, click_options
from memctl.api.groups import TopicRow, TopicShown
from memctl.cli.output import EXIT_NOTHING, EXIT_OK, columns, json_lines, progress, read_input, say
from memctl.text.clip import clip

# --session and --scope of the commands that look into one scope's topics.
scope_options = click_options(TOPICS_SCOPE)


@click.command()
@click.option("--session", required=True, metavar="ID", help="The session whose older messages are split.")
@click.option("--system", "system_file", metavar="FILE", help="The system prompt, counted in the main context.")
@click.option("--keep-recent", type=click.IntRange(min=0), metavar="N",
              help="Messages always left in the main context. [default: [topics] keep_recent, 20]")
@click.option("--force", is_flag=True, help="Split even when the context is under the threshold.")
@click.option("-n", "--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option("--llm", "llm_command", metavar="CMD", help="Split with this command: the prompt on stdin, the "
              "design 001 §6.4 XML on stdout. [default: [topics] llm_command, else built-in]")
@click.option("--scope", metavar="SCOPE", help="The scope the session must be in (user:<name>, project:<name>, "
              "...): another is an error, exit 2. The split always stays in the session's own scope.")
@click.option("--json", "as_json", is_flag=True, help='One JSON object a message: {"message_id", "topic_id", '
              '"action": "active" | "reactivated" | "new"}.')
@click.pass_obj
def split(memory, session, system_file, keep_recent, force, dry_run, llm_command, scope, as_json):
    """Move a session's older unsplit messages into topic files (topics/<id>.jsonl).

    Splits when the main context (system prompt, active topics' summaries,
    unsplit messages; counted with the real tokenizer) is over [topics]
    split_at (70%) of [topics] context_limit, always leaving the last
    --keep-recent messages. Each message goes to an active topic, a dormant
    one (reactivated) or a new one, all of the session's scope: another
    scope's topics (another person's) are never read or written. Re-running
    changes nothing.

    \b
    Examples:
      memctl split --session s1                        split if the context is over 70%
      memctl split --session s1 --force --dry-run      show the plan, write nothing
      memctl split --session s1 --llm "llm -m gpt-4o"  let an LLM choose (design 001 §6.4)

    Exit status: 0 messages were split, 1 nothing needed splitting, 2 error.
    """
    system_text = read_input(system_file)[0].decode("utf-8", errors="replace") if system_file else ""
    with progress() as advance:
        report = memory.topics.split(session, system_text=system_text, keep_recent=keep_recent, force=force,
                                     dry_run=dry_run, llm_command=llm_command, scope=scope, progress=advance)
    if not report.assignments:
        if not report.unsplit:
            say(f"memctl: nothing to split: every message of session {session} is in a topic already")
        elif (force or report.context_tokens > report.threshold) and report.unsplit <= report.keep_recent:
            say(f"memctl: nothing to split: session {session}'s {report.unsplit} unsplit message(s) are all "
                f"among the last {report.keep_recent} kept in the main context (--keep-recent, [topics] keep_recent)")
        else:
            say(f"memctl: nothing to split: session {session} context {report.context_tokens} tokens "
                f"(split above {report.threshold}), {report.unsplit} unsplit messages")
        sys.exit(EXIT_NOTHING)
    if as_json:
        json_lines(a.as_dict() for a in report.assignments)
    else:
        rows = [("MESSAGE", "TOPIC", "ACTION", "NAME")]
        rows += [(a.message_id, a.topic_id, a.action, clip(report.topics.get(a.topic_id, ""), 40))
                 for a in report.assignments]
        click.echo("\n".join(columns(rows)))
    if dry_run:
        say("memctl: dry run: nothing written")
    sys.exit(EXIT_OK)


@click.group()
def topics():
    """Read topic files: what the conversation's subjects are.

    A topic is in one scope, its sessions'; --session or --scope looks
    into one scope only.

    \b
    Examples:
      memctl topics list
      memctl topics list --session alice
      memctl topics show t-9da459f266e0 --json
    """


@topics.command("list")
@click.option("--archived", is_flag=True, help="The archived topics (topics/archived/YYYY-MM/) instead.")
@click.option("--since", metavar="YYYY-MM", help="With --archived: only months from this one on.")
@scope_options
@click.option("--json", "as_json", is_flag=True, help='One JSON object a topic: {"id", "name", "state", "messages", '
              '"tokens", "updated", "parent", "summary", "scope"}; scope null: an old topic of several scopes.')
@click.pass_obj
def list_topics(memory, archived, since, session, scope, as_json):
    """Every topic (of one scope): state, scope, name, size, last active. Exit 1 when there is none."""
    if archived:
        found = memory.topics.archived(since=since, scope=scope, session=session)
    else:
        found = memory.topics.list(scope=scope, session=session)
    if not found:
        say("memctl: no topics")
        sys.exit(EXIT_NOTHING)
    if as_json:
        json_lines(TopicRow.of(t).as_dict() for t in found)
        return
    rows = [("ID", "STATE", "SCOPE", "MESSAGES", "TOKENS", "UPDATED", "NAME")]
    rows += [(t.id, t.state, t.scope or "(several)", str(t.header.get("messages", 0)), str(t.header.get("tokens", 0)),
              str(t.header.get("updated", "")), clip(t.header.get("name", ""), 50)) for t in found]
    click.echo("\n".join(columns(rows, right=(3, 4))))


@topics.command("show")
@click.argument("topic_id", metavar="ID")
@scope_options
@click.option("--json", "as_json", is_flag=True, help='One JSON object, as the MCP topics_show tool gives it: '
              '{"topic": the header with its "links": [{"kind": "parent" | "child" | "related" | "merged-into" | '
              '"merged-from", "topic_id", "at"}], "messages": [{"id", "session", "role", "speaker", "text", "ts"}]}.')
@click.pass_obj
def show_topic(memory, topic_id, session, scope, as_json):
    """A topic's header, links, summary and messages; with --session or --scope, only a topic of that scope."""
    topic = memory.topics.show(topic_id, scope=scope, session=session)
    links = memory.topics.links(topic.id)
    if as_json:
        json_lines([TopicShown.of(topic, links).as_dict()])
        return
    header = topic.header
    click.echo(f"{header['id']}  {header.get('name', '')}\nstate {header.get('state')} · "
               f"scope {topic.scope or '(several)'} · "
               f"{header.get('messages', 0)} messages · {header.get('tokens', 0)} tokens · "
               f"updated {header.get('updated', '')}")
    kinds: dict[str, list[str]] = {}
    for link in links:
        kinds.setdefault(link.kind, []).append(link.topic_id)
    for kind, others in kinds.items():
        click.echo(f"{kind}: {', '.join(others)}")
    click.echo(f"\n{header.get('summary', '')}\n")
    for message in topic.messages:
        who = message.get("speaker") or message.get("role") or ""
        click.echo(f"[{message.get('ts', '')}] {who} ({message['id']}): {message.get('text', '')}")


@topics.command("activate")
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


@topics.command("log")
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
