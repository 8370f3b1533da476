"""The parameters an operation shares between the API, the command line and the MCP server, declared once.

A `Param` names the `Memory` keyword, its type, default, choices and limits and
one help text; `click_options` makes the click options of a command from it and
`json_schema` the MCP tool's JSON-schema properties, so the three front doors
cannot drift apart (as the MCP `kind` list once lacked `topic`).
tests/test_params.py checks each declaration against its `Memory` method.

Imports nothing but the standard library (click only inside `click_options`):
the command line reads these at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Callable

from memctl.hooks import CLIENTS

HOOK_CLIENTS: tuple[str, ...] = CLIENTS  # the clients `hooks install` and `hooks run` take (memctl/hooks/)

if TYPE_CHECKING:
    from memctl.index.filters import Filters as IndexFilters


@dataclass(frozen=True)
class Param:
    name: str  # the keyword of the Memory method
    help: str
    type: type = str  # str, int, float or bool
    default: Any = None
    many: bool = False  # a list: a repeatable option, a JSON array
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    above: float | None = None  # an exclusive minimum: the value must be over it
    key: str | None = None  # the MCP property and --option name when not `name` (kinds: --kind, "kind")
    flags: tuple[str, ...] = ()  # extra or other option names on the command line (-k, --workspace)
    metavar: str | None = None
    default_note: str | None = None  # a default that is not one value (the store's), said in the help

    @property
    def wire_name(self) -> str:
        return self.key or self.name

    def click_option(self) -> Callable:
        import click

        names = self.flags or ("--" + self.wire_name.replace("_", "-"),)
        options: dict[str, Any] = {"help": self._help(" (repeatable)" if self.many else "")}
        if self.type is bool:
            options.update(is_flag=True, default=self.default)  # None: not given, the settings decide
        else:
            options["type"] = self._click_type(click)
            options["multiple"] = self.many
            if self.metavar:
                options["metavar"] = self.metavar
            if self.default is not None and not self.many:
                options.update(default=self.default, show_default=True)
        return click.option(*names, self.name, **options)

    def _help(self, more: str = "") -> str:
        return self.help + more + (f" [default: {self.default_note}]" if self.default_note else "")

    def _click_type(self, click) -> Any:
        if self.choices:
            return click.Choice(list(self.choices))
        if self.type is int:
            return click.IntRange(min=self.minimum)
        if self.type is float:
            if self.above is not None:
                return click.FloatRange(min=self.above, min_open=True)
            return click.FloatRange(min=self.minimum)
        return None

    def json_schema(self) -> dict[str, Any]:
        if self.type is bool:
            return {"type": "boolean", "default": bool(self.default), "description": self._help()}
        one: dict[str, Any] = {"type": {str: "string", int: "integer", float: "number"}[self.type]}
        if self.choices:
            one["enum"] = list(self.choices)
        if self.minimum is not None:
            one["minimum"] = self.minimum
        if self.above is not None:
            one["exclusiveMinimum"] = self.above
        if self.many:
            return {"type": "array", "items": one, "description": self._help()}
        if self.default is not None:
            one["default"] = self.default
        return {**one, "description": self._help()}


def click_options(params: tuple[Param, ...]) -> Callable:
    """A decorator adding the click options of `params`, in their order in --help."""

    def add(command: Callable) -> Callable:
        for param in reversed(params):
            command = param.click_option()(command)
        return command

    return add


def json_schema(params: tuple[Param, ...]) -> dict[str, dict[str, Any]]:
    """The MCP tool's input properties for `params`, by wire name."""
    return {p.wire_name: p.json_schema() for p in params}


def keywords(params: tuple[Param, ...], arguments: dict[str, Any]) -> dict[str, Any]:
    """The Memory keywords of the `params` among arguments given by wire name (an MCP call's)."""
    return {p.name: arguments[p.wire_name] for p in params if p.wire_name in arguments}


# -- search (P3) -------------------------------------------------------------------------------
def _filter(help: str, **declared: Any) -> Any:
    """A field of Filters, carrying what its Param needs (the name is the field's)."""
    default = () if declared.get("many") else declared.get("default")
    return field(default=default, metadata={"param": {"help": help, **declared}})


