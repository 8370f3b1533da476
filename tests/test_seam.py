"""The folder store implements the seam a second store would (memctl/store/seam.py, docs/design.md):
every operation the features ask of a store, a transaction and an index, with its signature; and so
does the PostgreSQL store (memctl/store/postgres.py), whose writes tests/test_postgres.py holds to
the folder's on a real server."""

from __future__ import annotations

import inspect
import json
import threading
import time

import pytest

from conftest import FIXTURES, runtime_of, snapshot
from memctl.store.postgres import shown
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
    """Places and Names are its working folder's (store/postgres.py Mirror), Locked and Writes the database's."""
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


# -- the index's promises: search on a folder and on PostgreSQL alike -----------------------------------
DEMO = FIXTURES / "demo"
NOW = {"MEMCTL_NOW": "2026-11-20T10:00:00Z"}
CHINESE = ['{"id": "zh-1", "role": "user", "speaker": "Mei", "ts": "2026-11-05T09:00:00+08:00", '
           '"text": "我们的面包店用 PostgreSQL 存库存，每天早上六点盘点"}',
           '{"id": "zh-2", "role": "assistant", "ts": "2026-11-05T09:00:09+08:00", '
           '"text": "好的，我记住了：库存每天早上六点盘点。"}']


@pytest.fixture(scope="module")
def searched_stores(tmp_path_factory, postgres_server):
    """The bundled demo, a Chinese session and a user's own session in a folder store, and the same
    store copied into PostgreSQL (both indexed by their first search, with the fake embedder)."""
    from conftest import run_in_process

    folder = tmp_path_factory.mktemp("searched") / "store"
    for args, data in ((("ingest", str(DEMO / "chat.jsonl")), None), (("ingest", str(DEMO / "MEMORY.md")), None),
                       (("ingest", "--session", "bakery-zh", "-"), "\n".join(CHINESE)),
                       (("ingest", "--scope", "user:alice", "--session", "alice-1", "-"),
                        '{"role": "user", "text": "my PostgreSQL password for Kestrel is in the locker, code 4711"}')):
        assert run_in_process(folder, *args, input=data, env=NOW).returncode == 0
    url = postgres_server.new_database()
    assert run_in_process(folder, "store", "copy", str(folder), url).returncode == 0
    return folder, url


SEARCHES = [["which database does kestrel use"], ["PostgreSQL", "--explain"], ["库存 盘点", "--explain"],
            ["面包店"], ["recipe metadata JSONB", "--mode", "bm25"], ["inventory for the bakery", "--mode", "vector"],
            ["kestrel", "--kind", "memory", "-k", "3"], ["locker code", "--scope", "user:alice"],
            ["locker code"], ["zebra quantum marmalade"], ["kestrel stack", "--min-score", "0", "-k", "20"],
            ["kestrel", "--session", "2026-11-02-planning"], ["kestrel", "--since", "2026-11-03"]]


@pytest.mark.process
@pytest.mark.parametrize("argv", SEARCHES, ids=lambda argv: " ".join(argv))
def test_a_search_gives_the_same_results_on_a_folder_and_on_postgresql(searched_stores, argv):
    """Same queries, same store, the same results: ids in order, scores and every --explain number,
    the same exit status (1: nothing found), on the folder's index and on the database's."""
    from conftest import run_in_process

    folder, url = searched_stores
    on_folder = run_in_process(folder, "search", "--json", *argv, env=NOW)
    on_postgres = run_in_process(url, "search", "--json", *argv, env=NOW)
    assert on_postgres.returncode == on_folder.returncode, on_postgres.stderr
    assert on_postgres.stdout == on_folder.stdout
    assert on_folder.stdout or on_folder.returncode == 1


COUNTED = [["kestrel"], ["which database does kestrel use"], ["kestrel", "--kind", "memory", "-k", "3"],
           ["kestrel"], ["locker code", "--scope", "user:alice"]]


