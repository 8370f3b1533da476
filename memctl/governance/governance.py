"""MERA governance (G6): version chains and conflicts on write. The G4 scores are in
memctl/search/scores.py, an entry's status in memctl/store/status.py.

Version chains (G6): an entry's `supersedes: [ids]` names the entries it
replaces; those are `status: deprecated`. A chain is every entry connected by
such links; its tail is the newest version. Hand edits can break a chain (a
deleted entry, a cycle): the functions here report that and never fail on it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Iterator, Literal

import orjson

from memctl import clock
from memctl import config
from memctl.store import memoryfile
from memctl.errors import InputError
from memctl.store.memoryfile import Document, Entry
from memctl.search.scores import parse_time
from memctl.store.status import active_tails, chain_tails, is_current, status_of, supersedes_of
from memctl.store.store import Store
from memctl.text import cjk
from memctl.text.clip import clip
from memctl.text.shape import ABSENT, Shape, derived, hidden, shown
from memctl.text.words import STOPWORDS

LOG_FILE = "governance.log.jsonl"


def set_status(entry: Entry, status: str, stamp: str) -> None:
    """Change an entry's status and record when (status_changed_at).

    A hand-written entry (no metadata block) gets one, with the required
    schema fields filled as ingest would (summary from its text, class and
    scope from the [ingest] defaults), so the block it gains is complete.
    """
    if not entry.annotated:

        defaults = config.Ingest()
        entry.set("id", entry.derived_id)
        entry.set("summary", memoryfile.summary_of(entry))
        entry.set("memory_class", defaults.default_memory_class)
        entry.set("scope", defaults.default_scope)
    entry.set("status", status)
    entry.set("status_changed_at", stamp)


# -- similarity (G6: "top-K similar memories" on write) ---------------------
_TOKEN = re.compile(f"[0-9a-z]+|[{cjk.CJK}]+")

Similarity = Callable[[str, str], float]


@functools.lru_cache(maxsize=8192)
def lexical_tokens(text: str) -> frozenset[str]:
    """Words of Latin text, character bigrams of CJK text (a single CJK character stands alone).

    Remembered: writing N notes compares each with every entry, and tokenising
    each entry again per note took 36 of 40 s for 1,000 notes."""
    out: set[str] = set()
    for match in _TOKEN.finditer(text.lower()):
        word = match.group()
        if word[0].isascii():
            if word not in STOPWORDS:
                out.add(word)
        else:
            out.update(cjk.bigrams(word))
    return frozenset(out)


def lexical_similarity(a: str, b: str) -> float:
    """Jaccard similarity of lexical_tokens; dependency-free, the default until embeddings replace it."""
    ta, tb = lexical_tokens(a), lexical_tokens(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def _entry_text(entry: Entry) -> str:
    summary = entry.get("summary")
    return f"{summary}\n{entry.text}" if isinstance(summary, str) else entry.text


def similar(entries: Iterable[Entry], text: str, *, k: int = 5, min_score: float = 0.0,
            similarity: Similarity = lexical_similarity, exclude: Iterable[str] = ()) -> list[tuple[str, float]]:
    """The k current entries most similar to `text`, as (id, score), best first.

    `similarity(a, b) -> [0, 1]` is pluggable (e.g. embedding cosine).
    """
    skip = set(exclude)
    scored = []
    for entry in entries:
        if entry.id in skip or not is_current(entry):
            continue
        score = similarity(text, _entry_text(entry))
        if score >= min_score and score > 0:
            scored.append((entry.id, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored[:k]


# -- version chains (G6) -----------------------------------------------------
def _entry_key(name: str, doc: str) -> derived:
    """A key of a Link taken from its entry's fields, there when the entry has it."""

    @derived(doc, name=name, optional=True)
    def value(self) -> str:
        return self.entry.fields[name] if self.entry is not None and name in self.entry.fields else ABSENT

    return value


