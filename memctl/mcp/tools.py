"""The MCP tools: one table of functions over `memctl.Memory`, each with its JSON schemas.

A tool is a function `(memory, **arguments) -> Shape` registered with `@tool`;
its keyword parameters are the input schema's properties, so the server checks
the arguments against the schema and passes them straight on. A later feature
adds its tools by decorating one function each, here or in a module imported below.

Every tool returns a shape (memctl/text/shape.py), a JSON object (MCP's structured
content must be one): the `--json` shape of the matching command, with lists under a
named key. Its declaration is the tool's output schema and the "Returns" sentence of
its description, so neither is written by hand.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from memctl.api import Memory
from memctl.api import params
from memctl.api.params import (ACTIVATE, CONTEXT, FORGET, HISTORY_SCOPE, INGEST, REVIEW_SCOPE, SEARCH, TOPICS_SCOPE,
                                Filters, json_schema, keywords)
from memctl.api.groups import TopicRow, TopicShown
from memctl.text.bounds import MAX_QUERY_CHARS
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:  # the shapes the tools return, looked up when asked for (Tool.returns)
    from memctl.api.shapes import (Activation, CacheStats, Chain, Confirmation, Context, DailyReport, Entry,
                                   Forgotten, Found, Layered, Outcome, PendingReview, Plan, Problem, RecordResult,
                                   Rejection, Result, UpdateReport)


@dataclass(frozen=True)
class Tool:
    name: str
    about: str  # what it does and when to call it; the description adds what it returns
    input_schema: dict[str, Any]
    returned: str  # the name of the shape it returns, here or in memctl/api/shapes.py
    always: tuple[str, ...]  # the returned shape's `when=` keys the tool always gives
    run: Callable[..., dict[str, Any]]
    read_only: bool  # writes nothing at all: a client may call it without asking the user

    # The shapes are looked up when first asked for: importing them imports search and the topics
    # (numpy), and `memctl --help` imports this table (to name the tools in `memctl mcp --help`).
    @property
    def returns(self) -> type[Shape]:
        from memctl.api import shapes

        return getattr(shapes, self.returned, None) or globals()[self.returned]

    @property
    def description(self) -> str:
        return f"{self.about}\nReturns {self.returns.outline(always=self.always)}."

    @property
    def output_schema(self) -> dict[str, Any]:
        return self.returns.schema(always=self.always)


TOOLS: dict[str, Tool] = {}


def tool(name: str, description: str, *, returns: str, required: tuple[str, ...] = (),
         read_only: bool = False, asked: tuple[str, ...] = (), always: tuple[str, ...] = (),
         **properties: dict[str, Any]):
    """Register the decorated function as tool `name`: `properties` are its JSON-schema arguments; it
    returns the shape named `returns`, given as JSON with its `when=` keys named in `always`, and those
    named in `asked` when the argument of that name asks for them (search's explain)."""

    def register(make: Callable[..., Shape]) -> Callable[..., dict[str, Any]]:
        schema = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = list(required)

        def run(memory: Memory, *given: Any, **arguments: Any) -> dict[str, Any]:
            shown = {**{flag: bool(arguments.get(flag)) for flag in asked}, **dict.fromkeys(always, True)}
            return make(memory, *given, **arguments).as_dict(**shown)

        TOOLS[name] = Tool(name, textwrap.dedent(description).strip(), schema, returns, always, run, read_only)
        return run

    return register


# -- argument schemas ----------------------------------------------------------------
def text(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def searched(description: str, **extra: Any) -> dict[str, Any]:
    """A text a search reads, at most MAX_QUERY_CHARS characters."""
    return text(description, maxLength=MAX_QUERY_CHARS, **extra)


def texts(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def flag(description: str) -> dict[str, Any]:
    return {"type": "boolean", "default": False, "description": description}


def choice(description: str, values: list[str], default: str) -> dict[str, Any]:
    return {"type": "string", "enum": values, "default": default, "description": description}


def count(description: str, default: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "default": default, "description": description}


DRY_RUN = params.DRY_RUN.json_schema()
IDS = {"type": "array", "items": {"type": "string"}, "minItems": 1,
       "description": "Ids of pending memories, as review_pending lists them."}


# -- what the tools return that no command prints as one object ------------------------
@dataclass
class Stored(Shape):
    """What became of each record given, in input order."""
    outcomes: list[Outcome] = shown()


@dataclass
class Health(Shape):
    """The store's problems, and every memory's health score when asked."""
    problems: list[Problem] = shown()
    scores: list[dict[str, Any]] | None = shown("Every memory's health score and its parts, lowest first (asked "
                                                "with scores): as HealthScores gives them.", omit="none", default=None)


@dataclass
class CacheHit(Shape):
    """A cache lookup: the stored call (a hit) or null (a miss)."""
    hit: bool = shown()
    entry: Entry | None = shown("The stored result, failed and empty ones included: 'negative' says so, so do "
                                "not repeat the call.")


@dataclass
class CacheStored(Shape):
    """The entry stored."""
    entry: Entry = shown()


@dataclass
class CacheFound(Shape):
    """Consolidated tool results, best first."""
    results: list[Result] = shown()


@dataclass
class Topics(Shape):
    """The topics of the scope looked into."""
    topics: list[TopicRow] = shown()


# -- searching -----------------------------------------------------------------------
@tool("search", """
    Search long-term memory: notes in MEMORY.md, past chat messages, daily logs and topics,
    ranked by meaning and words together (hybrid BM25 + embeddings). Call it before
    answering anything that may depend on what the user said or decided earlier.
    Results come best first; an empty list means nothing relevant is stored.
    """, returns="Found", asked=("explain",), required=("query",),
      query=searched("What to look for, in the user's words (any language); never query syntax.", minLength=1),
      plan=searched("The user's message: search only the sections state_plan picks for it."),
      adaptive=flag("Skip messages that need no memory (greetings, acknowledgements, slash commands); "
                    "'skipped' then says why."),
      explain=flag("Add each result's score at every ranking stage under 'explain'."),
      **json_schema(SEARCH))
def search(memory: Memory, query: str, plan: str | None = None, adaptive: bool = False, explain: bool = False,
           **declared) -> Found:
    options = keywords(SEARCH, declared)
    return memory.search(query, where=Filters.take(options), plan=plan, adaptive=adaptive, **options)


@tool("layered_search", """
    Build the context for a turn within a token budget: L0 core memories (always),
    L1 the workspace's memories, L2 memories matching the query (only when the query
    asks about history or decisions or names something L0/L1 do not cover). Call it
    once at the start of a task to load what matters without flooding the context.
    Each layer lists the memories placed in it: id, section, text (or its summary, when
    the full text does not fit) and tokens.
    """, returns="Layered", required=("query",),
      query=searched("The task or question the context is for.", minLength=1),
      workspace=text("A scope such as 'project:kestrel' whose memories form L1."),
      budget=count("Token budget of all three layers together.", 2000))
def layered_search(memory: Memory, query: str, **options) -> Layered:
    return memory.layered_search(query, **options)


@tool("history", """
    The version chain of one memory, oldest first: every version that supersedes or is
    superseded by it. Call it to see how a fact changed over time, or before replacing
    a memory. The same object as `memctl history ID --json`.
    """, returns="Chain", required=("id",), read_only=True,
      id=text("The memory's id (as search results give it).", minLength=1), **json_schema(HISTORY_SCOPE))
def history(memory: Memory, id: str, scope: str | None = None) -> Chain:
    return memory.history(id, scope=scope)


# -- writing ---------------------------------------------------------------------------
@tool("ingest", """
    Store something to remember. kind 'message' (the default for plain text): chat
    messages, one a line, kept in sessions/ and the daily log. kind 'memory': a note
    for MEMORY.md, one a paragraph, under 'section'; with pending=true it waits for
    the user's confirmation (review_pending, confirm). Use a memory for decisions,
    preferences and facts to keep; messages for the conversation itself. JSON lines
    ({"text", "speaker"?, "role"?, "ts"?, ...}) and MEMORY.md-style Markdown are read too.
    A note whose canonical_topic already has a current memory is refused unless
    'supersedes' names the old one or allow_conflict is set.
    """, returns="Stored", required=("text",),
      text=text("What to store.", minLength=1),
      **json_schema(INGEST))
def ingest(memory: Memory, text: str, **declared) -> Stored:
    options = keywords(INGEST, declared)
    options["keep_noise"] = options.get("keep_noise") or None  # false is not asking: [ingest] filter_noise decides
    return Stored(memory.ingest(text, source="<mcp>", **options).outcomes)


@tool("index", """
    Bring the search index up to date with the store's files. Rarely needed: search
    does it by itself; call it after many writes to make the next search fast, or
    with rebuild=true if results look wrong.
    """, returns="UpdateReport", rebuild=flag("Start the index over from the files."))
def index(memory: Memory, rebuild: bool = False) -> UpdateReport:
    return memory.index(rebuild=rebuild)


# -- review (P5) ---------------------------------------------------------------------
@tool("review_pending", """
    List notes waiting for the user's confirmation (stored with pending=true), after
    dropping those whose time ran out. Call it to show the user what to confirm or
    reject.
    """, returns="PendingReview", **json_schema(REVIEW_SCOPE))
def review_pending(memory: Memory, scope: str | None = None) -> PendingReview:
    return memory.review.pending(scope=scope)


@tool("confirm", """
    Write pending notes to MEMORY.md once the user agrees (all or nothing).
    """, returns="Confirmation", required=("ids",), ids=IDS,
      supersedes=texts("Ids of memories the (one) confirmed note replaces."),
      allow_conflict=flag("Write even when the note's canonical_topic has a current memory."),
      dry_run=DRY_RUN, **json_schema(REVIEW_SCOPE))
def confirm(memory: Memory, ids: list[str], **options) -> Confirmation:
    return memory.review.confirm(ids, **options)


@tool("reject", """
    Drop pending notes the user does not want kept (all or nothing).
    """, returns="Rejection", required=("ids",), ids=IDS, dry_run=DRY_RUN, **json_schema(REVIEW_SCOPE))
def reject(memory: Memory, ids: list[str], dry_run: bool = False, scope: str | None = None) -> Rejection:
    return memory.review.reject(ids, dry_run=dry_run, scope=scope)


@tool("forget", """
    When the user asks you to forget something ("forget my phone number"): take it out of
    every file of the store and of the index, in one step. Choose by ids (from search
    results), by session, or by match (text it holds). A match, a session or a topic id
    only lists what would go, each with a preview: show the user, then call again with
    yes=true.
    """, returns="Forgotten", ids=texts("Ids of messages, memories, pending notes, log entries or topics to forget."),
      **json_schema(FORGET))
def forget(memory: Memory, ids: list[str] = (), **declared) -> Forgotten:
    return memory.forget(ids, **keywords(FORGET, declared))


# -- the section window (W) ----------------------------------------------------------
@tool("state_plan", """
    Start of a turn: which MEMORY.md sections are worth searching for the user's
    message (the section the recent turns keep using, plus sections the message
    names). Pass the same message as search's 'plan' to search only them.
    """, returns="Plan", required=("message",), read_only=True,
      message=searched("The user's message of this turn.", minLength=1))
def state_plan(memory: Memory, message: str) -> Plan:
    return memory.state.plan(message)


@tool("state_record", """
    End of a turn: record which MEMORY.md sections the turn used (the 'section' of
    the search results you relied on), so later turns search the dominant one first.
    """, returns="RecordResult", required=("sections",),
      sections=texts("Section names the turn used (may be empty: a turn that used none)."),
      summary=text("A one-line summary of the turn's topic, kept as the current topic."),
      dry_run=DRY_RUN)
def state_record(memory: Memory, sections: list[str], **options) -> RecordResult:
    return memory.state.record(sections, **options)


# -- health ----------------------------------------------------------------------------
@tool("health", """
    Check the store like git fsck (writes nothing): malformed entries, duplicate ids,
    broken or forked version chains, expired pending notes, permissions, leftovers of
    interrupted writes. Call it when something looks wrong.
    """, returns="Health", read_only=True,
      scores=flag("Also return every memory's health score (G4), lowest first."))
def health(memory: Memory, scores: bool = False) -> Health:
    return Health(memory.health.check(), memory.health.scores().rows if scores else None)


# -- shared tool-output cache (H1-H5, docs/cache.md) -----------------------------------
CALL = {"scope": text("The run the agents share (a debate, a job): its agents share one cache.", minLength=1),
        "tool": text("The tool's name.", minLength=1),
        "args": {"description": "The tool call's arguments, any JSON: the same arguments are the same call."}}


@tool("cache_get", """
    Before calling a slow or paid tool: has any agent of this run already made the same
    call? A hit gives the stored output (failed and empty results included: 'negative'
    says so, so do not repeat the call); on a miss (entry null) call the tool and store
    its result with cache_put.
    """, returns="CacheHit", required=("scope", "tool", "args"), **CALL)
def cache_get(memory: Memory, scope: str, tool: str, args: Any) -> CacheHit:
    entry = memory.cache.get(scope, tool, memory.cache.json_args(args))
    return CacheHit(entry is not None, entry)


@tool("cache_put", """
    After calling a tool that cache_get missed: store its result for every agent of the
    run, failures and empty results too (they are kept for a shorter time).
    """, returns="CacheStored", required=("scope", "tool", "args", "output"), **CALL,
      output=text("What the tool returned, as text."),
      exit_code={"type": "integer", "default": 0, "description": "The tool's exit status; not 0 is a failure."},
      error=text("The tool's error message, if it failed."),
      agent=text("Who made the call (kept with the result and in long-term memory)."),
      ttl={"type": "number", "exclusiveMinimum": 0, "description": "Seconds to keep it (default: [cache] ttl)."})
def cache_put(memory: Memory, scope: str, tool: str, args: Any, output: str, **options) -> CacheStored:
    return CacheStored(memory.cache.put(scope, tool, memory.cache.json_args(args), output, **options))


@tool("cache_search", """
    What the run's agents already found: tool results consolidated into long-term memory,
    searched by meaning and words.
    """, returns="CacheFound", required=("query",),
      query=searched("What to look for.", minLength=1),
      scope=text("Only results of this run."),
      tool=texts("Only results of these tools."),
      agent=texts("Only results these agents stored."),
      k=count("How many results at most.", 5))
def cache_search(memory: Memory, query: str, tool=(), agent=(), **options) -> CacheFound:
    return CacheFound(memory.cache.search(query, tools=tool, agents=agent, **options))


@tool("cache_stats", """
    How the shared cache is doing: hits, misses, negative hits, keys and bytes per run
    and tool.
    """, returns="CacheStats", read_only=True, scope=text("Only this run."))
def cache_stats(memory: Memory, scope: str | None = None) -> CacheStats:
    return memory.cache.stats(scope)


# -- topics: the context for the next turn (T4-T7, docs/context.md) -----------------
@tool("context", """
    Everything the model needs for the next turn, within a token budget - call it once per
    turn with the user's new message. In order: the system prompt; the core memories (rules
    that always apply); the memories of the session's scope and those relevant to the message
    (current versions only); the earlier messages the search finds, newest first; the relevant
    topics; the unsplit and the last 20 messages. No text twice; a tight budget gives memories
    as summaries, then drops whole parts (listed under "dropped"). A call records the topics'
    activation; no_record builds the same and writes nothing. If the user says you forgot
    something ("did you forget", "你忘了"), dormant topics are searched: a clear match is in the
    context and under "activated"; unclear ones under "ambiguous" - ask which was meant.
    "text" is the context as one text.
    """, returns="Context", always=("text",), required=("session", "message"),
      session=text("The conversation's session id.", minLength=1),
      message=searched("The user's new message.", minLength=1),
      system=text("The system prompt, first in the context."),
      **json_schema(CONTEXT))
def context(memory: Memory, session: str, message: str, system: str = "", budget: int | None = None,
            no_record: bool = False, scope: str | None = None) -> Context:
    return memory.context(session, message, system_text=system, budget=budget, no_record=no_record, scope=scope)


# Topics tools look into one scope when given a session (its scope) or a scope; with neither, every scope.
SCOPE_OF = json_schema(TOPICS_SCOPE)


@tool("topics_list", """
    The conversation's topics: what was talked about, each with its state (active: in
    the context when relevant; dormant: only found again by topics_activate or a
    "you forgot" message; archived: only on request).
    """, returns="Topics", read_only=True, archived=flag("List the archived topics instead."),
      since=text("With archived: only months from this one on (YYYY-MM)."), **SCOPE_OF)
def topics_list(memory: Memory, archived: bool = False, since: str | None = None, session: str | None = None,
                scope: str | None = None) -> Topics:
    if archived:
        found = memory.topics.archived(since=since, scope=scope, session=session)
    else:
        found = memory.topics.list(scope=scope, session=session)
    return Topics([TopicRow.of(t) for t in found])


@tool("topics_activate", """
    Bring a topic back into the context: by its id, or the dormant topics whose subject
    matches the query (with [topics] llm_command set, an LLM routes: design 001 §6.3).
    A topic holding under half of the query's words is no match: an unrelated query
    activates nothing. Call it when the user refers to something discussed long ago that the context does
    not hold.
    """, returns="Activation", required=("query",),
      query=searched("A topic id, or what the topic was about.", minLength=1),
      **json_schema(ACTIVATE))
def topics_activate(memory: Memory, query: str, include_archived: bool = False, session: str | None = None,
                    scope: str | None = None) -> Activation:
    return memory.topics.activate(query, include_archived=include_archived, session=session, scope=scope)


@tool("topics_show", """
    One topic: its header (name, summary, state, size), its links to other topics
    (parent, child, related, merged-into, merged-from) and its messages. A merged
    topic's old id finds the topic it went into.
    """, returns="TopicShown", required=("id",), read_only=True,
      id=text("The topic's id, as topics_list gives it.", minLength=1), **SCOPE_OF)
def topics_show(memory: Memory, id: str, session: str | None = None, scope: str | None = None) -> TopicShown:
    topic = memory.topics.show(id, session=session, scope=scope)
    return TopicShown.of(topic, memory.topics.links(topic.id))


@tool("review_daily", """
    The daily topic review (normally run from cron): compress the topics touched today,
    archive long-dormant ones, merge topics on the same subject and link related ones,
    summarise idle sessions; with [topics] llm_command set, an LLM merges, links and
    compresses (a bad answer changes nothing and is an error).
    """, returns="DailyReport", dry_run=DRY_RUN)
def review_daily(memory: Memory, dry_run: bool = False) -> DailyReport:
    return memory.review.daily(dry_run=dry_run)


def summary(one: Tool) -> str:
    """The first sentence of a tool's description: what the docs' list of tools says of it."""
    text = " ".join(one.description.split())
    end = re.search(r"[.?](\s|$)", text)
    return text if end is None else text[:end.start() + 1]