@pytest.mark.process
def test_a_search_on_postgresql_counts_its_accesses_as_a_folders_does(searched_stores, tmp_path):
    """The same searches on both backends count the same accesses: --rank mera, which reads them,
    then gives the same --json on both, and not what it gives on the store never searched. A copy
    of the PostgreSQL store into a folder carries its counts (folded into access.json)."""
    from conftest import run_in_process
    from memctl.store import counters

    folder, url = searched_stores
    never = tmp_path / "never-searched"
    assert run_in_process(folder, "store", "copy", str(folder), str(never)).returncode == 0
    for name in ("access.json", "access.log"):  # what the module's other searches counted
        (never / name).unlink(missing_ok=True)
    mera = ["search", "--json", "--rank", "mera", "kestrel", "-k", "20", "--min-score", "0"]
    uncounted = run_in_process(never, *mera, env=NOW).stdout  # it ranks before it counts its own accesses
    for argv in COUNTED:
        for store in (folder, url):
            assert run_in_process(store, "search", "--json", *argv, env=NOW).returncode == 0
    on_folder, on_postgres = (run_in_process(store, *mera, env=NOW) for store in (folder, url))
    assert on_postgres.returncode == on_folder.returncode == 0, on_postgres.stderr
    assert on_postgres.stdout == on_folder.stdout
    assert on_postgres.stdout != uncounted
    back = tmp_path / "back"
    assert run_in_process(url, "store", "copy", url, str(back)).returncode == 0
    assert not (back / "access.log").exists()
    assert counters.load(Store(back)) == counters.load(Store(folder)) != {}


SCOPES = ["user:alice", "user:bob", "project:kestrel", "project:osprey"]
WORDS = "kestrel osprey deploy key vault locker postgres redis bakery recipe 库存 密码 盘点 面包".split()


@pytest.fixture(params=["folder", "postgresql"])
def scoped_store(request, tmp_path):
    """A store whose scopes (and global notes) all speak of the same few words, on each backend."""
    import random

    from memctl import Memory
    from memctl.api import copy_store

    pick = random.Random(35)
    folder = tmp_path / "store"
    memory = Memory(folder)
    for number in range(40):
        scope = pick.choice([*SCOPES, None])
        text = " ".join(pick.sample(WORDS, 4))
        if number % 2:
            memory.ingest(f'{{"text": "note {number}: {text}"}}', kind="memory", scope=scope)
        else:
            memory.ingest(f'{{"id": "m{number}", "role": "user", "text": "{text}"}}', kind="message",
                          session=f"s-{(scope or 'global').replace(':', '-')}", scope=scope)
    if request.param == "folder":
        return folder
    url = request.getfixturevalue("postgres_url")
    copy_store(folder, url)
    return url


@pytest.mark.process
def test_a_scoped_search_never_sees_another_scopes_records(scoped_store):
    """Scopes are walls in SQL too: for random queries of the store's words in random scopes (and
    any mode, ranked by the access counts the searches before raised, or not), every result is of
    that scope or global, on both backends."""
    import random

    from memctl import Memory
    from memctl.store import counters

    memory, pick = Memory(scoped_store), random.Random(7)
    seen = set()
    for _ in range(40):
        scope = pick.choice(SCOPES)
        query = " ".join(pick.sample(WORDS, pick.randint(1, 3)))
        found = memory.search(query, scope=scope, k=20, min_score=0, mode=pick.choice(["hybrid", "bm25", "vector"]),
                              rank=pick.choice(["pipeline", "mera"]))
        assert {result.scope for result in found} <= {scope, "global"}, (query, scope)
        seen |= {result.scope for result in found}
    assert seen == {*SCOPES, "global"}  # every scope's walls were tested with results on both sides
    assert counters.load(memory.store)  # ... with counts of every scope's memories in the store


