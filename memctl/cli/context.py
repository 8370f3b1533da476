"""`memctl context`: the context for the next turn; parse, call `memctl.Memory`, print."""

from __future__ import annotations

import sys

import click

from memctl.api.params import CONTEXT, click_options
from memctl.cli.output import EXIT_OK, json_lines, read_input, say
from memctl.text.clip import clip


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
