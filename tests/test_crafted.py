"""Crafted and corrupt store files (bench/crafted_cases.py) under every command: no traceback,
exit 2 in one line naming the file, nothing outside the store read or written, and
`memctl health check` names every one.

In process (click's runner) for speed, on a sample hypothesis picks; `python bench/torture.py
--only crafted` runs every case under every command as real processes, with a hang bound.
"""

from __future__ import annotations

import shutil
import sys

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import REPO, snapshot

sys.path.insert(0, str(REPO / "bench"))
import crafted_cases  # noqa: E402  (bench/ is not a package)

from memctl.cli import cli  # noqa: E402

CASES = {case.name: case for case in crafted_cases.CASES}


@pytest.fixture(scope="module")
def topic_store(tmp_path_factory):
    """The demo chat split into topics, some archived, and a cache scope: made once, copied per example."""
    import torture

    return torture.topic_store(tmp_path_factory.mktemp("crafted"))


def crafted(tmp_path, topic_store, name: str):
    store, victim = tmp_path / "store", tmp_path / "outside" / "victim.txt"
    shutil.copytree(topic_store, store, symlinks=True)
    victim.parent.mkdir()
    victim.write_text(crafted_cases.SECRET + "\n")
    CASES[name].apply(store, victim)
    return store, victim


def invoke(store, args):
    return CliRunner().invoke(cli, ["--store", str(store), *args], prog_name="memctl")


@pytest.mark.process
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CASES)), command=st.sampled_from(crafted_cases.COMMANDS))
def test_a_crafted_store_gives_no_traceback_and_nothing_outside(tmp_path_factory, topic_store, name, command):
    store, victim = crafted(tmp_path_factory.mktemp("case"), topic_store, name)
    outside = snapshot(victim.parent)
    result = invoke(store, command)
    what = f"{name} | {' '.join(command)}\n{result.stderr}"
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        what + f"\n{type(result.exception).__name__}: {result.exception}"
    assert result.exit_code in (0, 1, 2), what
    if result.exit_code == 2:
        errors = [line for line in result.stderr.splitlines() if line.startswith("memctl: error: ")]
        assert len(errors) == 1, what
    assert crafted_cases.SECRET not in result.stdout + result.stderr, what
    assert snapshot(victim.parent) == outside, what


@pytest.mark.process  # topic_store is made by memctl processes (bench/torture.py)
@pytest.mark.parametrize("name", [case.name for case in crafted_cases.CASES if case.health])
def test_health_names_every_crafted_file(tmp_path, topic_store, name):
    store, _ = crafted(tmp_path, topic_store, name)
    result = invoke(store, ["health", "check", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1), result.output  # 0 when all it found are warnings (the cache's)
    files = [orjson.loads(line)["file"] for line in result.stdout.splitlines() if line.strip()]
    wanted = CASES[name].file
    assert any(f.startswith(wanted) or wanted.startswith(f) for f in files if f != "."), (wanted, files)


@pytest.mark.process  # topic_store is made by memctl processes (bench/torture.py)
def test_a_topic_header_naming_a_session_deletes_nothing(tmp_path, topic_store):
    """The attack of issue 19: a header id of ../sessions/<s>, then the daily review."""
    store, _ = crafted(tmp_path, topic_store, "topic-id-dotdot-session")
    sessions = snapshot(store / "sessions")
    result = invoke(store, ["review", "daily"])
    assert result.exit_code == 2 and "field 'id'" in result.stderr, result.stderr
    assert snapshot(store / "sessions") == sessions


@pytest.mark.process  # topic_store is made by memctl processes (bench/torture.py)
def test_a_torn_topic_line_is_mended_before_the_next_append(tmp_path, topic_store):
    store, _ = crafted(tmp_path, topic_store, "topic-torn-last-line")
    path = sorted((store / "topics").glob("t-*.jsonl"))[0]
    from memctl.store.store import Store

    with Store(store).transaction() as tx:
        tx.append(path, b'{"type": "message", "id": "m-after", "text": "whole"}\n')
    lines = path.read_bytes().splitlines()
    assert all(orjson.loads(line) for line in lines)  # every line parses: the torn one was cut
    assert orjson.loads(lines[-1])["id"] == "m-after"


def test_an_unterminated_line_that_parses_is_kept(tmp_path):
    from memctl.store.store import Store

    store = Store(tmp_path / "store")
    path = store.path("sessions", "s.jsonl")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"id": "m1"}\n{"id": "m2"}')  # a hand edit without the last newline
    with store.transaction() as tx:
        tx.append(path, b'{"id": "m3"}\n')
    assert [orjson.loads(line)["id"] for line in path.read_bytes().splitlines()] == ["m1", "m2", "m3"]
