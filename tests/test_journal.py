"""The undo journal is confined to its store, and readers never see an unfinished write.

A journal is data: a store can be copied, unpacked or handed over, so these
tests craft journals the way an attacker or an accident would and check that
nothing outside the store is touched and the command says what is wrong.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from conftest import snapshot

MESSAGE = {"id": "m1", "session": "s1", "role": "user", "text": "the heron nests by the river",
           "ts": "2026-11-20T10:00:00Z"}


@pytest.fixture
def store(run, store_dir: Path) -> Path:
    assert run("ingest", "-", input=orjson.dumps(MESSAGE).decode()).returncode == 0
    return store_dir


def plant(store: Path, journal) -> None:
    (store / ".journal").mkdir(mode=0o700, exist_ok=True)
    (store / ".journal" / "journal.json").write_bytes(orjson.dumps(journal))


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the store that a crafted journal aims at."""
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_text("do not touch\n")
    return path


def assert_refused(result, what: bytes) -> None:
    assert result.returncode == 2, result
    assert result.stderr.count(b"\n") == 1, result.stderr  # one line
    assert b"invalid journal" in result.stderr and what in result.stderr, result.stderr
    assert b"Traceback" not in result.stderr


def assert_read_with_warning(result, what: bytes) -> None:
    """A reader is not locked out of the memory by a journal nobody can undo: it says so and reads on."""
    assert result.returncode in (0, 1), result
    assert b"warning:" in result.stderr and b"invalid journal" in result.stderr and what in result.stderr
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("entry, what", [
    (lambda v: {"op": "append", "path": str(v), "size": 0}, b"not relative to the store"),
    (lambda v: {"op": "replace", "path": str(v), "backup": None}, b"not relative to the store"),
    (lambda v: {"op": "append", "path": "../outside/precious.txt", "size": 0}, b"not relative to the store"),
    (lambda v: {"op": "append", "path": "sessions/../../outside/precious.txt", "size": 0},
     b"not relative to the store"),
    (lambda v: {"op": "replace", "path": "MEMORY.md", "backup": str(v)}, b"not a backup file"),
    (lambda v: {"op": "append", "size": 0}, b"'path' missing"),
    (lambda v: {"op": "append", "path": "sessions/s1.jsonl", "size": "0"}, b"'size'"),
    (lambda v: {"op": "chmod", "path": "sessions/s1.jsonl"}, b"unknown op"),
    (lambda v: "append", b"not an object"),
], ids=["absolute-append", "absolute-replace", "dotdot", "dotdot-inner", "backup-outside", "no-path",
        "size-type", "unknown-op", "not-object"])
def test_crafted_journal_touches_nothing_and_is_reported(run, store, victim, entry, what):
    plant(store, {"ops": [entry(victim)]})
    before = snapshot(store)
    assert_refused(run("ingest", "-", input=orjson.dumps({**MESSAGE, "id": "m2"}).decode()), what)
    assert snapshot(store) == before
    for args in (["search", "--mode", "bm25", "heron"], ["review", "pending"]):
        assert_read_with_warning(run(*args), what)
    assert victim.read_text() == "do not touch\n"
    assert {k: v for k, v in snapshot(store).items() if not k.startswith(".index")} == \
        {k: v for k, v in before.items() if not k.startswith(".index")}
    checked = run("health", "check", "--json")
    assert checked.returncode == 1
    codes = [orjson.loads(line)["code"] for line in checked.stdout.splitlines()]
    assert "journal-invalid" in codes and "journal" not in codes


def test_journal_through_a_symlink_out_of_the_store_is_refused(run, store, victim):
    (store / "sessions" / "evil.jsonl").symlink_to(victim)
    plant(store, {"ops": [{"op": "append", "path": "sessions/evil.jsonl", "size": 0}]})
    assert_refused(run("ingest", "-", input=orjson.dumps({**MESSAGE, "id": "m2"}).decode()),
                   b"leads outside the store")
    assert victim.read_text() == "do not touch\n"


def test_legacy_list_journal_is_not_executed(run, store, victim):
    plant(store, [{"op": "append", "path": str(victim), "size": 0}])
    assert_refused(run("ingest", "-", input=orjson.dumps({**MESSAGE, "id": "m2"}).decode()), b"expected an object")
    assert victim.read_text() == "do not touch\n"


HALF_WRITE = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from memctl.store.store import Store
    store = Store(sys.argv[1])
    with store.transaction() as tx:
        tx.append(store.session_file("s1"), sys.argv[2].encode() + b"\\n")
        os._exit(9)  # killed mid-transaction: the journal stays, the lock is released
""")


def half_write(root: Path, line: bytes, cwd: Path) -> None:
    killed = subprocess.run([sys.executable, "-c", HALF_WRITE, str(root), line.decode()], cwd=cwd)
    assert killed.returncode == 9
    assert (root / ".journal" / "journal.json").exists()


@pytest.mark.process
def test_reader_never_sees_a_killed_writers_half_batch(run, store, tmp_path):
    """The killer case of the torture run: a search after a SIGKILL showed the unacknowledged batch."""
    original = (store / "sessions" / "s1.jsonl").read_bytes()
    half = orjson.dumps({**MESSAGE, "id": "m-unacked", "text": "the kingfisher was never acknowledged"})
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    half_write(store, half, cwd=elsewhere)  # relative paths: another working directory must not matter
    journal = orjson.loads((store / ".journal" / "journal.json").read_bytes())
    assert journal["ops"][0]["path"] == "sessions/s1.jsonl"

    found = run("search", "--mode", "bm25", "kingfisher")
    assert found.returncode == 1 and found.stdout == b"", found
    assert (store / "sessions" / "s1.jsonl").read_bytes() == original  # the reader rolled it back first
    assert not (store / ".journal").exists()
    assert run("search", "--mode", "bm25", "heron").returncode == 0


@pytest.mark.process
def test_copied_store_rolls_back_itself_not_the_original(run, store, tmp_path):
    half = orjson.dumps({**MESSAGE, "id": "m-unacked", "text": "half a batch"})
    half_write(store, half, cwd=tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(store, copy, symlinks=True)
    # The original has moved on since the copy: its session file is longer now.
    original_file = store / "sessions" / "s1.jsonl"
    shutil.rmtree(store / ".journal")
    with open(original_file, "ab") as fh:
        fh.write(orjson.dumps({**MESSAGE, "id": "m3", "text": "written after the copy"}) + b"\n")
    original_bytes = original_file.read_bytes()

    assert run("review", "pending", store=copy).returncode == 1  # a reader: rolls the copy back
    assert original_file.read_bytes() == original_bytes
    assert b"half a batch" not in (copy / "sessions" / "s1.jsonl").read_bytes()
    assert not (copy / ".journal").exists()


def test_search_of_a_missing_store_says_so(run, tmp_path):
    missing = tmp_path / "no" / "such"
    for args in (["search", "heron"], ["index"], ["review", "pending"], ["state", "show"]):
        result = run(*args, store=missing)
        assert result.returncode == 2, (args, result)
        assert result.stderr == f"memctl: error: no store at {missing}\n".encode(), result.stderr
    assert not missing.exists()


def test_index_files_are_private(run, store):
    assert run("index").returncode == 0
    index = store / ".index"
    for path in [index, *index.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
