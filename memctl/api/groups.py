"""The command groups of `Memory`: topics, the section window, review, health and hooks
(`memory.cache` is memctl.cache.Cache itself).

`memory.topics.list()`, `memory.state.plan(message)`, ...: one small class a command group of
memctl, each holding its Memory, as sqlite-utils' `db["table"]` holds its Database; it is given
the parts of its Memory it uses. What a group returns is a shape (memctl/text/shape.py); those
that are not one of the layer below are here, each the JSON its `--json` command and MCP tool print.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal

from memctl.store.store import check_scope
from memctl.text.bounds import need_query
from memctl.text.shape import Shape, derived, hidden, shown

if TYPE_CHECKING:
    from memctl.governance.review import ConfirmedRow, ExpiredRow, PendingRow, RejectedRow
    from memctl.runtime import Runtime
    from memctl.check import Problem
    from memctl.governance.lifecycle import Change
    from memctl.search.search import Retriever
    from memctl.store.store import Store
    from memctl.store.topicfile import Topic
    from memctl.topics.daily import DailyReport
    from memctl.topics.split import SplitReport
    from memctl.window.state import Plan, RecordResult, ResetResult, State
    from memctl.hooks.protocol import Answer as HookAnswer, Setup as HookSetup

Say = Callable[[str], None]


# -- topics (T, docs/topics.md) ---------------------------------------------------------------
@dataclass
class Activation(Shape):
    """What an explicit activation did (T7)."""

    activated: list[dict[str, Any]] = shown('The topics brought back: {"topic_id", "name"}.')
    candidates: list[dict[str, Any]] = shown('The topics weighed: {"topic_id", "name", "score", "relevance"?, '
                                             '"reason"?}.')
    method: Literal["id", "builtin", "llm"] = shown("How the topics were found.")
    fallback: str | None = shown("Why an LLM's answer was not used, or null.")
    no_match_reason: str | None = shown("Why nothing matched, or null.")


@dataclass
class TopicLink(Shape):
    """A link of a topic (T1), named from the topic's side."""

    kind: Literal["parent", "child", "related", "merged-into", "merged-from"] = shown()
    topic_id: str = shown("The topic at the other end.")
    at: str | None = shown("When the link was made.")


@dataclass
class TopicRow(Shape):
    """A topic as a list gives it (`memctl topics list --json`, the MCP topics_list tool)."""

    id: str = shown()
    name: str | None = shown()
    state: Literal["active", "dormant", "archived"] | None = shown("active: in the context when relevant; "
                                                                   "dormant: found again by an activation or a "
                                                                   "\"you forgot\"; archived: only on request.")
    messages: int | None = shown("Messages in it.")
    tokens: int | None = shown()
    updated: str | None = shown("When it last changed.")
    parent: str | None = shown("The topic it is a sub-topic of.")
    summary: str | None = shown()
    scope: str | None = shown("Its scope; null: an old topic of several scopes.")

    @classmethod
    def of(cls, topic: "Topic") -> "TopicRow":
        header = topic.header
        return cls(header.get("id"), header.get("name"), header.get("state"), header.get("messages"),
                   header.get("tokens"), header.get("updated"), header.get("parent"), header.get("summary"),
                   topic.scope)


@dataclass
class TopicShown(Shape):
    """One topic with its links and messages (`memctl topics show --json`, the MCP topics_show tool).
    Neither carries the topic file's record tag ("type"): the key holding each says what it is."""

    topic: dict[str, Any] = shown('Its header fields (name, summary, state, size, ...) with "links", a list '
                                  "of TopicLink (its kind, topic_id and at).")
    messages: list[dict[str, Any]] = shown('{"id", "session", "role", "speaker", "text", "ts"}')

    @classmethod
    def of(cls, topic: "Topic", links: list[TopicLink]) -> "TopicShown":
        header = {k: v for k, v in topic.header.items() if k != "type"}
        return cls({**header, "links": [link.as_dict() for link in links]},
                   [{k: v for k, v in m.items() if k != "type"} for m in topic.messages])