@dataclass(frozen=True)
class Filters:
    """Which records a search may return, as one value: `memory.search(query, where=Filters(scope=
    "project:kestrel", kinds=("memory",)))`, as sqlite-utils' `search(q, where=...)`. Its fields
    declare the filter options of `memctl search` and the MCP search tool (SEARCH_FILTERS); lists
    mean any of. Checked when a search renders it (InputError naming the option at fault)."""

    kinds: tuple[str, ...] = _filter(
        "Only results of these kinds: memory (MEMORY.md notes), message (chat messages), log (daily-log "
        "entries), topic (topic names and summaries).", many=True, choices=("memory", "message", "log", "topic"),
        key="kind")
    scope: str | None = _filter("A workspace such as project:kestrel: only that scope and global are searched "
                                "(G7).", flags=("--scope", "--workspace"), metavar="SCOPE")
    sections: tuple[str, ...] = _filter("Only this MEMORY.md section (its heading).", many=True, key="section",
                                        metavar="NAME")
    sources: tuple[str, ...] = _filter("Only this store file, or folder with a trailing '/' (e.g. sessions/).",
                                       many=True, key="source", metavar="PATH")
    sessions: tuple[str, ...] = _filter("Only this session id.", many=True, key="session", metavar="ID")
    tools: tuple[str, ...] = _filter("Only memories consolidated from this tool's cached calls (see memctl "
                                     "cache).", many=True, key="tool", metavar="NAME")
    agents: tuple[str, ...] = _filter("Only memories consolidated from the cached calls this agent stored.",
                                      many=True, key="agent", metavar="ID")
    since: str | None = _filter("Only results at or after this ISO 8601 date or time.", metavar="TIME")
    until: str | None = _filter("Only results at or before this ISO 8601 date or time (a date means its whole "
                                "day).", metavar="TIME")
    include_archived: bool = _filter("Also search memories the lifecycle archived.", type=bool, default=False)

    def __post_init__(self) -> None:
        for name in _MANY:  # any iterable given (a list from JSON, click's tuple) is kept as a tuple
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def given(self, **options: Any) -> "Filters":
        """These filters with `options` (search()'s filter keywords) in place; TypeError for an unknown one."""
        return replace(self, **options) if options else self

    @classmethod
    def take(cls, options: dict[str, Any]) -> "Filters":
        """The filters among a command's or a tool's option values, taken out of `options`."""
        return cls(**{f.name: options.pop(f.name) for f in fields(cls) if f.name in options})

    def rendered(self) -> "IndexFilters":
        """Checked (InputError naming the option) and made the one filter definition both searches
        apply (memctl/index/filters.py)."""
        from memctl.search.queries import filters_from

        found = filters_from(kinds=self.kinds, scope=self.scope, sections=self.sections, sources=self.sources,
                             sessions=self.sessions, tools=self.tools, agents=self.agents, since=self.since,
                             until=self.until)
        if self.include_archived:  # archived means "not searched by default" (G5), superseded means never
            found.exclude_status = tuple(s for s in found.exclude_status if s != "archived")
        return found


_MANY = tuple(f.name for f in fields(Filters) if f.metadata["param"].get("many"))
SEARCH_FILTERS = tuple(Param(f.name, **f.metadata["param"]) for f in fields(Filters))
SEARCH_RANKING = (
    Param("k", "How many results at most.", type=int, default=10, minimum=1, flags=("-k", "--limit")),
    Param("mode", "hybrid: meaning and words; bm25: words only (fastest); vector: meaning only.",
          default="hybrid", choices=("hybrid", "bm25", "vector")),
    Param("min_score", "Drop results whose calibrated relevance (0-1, judged before age counts) is below "
          "this, in place of the test of whether the store knows the subject; 0 keeps every candidate.",
          type=float, minimum=0, metavar="X",
          default_note="nothing at all when the store does not know the subject (retrieval.subject_min_cosine, "
          "subject_min_coverage, min_best_relevance, subject_min_words), else every result"),
    Param("rank", "pipeline: the default ranking stages; mera: the G4 retrieval score (0.4 relevance, "
          "0.25 recency, 0.2 access, 0.15 user weight).", default="pipeline", choices=("pipeline", "mera")),
)
SEARCH = SEARCH_RANKING + SEARCH_FILTERS


# -- writing --------------------------------------------------------------------------------------
DRY_RUN = Param("dry_run", "Check and report what would happen; write nothing.", type=bool, default=False,
                flags=("-n", "--dry-run"))
