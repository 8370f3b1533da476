"""The folder store implements the seam a second store would (memctl/store/seam.py, docs/design.md):
every operation the features ask of a store, a transaction and an index, with its signature; and so
does the PostgreSQL store (memctl/store/postgres.py), whose writes tests/test_postgres.py holds to
the folder's on a real server."""

from __future__ import annotations

import inspect

import pytest

from conftest import runtime_of
from memctl.index.index import Index
from memctl.store import seam
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