@dataclass
class TopicLog(Shape):
    """The tuning log (T11): rounds' scores and activation events, oldest first."""

    events: list[dict[str, Any]] = shown()


class TopicsGroup:
    """Topic files (T1-T12). The calls that look into one scope take it as a session (its scope) or a
    scope (both: they must agree); given neither, they look into the whole store."""

    def __init__(self, store: "Store", runtime: "Runtime", retriever: Callable[[], "Retriever"]):
        self.store = store
        self.runtime = runtime
        self.retriever = retriever  # the Memory's, opened on first use and kept warm

    def split(self, session: str, *, system_text: str = "", keep_recent: int | None = None, force: bool = False,
              dry_run: bool = False, llm_command: str | None = None,
              progress: Callable[[str, int, int], None] | None = None, scope: str | None = None) -> "SplitReport":
        """Move the session's older unsplit messages into topic files when its context is over the
        threshold (or `force`); with an LLM command ([topics] llm_command unless given) it chooses
        where messages go (§6.4) and writes the touched topics' names and summaries (prompts/summary.md).
        `progress(stage, done, total)` hears how far a long split is. Only topics of the session's scope take its
        messages; `scope`, if given, is the scope the session must be in (else InputError)."""
        from memctl.topics import llm
        from memctl.topics.split import split

        settings = self.runtime.settings.topics
        command = given_or(llm_command, settings.llm_command)
        choose = llm.chooser(self.store, command, settings.llm_timeout, settings.llm_batch) if command else None
        describe = llm.describer(self.store, command, settings.llm_timeout, settings.llm_parallel,
                                 settings.summary_bytes) if command else None
        return split(self.runtime, session, system_text=system_text, keep_recent=keep_recent, force=force,
                     dry_run=dry_run, choose=choose, describe=describe, progress=progress, scope=scope)

    def list(self, *, scope: str | None = None, session: str | None = None) -> list["Topic"]:
        """The topics of a scope (or every topic), oldest first."""
        from memctl.store.topicfile import in_scope, load_topics

        self.store.require()  # a wrong --store is an error, not "no topics" (exit 1)
        looked_in = scope_looked_into(self.store, session, scope)
        with self.store.reading():
            return [*in_scope(load_topics(self.store), looked_in).values()]

    def show(self, topic_id: str, *, scope: str | None = None, session: str | None = None) -> "Topic":
        """One topic (header and messages); a merged topic's id finds the topic it went into.
        InputError when there is none (in the scope looked into)."""
        from memctl.errors import InputError
        from memctl.store.topicfile import load_topic, topic_path
        from memctl.topics.daily import merged_into

        looked_in = scope_looked_into(self.store, session, scope)
        path = topic_path(self.store, topic_id)
        with self.store.reading():
            found = load_topic(path) if "/" not in topic_id else None
            if found is None and "/" not in topic_id and merged_into(self.store, topic_id):
                found = load_topic(topic_path(self.store, merged_into(self.store, topic_id)))
        if found is None:
            raise InputError(f"no topic '{topic_id}'", source=str(path))
        if looked_in is not None and found.scope != looked_in:  # said as of a missing one: nothing of it shows
            raise InputError(f"no topic '{topic_id}' in scope {looked_in}", source=str(path))
        return found

    def activate(self, query: str, *, include_archived: bool = False, llm_command: str | None = None,
                 scope: str | None = None, session: str | None = None) -> Activation:
        """Activate a topic by id, or the dormant topics matching `query` (T7 explicit path), of the
        scope looked into; archived ones only with `include_archived`. With an LLM command ([topics]
        llm_command unless given) the design 001 §6.3 routing prompt chooses; a bad answer falls back
        to the built-in search and says why in `fallback`."""
        from memctl.topics.round import activate

        need_query(query)
        looked_in = scope_looked_into(self.store, session, scope)
        settings = self.runtime.settings.topics
        command = given_or(llm_command, settings.llm_command)
        return Activation(**activate(self.runtime, self.retriever(), query, include_archived=include_archived,
                                     llm_command=command, scope=looked_in))

    def log(self, *, since: str | None = None) -> TopicLog:
        from memctl.topics import log

        self.store.require()
        with self.store.reading():
            return TopicLog(log.read(self.store, since))

    def archived(self, *, since: str | None = None, scope: str | None = None,
                 session: str | None = None) -> list["Topic"]:
        """Archived topics (T12) of the scope looked into, headers only, found by month: `since` is
        YYYY-MM or a date. Each header names its scope (None: of several), also for a topic archived
        before scopes."""
        from memctl.store.topicfile import Topic, archived_scope, archived_topics

        self.store.require()
        looked_in = scope_looked_into(self.store, session, scope)
        with self.store.reading():
            return [Topic({**header, "scope": archived_scope(self.store, header)})
                    for header in archived_topics(self.store, since, looked_in)]

    def links(self, topic_id: str) -> list[TopicLink]:
        """The links of a topic (T1), oldest first."""
        from memctl.store.topicfile import links_of

        with self.store.reading():
            return [TopicLink(**link) for link in links_of(self.store, topic_id)]


