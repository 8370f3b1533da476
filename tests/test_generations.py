"""A search reads one generation of the index while other processes update it (#31 item 1):
the table, the vectors and Tantivy of one update, never rows of a newer table read against the
vectors of an older one."""

from __future__ import annotations

import orjson
import pytest

from conftest import runtime_of
from memctl.index.index import Index
from memctl.ingest.ingest import ingest
from memctl.search import candidates
from memctl.search import search as search_module
from memctl.search.search import Query, Retriever, search_store
from memctl.store.store import Store

NOW = "2026-11-22T12:00:00Z"


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", NOW)


def turns(store: Store, first: int, count: int) -> None:
    """`count` turns of one session, each answering the one before (so each new turn is a reply
    that a search reads with the turn it answers)."""
    ingest(runtime_of(store), b"".join(orjson.dumps({"id": f"m{n}", "session": "s1", "speaker": "Ana",
                                         "ts": f"2026-11-20T10:{n:02d}:00Z",
                                         "text": f"heron survey {n}: counted {n + 3} herons at the lake"}) + b"\n"
                           for n in range(first, first + count)), source="<stdin>", fmt="jsonl", keep_noise=True)


# Points in the middle of a search, once its vectors are read: choosing the vectors' candidates,
# reading the replies' cosines (where rows of a newer table met the older vectors: IndexError),
# and ranking.
MIDDLES = {"vector candidates": (search_module.Searcher, "_vector_candidates"),
           "reply cosines": (candidates.IndexRows, "reply_cosines"), "ranking": (search_module, "rank")}


def update_in_the_middle(monkeypatch, store: Store, where: str) -> list[int]:
    """Once, in the middle of the next search (at MIDDLES[where]), ingest replies and update the
    index in place, as another agent's process does; how many times it ran."""
    owner, name = MIDDLES[where]
    original = getattr(owner, name)
    ran = []

    def meanwhile(*args, **kwargs):
        if not ran:
            ran.append(1)
            turns(store, 12, 3)
            assert Index(runtime_of(store)).update().added  # a patch: rows appended, the table changed in place
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, meanwhile)
    return ran


@pytest.mark.parametrize("where", sorted(MIDDLES))
def test_a_search_during_an_update_reads_one_generation(tmp_path, monkeypatch, where):
    store = Store(tmp_path / "s")
    turns(store, 0, 12)
    Index(runtime_of(store)).update()
    ran = update_in_the_middle(monkeypatch, store, where)
    (results,) = search_store(runtime_of(store), [Query(text="heron survey 11", min_score=0)], count_access=False)
    assert ran
    (fresh,) = search_store(runtime_of(store), [Query(text="heron survey 11", min_score=0)], count_access=False)
    # what a search after the update returns (the hook runs once): the newer generation, read whole
    assert [(r.id, r.score) for r in results] == [(r.id, r.score) for r in fresh]


def test_a_kept_retriever_reads_one_generation_while_another_updates(tmp_path, monkeypatch):
    # a resident server keeps its Retriever (and its Searcher) from call to call
    store = Store(tmp_path / "s")
    turns(store, 0, 12)
    retriever = Retriever(runtime_of(store))
    retriever.search([Query(text="heron survey 3", min_score=0)], count_access=False)
    ran = update_in_the_middle(monkeypatch, store, "reply cosines")
    (results,) = retriever.search([Query(text="heron survey 11", min_score=0)], count_access=False)
    assert ran
    (fresh,) = search_store(runtime_of(store), [Query(text="heron survey 11", min_score=0)], count_access=False)
    assert [(r.id, r.score) for r in results] == [(r.id, r.score) for r in fresh]


def test_a_compaction_while_the_index_is_opened_is_an_open_done_again(tmp_path, monkeypatch):
    # A compaction replaces the vectors, then the table: a Searcher that opened the old table
    # must not map the new vectors (their rows renumbered). It opens again, on the new pair.
    from memctl.index import lexical

    store = Store(tmp_path / "s")
    turns(store, 0, 12)
    Index(runtime_of(store)).update()
    vectors = store.index_dir / "vectors.npy"
    before = vectors.stat().st_ino
    original = lexical.open_index
    opened = []

    def compacting_meanwhile(path):
        if not opened:
            opened.append(path)
            session = store.session_file("s1")
            session.write_bytes(b"".join(session.read_bytes().splitlines(keepends=True)[6:]))
            Index(runtime_of(store)).update()
        return original(path)

    monkeypatch.setattr(lexical, "open_index", compacting_meanwhile)
    (results,) = search_store(runtime_of(store), [Query(text="heron survey 11", min_score=0)], count_access=False)
    assert opened and vectors.stat().st_ino != before  # compacted (new files) while the Searcher opened
    (fresh,) = search_store(runtime_of(store), [Query(text="heron survey 11", min_score=0)], count_access=False)
    assert [(r.id, r.score) for r in results] == [(r.id, r.score) for r in fresh]