@dataclass
class Link(Shape):
    """One version in a chain. `entry` is None when the id is named but found nowhere."""
    id: str = shown("The memory's id.")
    entry: Entry | None = hidden()
    supersedes: list[str] = shown("Ids of the versions it replaces.", default_factory=list)
    superseded_by: list[str] = shown("Ids of the versions that replace it.", default_factory=list)
    deleted: bool = hidden(default=False)   # found only among soft-deleted entries (deleted/*.md)

    key_order = ("id", "status", "supersedes", "superseded_by", "summary_key", "topic_key", "created_key",
                 "changed_key", "section", "text")

    @derived("missing: named but found nowhere; deleted: only in deleted/.")
    def status(self) -> Literal["active", "deprecated", "low_priority", "archived", "deleted",
                                "missing"]:
        if self.entry is None:
            return "missing"
        return "deleted" if self.deleted else status_of(self.entry)

    summary_key = _entry_key("summary", "Its summary field.")
    topic_key = _entry_key("canonical_topic", "Its canonical_topic field.")
    created_key = _entry_key("created_at", "Its created_at field.")
    changed_key = _entry_key("status_changed_at", "Its status_changed_at field.")

    @derived("Its MEMORY.md section (not for a missing version).", optional=True)
    def section(self) -> str | None:
        return ABSENT if self.entry is None else self.entry.section

    @derived("Its text (not for a missing version).", optional=True)
    def text(self) -> str:
        return ABSENT if self.entry is None else self.entry.text


@dataclass
class Chain(Shape):
    """A memory's version chain: every version that supersedes or is superseded by it, oldest first, and
    what is wrong with the chain. `memctl history ID --json` prints it and the MCP history tool returns it."""
    links: list[Link] = shown("The versions, oldest first.")
    problems: list[str] = shown("What is wrong with the chain (a fork, a cycle), as text.", default_factory=list)

    key_order = ("links", "tails", "problems")

    @property
    def ids(self) -> list[str]:
        return [link.id for link in self.links]

    @derived("Ids of the current versions (normally one).", name="current")
    def tails(self) -> list[str]:
        """Current versions that no current version supersedes (normally exactly one)."""
        return chain_tails((link.id, link.entry is not None and not link.deleted and is_current(link.entry),
                            link.supersedes) for link in self.links)


class Graph:
    """The supersedes links of a set of entries (MEMORY.md, plus soft-deleted ones if given)."""

    def __init__(self, entries: Iterable[Entry], deleted: Iterable[Entry] = ()):
        self.entries: dict[str, Entry] = {}
        self.deleted: set[str] = set()
        self.order: dict[str, int] = {}
        for entry in entries:
            self.entries.setdefault(entry.id, entry)
            self.order.setdefault(entry.id, len(self.order))
        for entry in deleted:
            if entry.id not in self.entries:
                self.entries[entry.id] = entry
                self.deleted.add(entry.id)
                self.order[entry.id] = len(self.order)
        self.older: dict[str, list[str]] = {i: list(dict.fromkeys(supersedes_of(e)))
                                            for i, e in self.entries.items()}
        self.newer: dict[str, list[str]] = {}
        for new, olds in self.older.items():
            for old in olds:
                self.newer.setdefault(old, []).append(new)

    def dangling(self) -> list[tuple[str, str]]:
        """(entry, id it supersedes) for every link to an id that is nowhere."""
        return [(new, old) for new, olds in self.older.items() for old in olds if old not in self.entries]

    def cycles(self) -> list[list[str]]:
        """Each supersedes cycle once, as a list of ids (a self-link is a cycle of one)."""
        cycles, color = [], {}
        for start in self.entries:
            if color.get(start):
                continue
            path, on_path = [], {}
            stack: list[tuple[str, Iterator[str]]] = [(start, iter(self.older.get(start, [])))]
            color[start] = 1
            path.append(start)
            on_path[start] = 0
            while stack:
                node, children = stack[-1]
                child = next(children, None)
                if child is None:
                    stack.pop()
                    path.pop()
                    on_path.pop(node, None)
                    color[node] = 2
                elif child in on_path:
                    cycles.append(path[on_path[child]:])
                elif child in self.entries and not color.get(child):
                    color[child] = 1
                    on_path[child] = len(path)
                    path.append(child)
                    stack.append((child, iter(self.older.get(child, []))))
        return cycles

    def chain(self, memory_id: str) -> Chain:
        if memory_id not in self.entries and memory_id not in self.newer:
            raise InputError(f"no memory with id '{memory_id}'", source="MEMORY.md")
        seen, todo = {memory_id}, [memory_id]
        while todo:
            node = todo.pop()
            for other in self.older.get(node, []) + self.newer.get(node, []):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        problems = []
        links = {}
        for node in seen:
            entry = self.entries.get(node)
            links[node] = Link(node, entry, [o for o in self.older.get(node, [])],
                               list(self.newer.get(node, [])), node in self.deleted)
            if entry is None:
                by = ", ".join(f"'{n}'" for n in self.newer.get(node, []))
                problems.append(f"'{node}' is superseded by {by} but is not in MEMORY.md (deleted by hand?)")
        for cycle in self.cycles():
            if cycle[0] in seen:
                problems.append("supersedes cycle: " + " -> ".join(cycle + [cycle[0]]))
        forks = [n for n in seen if len(self.newer.get(n, [])) > 1]
        for node in sorted(forks, key=self._key):
            problems.append(f"'{node}' is superseded by more than one memory: "
                            + ", ".join(self.newer[node]))
        return Chain([links[n] for n in self._oldest_first(seen)], problems)

    def _key(self, node: str) -> tuple:
        entry = self.entries.get(node)
        created = parse_time(entry.get("created_at")) if entry is not None else None
        return (created is None, created.timestamp() if created else 0.0, self.order.get(node, -1), node)

    def _oldest_first(self, nodes: set[str]) -> list[str]:
        """Topological order (what is superseded comes first); a cycle's members follow in file order."""
        waiting = {n: sum(1 for o in self.older.get(n, []) if o in nodes) for n in nodes}
        ready = sorted((n for n, w in waiting.items() if w == 0), key=self._key)
        out: list[str] = []
        while ready:
            node = ready.pop(0)
            out.append(node)
            for new in self.newer.get(node, []):
                if new in waiting:
                    waiting[new] -= 1
                    if waiting[new] == 0:
                        ready.append(new)
                        ready.sort(key=self._key)
        out += sorted((n for n in nodes if n not in out), key=self._key)
        return out


