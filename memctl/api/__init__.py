"""`Memory`: the whole of memctl as one object, as `Database` is the whole of sqlite-utils.

The command line and the MCP server call nothing else: they parse, call a
method and print what it returns. The per-call operations (ingest, index,
search, context, history) are methods; the rest live in groups, one small
class a command group of memctl (memctl/api/groups.py): `memory.topics`, `memory.state`,
`memory.review`, `memory.health`, `memory.hooks`; `memory.cache` is the
tool-output cache itself (memctl/cache). Every result is a dataclass
whose `as_dict()` is the documented JSON schema (docs/api.md).

Every heavy import happens inside the method that needs it, so that making a
Memory costs nothing and `memctl --help` stays fast. A Memory keeps its
search index and embedding model open between calls (a server's searches are
warm); a command line run makes one and uses it once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable

from memctl.api.params import SEARCH_FILTERS, Filters
from memctl.api.groups import HealthGroup, HooksGroup, ReviewGroup, Say, StateGroup, TopicsGroup, given_or
from memctl.store.store import DEFAULT_STORE, STORE_ENV, Store, check_scope
from memctl.text.bounds import need_query, within_bound
from memctl.text.shape import Shape, hidden, shown

if TYPE_CHECKING:
    from memctl.cache import Cache
    from memctl.forget import Forgotten
    from memctl.overview import Shown, Status
    from memctl.governance.governance import Chain
    from memctl.governance.layers import Layered
    from memctl.index.index import UpdateReport
    from memctl.ingest.ingest import IngestResult, Outcome
    from memctl.search.search import Result
    from memctl.context.turn import Context
    from memctl.store.copy import Copied


@dataclass
class Found(Shape):
    """What a search returns: the results, best first, or why no search was needed (`skipped`)."""

    results: list[Result] = shown("Best first; empty: nothing relevant is stored.", default_factory=list)
    skipped: str | None = shown("Why no search was run (adaptive, or a plan naming no section), else null.",
                                default=None)
    why_none: str | None = hidden(default=None)  # the search ran and nothing passed: why (--explain says it)

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __bool__(self) -> bool:
        return bool(self.results)

    def __getitem__(self, index):
        return self.results[index]


@dataclass
class Answer(Shape):
    """One query of a batch search (a line of `memctl search --batch`) and its results, best first."""

    query_id: Any = shown("The line's id.")
    results: list[Result] = shown()


class Memory:
    """A memory store: a directory of plain files, and everything memctl does with it.

    >>> memory = Memory("/tmp/agent/.memory")
    >>> memory.ingest('{"text": "Kestrel uses PostgreSQL"}', kind="memory")
    >>> [r.text for r in memory.search("which database")]
    >>> [t.header["name"] for t in memory.topics.list()]
    """

    def __init__(self, path: str | os.PathLike | None = None, *, say: Say | None = None):
        """The store at `path` (a folder, or a postgresql:// URL), else $MEMCTL_STORE, else ./.memory. `say` gets progress notes meant for a person
        (re-indexing, rebuilds); by default they are dropped."""
        from memctl.runtime import Runtime

        self.store = open_store(path)
        self.say = say
        # The settings (read once, on first use), the clock and the query embedder every call shares.
        self.runtime = Runtime(self.store, open_embedder=_query_embedder)
        self._retriever = None
        self.topics = TopicsGroup(self.store, self.runtime, self._retriever_open)
        self.state = StateGroup(self.store, self.runtime)
        self.review = ReviewGroup(self.store, self.runtime, self._say)
        self.health = HealthGroup(self.store, self.runtime)
        self.hooks = HooksGroup(self.store, self.runtime, self.context, self.ingest)

    @property
    def path(self):
        """What names the store: its folder, or its URL (what Memory(path) opens again)."""
        return self.store.root if self.store.is_folder else self.store.url

    def close(self) -> None:
        """Let go of what the store holds open: a PostgreSQL store's connection and working folder
        (nothing for a folder). A Memory used after it opens them again."""
        if not self.store.is_folder:
            self.store.close()

    @cached_property
    def cache(self) -> "Cache":
        """The store's tool-output cache (memctl/cache, docs/cache.md) on [cache] backend;
        `memory.cache.on("redis://...")` is the same on another. Made on first use, its backend opened
        by its first call, so `memctl cache --help` opens none; it consolidates into long-term memory
        through ingest (memctl/ingest/consolidate.py), which stands above the cache."""
        from memctl.cache import Cache
        from memctl.ingest.consolidate import consolidate

        return Cache(self.runtime, consolidator=consolidate)

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
        return ingest(self.runtime, data, source=source, fmt=fmt, kind=kind, session=session, pending=pending,
                      keep_noise=keep_noise, ttl_hours=ttl_hours, section=section, dry_run=dry_run,
                      on_noise=on_noise, supersedes=list(supersedes), allow_conflict=allow_conflict, scope=scope)

    def index(self, *, rebuild: bool = False,
              progress: Callable[[str, int, int], None] | None = None) -> "UpdateReport":
        """Bring .index/ up to date with the files (a search does this by itself)."""
        from memctl.index import open_index

        self.store.require()
        report = open_index(self.runtime).update(rebuild=rebuild, progress=progress)
        self._retriever = None  # reopen on the next search
        return report

    def forget(self, ids: Iterable[str] = (), *, session: str | None = None, match: str | None = None,
               scope: str | None = None, yes: bool = False, dry_run: bool = False) -> "Forgotten":
        """Take messages, memories, pending notes or log entries out of every file of the store and
        out of .index/, in one transaction (memctl/forget.py): by id (a topic's id: its messages),
        by `session` or by a text `match`. A topic, a session or a match only lists what it would
        forget unless `yes`. `scope`: only records of that scope. NotFound for an unknown id."""
        from memctl.forget import forget

        found = forget(self.runtime, list(ids), session=session, match=match, scope=scope, dry_run=dry_run,
                       yes=yes)
        if found.applied:
            self._retriever = None  # its open index may still hold what was forgotten
        return found

    # -- looking at the store ----------------------------------------------------------
    def show(self, record_id: str, *, scope: str | None = None) -> "Shown":
        """One message, memory, pending note, log entry or topic by id: text, fields, file and line,
        and a memory's version chain or the topics holding a message. NotFound when there is none
        (in `scope`, when one is given: then nothing of another scope shows)."""
        from memctl.overview import show

        return show(self.store, record_id, scope)

    def status(self) -> "Status":
        """The store at a glance: counts by kind and scope, sizes, the index, the model."""
        from memctl.overview import status

        return status(self.runtime)

    def config(self) -> list[dict[str, Any]]:
        """Every setting's effective value and where it came from (config.origins)."""
        from memctl.config import origins

        rows = origins(self.store.config_file)
        if not self.store.is_folder:  # its memctl.toml is read from a private copy: named as the store's
            for row in rows:
                row["source"] = row["source"].replace(str(self.store.config_file), f"{self.store.shown} memctl.toml")
        return rows

    # -- searching -----------------------------------------------------------------
    def search(self, query: str, *, where: Filters | None = None, k: int = 10, mode: str = "hybrid",
               min_score: float | None = None, rank: str = "pipeline", plan: str | None = None,
               adaptive: bool = False, **filters: Any) -> Found:
        """Hybrid search (P3) of what `where` admits; a filter may also be given as a keyword
        (`scope="project:kestrel"`, `kinds=["memory"]`: Filters' fields), in place of where's. `plan`:
        search the sections `state.plan(plan)` picks (and query defaults to it); `adaptive`: skip
        messages that need no memory (P7). When nothing is searched, `Found.skipped` says why."""
        from memctl.search.queries import Query

        where = (where or Filters()).given(**filters)
        if plan is not None:
            within_bound(plan, "plan")
            where = where.given(sections=dict.fromkeys((*where.sections, *self.state.plan(plan).names)))
            query = query or plan
            if not where.sections:
                return Found(skipped="the plan names no section; nothing to search")
        need_query(query)
        if adaptive:
            reason = self.search_needed(query)
            if reason:
                return Found(skipped=f"no search needed: {reason}")
        asked = Query(text=query, k=k, mode=mode, filters=where.rendered(), min_score=min_score, rank=rank)
        (results,) = self._retrieve([asked])
        return Found(results, why_none=asked.why_none)

    def search_batch(self, data: bytes | str, *, source: str = "<input>", **defaults: Any) -> list[Answer]:
        """Many queries, one JSON object a line (`memctl search --batch`); every line is checked
        before any runs. `defaults` are search()'s keywords (k, mode, min_score, rank, where or
        the filters) for lines that name none."""
        from memctl.search.queries import parse_batch

        if isinstance(data, str):
            data = data.encode()
        options = {"k": defaults.pop("k", 10), "mode": defaults.pop("mode", "hybrid"),
                   "min_score": defaults.pop("min_score", None), "rank": defaults.pop("rank", "pipeline")}
        where = (defaults.pop("where", None) or Filters()).given(**defaults)
        options["filters"] = where.rendered()
        queries, ids = parse_batch(data, source, default=options, where=where, filter_params=SEARCH_FILTERS)
        return [Answer(query_id, results) for query_id, results in zip(ids, self._retrieve(queries))]

    @staticmethod
    def filters(where: Filters | None = None, **filters: Any):
        """The one filter definition both searches apply (memctl/index/filters.py), from `where`
        and filter keywords as search() takes them (checked: InputError).
        `tools`, `agents`: memories consolidated from the tool cache (H4)."""
        return (where or Filters()).given(**filters).rendered()

    @staticmethod
    def search_needed(message: str) -> str | None:
        """Why `message` needs no memory search (greeting, acknowledgement, ...), or None (P7)."""
        from memctl.text.adaptive import skip_reason

        return skip_reason(message)

    def layered_search(self, query: str, *, workspace: str | None = None, budget: int = 2000) -> "Layered":
        """Layered result (G1): L0 core, L1 workspace, L2 query within `budget` tokens."""
        from memctl.governance.layers import layered_search

        need_query(query)
        self.store.require()
        return layered_search(self.runtime, query, workspace=workspace, budget=budget, say=self.say,
                              retriever=self._retriever_open())

    def history(self, memory_id: str, *, scope: str | None = None) -> "Chain":
        """The version chain of a memory, oldest first (G6 supersedes links). `scope`: the memory must
        be of that scope or global (else InputError, as for an unknown id), and only such versions show."""
        from memctl.governance.governance import chain, chain_seen_from
        from memctl.governance.lifecycle import load_deleted
        from memctl.store import memoryfile

        check_scope(scope)
        self.store.require()
        with self.store.reading():
            found = chain(memoryfile.load(self.store.memory_md), memory_id, load_deleted(self.store))
        return found if scope is None else chain_seen_from(found, memory_id, scope)

    # -- the per-turn call -----------------------------------------------------------
    def context(self, session: str, message: str, *, system_text: str = "", budget: int | None = None,
                no_record: bool = False, llm_command: str | None = None, scope: str | None = None,
                new_session: bool = False, leave_out: Iterable[str] = ()) -> "Context":
        """The context for the next turn (T5, G1; docs/context.md): the system prompt, the core
        memories, the scope's memories and those the search finds for `message`, the session's
        messages it finds, the relevant topics, the unsplit and recent messages, within `budget`
        tokens ([topics] context_budget). Records the topics' round (activation, T6, T11) unless
        `no_record` (a preview: nothing is written). Only the
        session's scope is read; `scope`, if given, is the scope the session must be in (else InputError).
        `new_session`: a session not stored yet is one without messages (else InputError);
        `leave_out`: kinds of parts not given (e.g. "recent", "unsplit": a client holding the
        conversation), their budget going to the rest."""
        from memctl.context.turn import build

        within_bound(message, "message")
        settings = self.runtime.settings
        command = given_or(llm_command, settings.topics.llm_command)
        return build(self.runtime, self._retriever_open(), session, message, system_text=system_text,
                     budget=given_or(budget, settings.topics.context_budget), record=not no_record,
                     llm_command=command, say=self.say, scope=scope, new_session=new_session,
                     leave_out=frozenset(leave_out))

    def warm(self) -> None:
        """Open what a search needs before the first one comes, for a process that serves many
        (the resident server, `memctl mcp`): numpy, and the query model with its sessions laid out
        for many calls (Embedder.warm: a warm query took 2.4 ms instead of 3.1; bench/README.md "Cited
        measurements"). It may
        run on a thread of its own beside the calls (Runtime.warm_embedder)."""
        import numpy  # noqa: F401

        self.runtime.warm_embedder()

    def learn_ahead(self, rows: int = 128) -> bool:
        """Learn `rows` more rows of the open index before searches need them (a resident server
        calls it between calls); True when there is nothing more to learn. Changes no result."""
        return self._retriever is None or self._retriever.learn_ahead(rows)

    def embed_ahead(self, written: tuple | None) -> tuple | None:
        """If the store was written since `written` (its Store.written_stamp then), start embedding,
        in a thread, the new and changed messages the next index update will embed: `memctl index`
        after `memctl ingest` then finds them embedded (a resident server, `memctl mcp`, call it
        after each call). The stamp now, for the next call. Changes no vector and no output. A
        write is seen in one stat (every committed transaction moves the stamp); a hand edit is
        not, and is embedded by the update as before."""
        import os

        from memctl.index.index import Index

        if not self.store.is_folder:
            return written  # a PostgreSQL store's index embeds in its update (PgIndex.embed_ahead says why)
        stamp = self.store.written_stamp()
        if stamp != written:
            # A store of its own, by absolute path: the thread outlives the call, whose working
            # directory and objects the server's next call replaces.
            Index(self.runtime.on(Store(os.path.abspath(self.store.root)))).embed_ahead()
        return stamp

    def adopt(self, previous: "Memory") -> None:
        """Search with `previous`'s open index, vectors and model: a resident server makes each call's
        Memory anew (its settings and clock are the caller's) and hands it the last one's. Only for
        the same store path; a search still checks the files first, and reopens the index when it
        or the settings changed."""
        if previous._retriever is not None and previous.path == self.path:
            self._retriever = previous._retriever
            self._retriever.runtime, self._retriever.say = self.runtime, self.say

    # -- inside ----------------------------------------------------------------------
    def _say(self, message: str) -> None:
        if self.say is not None:
            self.say(message)

    def _retriever_open(self):
        from memctl.search import open_retriever

        if self._retriever is None:
            self._retriever = open_retriever(self.runtime, say=self.say)
        return self._retriever

    def _retrieve(self, queries) -> list[list["Result"]]:
        return self._retriever_open().search(queries)


def copy_store(source: str | os.PathLike, target: str | os.PathLike, *, dry_run: bool = False) -> "Copied":
    """Copy a whole store, each a folder or a postgresql:// URL, into a new or empty one, in one
    transaction of the target's (memctl/store/copy.py); folder -> PostgreSQL -> folder gives the
    same files back. `dry_run`: check both and say what would go, writing nothing."""
    from memctl.store.copy import copy_store as copy

    stores = open_store(source), open_store(target)
    try:
        return copy(*stores, dry_run=dry_run)
    finally:
        for store in stores:
            if not store.is_folder:
                store.close()


def open_store(name: str | os.PathLike | None = None):
    """The store named by `name` (--store), else $MEMCTL_STORE, else ./.memory: a Store (a folder),
    or for a postgresql:// URL a PostgresStore, whose module (and psycopg with it) is loaded only
    then, so that a folder store starts as it did (here, not a module of its own: one import less
    a call)."""
    from memctl.store import is_url

    name = os.fspath(name or os.environ.get(STORE_ENV) or DEFAULT_STORE)
    if is_url(name):
        from memctl.store.postgres import PostgresStore

        return PostgresStore.opened(name)
    return Store(name)


def read_input(name: str) -> tuple[bytes, str]:
    """The bytes of a file, or of stdin for "-", with the name errors will use (what `ingest`,
    `search --batch` and `state record` are handed); over 256 MiB is an InputError."""
    from memctl.ingest.inputs import read_source

    return read_source(name)


def read_text(name: str) -> str:
    """read_input as UTF-8 text; binary or non-UTF-8 input is an InputError naming the byte's line."""
    from memctl.store.jsonl import decode

    return decode(*read_input(name))


def _query_embedder(settings):
    """The embedder a search uses (a query runs on [embedding] query_threads), calibrated by [retrieval]."""
    from memctl.index.embedders import open_embedder

    return open_embedder(settings.embedding, settings.retrieval)