SCOPE_NAMES = "user:<name>, project:<name>, lang:<name> or global"
INGEST = (
    Param("fmt", "How to read the input; auto goes by the file name, then by the content. chatgpt, claude: "
          "the conversations.json of a ChatGPT or Claude data export (a session a conversation).", default="auto",
          choices=("auto", "jsonl", "json", "md", "text", "chatgpt", "claude"), key="format", flags=("-f", "--format")),
    Param("kind", "message: chat messages into sessions/ and the daily log. memory: notes into MEMORY.md. "
          "auto: memory for Markdown and pending input, else message.", default="auto",
          choices=("auto", "message", "memory")),
    Param("session", "Session id of messages that name none.", metavar="ID",
          default_note="the file name, else 'default'"),
    Param("scope", f"Put the records in this scope: {SCOPE_NAMES}. A new session takes it; a stored session "
          "in another scope, or a record naming another, is refused. Notes that name none take it too.",
          metavar="SCOPE", default_note="the records' own 'scope', else ingest.default_scope, 'global'"),
    Param("section", "MEMORY.md section of notes that name none.", metavar="NAME",
          default_note="ingest.default_section, 'General'"),
    Param("pending", "Hold notes in pending.jsonl until the user confirms them (review) instead of writing "
          "MEMORY.md.", type=bool, default=False),
    Param("ttl_hours", "Hours a pending note waits for confirmation.", type=float, above=0, flags=("--ttl",),
          metavar="HOURS", default_note="ingest.pending_ttl_hours, 24"),
    Param("keep_noise", "Keep greetings, refusals, memory questions and text under 5 characters, which the "
          "noise filter drops.", type=bool),
    Param("supersedes", "The id of a memory the (one) note replaces: it becomes deprecated and the note lists "
          "it in 'supersedes'.", many=True, metavar="ID"),
    Param("allow_conflict", "Write a note even when its canonical_topic already has a current memory "
          "(otherwise that is refused; a warning remains).", type=bool, default=False, flags=("--add",)),
    DRY_RUN,
)

# -- review (P5) and history (G6): what is read or written by id, inside one scope ---------------
REVIEW_SCOPE = (
    Param("scope", f"Only the pending notes of this scope ({SCOPE_NAMES}): give it when serving one person "
          "or project; a note of another scope (global too) is unknown here.", metavar="SCOPE",
          default_note="every scope"),
)
HISTORY_SCOPE = (
    Param("scope", f"Only a memory of this scope ({SCOPE_NAMES}) or a global one, as search sees them; "
          "versions of other scopes are left out.", metavar="SCOPE", default_note="every scope"),
)

# -- topics (T) ---------------------------------------------------------------------------------
# The topics calls look into one scope, given as a session (its scope) or a scope; with neither, every scope.
TOPICS_SCOPE = (
    Param("session", "Only the topics of this session's scope (give it when serving one person or project).",
          metavar="ID", default_note="with neither, every scope"),
    Param("scope", "Only the topics of this scope (user:<name>, project:<name>, ...); with session, the "
          "session must be in it.", metavar="SCOPE"),
)
ACTIVATE = (Param("include_archived", "Also search archived topics (and restore a match).", type=bool,
                  default=False),) + TOPICS_SCOPE
CONTEXT = (
    Param("budget", "Tokens the context may take (cl100k).", type=int, minimum=1, metavar="TOKENS",
          default_note="[topics] context_budget, 8000"),
    Param("scope", "The scope the session must be in (user:<name>, project:<name>, ...): a session in "
          "another is refused. The context always stays in the session's own scope.", metavar="SCOPE"),
    Param("no_record", "A preview: build the same context and write nothing (no activation change, no log "
          "line).", type=bool, default=False),
)

# -- forgetting (#24) ----------------------------------------------------------------------------
FORGET = (
    Param("session", "Forget every message of this session (its file, its daily-log entries, its topics' "
          "copies); with --match, only matches in it.", metavar="ID"),
    Param("match", "Forget every message, memory, pending note and log entry whose text holds this "
          "(case folded, at least 2 characters).", metavar="TEXT"),
    Param("scope", f"Only records of this scope ({SCOPE_NAMES}) are chosen; an id in another is unknown here.",
          metavar="SCOPE"),
    Param("yes", "Forget what a topic, --session or --match chose; without it they only list what they "
          "would forget.", type=bool, default=False, flags=("-y", "--yes")),
    DRY_RUN,
)