def chain(doc: Document, memory_id: str, deleted: Iterable[Entry] = ()) -> Chain:
    """The whole version chain of a memory, oldest first (G6 "archaeology").

    Follows `supersedes` both ways. Links to ids found nowhere appear with
    entry None, cycles and forks are listed in `problems`; nothing raises
    except an id that neither exists nor is named by any link (InputError).
    Pass soft-deleted entries (lifecycle.load_deleted) to follow links into them.
    """
    return Graph(doc.entries, deleted).chain(memory_id)


def chain_seen_from(found: Chain, memory_id: str, scope: str) -> Chain:
    """The chain as `scope` sees it (G7, as search does: its own memories and global ones): the
    versions of other scopes left out, and the links and problems naming them. An id of another
    scope (or one found nowhere) is no memory there: InputError, as for an id no store holds."""
    from memctl.store.memoryfile import note_scope

    seen = {link.id for link in found.links if link.entry is not None and note_scope(link.entry.fields) in
            (scope, "global")}
    if memory_id not in seen:
        raise InputError(f"no memory with id '{memory_id}' in scope {scope}", source="MEMORY.md")
    # an id found nowhere stays when a version of the scope names it (it shows a link is broken)
    seen |= {other for link in found.links if link.id in seen for other in link.supersedes + link.superseded_by
             if other not in found.ids}
    links = [Link(link.id, link.entry, [o for o in link.supersedes if o in seen],
                  [n for n in link.superseded_by if n in seen], link.deleted)
             for link in found.links if link.id in seen]
    hidden = set(found.ids) - seen
    return Chain(links, [p for p in found.problems if not hidden & set(re.findall(r"[\w.:@+-]+", p))])


def topic_conflicts(doc: Document) -> dict[str, list[str]]:
    """canonical_topic -> ids, for every topic with more than one current entry that is a chain tail."""
    tails = set(active_tails(doc))
    by_topic: dict[str, list[str]] = {}
    for entry in doc.entries:
        topic = entry.get("canonical_topic")
        if isinstance(topic, str) and topic and entry.id in tails:
            by_topic.setdefault(topic, []).append(entry.id)
    return {t: ids for t, ids in by_topic.items() if len(ids) > 1}