# -- every command, on a folder and on PostgreSQL alike ------------------------------------------------
PENDING_NOTE = '{"text": "Kestrel might move to Redis streams", "fields": {"scope": "project:kestrel"}}'
EVERYDAY = [  # (argv, stdin): each on the store as the steps before left it
    (["ingest", str(DEMO / "chat.jsonl")], None),
    (["ingest", str(DEMO / "MEMORY.md")], None),
    (["ingest", "--session", "bakery-zh", "-"], "\n".join(CHINESE)),
    (["ingest", "--pending", "-"], PENDING_NOTE),
    (["ingest", "--scope", "user:alice", "--session", "alice-1", "-"],
     '{"role": "user", "text": "my locker code is 4711, keep it to yourself"}'),
    (["search", "--json", "which database does kestrel use"], None),
    (["search", "--json", "--layered", "--workspace", "project:kestrel", "--budget", "200", "which queue"], None),
    (["context", "--json", "--session", "2026-11-09-debugging", "--message", "why did the sync time out?"], None),
    (["status", "--json"], None),
    (["show", "--json", "mem-kestrel-db"], None),
    (["show", "--json", "s2-02"], None),
    (["history", "--json", "mem-kestrel-db"], None),
    (["review", "pending", "--json"], None),
    (["review", "confirm", "PENDING"], None),
    (["split", "--json", "--session", "2026-11-09-debugging", "--force"], None),
    (["topics", "list", "--json"], None),
    (["state", "record", "--json", "--hit", "Decisions", "--summary", "Choosing the database"], None),
    (["state", "show", "--json"], None),
    (["forget", "--json", "s2-03"], None),
    (["forget", "--json", "--match", "locker code", "--yes"], None),
    (["show", "--json", "s2-03"], None),
    (["search", "--json", "locker code", "--scope", "user:alice"], None),
    (["review", "lifecycle", "--json", "--dry-run"], None),
    (["health", "check", "--json"], None),
    (["config", "--json"], None),
    (["cache", "run", "--json", "--scope", "s1", "--tool", "echo", "--", "echo", "hello"], None),
    (["cache", "stats", "--json"], None),
]


def test_every_command_does_the_same_on_a_folder_and_on_postgresql(tmp_path, postgres_url):
    """The README's everyday commands, one after another, on a folder store and on a store named by
    a URL: the same exit status and the same output (the store named as it is), and at the end
    the same truth, file for file, as `store copy` reads it back."""
    from conftest import run_in_process

    folder = tmp_path / "store"
    env = {**NOW, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def same(argv: list[str], text: bytes, store: str):
        text = text.decode().replace(store, "STORE")
        if argv[0] == "status":  # bytes on disk: Tantivy's and SQLite's files against the tables' pages
            shown = json.loads(text)
            assert shown["sizes"]["total_bytes"] > shown["sizes"]["index_bytes"] > 0
            return {**shown, "sizes": None}
        if argv[:2] == ["cache", "run"]:  # a run's own: its entry's id is random, its duration measured
            return {**json.loads(text), "id": None, "duration_ms": None}
        return text

    pending = None
    for argv, data in EVERYDAY:
        argv = [pending if arg == "PENDING" else arg for arg in argv]
        on_folder = run_in_process(folder, *argv, input=data, env=env)
        on_postgres = run_in_process(postgres_url, *argv, input=data, env=env)
        assert on_folder.returncode in (0, 1), (argv, on_folder.stderr)
        assert (on_postgres.returncode, same(argv, on_postgres.stdout, shown(postgres_url))) == \
            (on_folder.returncode, same(argv, on_folder.stdout, str(folder))), (argv, on_postgres.stderr)
        if argv[:2] == ["review", "pending"]:
            pending = json.loads(on_folder.stdout.splitlines()[0])["id"]
    back = tmp_path / "back"
    assert run_in_process(folder, "store", "copy", postgres_url, str(back)).returncode == 0
    kept_apart = ("cache/", "access.")  # the cache is this machine's; access counts are compared as counts:
    # the folder logs each search a line (access.log), PostgreSQL raises a row, which a copy folds into access.json
    assert {path: digest for path, digest in snapshot(back).items() if not path.startswith("access.")} == \
        {path: digest for path, digest in snapshot(folder).items()
         if not path.startswith((".", *kept_apart))}
    from memctl.store import counters

    assert counters.load(Store(back)) == counters.load(Store(folder)) != {}