# -- the section window (W, docs/state.md) ----------------------------------------------------
@dataclass
class WindowShown:
    """index_state.json as `state show --json` prints it; `fields` is None before the first turn."""

    fields: dict[str, Any] | None


class StateGroup:
    def __init__(self, store: "Store", runtime: "Runtime"):
        self.store = store
        self.runtime = runtime

    def plan(self, message: str) -> "Plan":
        """The MEMORY.md sections worth searching for `message` (start of a turn)."""
        from memctl.text.bounds import within_bound
        from memctl.window.state import plan

        return plan(self.runtime, within_bound(message, "message"))

    def record(self, sections: Iterable[str] = (), *, search_output: bytes | None = None,
               source: str = "<input>", summary: str | None = None, dry_run: bool = False) -> "RecordResult":
        """Record the sections a turn used (end of a turn): `sections`, plus those of
        `memctl search --json` output given as `search_output`."""
        from memctl.window.state import hits_from_search_output, record

        hits = [*sections]
        if search_output is not None:
            hits += hits_from_search_output(search_output, source)
        return record(self.runtime, hits, summary=summary, dry_run=dry_run)

    def show(self) -> WindowShown:
        from memctl.window.state import show

        return WindowShown(show(self.runtime))

    def reset(self, *, dry_run: bool = False) -> "ResetResult":
        from memctl.window.state import reset

        return reset(self.runtime, dry_run=dry_run)

    def configure(self, *, window: int | None = None, threshold: float | None = None,
                  dry_run: bool = False) -> "State":
        from memctl.window.state import configure

        return configure(self.runtime, window=window, threshold=threshold, dry_run=dry_run)


# -- review (P5, G5, T12) -----------------------------------------------------------------------
@dataclass
class Reviewed(Shape):
    """Rows of a review step (`step`: pending, confirmed or rejected, the rows' key) and the pending
    memories that expired and were dropped first (P5)."""

    rows: list[dict[str, Any]] = hidden()
    expired: list[ExpiredRow] = shown("Pending memories dropped first because their time ran out.",
                                      default_factory=list)
    step: ClassVar[str]

    key_order = ("step_rows", "expired")


@dataclass
class PendingReview(Reviewed):
    """The pending memories that have not expired, in file order, and those that expired."""

    step = "pending"

    @derived(name="pending")
    def step_rows(self) -> list[PendingRow]:
        return self.rows


@dataclass
class Confirmation(Reviewed):
    """The pending memories written to MEMORY.md, and those that expired first."""

    step = "confirmed"

    @derived(name="confirmed")
    def step_rows(self) -> list[ConfirmedRow]:
        return self.rows


@dataclass
class Rejection(Reviewed):
    """The pending memories dropped at the user's word, and those that expired first."""

    step = "rejected"

    @derived(name="rejected")
    def step_rows(self) -> list[RejectedRow]:
        return self.rows


