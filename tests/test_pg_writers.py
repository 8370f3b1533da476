"""Many writers on two machines at once, and writers killed mid-transaction (#35 item 3), on a folder
store and on a PostgreSQL store alike: every acknowledged record is in the store exactly once, ids
are unique, a killed writer's batch is all there or not there at all, and under writers at once the
newer fact holds (one current memory a subject) and a supersede chain stays one line.

A "machine" is a HOME, a runtime folder (XDG_RUNTIME_DIR), a temp folder (TMPDIR), XDG
config/cache/state folders and a working directory of its own: what two hosts sharing one store
do not share. The writers are real `python -m memctl --store STORE ingest` processes
(MEMCTL_SERVER=off: no resident server outlives a test; the store is the only thing the machines
share). What they stored is read back through `memctl store copy STORE DIR`, the same way on
both backends.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from conftest import memctl_command
from memctl.governance import governance
from memctl.store import memoryfile
from memctl.store.status import is_current

pytestmark = pytest.mark.process

WRITERS = 8  # four on each machine


@pytest.fixture(params=["folder", "postgresql"])
def shared_store(request, tmp_path) -> str:
    """The one store both machines write: a folder, or a PostgreSQL database of the test's own."""
    if request.param == "folder":
        return str(tmp_path / "store")
    return request.getfixturevalue("postgres_url")


class Machine:
    """One host's environment: its own HOME, runtime, config, cache and state folders and working directory."""

    def __init__(self, root: Path, store: str):
        self.store = store
        self.home = root / "home"
        self.work = root / "work"
        runtime, temp = root / "run", root / "tmp"  # a PostgreSQL store's working folder goes in the temp folder
        for folder in (self.home, self.work, runtime, temp):
            folder.mkdir(parents=True)
        runtime.chmod(0o700)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMCTL_", "XDG_"))}
        self.env.update({"HOME": str(self.home), "XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(temp),
                         "XDG_CONFIG_HOME": str(self.home / ".config"), "XDG_CACHE_HOME": str(self.home / ".cache"),
                         "XDG_STATE_HOME": str(self.home / ".local/state"),
                         "XDG_DATA_HOME": str(self.home / ".local/share"),
                         "MEMCTL_SERVER": "off", "MEMCTL_NOW": "2026-11-20T10:00:00Z"})

    def command(self, *args: str) -> list[str]:
        return [*memctl_command(), "--store", self.store, *args]

    def run(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), input=input, capture_output=True, env=self.env, cwd=self.work,
                              timeout=300)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.command(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env, cwd=self.work)


@pytest.fixture
def machines(tmp_path, shared_store) -> tuple[Machine, Machine]:
    return Machine(tmp_path / "host-a", shared_store), Machine(tmp_path / "host-b", shared_store)


def read_back(machine: Machine, folder: Path) -> Path:
    """The whole store as files (`memctl store copy`), each file parsed: the folder."""
    done = machine.run("store", "copy", machine.store, str(folder))
    assert done.returncode == 0, done.stderr
    for path in (folder / "sessions").glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            orjson.loads(line)  # no torn line
    if (folder / "MEMORY.md").exists():
        assert memoryfile.load(folder / "MEMORY.md").issues == []
    return folder


def message_ids(folder: Path) -> Counter:
    return Counter(orjson.loads(line)["id"] for path in (folder / "sessions").glob("*.jsonl")
                   for line in path.read_bytes().splitlines())


def stored(done: subprocess.CompletedProcess) -> list[str]:
    """The ids an `ingest --json` says it stored (its acknowledgement)."""
    return [r["id"] for r in map(orjson.loads, done.stdout.splitlines()) if r["status"] == "stored"]


def at_once(work, count: int) -> list:
    """work(number) on `count` threads started together (each runs memctl processes); their results."""
    results: list = [None] * count
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def one(number: int) -> None:
        start.wait()
        try:
            results[number] = work(number)
        except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


# One export every writer imports at once: its messages carry no id, so each gets one from its content.
SHARED_EXPORT = b"".join(orjson.dumps({"session": "shared", "role": ("user", "assistant")[n % 2],
                                       "text": f"the shared export, line {n}: kestrel moves to postgres",
                                       "ts": "2026-11-19T09:00:00Z"}) + b"\n" for n in range(12))
