"""A store holds only regular files, and memctl writes through no other name of one (#31 items
2 and 3): a FIFO (or socket, device, folder) where a store file should be is named in one line,
never waited on; a file of several hard links is never appended to, since its other name may lie
outside the store; `health check` lists both."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from conftest import memctl_command, runtime_of

MESSAGE = {"id": "m1", "session": "s1", "text": "the heron survey counted twelve herons at the lake",
           "ts": "2026-11-20T10:00:00Z"}
# Where the issue planted a FIFO, and the files a search or a status read besides
PLACES = ["sessions/zz.jsonl", "sessions/s1.jsonl", ".lock", "MEMORY.md", "memctl.toml", "pending.jsonl",
          "memory/2026-11-20.md", "topics/t-zz.jsonl", "access.log", ".index/manifest.json", ".index/vectors.npy"]


def memctl(store: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    """A real process: one that waits at a FIFO's opening can only be stopped from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_SERVER"] = "off"
    return subprocess.run([*memctl_command(), "--store", str(store), *args], input=input, capture_output=True,
                          env=env, timeout=120)


@contextmanager
def rescued(fifo: Path):
    """While the block runs, a FIFO's other end opened and closed every few seconds: a command that
    waits at its opening (as memctl did) is let go, and the test fails instead of waiting forever."""
    done = threading.Event()

    def rescue():
        while not done.wait(3):
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # a reader and a writer at once: never waits

    thread = threading.Thread(target=rescue, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.fixture
def base(run, store_dir) -> Path:
    """A store with a message, a note, a pending note, settings and an index."""
    assert run("ingest", "-f", "jsonl", "-", input=orjson.dumps(MESSAGE) + b"\n").returncode == 0
    assert run("ingest", "--kind", "memory", "-", input=b"The heron survey is on Tuesdays.\n").returncode == 0
    assert run("ingest", "--pending", "-", input=b"heron counts go to Mei\n").returncode == 0
    (store_dir / "memctl.toml").write_text("[retrieval]\n")
    (store_dir / "memctl.toml").chmod(0o600)
    assert run("search", "heron").returncode == 0
    return store_dir


@pytest.mark.parametrize("place", PLACES)
def test_a_fifo_in_the_store_is_named_never_waited_on(run, base, place):
    fifo = base / place
    fifo.parent.mkdir(mode=0o700, exist_ok=True)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo, 0o600)
    with rescued(fifo):  # before: every command waited forever at the FIFO's opening
        for command in (["search", "heron"], ["status"]):
            done = run(*command)
            assert b"Traceback" not in done.stderr
            assert done.returncode in (0, 2), (command, done.stderr)  # 0: a command that never opens that file
            if done.returncode == 2:
                assert done.stderr.decode().splitlines()[-1] == (
                    f"memctl: error: {fifo}: a named pipe (FIFO), not a regular file; memctl opens only regular "
                    "files (README: Trust): remove it, or put a regular file there")
        health = run("health", "check")
    assert health.returncode == 1 and b"Traceback" not in health.stderr
    assert health.stdout.decode().splitlines() == [f"{place}: a named pipe (FIFO), not a regular file; memctl opens "
                                                   "only regular files (README: Trust): remove it, or put a regular "
                                                   "file there"]


@pytest.mark.process
def test_a_search_in_a_real_process_does_not_wait_at_a_fifo(base):
    # the case as a user met it: a process that waited at the FIFO until killed
    os.mkfifo(base / "sessions" / "zz.jsonl", 0o600)
    done = memctl(base, "search", "heron")
    assert done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"zz.jsonl: a named pipe" in done.stderr


def test_a_fifo_at_a_session_file_is_refused_before_ingest_writes(run, base):
    fifo = base / "sessions" / "s2.jsonl"
    os.mkfifo(fifo, 0o600)
    with rescued(fifo):
        done = run("ingest", "-f", "jsonl", "-", input=orjson.dumps({**MESSAGE, "id": "m2", "session": "s2"}))
    assert done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"s2.jsonl: a named pipe" in done.stderr
    assert not (base / ".journal").exists()


def hard_linked(store: Path, place: str, tmp_path: Path) -> Path:
    """`place` made one name of a file outside the store (its content as it was); that file."""
    outside = tmp_path / "outside"
    shutil.copyfile(store / place, outside)
    (store / place).unlink()
    os.link(outside, store / place)
    return outside


@pytest.mark.parametrize("place", ["sessions/s1.jsonl", "memory/2026-11-20.md", "access.log"])
def test_nothing_is_appended_through_a_hard_link(run, store_dir, tmp_path, place):
    assert run("ingest", "-f", "jsonl", "-", input=orjson.dumps(MESSAGE) + b"\n").returncode == 0
    assert run("ingest", "--kind", "memory", "-", input="The heron survey is on Tuesdays.\n").returncode == 0
    assert run("search", "heron survey").returncode == 0  # counts the note: access.log
    outside = hard_linked(store_dir, place, tmp_path)
    before = outside.read_bytes()
    later = orjson.dumps({**MESSAGE, "id": "m2", "text": "a second heron survey, nine herons"}) + b"\n"
    ingest = run("ingest", "-f", "jsonl", "-", input=later)
    search = run("search", "heron survey")
    assert outside.read_bytes() == before  # before: both appended to the file outside
    refused = ingest if place != "access.log" else search
    assert refused.returncode == 2
    assert refused.stderr.decode().splitlines()[-1] == (
        f"memctl: error: {store_dir / place}: a file of 2 hard links; memctl writes through none, as another name "
        "may lie outside the store (README: Trust): make it a file of its own (cp FILE FILE.own && mv FILE.own FILE)")
    assert not (store_dir / ".journal").exists()  # refused before the journal named it: nothing to undo
    health = run("health", "check")
    assert health.returncode == 1
    assert f"{place}: a file of 2 hard links".encode() in health.stdout


def test_a_cache_file_is_not_appended_through_a_hard_link(store_dir, tmp_path):
    from memctl.cache.files import _append
    from memctl.errors import StoreError
    from memctl.store.store import Store

    store = Store(store_dir)
    events = store.path("cache", "s", "events")
    _append(events, b"x\n")
    outside = hard_linked(store_dir, "cache/s/events", tmp_path)
    with pytest.raises(StoreError, match="2 hard links"):
        _append(events, b"y\n")
    assert outside.read_bytes() == b"x\n"


def test_a_killed_writers_backups_are_not_reported_as_hard_links(run, store_dir):
    # A transaction keeps the old version of a file it replaces as a hard link in its journal:
    # health reports the journal, not its files.
    from memctl.check import check
    from memctl.store.store import Store, Transaction

    assert run("ingest", "--kind", "memory", "-", input="The heron survey is on Tuesdays.\n").returncode == 0
    store = Store(store_dir)
    with store.lock():
        Transaction(store).replace(store.memory_md, b"# gone\n")  # never committed: as if killed
    codes = {problem.code for problem in check(runtime_of(store))}
    assert "journal" in codes and "hard-link" not in codes