@dataclass
class Lifecycle(Shape):
    """The lifecycle's changes by health score (G5) and the expired pending memories dropped first."""

    changes: list[Change] = shown()
    expired: list[ExpiredRow] = shown(default_factory=list)


class ReviewGroup:
    def __init__(self, store: "Store", runtime: "Runtime", say: Say):
        self.store = store
        self.runtime = runtime
        self.say = say  # hears each expired pending memory dropped

    def pending(self, *, scope: str | None = None) -> Reviewed:
        """Pending memories with their age and time left (hours); `scope`: only that scope's."""
        from memctl.governance.review import listing

        self.store.require()
        check_scope(scope)
        expired = self._drop_expired(scope=scope)
        return PendingReview(listing(self.runtime, scope=scope), expired)

    def confirm(self, ids: Iterable[str], *, allow_conflict: bool = False, supersedes: Iterable[str] = (),
                dry_run: bool = False, scope: str | None = None) -> Reviewed:
        """Write pending memories to MEMORY.md (all or nothing); `scope`: an id of another is unknown."""
        from memctl.governance.review import confirm

        check_scope(scope)
        expired = self._drop_expired(dry_run=dry_run, scope=scope)
        rows = confirm(self.runtime, [*ids], dry_run=dry_run, allow_conflict=allow_conflict,
                       supersedes=[*supersedes], scope=scope)
        return Confirmation(rows, expired)

    def reject(self, ids: Iterable[str], *, dry_run: bool = False, scope: str | None = None) -> Reviewed:
        """Drop pending memories without writing them (all or nothing); `scope`: an id of another is unknown."""
        from memctl.governance.review import reject

        check_scope(scope)
        expired = self._drop_expired(dry_run=dry_run, scope=scope)
        return Rejection(reject(self.runtime, [*ids], dry_run=dry_run, scope=scope), expired)

    def lifecycle(self, *, dry_run: bool = False, hard: bool = False) -> Lifecycle:
        """Demote, archive and delete memories by health score (G5)."""
        from memctl.governance.lifecycle import run

        self.store.require()  # a cron line naming the wrong store must fail, not pass with nothing to do
        expired = self._drop_expired(dry_run=dry_run)
        return Lifecycle(run(self.runtime, dry_run=dry_run, hard=hard), expired)

    def daily(self, *, dry_run: bool = False, llm_command: str | None = None,
              progress: Callable[[str, int, int], None] | None = None) -> "DailyReport":
        """The daily review (T12, P8): compress today's topics, archive old dormant ones, merge
        same-subject topics and link related ones, summarise idle sessions. With an LLM command
        ([topics] llm_command unless given) it merges, links and compresses; a bad answer raises
        LLMAnswerError and nothing is written. `progress(stage, done, total)` hears how far it is."""
        from memctl.topics.daily import review

        self.store.require()
        command = given_or(llm_command, self.runtime.settings.topics.llm_command)
        return review(self.runtime, dry_run=dry_run, llm_command=command, progress=progress)

    def _drop_expired(self, *, dry_run: bool = False, scope: str | None = None) -> list[dict[str, Any]]:
        """Remove pending memories (of `scope`) whose time ran out: every review step does this first."""
        from memctl.governance.review import drop_expired

        dropped = drop_expired(self.runtime, dry_run=dry_run, scope=scope)
        verb = "would drop" if dry_run else "dropped"
        for item in dropped:  # said now: the review step after this may still fail
            self.say(f"memctl: {verb} expired pending memory '{item['id']}' (expired {item['expires_at']})")
        return dropped


# -- health (G4) --------------------------------------------------------------------------------
@dataclass
class HealthScores(Shape):
    """The health score of every memory with its parts, one dict a memory."""

    rows: list[dict[str, Any]] = shown('{"id", "line", "section", "status", "core", "health", "recency_decay", '
                                       '"access_frequency", "user_weight", "access_count", "age_days", "summary"}',
                                       name="scores")


