"""Saying what was skipped or done: bad store lines passed over, progress on a terminal only,
a hint when ingest waits on a terminal, and what `review daily` changed or would change."""

from __future__ import annotations

import os
import pty
import subprocess
import time

import pytest

from conftest import memctl_command, snapshot
from memctl.cli import output
from test_context import SPLIT_ON, make_dormant, split_three_subjects

MESSAGES = ('{"id": "m1", "role": "user", "text": "the Kestrel demo is on December 12th"}\n'
            '{"id": "m2", "role": "user", "text": "Mei moves the demo to the big room"}\n')


def test_index_and_search_name_a_bad_line_of_a_session_file_and_exit_as_before(run, store_dir):
    assert run("ingest", "--session", "s1", "-", input=MESSAGES).returncode == 0
    with open(store_dir / "sessions" / "s1.jsonl", "ab") as f:
        f.write(b'{"id": "m3", "role": "user", "text": "cut sh\n')
    indexed = run("index")
    assert indexed.returncode == 0
    assert indexed.stderr.decode().splitlines() == [
        "memctl: skipped sessions/s1.jsonl:3: not valid JSON (unexpected end of data) (not indexed)"]
    with open(store_dir / "sessions" / "s1.jsonl", "ab") as f:  # a search that indexes first says it too
        f.write(b'["not", "a message"]\n')
    found = run("search", "--mode", "bm25", "Kestrel demo")
    assert found.returncode == 0 and b"m1" in found.stdout
    said = [line for line in found.stderr.decode().splitlines() if "skipped" in line]
    assert said == ["memctl: skipped sessions/s1.jsonl:3: not valid JSON (unexpected end of data) (not indexed)",
                    "memctl: skipped sessions/s1.jsonl:4: expected a JSON object, got a list (not indexed)"]
    assert run("-q", "index", "--rebuild").stderr == b""


def test_many_bad_lines_are_said_in_a_few(run, store_dir):
    assert run("ingest", "--session", "s1", "-", input=MESSAGES).returncode == 0
    with open(store_dir / "sessions" / "s1.jsonl", "ab") as f:
        f.write(b"garbage\n" * 10)
    lines = run("index", "--json").stderr.decode().splitlines()
    assert len(lines) == 4 and lines[-1] == "memctl: skipped 7 more bad lines; `memctl health` lists them"


def test_split_and_daily_review_show_progress_only_on_a_terminal(run, store_dir, monkeypatch):
    from test_topics import HOTEL, TAXI, WEATHER, session_lines

    run("ingest", "-", input=session_lines(WEATHER + HOTEL + TAXI))
    off = run("split", "--session", "s1", "--force", "--keep-recent", "2", "--dry-run")
    assert off.returncode == 0 and b"embedding" not in off.stderr and b"summarising" not in off.stderr
    monkeypatch.setattr(output, "on_terminal", lambda: True)
    on = run("split", "--session", "s1", "--force", "--keep-recent", "2", "--dry-run")
    assert on.returncode == 0 and b"embedding" in on.stderr and b"summarising" in on.stderr
    assert run("split", "--session", "s1", "--force", "--keep-recent", "2").returncode == 0
    daily = run("review", "daily", "--dry-run", env={"MEMCTL_NOW": "2026-11-21T09:00:00Z"})
    assert b"compressing" in daily.stderr or b"embedding summaries" in daily.stderr


def test_daily_review_says_what_it_would_change_then_what_it_changed(run, store_dir):
    ids = split_three_subjects(run, store_dir, SPLIT_ON)  # dated: "later" is then a fixed 15 days on
    make_dormant(store_dir, ids["weather"])
    later = {"MEMCTL_NOW": "2026-12-05T03:00:00Z"}
    before = snapshot(store_dir)
    plan = run("review", "daily", "--dry-run", env=later)
    assert plan.returncode == 0 and snapshot(store_dir) == before
    plan_rows = plan.stdout.decode().splitlines()
    assert any(row.startswith("would archive") and ids["weather"] in row for row in plan_rows)
    said = plan.stderr.decode().splitlines()[-1]
    assert said.startswith("memctl: review daily: dry run: would archive 1 topic(s)")
    assert said.endswith("; nothing written")
    done = run("review", "daily", env=later)
    rows = done.stdout.decode().splitlines()
    assert any(row.startswith("archived") and ids["weather"] in row for row in rows)
    assert not any(row.startswith("would") for row in rows)
    assert done.stderr.decode().splitlines()[-1].startswith("memctl: review daily: archived 1 topic(s)")
    again = run("review", "daily", env=later)
    assert again.stdout == b""
    assert again.stderr.decode().splitlines()[-1] == "memctl: review daily: nothing changed"


@pytest.mark.process
@pytest.mark.parametrize("stdin_is_terminal", [True, False])
def test_ingest_from_a_terminal_says_how_to_end(store_dir, stdin_is_terminal):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    argv = [*memctl_command(), "--store", str(store_dir), "ingest"]
    if not stdin_is_terminal:
        done = subprocess.run(argv, input=b"a message typed into a pipe, long enough\n", capture_output=True,
                              env=env, timeout=120)
        assert done.returncode == 0 and b"terminal" not in done.stderr
        return
    main, side = pty.openpty()
    process = subprocess.Popen(argv, stdin=side, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    os.close(side)
    try:
        os.write(main, b"a message typed at the terminal, long enough\n")
        time.sleep(0.5)
        os.write(main, b"\x04")  # Ctrl-D: the end of the input
        out, err = process.communicate(timeout=120)
    finally:
        os.close(main)
    assert process.returncode == 0, err
    assert err.decode().splitlines()[0] == "memctl: reading messages from the terminal; end with Ctrl-D (or give a FILE)"
    assert out.decode().startswith("m-")
