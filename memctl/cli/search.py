"""`memctl search` (hybrid, layered and batch searches) and `memctl history`."""

from __future__ import annotations

import sys

import click

from memctl.api.params import HISTORY_SCOPE, SEARCH, SEARCH_FILTERS, Filters, click_options
from memctl.cli.output import EXIT_NOTHING, EXIT_OK, json_lines, read_input, say


@click.command()
@click.argument("query", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object a result (JSON lines); schema below.")
@click.option("--batch", "batch", metavar="FILE|-", help='Many queries, one JSON object a line: {"id", "query", '
              '"k"?, "mode"?, "rank"?, "min_score"?, ' + ", ".join(f'"{p.wire_name}"?' for p in SEARCH_FILTERS)
              + '}; the options given are the defaults of lines that name none.')
@click_options(SEARCH)
@click.option("--plan", "plan_message", metavar="MESSAGE", help="Search the sections `memctl state plan "
              "MESSAGE` picks; QUERY defaults to MESSAGE.")
@click.option("--adaptive", is_flag=True, help="Skip greetings, acknowledgements, slash commands, emoji and "
              "short messages (exit 1, reason on stderr); memory words always search (P7).")
@click.option("--layered", is_flag=True, help="Layered result (G1): L0 core, L1 workspace, L2 query, "
              "within --budget tokens.")
@click.option("--budget", type=click.IntRange(min=1), default=2000, show_default=True, metavar="TOKENS",
              help="Token budget of --layered.")
@click.option("--history", "history_id", metavar="ID", help="Deprecated, kept for one release: `memctl history "
              "ID` prints the same.")
@click.option("--explain", is_flag=True, help="Show each ranking stage's factor and score for each result.")
@click.pass_obj
def search(memory, query, as_json, batch, plan_message, adaptive, layered, budget, history_id, explain, **declared):
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
      {"id", "kind": "memory"|"message"|"log"|"topic", "text", "score",
       "confidence" (0-1: how sure the search is that it is relevant), "source",
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
      memctl search --adaptive -- "$USER_MESSAGE" || echo "no memory needed"
    """
    where = Filters.take(declared)
    if history_id:
        _print_history(memory, history_id, as_json, where.scope)
        return
    if batch:
        if query or plan_message:
            raise click.UsageError("give either QUERY or --batch, not both")
        data, source = read_input(batch)
        answers = memory.search_batch(data, source=source, where=where, **declared)
        json_lines(answer.as_dict(explain=explain) for answer in answers)
        sys.exit(EXIT_OK if any(answer.results for answer in answers) else EXIT_NOTHING)
    if not (query or plan_message) or not (query or plan_message).strip():
        raise click.UsageError("give a QUERY (or --batch FILE)")
    if layered:
        reason = memory.search_needed(query) if adaptive else None
        if reason:
            say(f"memctl: no search needed: {reason}")
            sys.exit(EXIT_NOTHING)
        _print_layered(memory, query, where.scope, budget, as_json)
        return
    found = memory.search(query, where=where, plan=plan_message, adaptive=adaptive, **declared)
    if found.skipped:
        say(f"memctl: {found.skipped}")
    elif explain and not found:
        say(f"memctl: nothing passed: {found.why_none}")
    if as_json:
        json_lines(r.as_dict(explain=explain) for r in found)
    else:
        for result in found:
            _print_result(result, explain)
    sys.exit(EXIT_OK if found else EXIT_NOTHING)


@click.command()
@click.argument("memory_id", metavar="ID")
@click_options(HISTORY_SCOPE)
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"links": [{"id", "status", "supersedes", '
              '"superseded_by", "summary"?, "canonical_topic"?, "created_at"?, "status_changed_at"?, "section"?, '
              '"text"?}], "current": [ids of the current versions], "problems": [text]}, as the MCP history tool '
              'returns.')
@click.pass_obj
def history(memory, memory_id, scope, as_json):
    """The version chain of memory ID, oldest first: every version that
    supersedes or is superseded by it (G6), with its status and summary.

    What is wrong with the chain (a fork, a cycle) goes to stderr.

    \b
    Examples:
      memctl history mem-kestrel-db
      memctl history mem-kestrel-db --scope project:kestrel --json

    Exit status: 0 printed, 2 error (no memory with that id, in the scope).
    """
    _print_history(memory, memory_id, as_json, scope)


def _print_history(memory, memory_id: str, as_json: bool, scope: str | None) -> None:
    found = memory.history(memory_id, scope=scope)
    if as_json:
        json_lines([found.as_dict()])
    else:
        for link in found.links:
            summary = (link.entry.get("summary") or "") if link.entry is not None else ""
            created = (link.entry.get("created_at") or "") if link.entry is not None else ""
            click.echo(f"{link.id}  {link.status}  {created}  {summary}".rstrip())
    for problem in found.problems:
        say(f"memctl: chain of {memory_id}: {problem}")


def _print_layered(memory, query: str, workspace: str | None, budget: int, as_json: bool) -> None:
    result = memory.layered_search(query, workspace=workspace, budget=budget)
    if as_json:
        json_lines([result.as_dict()])
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
        say(f"memctl: over the budget, left out: {', '.join(result.left_out)}")
    sys.exit(EXIT_OK if any(result.layers.values()) else EXIT_NOTHING)


def _print_result(result, explain: bool) -> None:
    first, last = result.lines
    where = f"{result.source}:{first}" + (f"-{last}" if last != first else "")
    # One rule for the column: a memory's section; a topic (its name and summary) is nobody's words; for
    # anything said, who said it: the speaker, else the role (a message without one is a user's, as the
    # daily log has it).
    role = (result.fields or {}).get("role") if result.kind not in ("memory", "topic") else None
    label = f"[{result.section}]" if result.kind == "memory" else \
        "topic" if result.kind == "topic" else (result.speaker or role or "user")
    click.echo(f"{where}  {label}  {result.score:.3f}  {result.record_id or result.id}")
    snippet = " ".join(result.text.split())
    click.echo("    " + (snippet if len(snippet) <= 300 else snippet[:299] + "…"))
    if explain:
        for line in result.explain_lines():
            click.echo("    " + line)
