"""`Memory`: the whole of memctl as one object, as `Database` is the whole of sqlite-utils.

The command line and the MCP server call nothing else: they parse, call a
method and print what it returns. Results are dataclasses whose `as_dict()`
is the documented JSON schema (docs/api.md), or plain dicts of that schema.

Every heavy import happens inside the method that needs it, so that making a
Memory costs nothing and `memctl --help` stays fast. A Memory keeps its
search index and embedding model open between calls (a server's searches are
warm); a command line run makes one and uses it once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from memctl.store.store import Store

if TYPE_CHECKING:
    from memctl.cache import Cache, Entry
    from memctl.governance.governance import Chain
    from memctl.check import Problem
    from memctl.governance.lifecycle import Change
    from memctl.index.index import UpdateReport
    from memctl.ingest.ingest import IngestResult, Outcome
    from memctl.governance.layers import Layered
    from memctl.search.search import Result
    from memctl.topics.context import Context
    from memctl.topics.daily import DailyReport
    from memctl.store.topicfile import Topic
    from memctl.topics.split import SplitReport
    from memctl.window.state import Plan, RecordResult, ResetResult, State

Say = Callable[[str], None]


@dataclass
class Found:
    """What a search returns: the results, or why no search was needed (`skipped`)."""

    results: list["Result"] = field(default_factory=list)
    skipped: str | None = None

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __bool__(self) -> bool:
        return bool(self.results)

    def __getitem__(self, index):
        return self.results[index]


@dataclass
class Reviewed:
    """Rows of a review step and the pending memories that expired first (P5)."""

    rows: list[dict[str, Any]]
    expired: list[dict[str, Any]] = field(default_factory=list)


class Memory:
    """A memory store: a directory of plain files, and everything memctl does with it.

    >>> memory = Memory("/tmp/agent/.memory")
    >>> memory.ingest('{"text": "Kestrel uses PostgreSQL"}', kind="memory")
    >>> [r.text for r in memory.search("which database")]
    """

    def __init__(self, path: str | os.PathLike | None = None, *, say: Say | None = None):
        """The store at `path`, else $MEMCTL_STORE, else ./.memory. `say` gets progress notes
        meant for a person (re-indexing, rebuilds); by default they are dropped."""
        from memctl.config import Runtime

        self.store = Store.locate(path)
        self.say = say
        # The settings (read once, on first use), the clock and the query embedder every call shares.
        self.runtime = Runtime(self.store.config_file, open_embedder=_query_embedder)
        self._retriever = None
        self._caches: dict[str | None, "Cache"] = {}

    @property
    def path(self):
        return self.store.root

    # -- writing -------------------------------------------------------------------
    def ingest(self, data: bytes | str, *, source: str = "<input>", fmt: str = "auto", kind: str = "auto",
               session: str | None = None, section: str | None = None, pending: bool = False,
               ttl_hours: float | None = None, keep_noise: bool | None = None,
               supersedes: Iterable[str] = (), allow_conflict: bool = False, dry_run: bool = False,
               on_noise: Callable[["Outcome", str], None] | None = None, scope: str | None = None) -> "IngestResult":
        """Store messages or notes (all or nothing); see `memctl ingest --help` for the formats.
        `scope` (user:alice, project:kestrel, ...) is the scope of a new session and of notes that
        name none; a record or a stored session in another scope is an InputError."""
        from memctl.ingest.ingest import ingest

        if isinstance(data, str):
            data = data.encode()
        return ingest(self.store, data, source=source, fmt=fmt, kind=kind, session=session, pending=pending,
                      keep_noise=keep_noise, ttl_hours=ttl_hours, section=section, dry_run=dry_run,
                      on_noise=on_noise, supersedes=list(supersedes), allow_conflict=allow_conflict, scope=scope,
                      settings=self.runtime.settings)

    def index(self, *, rebuild: bool = False,
              progress: Callable[[str, int, int], None] | None = None) -> "UpdateReport":
        """Bring .index/ up to date with the files (a search does this by itself)."""
        from memctl.index.index import Index

        self.store.require()
        report = Index(self.store, self.runtime.settings).update(rebuild=rebuild, progress=progress)
        self._retriever = None  # reopen on the next search
        return report

    # -- searching -----------------------------------------------------------------
    def search(self, query: str, *, k: int = 10, mode: str = "hybrid", kinds: Iterable[str] = (),
               scope: str | None = None, sections: Iterable[str] = (), sources: Iterable[str] = (),
               sessions: Iterable[str] = (), tools: Iterable[str] = (), agents: Iterable[str] = (),
               since: str | None = None, until: str | None = None, min_score: float | None = None,
               rank: str = "pipeline", include_archived: bool = False, plan: str | None = None,
               adaptive: bool = False) -> Found:
        """Hybrid search (P3). `plan`: search the sections `state_plan(plan)` picks (and query
        defaults to it); `adaptive`: skip messages that need no memory (P7). When nothing is
        searched, `Found.skipped` says why."""
        from memctl.search.search import Query

        sections = tuple(sections)
        if plan is not None:
            sections = tuple(dict.fromkeys((*sections, *self.state_plan(plan).names)))
            query = query or plan
            if not sections:
                return Found(skipped="the plan names no section; nothing to search")
        self._need_query(query)
        if adaptive:
            reason = self.search_needed(query)
            if reason:
                return Found(skipped=f"no search needed: {reason}")
        filters = self.filters(kinds=kinds, scope=scope, sections=sections, sources=sources, sessions=sessions,
                               tools=tools, agents=agents, since=since, until=until,
                               include_archived=include_archived)
        (results,) = self._retrieve([Query(text=query, k=k, mode=mode, filters=filters, min_score=min_score,
                                           rank=rank)])
        return Found(results)

    def search_batch(self, data: bytes | str, *, source: str = "<input>",
                     **defaults: Any) -> list[tuple[Any, list["Result"]]]:
        """Many queries, one JSON object a line (`memctl search --batch`); every line is checked
        before any runs. `defaults` are search()'s filter keywords for lines that name none."""
        from memctl.search.queries import parse_batch

        if isinstance(data, str):
            data = data.encode()
        options = {"k": defaults.pop("k", 10), "mode": defaults.pop("mode", "hybrid"),
                   "min_score": defaults.pop("min_score", None), "filters": self.filters(**defaults)}
        queries, ids = parse_batch(data, source, default=options)
        return list(zip(ids, self._retrieve(queries)))

    @staticmethod
    def filters(*, kinds: Iterable[str] = (), scope: str | None = None, sections: Iterable[str] = (),
                sources: Iterable[str] = (), sessions: Iterable[str] = (), tools: Iterable[str] = (),
                agents: Iterable[str] = (), since: str | None = None, until: str | None = None,
                include_archived: bool = False):
        """The one filter definition of a search, from option values (checked: InputError).
        `tools`, `agents`: memories consolidated from the tool cache (H4)."""
        from memctl.search.queries import filters_from

        filters = filters_from(kinds=kinds, scope=scope, sections=sections, sources=sources,
                               sessions=sessions, tools=tools, agents=agents, since=since, until=until)
        if include_archived:  # archived means "not searched by default" (G5), superseded means never
            filters.exclude_status = tuple(s for s in filters.exclude_status if s != "archived")
        return filters

    @staticmethod
    def search_needed(message: str) -> str | None:
        """Why `message` needs no memory search (greeting, acknowledgement, ...), or None (P7)."""
        from memctl.text.adaptive import skip_reason

        return skip_reason(message)

    def layered_search(self, query: str, *, workspace: str | None = None, budget: int = 2000) -> "Layered":
        """Layered result (G1): L0 core, L1 workspace, L2 query within `budget` tokens."""
        from memctl.governance.layers import layered_search

        self._need_query(query)
        self.store.require()
        return layered_search(self.store, query, workspace=workspace, budget=budget, say=self.say,
                              retriever=self._retriever_open(), gov=self.runtime.settings.governance)

    def history(self, memory_id: str) -> "Chain":
        """The version chain of a memory, oldest first (G6 supersedes links)."""
        from memctl.governance.governance import chain
        from memctl.governance.lifecycle import load_deleted
        from memctl.store import memoryfile

        self.store.require()
        with self.store.reading():
            return chain(memoryfile.load(self.store.memory_md), memory_id, load_deleted(self.store))

    # -- review (P5, G5) -------------------------------------------------------------
    def drop_expired(self, *, dry_run: bool = False) -> list[dict[str, Any]]:
        """Remove pending memories whose time ran out; every review step does this first."""
        from memctl.governance.review import drop_expired

        dropped = drop_expired(self.store, dry_run=dry_run)
        verb = "would drop" if dry_run else "dropped"
        for item in dropped:  # said now: the review step after this may still fail
            self._say(f"memctl: {verb} expired pending memory '{item['id']}' (expired {item['expires_at']})")
        return dropped

    def review_pending(self) -> Reviewed:
        """Pending memories with their age and time left (hours), after dropping expired ones."""
        from memctl.governance.review import listing

        self.store.require()
        expired = self.drop_expired()
        return Reviewed(listing(self.store), expired)

    def confirm(self, ids: Iterable[str], *, allow_conflict: bool = False, supersedes: Iterable[str] = (),
                dry_run: bool = False) -> Reviewed:
        """Write pending memories to MEMORY.md (all or nothing)."""
        from memctl.governance.review import confirm

        expired = self.drop_expired(dry_run=dry_run)
        rows = confirm(self.store, list(ids), dry_run=dry_run, allow_conflict=allow_conflict,
                       supersedes=list(supersedes), settings=self.runtime.settings)
        return Reviewed(rows, expired)

    def reject(self, ids: Iterable[str], *, dry_run: bool = False) -> Reviewed:
        """Drop pending memories without writing them (all or nothing)."""
        from memctl.governance.review import reject

        expired = self.drop_expired(dry_run=dry_run)
        return Reviewed(reject(self.store, list(ids), dry_run=dry_run), expired)

    def lifecycle(self, *, dry_run: bool = False, hard: bool = False) -> tuple[list["Change"], list[dict]]:
        """Demote, archive and delete memories by health score (G5); (changes, expired pending)."""
        from memctl.governance.lifecycle import run

        expired = self.drop_expired(dry_run=dry_run)
        return run(self.store, dry_run=dry_run, hard=hard, gov=self.runtime.settings.governance), expired

    # -- health ----------------------------------------------------------------------
    def health_scores(self, *, sort: str = "health") -> list[dict[str, Any]]:
        """Health score of every memory with its parts (G4)."""
        from memctl.governance.health import scores

        self.store.require()
        with self.store.reading():
            return scores(self.store, sort=sort, gov=self.runtime.settings.governance)

    def health_check(self) -> list["Problem"]:
        """Every problem of the store, like git fsck; writes nothing."""
        from memctl.check import check

        return check(self.store)

    def health_fix(self, problems: list["Problem"], *, dry_run: bool = False) -> list[str]:
        """Repair what is safe among `problems`; one line per repair (made or, dry, that would be)."""
        from memctl.check import fix

        return fix(self.store, problems, dry_run=dry_run)

    # -- the section window (W) ------------------------------------------------------
    def state_plan(self, message: str) -> "Plan":
        """The MEMORY.md sections worth searching for `message` (start of a turn)."""
        from memctl.window.state import plan

        return plan(self.store, message, settings=self.runtime.settings.state)

    def state_record(self, sections: Iterable[str] = (), *, search_output: bytes | None = None,
                     source: str = "<input>", summary: str | None = None,
                     dry_run: bool = False) -> "RecordResult":
        """Record the sections a turn used (end of a turn): `sections`, plus those of
        `memctl search --json` output given as `search_output`."""
        from memctl.window.state import hits_from_search_output, record

        hits = list(sections)
        if search_output is not None:
            hits += hits_from_search_output(search_output, source)
        return record(self.store, hits, summary=summary, dry_run=dry_run, settings=self.runtime.settings.state)

    def state_show(self) -> dict[str, Any] | None:
        """index_state.json as `state show --json` prints it, or None before the first turn."""
        from memctl.window.state import show

        return show(self.store, settings=self.runtime.settings.state)

    def state_reset(self, *, dry_run: bool = False) -> "ResetResult":
        from memctl.window.state import reset

        return reset(self.store, dry_run=dry_run, settings=self.runtime.settings.state)

    def state_config(self, *, window: int | None = None, threshold: float | None = None,
                     dry_run: bool = False) -> "State":
        from memctl.window.state import configure

        return configure(self.store, window=window, threshold=threshold, dry_run=dry_run,
                         settings=self.runtime.settings.state)

    # -- topics (T) ------------------------------------------------------------------
    def split(self, session: str, *, system_text: str = "", keep_recent: int | None = None, force: bool = False,
              dry_run: bool = False, llm_command: str | None = None,
              progress: Say | None = None, scope: str | None = None) -> "SplitReport":
        """Move the session's older unsplit messages into topic files when its context is over the
        threshold (or `force`); with an LLM command ([topics] llm_command unless given) it chooses
        where messages go (§6.4) and writes the touched topics' names and summaries (prompts/summary.md).
        `progress` hears what a long split is doing. Only topics of the session's scope take its
        messages; `scope`, if given, is the scope the session must be in (else InputError)."""
        from memctl.topics import llm
        from memctl.topics.split import split

        settings = self.runtime.settings.topics
        command = _given_or(llm_command, settings.llm_command)
        choose = llm.chooser(self.store, command, settings.llm_timeout, settings.llm_batch) if command else None
        describe = llm.describer(self.store, command, settings.llm_timeout, settings.llm_parallel,
                                 settings.summary_bytes) if command else None
        return split(self.store, session, system_text=system_text, keep_recent=keep_recent, force=force,
                     dry_run=dry_run, choose=choose, describe=describe, progress=progress, scope=scope,
                     settings=self.runtime.settings)

    # The topics calls below look into one scope, given as a session (its scope) or a scope (both:
    # they must agree); given neither, into the whole store.
    def topics(self, *, scope: str | None = None, session: str | None = None) -> list["Topic"]:
        """The topics of a scope (or every topic), oldest first."""
        from memctl.store.topicfile import in_scope, load_topics

        looked_in = self._scope_for(session, scope)
        with self.store.reading():
            return list(in_scope(load_topics(self.store), looked_in).values())

    def topic(self, topic_id: str, *, scope: str | None = None, session: str | None = None) -> "Topic":
        """One topic (header and messages); InputError when there is none (in the scope looked into)."""
        from memctl.errors import InputError
        from memctl.store.topicfile import load_topic, topic_path

        from memctl.topics.daily import merged_into

        looked_in = self._scope_for(session, scope)
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

    def context(self, session: str, message: str, *, system_text: str = "", budget: int | None = None,
                record: bool = True, llm_command: str | None = None, scope: str | None = None) -> "Context":
        """The main context for the next turn (T5): system prompt, relevant topics, unsplit and recent
        messages within `budget` tokens ([topics] context_budget). Records the round's scores and
        activation changes (T6, T11) unless `record` is False; an amnesia cue searches dormant topics (T7).
        Only topics of the session's scope are read; `scope`, if given, is the scope the session must
        be in (else InputError)."""
        from memctl.topics.context import build

        settings = self.runtime.settings.topics
        command = _given_or(llm_command, settings.llm_command)
        return build(self.store, self._retriever_open(), session, message, system_text=system_text,
                     budget=_given_or(budget, settings.context_budget), record=record,
                     llm_command=command, say=self.say, scope=scope, settings=settings)

    def topics_activate(self, query: str, *, include_archived: bool = False, llm_command: str | None = None,
                        scope: str | None = None, session: str | None = None) -> dict[str, Any]:
        """Activate a topic by id, or the dormant topics matching `query` (T7 explicit path), of the
        scope looked into; archived ones only with `include_archived`. With an LLM command ([topics]
        llm_command unless given) the design 001 §6.3 routing prompt chooses; a bad answer falls back
        to the built-in search and says why under "fallback". {"activated", "candidates", "method",
        "fallback", "no_match_reason"}."""
        from memctl.topics.context import activate

        self._need_query(query)
        looked_in = self._scope_for(session, scope)
        settings = self.runtime.settings.topics
        command = _given_or(llm_command, settings.llm_command)
        return activate(self.store, self._retriever_open(), query, include_archived=include_archived,
                        llm_command=command, scope=looked_in, settings=settings)

    def topics_log(self, *, since: str | None = None) -> list[dict[str, Any]]:
        """The tuning log (T11): rounds' scores and activation events, oldest first."""
        from memctl.topics import log

        with self.store.reading():
            return log.read(self.store, since)

    def topics_archived(self, *, since: str | None = None, scope: str | None = None,
                        session: str | None = None) -> list[dict[str, Any]]:
        """Headers of archived topics (T12) of the scope looked into, found by month: `since` is
        YYYY-MM or a date. Each header's `scope` is its scope (None: of several), also for a topic
        archived before scopes."""
        from memctl.store.topicfile import archived_scope, archived_topics

        looked_in = self._scope_for(session, scope)
        with self.store.reading():
            return [{**h, "scope": archived_scope(self.store, h)} for h in archived_topics(self.store, since, looked_in)]

    def review_daily(self, *, dry_run: bool = False, llm_command: str | None = None) -> "DailyReport":
        """The daily review (T12, P8): compress today's topics, archive old dormant ones, merge
        same-subject topics and link related ones, summarise idle sessions. With an LLM command
        ([topics] llm_command unless given) it merges, links and compresses; a bad answer raises
        LLMAnswerError and nothing is written."""
        from memctl.topics.daily import review

        self.store.require()
        command = _given_or(llm_command, self.runtime.settings.topics.llm_command)
        return review(self.store, dry_run=dry_run, llm_command=command, settings=self.runtime.settings)

    def topic_links(self, topic_id: str) -> list[dict[str, Any]]:
        """The links of a topic (T1), oldest first: {"kind": "parent" | "child" | "related" |
        "merged-into" | "merged-from", "topic_id": the other topic, "at"}."""
        from memctl.store.topicfile import links_of

        with self.store.reading():
            return links_of(self.store, topic_id)

    # -- shared working memory for tool outputs (H1-H5, docs/cache.md) --------------------
    def cache(self, backend: str | None = None) -> "Cache":
        """The tool-output cache of this store, on [cache] backend or `backend` (files, redis://...):
        run, get, put, stats, consolidate, search, clear (memctl/cache/__init__.py)."""
        if backend not in self._caches:
            from memctl.cache import Cache
            from memctl.ingest.consolidate import consolidate

            self._caches[backend] = Cache(self.store, backend=backend, consolidator=consolidate, runtime=self.runtime)
        return self._caches[backend]

    def cache_get(self, scope: str, tool: str, args: Any) -> "Entry | None":
        """The stored result of tool(args) in the run `scope` (a hit), or None (a miss)."""
        return self.cache().get(scope, tool, args)

    def cache_put(self, scope: str, tool: str, args: Any, output: bytes | str, *, exit_code: int = 0,
                  error: str = "", agent: str = "", ttl: float | None = None) -> "Entry":
        """Store a tool call's result for every agent of the run; empty and failed ones too."""
        return self.cache().put(scope, tool, args, output, exit_code=exit_code, stderr=error, agent=agent, ttl=ttl)

    def cache_search(self, query: str, *, scope: str | None = None, tools: Iterable[str] = (),
                     agents: Iterable[str] = (), k: int = 5) -> list["Result"]:
        """What the run's agents already found: the consolidated tool results (design 004)."""
        return self.cache().search(query, scope=scope, tools=tuple(tools), agents=tuple(agents), k=k)

    def cache_stats(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Hits, misses, negative hits, keys and bytes per scope and tool."""
        return self.cache().stats(scope)

    # -- inside ----------------------------------------------------------------------
    def _say(self, message: str) -> None:
        if self.say is not None:
            self.say(message)

    def _scope_for(self, session: str | None, scope: str | None) -> str | None:
        """The scope a topics call looks into: the session's (InputError if `scope` says another),
        else `scope` (checked), else None: every scope."""
        from memctl.errors import InputError
        from memctl.store.memoryfile import check_field
        from memctl.topics.split import scope_of_session, session_messages

        if session is not None:
            with self.store.reading():
                return scope_of_session(self.store, session, session_messages(self.store, session), scope)
        if scope is not None and check_field("scope", scope):
            raise InputError(check_field("scope", scope), source="--scope")
        return scope

    def _retriever_open(self):
        from memctl.search.search import Retriever

        if self._retriever is None:
            self._retriever = Retriever(self.store, say=self.say, runtime=self.runtime)
        return self._retriever

    def _retrieve(self, queries) -> list[list["Result"]]:
        return self._retriever_open().search(queries)

    @staticmethod
    def _need_query(query: str | None) -> None:
        from memctl.errors import InputError

        if not query or not query.strip():
            raise InputError("give a query", source="query")


def _query_embedder(settings):
    """The embedder a search uses: [embedding] on query_threads, calibrated by [retrieval]."""
    from dataclasses import replace

    from memctl.index.embedders import open_embedder

    return open_embedder(replace(settings.embedding, threads=settings.embedding.query_threads), settings.retrieval)


def _given_or(given: Any, configured: Any) -> Any:
    """What the caller gave (a flag; "" is given too: no LLM) wins over the settings (config.load: for a
    program to run, the environment or the user's config.toml, never the store's memctl.toml)."""
    return given if given is not None else configured