# -- writing notes with chains and conflict checks --------------------------
@dataclass
class Similar(Shape):
    id: str = shown("A current memory close to the note.")
    score: float = shown("How close, 0-1.", digits=3)


@dataclass
class NoteReport(Shape):
    """What governance found about one note written (or held as pending)."""
    supersedes: list[str] = shown("Ids the note replaces.", omit="empty", default_factory=list)
    conflicts: list[str] = shown("Current ids with the same canonical_topic.", omit="empty", default_factory=list)
    similar: list[tuple[str, float]] = hidden(default_factory=list)
    topic: str | None = hidden(default=None)
    duplicate_of: str | None = shown("A current memory saying the same: the note is not written.", omit="empty",
                                     default=None)

    key_order = ("supersedes", "conflicts", "similar_shown", "duplicate_of")

    @derived("Current memories close to the note.", name="similar", omit="empty")
    def similar_shown(self) -> list[Similar]:
        return [Similar(i, s) for i, s in self.similar]

    def subject(self) -> str:
        """What the conflict is about: the shared canonical_topic, or the near-duplicate's subject."""
        return f"canonical_topic '{self.topic}'" if self.topic else "its subject (a near-duplicate)"

    def warning(self, memory_id: str) -> str | None:
        if not self.conflicts:
            return None
        ids = ", ".join(f"'{i}'" for i in self.conflicts)
        return (f"'{memory_id}': {self.subject()} already has current memory {ids}; "
                f"it was added anyway (--add); to replace instead: --supersedes {self.conflicts[0]}")


def apply_notes(doc: Document, notes: list[tuple[int, dict]], *, source: str, allow_conflict: bool,
                now: datetime, governance_settings: config.Governance,
                hold: bool = False) -> tuple[dict[str, NoteReport], list[dict]]:
    """Add notes to `doc` in memory, deprecating what each supersedes; nothing is written here.

    A note is {"id", "section", "text", "fields"} with its input line. Raises
    InputError (the caller's transaction then writes nothing) when a note
    supersedes an id not in MEMORY.md (or this input), itself, or a version
    another memory already superseded; or, without allow_conflict, when its
    canonical_topic already has a current memory. With `hold` (pending
    notes) the links are checked and conflicts reported, and the document
    is left unchanged. Returns a report per note id and governance log records.
    """
    stamp = clock.format_ts(now)
    by_id = {e.id: e for e in doc.entries}
    stored_before = set(by_id)
    replaced_by = {old: e.id for e in doc.entries for old in supersedes_of(e)}
    # Every note of the input can be named by any other, in any order (an
    # exported MEMORY.md may list a new version before the one it replaces).
    staged = {note["id"]: Entry(text=note["text"], fields=note["fields"], section=note["section"],
                                headings=tuple(note.get("headings", ())), list_item=note.get("list_item", ""))
              for _, note in notes}
    refuse_conflicts = not allow_conflict and not hold
    reports: dict[str, NoteReport] = {}
    log: list[dict] = []
    for line, note in notes:
        where = {"source": source, "line": line}
        fields, note_id = note["fields"], note["id"]
        olds = _supersede(note, by_id, staged, replaced_by, where, None if hold else log, stamp)
        report = reports[note_id] = NoteReport(supersedes=olds)
        current = is_current(fields)
        if current and not olds:
            report.duplicate_of = _same_statement(doc.entries, note["text"], _scope(fields), note_id)
            if report.duplicate_of:
                continue  # nothing new to write: the store says this already
        if current:
            _check_topic(report, doc, note, refuse_conflicts, where)
        report.similar = similar(doc.entries, f"{fields.get('summary', '')}\n{note['text']}",
                                 k=int(governance_settings.conflict_top_k),
                                 min_score=governance_settings.conflict_min_similarity,
                                 exclude=[note_id, *olds])
        if current and not report.conflicts:
            # Against what the store held before this input, in the note's scope: the notes of one
            # input are the writer's own set of statements (a list of facts of one form, say).
            near = [i for i, score in report.similar if score >= governance_settings.near_duplicate_similarity
                    and i in stored_before and _scope(by_id[i].fields) == _scope(fields)]
            _check_near(report, near, by_id, refuse_conflicts, where)
        if report.conflicts and not hold:
            log.append({"ts": stamp, "action": "add-conflict", "id": note_id, "topic": fields.get("canonical_topic"),
                        "conflicts": report.conflicts})
        by_id[note_id] = staged[note_id]
        if not hold:
            doc.add(staged[note_id])
    return reports, log