BATCHES, PER_BATCH = 3, 15


def test_eight_writers_on_two_machines_lose_and_double_nothing(machines, tmp_path):
    def write(writer: int) -> list[subprocess.CompletedProcess]:
        machine = machines[writer % 2]
        done = []
        for batch in range(BATCHES):
            # Sessions shared by writers of both machines; half the messages without an id (memctl gives it).
            lines = [{"session": f"s{(writer + batch) % 3}", "role": "user", "ts": "2026-11-20T10:00:00Z",
                      "text": f"writer {writer} batch {batch} message {k}: the deploy of kestrel on host {writer % 2}"}
                     for k in range(PER_BATCH)]
            for k, line in enumerate(lines):
                if k % 2:
                    line["id"] = f"w{writer}-b{batch}-{k}"
            done.append(machine.run("ingest", "--json", "-", input=b"".join(orjson.dumps(r) + b"\n" for r in lines)))
            if batch == 1:
                done.append(machine.run("ingest", "--json", "-", input=SHARED_EXPORT))
        return done

    runs = [done for writer in at_once(write, WRITERS) for done in writer]
    assert all(done.returncode == 0 for done in runs), [done.stderr for done in runs if done.returncode]
    acknowledged = Counter(i for done in runs for i in stored(done))
    assert set(acknowledged.values()) == {1}  # no id acknowledged twice: the shared export landed once
    assert len(acknowledged) == WRITERS * BATCHES * PER_BATCH + 12
    present = message_ids(read_back(machines[0], tmp_path / "copy"))
    assert present == acknowledged  # every acknowledged id once, and nothing else
    # every message of a user is in the day's log once too (written in the same transaction)
    log = (tmp_path / "copy" / "memory" / "2026-11-20.md").read_text()
    assert sum(line.startswith("### ") for line in log.splitlines()) == WRITERS * BATCHES * PER_BATCH


def in_transaction(store: str):
    """A probe true while some writer is inside a transaction: the folder's journal on disk, or a
    session holding an advisory lock (the PostgreSQL store's write lock)."""
    if not store.startswith("postgres"):
        return lambda: (Path(store) / ".journal").exists()
    import psycopg

    watcher = psycopg.connect(store, autocommit=True)

    def probe() -> bool:
        held = watcher.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
        return held[0] > 0

    probe.close = watcher.close
    return probe


KILLED_BATCH = 400


def test_a_writer_killed_mid_transaction_leaves_its_batch_whole_or_absent(machines, tmp_path):
    """Rounds of a big ingest on machine A killed (SIGKILL) at a random moment or inside its
    transaction, while machine B's writes go on: after each, A's batch is all there or not at all,
    B's acknowledged writes are all there once, and the next writer is not locked out."""
    a, b = machines
    rng = random.Random(20261128)
    probe = in_transaction(a.store)
    acknowledged: Counter = Counter()
    outcomes = Counter()
    try:
        for run in range(30):
            if run >= 6 and outcomes["killed in transaction"] >= 3 and outcomes["acknowledged"] >= 1:
                break
            batch = b"".join(orjson.dumps({"id": f"r{run}-{k}", "session": f"k{k % 5}", "role": "user",
                                           "text": f"run {run} message {k} " + "x" * 200,
                                           "ts": "2026-11-20T10:00:00Z"}) + b"\n" for k in range(KILLED_BATCH))
            (a.work / f"run-{run}.jsonl").write_bytes(batch)
            writer = a.start("ingest", "--json", f"run-{run}.jsonl")
            other = b.run("ingest", "--json", "-", input=orjson.dumps(
                {"id": f"b{run}", "session": "b", "role": "user", "text": f"machine b writes during run {run}"}))
            assert other.returncode == 0, other.stderr
            acknowledged.update(stored(other))
            if run % 2:  # every other kill waits for the writer's transaction in flight
                deadline = time.monotonic() + 20
                while writer.poll() is None and not probe() and time.monotonic() < deadline:
                    time.sleep(0.0005)
            else:
                time.sleep(rng.uniform(0.1, 1.5))
            was_in_transaction = probe()
            writer.send_signal(signal.SIGKILL)
            out, _ = writer.communicate()
            if writer.returncode == 0:
                outcomes["acknowledged"] += 1
                acknowledged.update(r["id"] for r in map(orjson.loads, out.splitlines()) if r["status"] == "stored")
            else:
                assert writer.returncode == -signal.SIGKILL
                outcomes["killed in transaction" if was_in_transaction else "killed"] += 1
            after = b.run("ingest", "--json", "-", input=orjson.dumps(  # not locked out by the dead writer
                {"id": f"after-{run}", "session": "b", "role": "user", "text": f"machine b after run {run}"}))
            assert after.returncode == 0, after.stderr
            acknowledged.update(stored(after))
            present = message_ids(read_back(b, tmp_path / f"copy-{run}"))
            assert set(present.values()) == {1}
            assert acknowledged <= present  # nothing acknowledged is lost
            runs = Counter(i.split("-")[0] for i in present if i.startswith("r"))
            assert set(runs.values()) <= {KILLED_BATCH}, runs  # a batch whole or absent
    finally:
        getattr(probe, "close", lambda: None)()
    assert outcomes["killed in transaction"] >= 3, outcomes


