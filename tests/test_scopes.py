"""Scopes are walls (SPEC X3, G7): nothing of one scope appears in another's topics, context or search.

A session is in one scope (user:alice, project:kestrel, global), kept on each of
its messages; a topic is in one scope (its header's `scope`). The checks here go
through the library with a tiny deterministic embedder (registered through the
embedders registry, so no model loads), and the attack that showed the problem
through real `memctl` processes.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from memctl.api import Memory
from memctl.errors import InputError, StoreError
from memctl.index.embedders import Backend, register
from memctl.ingest.ingest import ingest
from memctl.store import memoryfile
from memctl.store.store import Store
from conftest import runtime_of


def chat(session: str, texts: list[str], scope: str | None = None, prefix: str | None = None) -> bytes:
    """JSON lines of a conversation, user and assistant in turn; `scope` on every record if given."""
    prefix = prefix or session
    lines = []
    for n, text in enumerate(texts):
        record = {"id": f"{prefix}-{n}", "session": session, "role": ("user", "assistant")[n % 2], "text": text,
                  "ts": f"2026-11-20T10:{n // 60:02d}:{n % 60:02d}Z"}
        if scope:
            record["scope"] = scope
        lines.append(orjson.dumps(record) + b"\n")
    return b"".join(lines)


def stored(store_dir, session: str) -> list[dict]:
    return [orjson.loads(line) for line in (store_dir / "sessions" / f"{session}.jsonl").read_bytes().splitlines()]


# -- ingest: a session is in one scope -------------------------------------------------------------

def test_scope_flag_puts_a_new_session_in_it_and_later_records_follow(store_dir):
    store = Store(store_dir)
    ingest(runtime_of(store), chat("alice", ["I keep herons", "Herons, noted"]), scope="user:alice")
    ingest(runtime_of(store), chat("alice", ["and two cats"], prefix="later"))  # names no scope: the session's
    assert {m["scope"] for m in stored(store_dir, "alice")} == {"user:alice"}


def test_records_name_their_own_scope_and_global_is_written_as_no_field(store_dir):
    store = Store(store_dir)
    ingest(runtime_of(store), chat("bob", ["my bank is Osprey", "Osprey, noted"], scope="user:bob") + chat("open", ["shared words"], scope="global"))
    assert {m["scope"] for m in stored(store_dir, "bob")} == {"user:bob"}
    assert all("scope" not in m for m in stored(store_dir, "open"))


def test_default_scope_comes_from_memctl_toml(store_dir):
    store_dir.mkdir()
    (store_dir / "memctl.toml").write_text('[ingest]\ndefault_scope = "project:kestrel"\n')
    ingest(runtime_of(Store(store_dir)), chat("s1", ["inventory service"]))
    assert stored(store_dir, "s1")[0]["scope"] == "project:kestrel"


@pytest.mark.parametrize("first, then, flag, said", [
    ("user:alice", "user:bob", None, "<input>:1: field 'scope': is user:bob, but session 'alice' is in scope user:alice"),
    (None, "user:bob", None, "<input>:1: field 'scope': is user:bob, but session 'alice' is in scope global"),
    ("user:alice", None, "user:bob", "<input>:1: field 'scope': is user:bob, but session 'alice' is in scope user:alice"),
])
def test_a_record_in_another_scope_than_its_stored_session_is_refused(store_dir, first, then, flag, said):
    store = Store(store_dir)
    ingest(runtime_of(store), chat("alice", ["my own words here"], scope=first), source="<input>")
    before = (store_dir / "sessions" / "alice.jsonl").read_bytes()
    with pytest.raises(InputError) as refused:
        ingest(runtime_of(store), chat("alice", ["somebody else's words"], scope=then, prefix="x"), source="<input>", scope=flag)
    assert str(refused.value) == said
    assert (store_dir / "sessions" / "alice.jsonl").read_bytes() == before


def test_one_input_cannot_put_a_new_session_in_two_scopes(store_dir):
    data = chat("s1", ["first line here"], scope="user:alice") + chat("s1", ["second line here"], scope="user:bob", prefix="y")
    with pytest.raises(InputError) as refused:
        ingest(runtime_of(Store(store_dir)), data, source="in.jsonl")
    assert str(refused.value) == "in.jsonl:2: field 'scope': is user:bob, but line 1 put session 's1' in scope user:alice"
    assert not store_dir.exists() or not (store_dir / "sessions").exists()


@pytest.mark.parametrize("record, flag, said", [
    ({"text": "x", "scope": "team:red"}, None, "field 'scope': must be global, project:<name>, lang:<name> or user:<name>"),
    ({"text": "x", "scope": 7}, None, "field 'scope': must be global"),
    ({"text": "x", "scope": "user:carol"}, "user:dave", "field 'scope': is user:carol, but --scope is user:dave"),
])
def test_a_bad_or_contrary_scope_field_is_one_line_naming_the_line(store_dir, record, flag, said):
    with pytest.raises(InputError) as refused:
        ingest(runtime_of(Store(store_dir)), orjson.dumps(record) + b"\n", source="in.jsonl", scope=flag)
    assert str(refused.value).startswith(f"in.jsonl:1: {said}")


def test_scope_flag_is_checked_and_scopes_notes_that_name_none(store_dir):
    store = Store(store_dir)
    with pytest.raises(InputError, match="^--scope: must be global"):
        ingest(runtime_of(store), b"hello there, a long enough line", scope="alice")
    ingest(runtime_of(store), b'{"text": "Prefers green tea"}\n', kind="memory", scope="user:alice")
    assert "scope: user:alice" in (store_dir / "MEMORY.md").read_text()
    with pytest.raises(InputError, match="field 'scope': is project:x, but --scope is user:alice"):
        ingest(runtime_of(store), b'{"text": "Uses Postgres", "scope": "project:x"}\n', kind="memory", scope="user:alice")


def test_the_same_note_in_two_scopes_is_two_notes_and_neither_scope_hears_of_the_other(store_dir):
    store = Store(store_dir)
    note = b'{"text": "Prefers green tea in the morning"}\n'
    alice = ingest(runtime_of(store), note, kind="memory", scope="user:alice")
    bob = ingest(runtime_of(store), note, kind="memory", scope="user:bob")
    assert [o.status for o in alice.outcomes] == [o.status for o in bob.outcomes] == ["stored"]
    assert alice.outcomes[0].id != bob.outcomes[0].id
    doc = memoryfile.load(store_dir / "MEMORY.md")
    assert sorted(e.get("scope") for e in doc.entries) == ["user:alice", "user:bob"]
    again = ingest(runtime_of(store), note, kind="memory", scope="user:bob")  # bob's own twice: a no-op
    assert [o.status for o in again.outcomes] == ["duplicate"]
    unscoped = ingest(runtime_of(store), note, kind="memory")
    assert unscoped.outcomes[0].id == "mem-9221c25cfe753cf9"  # a global note keeps the id it always had


def test_an_id_taken_in_another_scope_is_refused_without_its_text(store_dir):
    store = Store(store_dir)
    ingest(runtime_of(store), b'{"id": "mem-x", "text": "Alice banks with Osprey"}\n', kind="memory",
           scope="user:alice")
    with pytest.raises(InputError) as refused:
        ingest(runtime_of(store), b'{"id": "mem-x", "text": "Alice banks with Osprey"}\n', kind="memory",
               scope="user:bob", source="in.jsonl")
    assert str(refused.value) == ("in.jsonl:1: field 'id': id 'mem-x' is taken in another scope; "
                                  "give this one another id")
    assert [e.get("scope") for e in memoryfile.load(store_dir / "MEMORY.md").entries] == ["user:alice"]


def test_a_session_file_edited_into_two_scopes_is_refused_by_name(store_dir):
    store = Store(store_dir)
    ingest(runtime_of(store), chat("alice", ["first line here", "second line here"], scope="user:alice"))
    path = store_dir / "sessions" / "alice.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"scope":"user:alice","role":"assistant"',
                                               b'"scope":"user:bob","role":"assistant"'))
    with pytest.raises(StoreError) as refused:
        ingest(runtime_of(store), chat("alice", ["third line here"], prefix="z"))
    assert str(refused.value) == ("sessions/alice.jsonl: message 'alice-1' is in scope user:bob, the session's first "
                                  "in user:alice; a session is in one scope: correct its 'scope' fields")


# -- a tiny deterministic embedder, registered the way the registry allows ---------------------------

class HashingEmbedder:
    """Bag-of-words vectors: each word hashed (crc32, the same in every process) to one of 64
    dimensions. Sentences sharing words are close, as a model would make them, and nothing loads."""

    key = "test-hashing-1"
    source = "tests/test_scopes.py"
    dimension = 64

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                vectors[row, zlib.crc32(word.encode()) % self.dimension] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)

    def unknown_share(self, text: str) -> float:
        return 0.0


register(Backend("test-hashing", "deterministic word hashing, for tests", "tests/test_scopes.py", 0.0, 1.0,
                 lambda settings: HashingEmbedder()))


def memory_at(root: Path) -> Memory:
    """A Memory whose store embeds with HashingEmbedder."""
    root.mkdir(parents=True)
    (root / "memctl.toml").write_text('[embedding]\nmodel = "test-hashing"\n')
    return Memory(root)


# -- topics: one scope each; stores written before scopes --------------------------------------------

def two_people_split(tmp_path) -> tuple[Memory, Conversations]:
    """alice and bob say the same things (but for their markers) and split: the same topics, twice."""
    conversations = Conversations(memory_at(tmp_path / "store"))
    for owner in ("alice", "bob"):
        for subject in range(len(SUBJECTS)):
            conversations.ingest(owner, SESSIONS[owner][0], subject, 4)
        conversations.memory.topics.split(SESSIONS[owner][0], force=True, keep_recent=0)
    return conversations.memory, conversations


def test_the_daily_review_merges_and_links_only_within_a_scope(tmp_path):
    memory, conversations = two_people_split(tmp_path)
    scope_of = {t.id: t.scope for t in memory.topics.list()}
    names = {scope: {t.header["name"] for t in memory.topics.list(scope=scope)} for scope in ("user:alice", "user:bob")}
    assert names["user:alice"] & names["user:bob"]  # same-named topics: merged, had they met
    report = memory.review.daily()
    assert report.compressed and all(scope_of[m["topic_id"]] == scope_of[m["into"]] for m in report.merged)
    assert all(scope_of[r["topic_id"]] == scope_of[r["with"]] for r in report.related)
    assert {t.scope for t in memory.topics.list()} == {"user:alice", "user:bob"}
    conversations.topic_files_each_in_one_scope(tmp_path / "store")


def test_a_topic_of_another_scope_is_not_there_for_a_scoped_look(tmp_path):
    memory, _ = two_people_split(tmp_path)
    alices = memory.topics.list(session="alice-home")
    assert alices and {t.scope for t in alices} == {"user:alice"}
    assert memory.topics.list(scope="user:bob") == memory.topics.list(session="bob")
    with pytest.raises(InputError, match=f"no topic '{alices[0].id}' in scope user:bob$"):
        memory.topics.show(alices[0].id, session="bob")
    with pytest.raises(InputError, match="^--scope: session 'bob' is in scope user:bob, not user:alice$"):
        memory.context("bob", "Will it rain?", scope="user:alice")
    with pytest.raises(InputError, match="^--scope: session 'bob' is in scope user:bob, not user:alice$"):
        memory.topics.split("bob", force=True, scope="user:alice")
    with pytest.raises(InputError, match="^--scope: must be global"):
        memory.topics.list(scope="alice")
    assert memory.topics.activate(alices[0].id, scope="user:bob").activated == []


def test_mcp_topics_tools_look_into_the_scope_they_are_given(tmp_path):
    from memctl.mcp.tools import TOOLS

    memory, _ = two_people_split(tmp_path)
    listed = TOOLS["topics_list"].run(memory, session="bob")["topics"]
    assert listed and {t["scope"] for t in listed} == {"user:bob"}
    alices = TOOLS["topics_list"].run(memory, scope="user:alice")["topics"]
    with pytest.raises(InputError, match="in scope user:bob$"):
        TOOLS["topics_show"].run(memory, id=alices[0]["id"], session="bob")
    with pytest.raises(InputError, match="session 'alice-home' is in scope user:alice, not user:bob$"):
        TOOLS["context"].run(memory, session="alice-home", message="Will it rain?", scope="user:bob")
    assert TOOLS["topics_activate"].run(memory, query=alices[0]["id"], scope="user:bob")["activated"] == []
    for name in ("topics_list", "topics_show", "topics_activate"):
        assert {"session", "scope"} <= set(TOOLS[name].input_schema["properties"])


def write_topic(root: Path, topic_id: str, name: str, messages: list[dict], **header) -> None:
    records = [{"type": "topic", "id": topic_id, "name": name, "summary": " ".join(m["text"] for m in messages),
                "parent": None, "children": [], "state": "active", "created": "2026-11-20T00:00:00Z",
                "updated": "2026-11-20T00:00:00Z", "messages": len(messages), **header}]
    records += [{"type": "message", **m} for m in messages]
    (root / "topics").mkdir(exist_ok=True)
    (root / "topics" / f"{topic_id}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def test_a_topic_from_before_scopes_is_in_its_messages_scope_and_a_mixed_one_in_none(tmp_path):
    root = tmp_path / "store"
    conversations = Conversations(memory_at(root))
    conversations.ingest("open", "lobby", 0, 4)
    conversations.ingest("alice", "alice-home", 0, 4)
    lobby, alice = stored(root, "lobby"), stored(root, "alice-home")
    write_topic(root, "t-old", "Redwood City rain", lobby[:2])                  # old: no scope field anywhere
    write_topic(root, "t-mixed", "Redwood City drizzle", lobby[2:] + alice[:2])  # old, and two people's
    memory = conversations.memory
    assert {t.id: t.scope for t in memory.topics.list()} == {"t-old": "global", "t-mixed": None}
    assert [t.id for t in memory.topics.list(session="lobby")] == ["t-old"]
    assert memory.topics.list(session="alice-home") == []
    for session, owner in (("lobby", "open"), ("alice-home", "alice")):
        built = memory.context(session, "Will it rain in Redwood City?")
        conversations.only_own(owner, built.text, "context")
        assert "t-mixed" not in json.dumps(built.as_dict())
    found = memory.search("Redwood City drizzle", kinds=("topic",))
    assert "t-mixed" not in [r.id for r in found]  # in no scope: found by no search


def test_an_archived_topic_from_before_scopes_is_in_its_sessions_scope_and_comes_back_with_it(tmp_path):
    root = tmp_path / "store"
    conversations = Conversations(memory_at(root))
    conversations.ingest("alice", "alice-home", 1, 4)
    conversations.ingest("bob", "bob", 1, 4)
    (root / "topics" / "archived" / "2026-10").mkdir(parents=True)
    header = {"type": "topic", "id": "t-arch", "name": "Acorn Guest House", "summary": "the hotel",
              "state": "archived", "updated": "2026-10-02T00:00:00Z", "sessions": ["alice-home"],
              "message_ids": [m["id"] for m in stored(root, "alice-home")]}
    (root / "topics" / "archived" / "2026-10" / "t-arch.jsonl").write_bytes(orjson.dumps(header) + b"\n")
    memory = conversations.memory
    assert [t.scope for t in memory.topics.archived(session="alice-home")] == ["user:alice"]
    assert memory.topics.archived(session="bob") == []
    assert memory.topics.activate("t-arch", include_archived=True, session="bob").activated == []
    assert (root / "topics" / "archived" / "2026-10" / "t-arch.jsonl").exists()
    memory.topics.activate("t-arch", include_archived=True, session="alice-home")
    assert memory.topics.show("t-arch").header["scope"] == "user:alice"


# -- property: random conversations in three scopes, random calls, no call crosses a wall ---------

# Each owner is one scope; their conversations share subjects (so that without walls similarity
# would mix them) and every message carries a marker naming its owner, "zq<owner><n>".
OWNERS = {"alice": "user:alice", "bob": "user:bob", "open": "global"}
SESSIONS = {"alice": ["alice-home", "alice-work"], "bob": ["bob"], "open": ["lobby"]}
SUBJECTS = [
    ["Will it rain in Redwood City this week?", "Drizzle on Wednesday and Thursday in Redwood City.",
     "How cold will Redwood City get at night?", "Down to 8 degrees in Redwood City on Thursday night."],
    ["I need a cheap hotel in the north of Cambridge with free parking.",
     "The Acorn Guest House is cheap, in the north, with free parking.",
     "Book the Acorn Guest House for 3 nights from Friday.", "Booked the Acorn Guest House for 3 nights."],
    ["Get me a taxi from the Acorn Guest House to the station at 9:45.",
     "A blue Skoda taxi will pick you up at 9:45.", "What is the taxi driver's phone number?",
     "The taxi number is 07714 291108."],
]
MARKER = re.compile(r"zq(alice|bob|open)\d+")


def owners_in(text: str) -> set[str]:
    return set(MARKER.findall(text))


class Conversations:
    """What the test has stored, and the checks every call's output must pass."""

    def __init__(self, memory: Memory):
        self.memory = memory
        self.count = 0
        self.ingested: set[str] = set()

    def ingest(self, owner: str, session: str, subject: int, size: int) -> None:
        lines = []
        for turn in range(size):
            self.count += 1
            text = f"{SUBJECTS[subject][turn % 4]} Note zq{owner}{self.count}."
            lines.append(orjson.dumps({"id": f"{owner}-{self.count}", "session": session, "text": text,
                                       "role": ("user", "assistant")[turn % 2],
                                       "ts": f"2026-11-20T{self.count // 60 % 24:02d}:{self.count % 60:02d}:00Z"}))
        self.memory.ingest(b"\n".join(lines), fmt="jsonl", scope=OWNERS[owner])
        self.ingested.add(session)

    def note(self, owner: str, subject: int, core: bool) -> None:
        """A memory of the owner's scope (a core rule, perhaps) on a subject every scope talks about."""
        self.count += 1
        note = {"text": f"{SUBJECTS[subject][1]} Note zq{owner}{self.count}.", "section": "Notes",
                "scope": OWNERS[owner], "is_core": core}
        self.memory.ingest(orjson.dumps(note), fmt="jsonl", kind="memory", allow_conflict=True)

    def pending(self, owner: str, subject: int) -> None:
        """A note of the owner's scope held for confirmation."""
        self.count += 1
        note = {"text": f"{SUBJECTS[subject][3]} Note zq{owner}{self.count}.", "section": "Notes"}
        self.memory.ingest(orjson.dumps(note), fmt="jsonl", pending=True, scope=OWNERS[owner])

    def review(self, owner: str, confirm: bool, through_mcp: bool) -> None:
        """The owner's agent lists its pending notes, confirms or rejects the first, and cannot
        confirm or reject another scope's."""
        from memctl.mcp.tools import TOOLS

        memory, scope = self.memory, OWNERS[owner]
        step = "confirm" if confirm else "reject"
        if through_mcp:
            listed = TOOLS["review_pending"].run(memory, scope=scope)["pending"]
            act = lambda ids: TOOLS[step].run(memory, ids=ids, scope=scope)  # noqa: E731
        else:
            listed = memory.review.pending(scope=scope).rows
            act = lambda ids: getattr(memory.review, step)(ids, scope=scope)  # noqa: E731
        self.only_own(owner, json.dumps(listed), "review pending")
        others = [p["id"] for p in memory.review.pending().rows if not owners_in(p["text"]) <= {owner}]
        for other in others[:1]:
            with pytest.raises(InputError, match=f"in scope {scope}"):
                act([other])
        if listed:
            act([listed[0]["id"]])
        assert {p["id"] for p in memory.review.pending().rows} >= set(others)  # nobody else's note went

    def history(self, owner: str, through_mcp: bool) -> None:
        """Every memory's chain asked by id from the owner's scope: its own or global, else unknown."""
        from memctl.mcp.tools import TOOLS

        scope = OWNERS[owner]
        for entry in memoryfile.load(self.memory.store.memory_md).entries:
            try:
                chain = TOOLS["history"].run(self.memory, id=entry.id, scope=scope) if through_mcp else \
                    {"links": [link.as_dict() for link in self.memory.history(entry.id, scope=scope).links]}
            except InputError:
                assert entry.get("scope", "global") not in (scope, "global"), entry.id
                continue
            assert owners_in(json.dumps(chain)) <= {owner, "open"}, f"history {entry.id} for {owner}: {chain}"

    def lose(self, owner: str, session: str, before_scopes: bool) -> None:
        """The session's file moved away by hand; with `before_scopes`, the daily logs as written
        before an entry carried its scope."""
        root = self.memory.store.root
        if before_scopes:
            for log in (root / "memory").glob("*.md"):
                log.write_text(re.sub(r" · (global|user:\w+)\n", "\n", log.read_text()))
        (root / "sessions" / f"{session}.jsonl").rename(root / f"{session}.gone")
        self.ingested.discard(session)

    def only_own(self, owner: str, shown: str, what: str) -> None:
        assert owners_in(shown) <= {owner}, f"{what} for {owner} shows {owners_in(shown) - {owner}}:\n{shown}"

    def topic_files_each_in_one_scope(self, root: Path) -> None:
        for path in (root / "topics").glob("t-*.jsonl"):
            records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
            scope = [r for r in records if r["type"] == "topic"][-1]["scope"]
            owners = owners_in(" ".join(r["text"] for r in records if r["type"] == "message"))
            assert {OWNERS[o] for o in owners} <= {scope}, f"{path.name} ({scope}) holds messages of {owners}"
            assert {r.get("scope", "global") for r in records if r["type"] == "message"} <= {scope}