def _supersede(note: dict, by_id: dict[str, Entry], staged: dict[str, Entry], replaced_by: dict[str, str],
               where: dict, log: list[dict] | None, stamp: str) -> list[str]:
    """The ids the note supersedes, each checked (it exists in MEMORY.md or the input, is not the note
    itself, and no other memory superseded it); the note takes the topic of what it replaces. With
    `log` (not pending), each current one is deprecated and logged."""
    fields, note_id = note["fields"], note["id"]
    olds = list(dict.fromkeys(supersedes_of(fields)))
    for old in olds:
        target = by_id.get(old) or staged.get(old)
        if old == note_id:
            raise InputError("a memory cannot supersede itself", **where, field="supersedes")
        if target is None:
            raise InputError(f"'{old}': no memory with that id in MEMORY.md", **where, field="supersedes")
        if replaced_by.get(old, note_id) != note_id:
            raise InputError(f"'{old}' is already superseded by '{replaced_by[old]}'; supersede the newest "
                             f"version instead", **where, field="supersedes")
        if "canonical_topic" not in fields and isinstance(target.get("canonical_topic"), str):
            fields["canonical_topic"] = target.get("canonical_topic")  # a new version stays in its topic
        if log is not None and target.get("status") != "deprecated":
            log.append({"ts": stamp, "action": "supersede", "id": old, "by": note_id,
                        "from": status_of(target), "to": "deprecated"})
            set_status(target, "deprecated", stamp)
        replaced_by[old] = note_id
    return olds


def _check_topic(report: NoteReport, doc: Document, note: dict, refuse: bool, where: dict) -> None:
    """The current memories of the note's canonical_topic (other than those it supersedes) as its
    conflicts; with `refuse`, any is an error."""
    topic = note["fields"].get("canonical_topic")
    if not (isinstance(topic, str) and topic):
        return
    report.topic = topic
    tails = set(active_tails(doc))
    report.conflicts = [e.id for e in doc.entries if e.get("canonical_topic") == topic
                        and e.id in tails and e.id != note["id"] and e.id not in report.supersedes]
    if report.conflicts and refuse:
        ids = ", ".join(f"'{i}'" for i in report.conflicts)
        raise InputError(f"'{topic}' already has current memory {ids}; add this one anyway with --add, "
                         f"or replace it with --supersedes {report.conflicts[0]}", **where, field="canonical_topic")


def _check_near(report: NoteReport, near: list[str], by_id: dict[str, Entry], refuse: bool, where: dict) -> None:
    """Near-duplicates of a current note as its conflicts; with `refuse`, any is an error."""
    if not near:
        return
    report.conflicts = near
    if refuse:
        ids = ", ".join(f"'{i}'" for i in near)
        summary = _summary(by_id[near[0]])
        raise InputError(f"says something else on the subject of current memory {ids} (\"{summary}\"); "
                         f"add this one anyway with --add, or replace it with --supersedes {near[0]}",
                         **where, field="text")


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def _scope(fields: dict) -> str:
    return fields.get("scope") or "global"


def _same_statement(entries: Iterable[Entry], text: str, scope: str, note_id: str) -> str | None:
    """The id of a current memory of the same scope whose text is the note's (case and spacing aside)."""
    wanted = _normal(text)
    for entry in entries:
        if (entry.id != note_id and is_current(entry) and _scope(entry.fields) == scope
                and _normal(entry.text) == wanted):
            return entry.id
    return None


def _summary(entry: Entry) -> str:
    summary = entry.get("summary")
    return clip(summary if isinstance(summary, str) else entry.text, 80)


def log_records(records: list[dict]) -> bytes:
    """Governance log lines (governance.log.jsonl at the store root), one JSON object each."""
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def log_path(store: Store):
    return store.path(LOG_FILE)