class HealthGroup:
    def __init__(self, store: "Store", runtime: "Runtime"):
        self.store = store
        self.runtime = runtime

    def scores(self, *, sort: str = "health") -> HealthScores:
        from memctl.governance.health import scores

        self.store.require()
        with self.store.reading():
            return HealthScores(scores(self.runtime, sort=sort))

    def check(self) -> list["Problem"]:
        """Every problem of the store, like git fsck; writes nothing."""
        from memctl.check import check

        return check(self.runtime)

    def fix(self, problems: list["Problem"], *, dry_run: bool = False) -> list[str]:
        """Repair what is safe among `problems`; one line per repair (made or, dry, that would be)."""
        from memctl.check import fix

        return fix(self.runtime, problems, dry_run=dry_run)


# -- agent clients' hooks (memctl/hooks/, README "Hooks") ----------------------------------------------
class HooksGroup:
    """Memory given to each prompt and the conversation kept, by a client's hooks, without the model
    calling a tool. `context` and `ingest` are its Memory's."""

    def __init__(self, store: "Store", runtime: "Runtime", context: Callable[..., Any], ingest: Callable[..., Any]):
        self.store = store
        self.runtime = runtime
        self._context = context
        self._ingest = ingest

    def run(self, client: str, event: bytes) -> "HookAnswer":
        """Handle one hook event of `client` (its JSON, as the client gives it on stdin): a prompt gets
        the context memory has for it, within [hooks] context_budget tokens; the end of a turn, a
        compaction or the end of a session stores the conversation's new messages. Raises MemctlError
        (or OSError): a client's hook must then print nothing and let the agent go on."""
        from memctl.hooks import protocol

        settings = self.runtime.settings
        return protocol.run(_client(client), event, store=self.store, budget=settings.hooks.context_budget,
                            timeout=settings.hooks.timeout_seconds, max_text_bytes=settings.ingest.max_text_bytes,
                            context=self._context, ingest=self._ingest)

    def install(self, client: str, *, settings: str | None = None, project: bool = False,
                dry_run: bool = False) -> "HookSetup":
        """Add the hooks that run `memctl hooks run CLIENT` on this store to the client's settings
        (the user's, the project's, or the file `settings`), keeping everything else in it."""
        from memctl.hooks import protocol

        spec = _client(client)
        return protocol.install(spec, spec.settings_path(settings=settings, project=project), self.store.name_to_keep,
                                dry_run=dry_run)

    def uninstall(self, client: str, *, settings: str | None = None, project: bool = False,
                  dry_run: bool = False) -> "HookSetup":
        """Take out of the client's settings exactly the hooks `install` added for this store."""
        from memctl.hooks import protocol

        spec = _client(client)
        return protocol.install(spec, spec.settings_path(settings=settings, project=project), self.store.name_to_keep,
                                dry_run=dry_run, remove=True)

    def note(self, client: str) -> str:
        """What the user must still do in the client for its hooks to run ("" for nothing)."""
        return _client(client).install_note


def _client(client: str):
    from memctl.errors import InputError
    from memctl.hooks import CLIENTS, client as hook_client

    if client not in CLIENTS:
        raise InputError(f"no hooks for client {client!r:.40}; one of {', '.join(CLIENTS)}", source="CLIENT")
    return hook_client(client)


def scope_looked_into(store: "Store", session: str | None, scope: str | None) -> str | None:
    """The scope a topics call looks into: the session's (InputError if `scope` says another),
    else `scope` (checked), else None: every scope."""
    from memctl.topics.split import scope_of_session, session_messages

    if session is not None:
        with store.reading():
            return scope_of_session(store, session, session_messages(store, session), scope)
    return check_scope(scope)


def given_or(given: Any, configured: Any) -> Any:
    """What the caller gave (a flag; "" is given too: no LLM) wins over the settings (config.load: for a
    program to run, the environment or the user's config.toml, never the store's memctl.toml)."""
    return given if given is not None else configured