OWNER = st.sampled_from(sorted(OWNERS))
CALLS = st.one_of(
    st.tuples(st.just("ingest"), OWNER, st.integers(0, 1), st.integers(0, 2), st.integers(1, 6)),
    st.tuples(st.just("note"), st.sampled_from(["alice", "bob"]), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("split"), OWNER, st.integers(0, 1), st.integers(0, 3)),
    st.tuples(st.just("context"), OWNER, st.integers(0, 1), st.integers(0, 2), st.booleans(), st.booleans()),
    st.tuples(st.just("activate"), OWNER, st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("topics"), OWNER, st.integers(0, 1)),
    st.tuples(st.just("search"), OWNER, st.integers(0, 2)),
    st.tuples(st.just("review"),),
    # alice's and bob's, as "note": a global note, once confirmed, is a memory every scope's search and
    # context may show (global is shared), which only_own would take for a leak
    st.tuples(st.just("pending"), st.sampled_from(["alice", "bob"]), st.integers(0, 2)),
    st.tuples(st.just("review_pending"), OWNER, st.booleans(), st.booleans()),
    st.tuples(st.just("history"), OWNER, st.booleans()),
    st.tuples(st.just("lose"), OWNER, st.integers(0, 1), st.booleans()),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(calls=st.lists(CALLS, min_size=4, max_size=14))
# A global session moved away by hand: its log entries (global, by their headings) came back in alice's context.
@example(calls=[("ingest", "alice", 0, 0, 1), ("ingest", "alice", 0, 0, 1), ("lose", "open", 0, False),
                ("context", "alice", 0, 0, False, False)])
def test_no_call_of_one_scope_returns_another_scopes_text(tmp_path_factory, calls):
    walls_hold(memory_at(tmp_path_factory.mktemp("walls") / "store"), calls)


@pytest.mark.process
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(calls=st.lists(CALLS.filter(lambda call: call[0] != "lose"), min_size=4, max_size=14))
def test_no_call_of_one_scope_returns_another_scopes_text_on_postgresql(postgres_server, calls):
    """The same walls on a store named by a URL (a database an example; no file to move by hand)."""
    from memctl.store.postgres import PostgresStore

    url = postgres_server.new_database()
    with PostgresStore(url).transaction() as tx:
        tx.replace("memctl.toml", b'[embedding]\nmodel = "test-hashing"\n')
    memory = Memory(url)
    try:
        walls_hold(memory, calls)
    finally:
        memory.close()


def walls_hold(memory: Memory, calls: list[tuple]) -> None:
    """Every scope talks on every subject, then `calls` run: no call of one scope shows another's text."""
    conversations = Conversations(memory)
    for owner in OWNERS:  # every scope talks first, on every subject
        for subject in range(len(SUBJECTS)):
            conversations.ingest(owner, SESSIONS[owner][0], subject, 4)
    for call in calls:
        name, owner = call[0], call[1] if len(call) > 1 else None
        session = SESSIONS[owner][call[2] % len(SESSIONS[owner])] if len(call) > 2 else None
        if name == "ingest":
            conversations.ingest(owner, session, call[3], call[4])
        elif name == "note":
            conversations.note(owner, call[2], call[3])
        elif name == "pending":
            conversations.pending(owner, call[2])
        elif name == "review_pending":
            conversations.review(owner, call[2], call[3])
        elif name == "history":
            conversations.history(owner, call[2])
        elif session is not None and session not in conversations.ingested:
            continue
        elif name == "lose":
            conversations.lose(owner, session, call[3])
        elif name == "split":
            report = memory.topics.split(session, force=True, keep_recent=call[3])
            assert all(memory.topics.show(t).scope == OWNERS[owner] for t in report.topics)
        elif name == "context":
            cue = "Did you forget? " if call[5] else ""
            built = memory.context(session, f"{cue}{SUBJECTS[call[3]][0]}", no_record=not call[4])
            conversations.only_own(owner, built.text + json.dumps(built.as_dict()), "context")
            assert all(memory.topics.show(s["topic_id"]).scope == OWNERS[owner]
                       for s in built.sections if s["kind"] == "topic")
        elif name == "activate":
            found = memory.topics.activate(SUBJECTS[call[3]][1], session=session)
            scopes = {memory.topics.show(c["topic_id"]).scope for c in found.activated + found.candidates}
            assert scopes <= {OWNERS[owner]}
        elif name == "topics":
            for topic in memory.topics.list(session=session):
                shown = memory.topics.show(topic.id, session=session)
                conversations.only_own(owner, json.dumps([shown.header, shown.messages]), "topics show")
        elif name == "search":
            shared = {owner, "open"}  # a scope's search also finds global messages (G7: global is shared)
            for result in memory.search(SUBJECTS[call[2]][2], scope=OWNERS[owner]):  # memories too
                assert owners_in(result.text) <= shared, f"search for {owner}: {result.text}"
        elif name == "review":
            memory.review.daily()
        with memory.store.reading():
            conversations.topic_files_each_in_one_scope(Path(memory.store.root))


# -- property: the tool cache keeps each run's results to that run ---------------------------------

RUNS = ("debate-1", "debate-2", "job-3")
QUOTES = ["2330 TSMC: close 1032 TWD, volume 31,204 lots", "2330 TSMC: revenue up 39% on the year",
          "3444 Lianhua: no trades today"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(puts=st.lists(st.tuples(st.sampled_from(RUNS), st.integers(0, 2)), min_size=1, max_size=10),
       consolidated=st.lists(st.sampled_from(RUNS), max_size=4))
def test_cache_search_and_consolidation_keep_their_run(tmp_path_factory, puts, consolidated):
    memory = memory_at(tmp_path_factory.mktemp("runs") / "store")
    for n, (run, quote) in enumerate(puts):
        memory.cache.put(run, "quote", {"n": n}, f"{QUOTES[quote]} (zq{run.replace('-', '')}x{n})")
    for run in consolidated:
        memory.cache.consolidate(run, everything=True)
    notes = memoryfile.load(memory.store.memory_md).entries
    assert {(n.get("cache_scope"), *re.findall(r"zq([a-z]+\d)x", n.text)) for n in notes} == \
        {(run, run.replace("-", "")) for run, _ in puts if run in consolidated}
    for run in RUNS:
        for result in memory.cache.search("TSMC close revenue trades", scope=run, k=20):
            assert set(re.findall(r"zq([a-z]+\d)x", result.text)) <= {run.replace("-", "")}, result.text
            assert result.fields["cache_scope"] == run


# -- the attack that was measured, through real processes -------------------------------------------

def test_two_peoples_sessions_split_in_one_store_never_meet(run, store_dir, tmp_path):
    """Before scopes: `context --session bob` printed 44 lines of alice's messages, and 6 topic files
    held both people's. Now each is in a scope, and nothing of one reaches the other."""
    for owner in ("alice", "bob"):
        lines = [orjson.dumps({"id": f"{owner}-{n}", "role": ("user", "assistant")[n % 2],
                               "text": f"{text} Note zq{owner}{n}.", "ts": f"2026-11-20T10:{n:02d}:00Z"})
                 for n, text in enumerate(t for subject in SUBJECTS for t in subject)]
        (tmp_path / f"{owner}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        assert run("ingest", "--scope", f"user:{owner}", str(tmp_path / f"{owner}.jsonl")).returncode == 0
        split = run("split", "--session", owner, "--force", "--keep-recent", "2")
        assert split.returncode == 0, split.stderr
    context = run("context", "--session", "bob", "--scope", "user:bob", "--message",
                  "Will it rain in Redwood City this week? And the Acorn Guest House booking?")
    assert context.returncode == 0, context.stderr
    assert "# Topic:" in context.stdout.decode() and owners_in(context.stdout.decode()) == {"bob"}
    for path in (store_dir / "topics").glob("t-*.jsonl"):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        assert len(owners_in(path.read_text())) == 1 and len({r.get("scope") for r in records}) == 1, path.name

    listed = [json.loads(line) for line in run("topics", "list", "--session", "bob", "--json").stdout.splitlines()]
    assert listed and {t["scope"] for t in listed} == {"user:bob"}
    from memctl.mcp.tools import TOOLS  # one topic row on both faces (#32): the CLI's once lacked "summary"

    assert listed == TOOLS["topics_list"].run(Memory(store_dir), session="bob")["topics"]
    assert all(t["summary"] for t in listed)
    alices = [json.loads(line) for line in run("topics", "list", "--scope", "user:alice", "--json").stdout.splitlines()]
    shown = run("topics", "show", alices[0]["id"], "--session", "bob")
    assert shown.returncode == 2 and shown.stdout == b""
    assert shown.stderr.decode().endswith(f"no topic '{alices[0]['id']}' in scope user:bob\n")
    found = run("search", "--scope", "user:bob", "--json", "Acorn Guest House for 3 nights")
    assert found.returncode == 0 and owners_in(found.stdout.decode()) == {"bob"}
    wrong = run("context", "--session", "alice", "--scope", "user:bob", "--message", "Will it rain?")
    assert (wrong.returncode, wrong.stdout) == (2, b"")
    assert wrong.stderr == b"memctl: error: --scope: session 'alice' is in scope user:alice, not user:bob\n"


# -- reads and writes by id, pending notes and orphaned log entries stay in their scope (#31 item 5) --

def two_notes(run, tmp_path) -> dict[str, str]:
    """alice's and bob's notes in MEMORY.md (bob's replaces his first one) and one pending note each;
    their ids by name."""
    ids = {}
    for owner in ("alice", "bob"):
        done = run("ingest", "--kind", "memory", "--scope", f"user:{owner}", "--json", "-",
                   input=f'{{"text": "Banks with Osprey Savings. Note zq{owner}1."}}\n')
        ids[owner] = json.loads(done.stdout)["id"]
        done = run("ingest", "--pending", "--scope", f"user:{owner}", "--json", "-",
                   input=f'{{"text": "Moved to Taipei last month. Note zq{owner}2."}}\n')
        ids[f"{owner}-pending"] = json.loads(done.stdout)["id"]
    done = run("ingest", "--kind", "memory", "--scope", "user:bob", "--supersedes", ids["bob"], "--json", "-",
               input='{"text": "Banks with Heron Credit now. Note zqbob3."}\n')
    ids["bob-new"] = json.loads(done.stdout)["id"]
    return ids


def test_history_by_id_answers_only_inside_the_asked_scope(run, store_dir, tmp_path):
    from memctl.mcp.tools import TOOLS

    ids = two_notes(run, tmp_path)
    asked = run("search", "--history", ids["alice"], "--scope", "user:bob")
    assert (asked.returncode, asked.stdout) == (2, b"")
    assert asked.stderr.decode() == f"memctl: error: MEMORY.md: no memory with id '{ids['alice']}' in scope user:bob\n"
    own = run("search", "--history", ids["bob-new"], "--scope", "user:bob", "--json")
    assert own.returncode == 0 and owners_in(own.stdout.decode()) == {"bob"}
    (chain,) = [json.loads(line) for line in own.stdout.splitlines()]
    assert [link["id"] for link in chain["links"]] == [ids["bob"], ids["bob-new"]]
    memory = Memory(store_dir)
    with pytest.raises(InputError, match="in scope user:bob$"):
        TOOLS["history"].run(memory, id=ids["alice"], scope="user:bob")
    assert owners_in(json.dumps(TOOLS["history"].run(memory, id=ids["alice"], scope="user:alice"))) == {"alice"}
    assert "scope" in TOOLS["history"].input_schema["properties"]


def test_a_chain_seen_from_one_scope_leaves_another_scopes_versions_out(store_dir):
    memory = Memory(store_dir)
    memory.ingest('{"text": "Prefers aisle seats. Note zqalice1."}', kind="memory", scope="user:alice")
    alices = memoryfile.load(store_dir / "MEMORY.md").entries[0].id
    memory.ingest('{"text": "Prefers window seats. Note zqbob2."}', kind="memory", scope="user:bob",
                  supersedes=[alices])  # bob's note names alice's: a chain across the wall
    bobs = [e.id for e in memoryfile.load(store_dir / "MEMORY.md").entries if e.id != alices][0]
    seen = memory.history(bobs, scope="user:bob")
    assert [link.id for link in seen.links] == [bobs] and seen.links[0].supersedes == []
    assert owners_in(json.dumps([link.as_dict() for link in seen.links])) == {"bob"}
    assert [link.id for link in memory.history(bobs).links] == [alices, bobs]  # the whole store's look


def test_pending_notes_have_a_scope_and_review_stays_in_it(run, store_dir, tmp_path):
    from memctl.mcp.tools import TOOLS

    ids = two_notes(run, tmp_path)
    pending = [json.loads(line) for line in (store_dir / "pending.jsonl").read_bytes().splitlines()]
    assert {p["id"]: p["fields"]["scope"] for p in pending} == {ids["alice-pending"]: "user:alice",
                                                                ids["bob-pending"]: "user:bob"}
    listed = run("review", "pending", "--scope", "user:bob", "--json")
    assert listed.returncode == 0 and [json.loads(line)["id"] for line in listed.stdout.splitlines()] == \
        [ids["bob-pending"]]
    for step in ("confirm", "reject"):
        refused = run("review", step, ids["alice-pending"], "--scope", "user:bob")
        assert (refused.returncode, refused.stdout) == (2, b"")
        assert refused.stderr.decode() == (f"memctl: error: pending.jsonl: no pending memory with id "
                                           f"'{ids['alice-pending']}' in scope user:bob (see: memctl review pending)\n")
    memory = Memory(store_dir)
    assert [p["id"] for p in TOOLS["review_pending"].run(memory, scope="user:bob")["pending"]] == [ids["bob-pending"]]
    for step in ("confirm", "reject"):
        with pytest.raises(InputError, match="in scope user:bob"):
            TOOLS[step].run(memory, ids=[ids["alice-pending"]], scope="user:bob")
        assert "scope" in TOOLS[step].input_schema["properties"]
    assert ids["alice-pending"] in (store_dir / "pending.jsonl").read_text()
    assert "zqalice2" not in (store_dir / "MEMORY.md").read_text()
    confirmed = TOOLS["confirm"].run(memory, ids=[ids["bob-pending"]], scope="user:bob")["confirmed"]
    assert [c["id"] for c in confirmed] == [ids["bob-pending"]]
    assert [p["id"] for p in memory.review.pending().rows] == [ids["alice-pending"]]  # the whole store's look


def gone_session_store(run, store_dir, tmp_path, old_log: bool) -> None:
    """alice's session in the daily log, its file then gone (moved away by hand); with `old_log`, the
    log as written before entries carried a scope."""
    for owner in ("alice", "bob"):
        lines = [orjson.dumps({"id": f"{owner}-{n}", "text": f"{text} Note zq{owner}{n}.",
                               "ts": f"2026-11-20T10:{n:02d}:00Z"})
                 for n, text in enumerate(SUBJECTS[1])]
        assert run("ingest", "--scope", f"user:{owner}", "--session", owner, "-",
                   input=b"\n".join(lines)).returncode == 0
    log = store_dir / "memory" / "2026-11-20.md"
    assert "· alice-0 · user:alice\n" in log.read_text()
    if old_log:
        log.write_text(re.sub(r" · (user:\w+)\n", "\n", log.read_text()))
    (store_dir / "sessions" / "alice.jsonl").rename(tmp_path / "alice.jsonl")


@pytest.mark.parametrize("old_log", [False, True], ids=["scope-in-log", "log-before-scopes"])
def test_a_log_entry_whose_session_is_gone_stays_out_of_other_scopes(run, store_dir, tmp_path, old_log):
    gone_session_store(run, store_dir, tmp_path, old_log)
    found = run("search", "--scope", "user:bob", "--json", "-k", "20", "cheap hotel Acorn Guest House parking")
    assert found.returncode == 0 and owners_in(found.stdout.decode()) == {"bob"}
    context = run("context", "--session", "bob", "--message", "Which hotel did I book, the Acorn Guest House?")
    assert context.returncode == 0 and owners_in(context.stdout.decode()) == {"bob"}
    alices = run("search", "--scope", "user:alice", "--json", "-k", "20", "cheap hotel Acorn Guest House parking")
    # alice still finds her words while the log says whose they are; an old log's cannot be told
    assert owners_in(alices.stdout.decode()) == (set() if old_log else {"alice"})
    everything = run("search", "--json", "-k", "20", "cheap hotel Acorn Guest House parking")
    assert owners_in(everything.stdout.decode()) == {"alice", "bob"}  # a look at the whole store sees all
    listed = run("forget", "--match", "Acorn", "--scope", "user:bob", "--dry-run", "--json")
    assert "zqalice" not in listed.stdout.decode()


def test_every_call_taking_a_scope_refuses_a_bad_one_with_the_one_rule(store_dir):
    """The scope-name rule lives in one place (store.check_scope, beside check_name): ingest, search,
    history, forget, review and the topics calls give the same refusal, naming what was given."""
    memory = Memory(store_dir)
    memory.ingest('{"text": "Prefers green tea"}\n', kind="memory", scope="user:alice")
    said = "--scope: must be global, project:<name>, lang:<name> or user:<name>, got 'team:red'"
    calls = [lambda: memory.ingest("hello there, a long enough line", scope="team:red"),
             lambda: memory.search("green tea", scope="team:red"),
             lambda: memory.history("x", scope="team:red"),
             lambda: memory.forget(match="green", scope="team:red"),
             lambda: memory.review.pending(scope="team:red"),
             lambda: memory.topics.list(scope="team:red")]
    for call in calls:
        with pytest.raises(InputError) as refused:
            call()
        assert str(refused.value) == said