def test_the_newer_fact_and_a_supersede_chain_hold_under_writers_at_once(machines, tmp_path):
    """Eight writers on two machines each write notes on one subject at once. Without a link, one
    note on a new subject lands and every other is refused as a conflict; each writer then puts
    its notes at the end of one chain (--supersedes the newest it knows, and on "already
    superseded by X" again after X): one line, no fork, one current version."""
    a = machines[0]
    first = a.run("ingest", "--kind", "memory", "--json", "-", input=orjson.dumps(
        {"id": "db-0", "text": "Kestrel keeps its data in SQLite", "canonical_topic": "kestrel-db"}))
    assert first.returncode == 0, first.stderr

    def write(writer: int) -> tuple[subprocess.CompletedProcess, list[str], int]:
        machine = machines[writer % 2]
        unlinked = machine.run("ingest", "--kind", "memory", "--json", "-", input=orjson.dumps(
            {"id": f"cache-{writer}", "text": f"Kestrel caches its pages in store number {writer}",
             "canonical_topic": "kestrel-cache"}))
        landed, refusals, newest = [], 0, "db-0"
        for note in range(3):
            for _ in range(WRITERS * 3 * 2):
                done = machine.run("ingest", "--kind", "memory", "--json", "--supersedes", newest, "-",
                                   input=orjson.dumps({"id": f"db-{writer}-{note}", "canonical_topic": "kestrel-db",
                                                       "text": f"Kestrel moved its data to database {writer}.{note}"}))
                if done.returncode == 0:
                    assert stored(done) == [f"db-{writer}-{note}"]
                    landed.append(newest := f"db-{writer}-{note}")
                    break
                newer = re.search(rb"is already superseded by '([^']+)'", done.stderr)
                assert done.returncode == 2 and newer, done.stderr
                refusals += 1
                newest = newer.group(1).decode()
        return unlinked, landed, refusals

    results = at_once(write, WRITERS)
    unlinked = [done for done, _, _ in results]
    assert sorted(done.returncode for done in unlinked) == [0] + [2] * (WRITERS - 1), [d.stderr for d in unlinked]
    assert all(b"already has current memory" in done.stderr for done in unlinked if done.returncode)
    landed = [note for _, notes, _ in results for note in notes]
    assert len(landed) == WRITERS * 3
    assert sum(refusals for _, _, refusals in results) > 0  # the writers did meet
    doc = memoryfile.load(read_back(a, tmp_path / "copy") / "MEMORY.md")
    cache = [e.id for e in doc.entries if e.get("canonical_topic") == "kestrel-cache"]
    assert len(cache) == 1 and cache[0] in {f"cache-{w}" for w in range(WRITERS)}
    chain = governance.chain(doc, "db-0")
    assert chain.problems == []  # no fork, no cycle, nothing dangling
    assert set(chain.ids) == {"db-0", *landed}
    # one line: each version supersedes the one before it, and only the last is current
    assert [link.supersedes for link in chain.links[1:]] == [[link.id] for link in chain.links[:-1]]
    assert chain.tails == [chain.links[-1].id]
    assert [link.id for link in chain.links if is_current(link.entry)] == [chain.links[-1].id]
    assert governance.topic_conflicts(doc) == {}  # the newer fact: one current memory a subject
