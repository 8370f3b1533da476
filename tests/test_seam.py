"""The folder store implements the seam a second store would (memctl/store/seam.py, docs/design.md):
every operation the features ask of a store, a transaction and an index, with its signature; and so
does the PostgreSQL store (memctl/store/postgres.py), whose writes tests/test_postgres.py holds to
the folder's on a real server."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from conftest import runtime_of
from memctl.index.index import Index
from memctl.store import seam
from memctl.store.copy import files_of, place
from memctl.store.postgres import PostgresStore, PostgresWrites
from memctl.store.store import Store, Transaction

PROTOCOLS = [seam.Locked, seam.Places, seam.Names, seam.Truth]


def members(protocol) -> set[str]:
    """The operations a protocol names, its parents' included."""
    return {name for base in protocol.__mro__ if base.__module__ == seam.__name__
            for name in base.__dict__ if not name.startswith("_")}


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_a_folder_store_is_each_part_of_the_truth(store_dir, protocol):
    store = Store(store_dir)
    assert isinstance(store, protocol)
    assert members(protocol)
    same_operations(protocol, Store)  # a caller of the seam can call the store


def same_operations(protocol, given_class) -> None:
    """`given_class` has each operation of `protocol` with the same parameters, a property as a property."""
    for name in sorted(members(protocol)):
        wanted = inspect.getattr_static(protocol, name)
        given = inspect.getattr_static(given_class, name)
        if isinstance(wanted, property):
            assert isinstance(given, property), name
        else:
            assert [(p.name, p.kind) for p in inspect.signature(given).parameters.values()] == \
                   [(p.name, p.kind) for p in inspect.signature(wanted).parameters.values()], name


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_a_postgresql_store_has_every_operation_of_the_truth(protocol):
    """Places and Names are there to refuse (NotOnPostgres) until the features ask by kind."""
    same_operations(protocol, PostgresStore)
    same_operations(seam.Writes, PostgresWrites)
    store = PostgresStore("postgresql://mei:pw@127.0.0.1:1/memory")  # never connected: nothing is asked yet
    assert isinstance(store, seam.Locked) and isinstance(PostgresWrites(store, None), seam.Writes)


def test_a_transaction_and_an_index_are_their_parts(store_dir):
    store = Store(store_dir)
    with store.transaction() as tx:
        assert isinstance(tx, seam.Writes) and isinstance(tx, Transaction)
    with store.transaction(dry_run=True) as tx:
        assert isinstance(tx, seam.Writes)
    assert isinstance(Index(runtime_of(store)), seam.Searchable)


def test_an_object_without_the_operations_is_no_store():
    class Partial:
        def lock(self): ...

    assert not isinstance(Partial(), seam.Locked)
    assert not isinstance(object(), seam.Truth)


# -- the truth's promises (docs/design.md), on a folder and on PostgreSQL alike (truth_backend) ----------
def write(store, tx, path: str, data: bytes, how: str = "replace") -> None:
    getattr(tx, how)(place(store, path), data)


class Planned(Exception):
    """Raised inside a transaction on purpose."""


def test_a_transaction_lands_whole_or_not_at_all(truth_backend):
    store = truth_backend
    with store.transaction() as tx:
        write(store, tx, "MEMORY.md", b"# Notes\n\nkept\n")
    with pytest.raises(Planned):
        with store.transaction() as tx:
            write(store, tx, "sessions/s1.jsonl", b'{"id": "m1", "text": "half"}\n', "append")
            write(store, tx, "MEMORY.md", b"# Notes\n\nchanged\n")
            write(store, tx, "memory/2026-11-20.md", b"# 2026-11-20\n")
            raise Planned
    with store.reading():
        assert files_of(store) == {"MEMORY.md": b"# Notes\n\nkept\n"}


def test_a_dry_run_writes_nothing_and_moves_no_stamp(truth_backend):
    store = truth_backend
    with store.transaction(dry_run=True) as tx:  # no store yet: none is made
        write(store, tx, "MEMORY.md", b"dry\n")
    assert not store.exists() and store.written_stamp() is None
    with store.transaction() as tx:
        write(store, tx, "pending.jsonl", b'{"id": "p1", "text": "maybe"}\n', "append")
    stamp = store.written_stamp()
    with store.transaction(dry_run=True) as tx:
        write(store, tx, "pending.jsonl", b'{"id": "p2", "text": "dry"}\n', "append")
        tx.delete(place(store, "pending.jsonl"))
    assert store.written_stamp() == stamp
    with store.reading():
        assert files_of(store) == {"pending.jsonl": b'{"id": "p1", "text": "maybe"}\n'}
    with store.transaction() as tx:
        tx.delete(place(store, "pending.jsonl"))
    assert store.written_stamp() != stamp


def test_a_reader_never_sees_half_a_write(truth_backend):
    """A reader during a write sees all of it or none of it (a folder's waits, PostgreSQL's reads
    the snapshot before it)."""
    store = truth_backend
    with store.transaction() as tx:
        write(store, tx, "MEMORY.md", b"# Notes\n")
    halfway, seen = threading.Event(), []

    def writer():
        with store_again(store).transaction() as tx:
            write(store, tx, "MEMORY.md", b"# Notes\n\nnew\n")
            halfway.set()
            time.sleep(0.5)
            write(store, tx, "sessions/s1.jsonl", b'{"id": "m1", "text": "new"}\n', "append")

    thread = threading.Thread(target=writer)
    thread.start()
    halfway.wait(10)
    reader = store_again(store)
    with reader.reading():
        seen.append(files_of(reader))
    thread.join()
    assert seen[0] in ({"MEMORY.md": b"# Notes\n"},
                       {"MEMORY.md": b"# Notes\n\nnew\n", "sessions/s1.jsonl": b'{"id": "m1", "text": "new"}\n'})


def test_one_writer_at_a_time_loses_no_update(truth_backend):
    """Writers that read, then write what they read plus one, in a transaction each: none is lost."""
    store = truth_backend
    with store.transaction() as tx:
        write(store, tx, "count.txt", b"0")

    def add_one():
        mine = store_again(store)
        for _ in range(5):
            with mine.transaction() as tx:
                count = int(files_of(mine)["count.txt"])
                time.sleep(0.01)
                write(mine, tx, "count.txt", str(count + 1).encode())

    threads = [threading.Thread(target=add_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with store.reading():
        assert files_of(store)["count.txt"] == b"20"


def store_again(store):
    """Another handle on the same store, as another process or thread has (its own lock descriptor,
    its own connection)."""
    return Store(store.root) if store.is_folder else PostgresStore(store.url)
