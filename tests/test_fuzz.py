"""Generated bad inputs through real `memctl` processes: exit 2, one line, no traceback, no change.

The cases come from bench/fuzz_cases.py (numbers out of range, deep nesting,
wrong types, bad bytes, malformed notes, usage errors, corrupt store files);
hypothesis picks and shrinks them. A bounded number of examples keeps CI
fast; `python bench/torture.py --fuzz 10000` runs the long version.
"""

from __future__ import annotations

import random
import shutil
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, REPO, run_in_process, snapshot

sys.path.insert(0, str(REPO / "bench"))
import fuzz_cases  # noqa: E402  (bench/ is not a package)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    """The demo store, indexed with the fake model the examples' runs read it with, made once: each
    example works on a copy."""
    store = tmp_path_factory.mktemp("fuzz") / "store"
    for args in (["ingest", str(FIXTURES / "demo" / "chat.jsonl")], ["ingest", str(FIXTURES / "demo" / "MEMORY.md")],
                 ["index"]):
        assert run_in_process(store, *args).returncode == 0
    return store


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(category=st.sampled_from(sorted(fuzz_cases.GENERATORS)), seed=st.integers(0, 2**32 - 1))
def test_bad_input_is_exit_2_one_line_and_changes_nothing(run, tmp_path, demo_store, category, seed):
    case = fuzz_cases.GENERATORS[category](random.Random(seed))
    store = tmp_path / f"store-{seed}"
    shutil.copytree(demo_store, store, symlinks=True)
    for rel, data in case.files.items():
        (store / rel).parent.mkdir(mode=0o700, exist_ok=True)
        (store / rel).write_bytes(data)
    args = case.args
    if case.input_file is not None:
        path = tmp_path / f"input-{seed}{case.input_suffix}"
        path.write_bytes(case.input_file)
        args = [str(path) if a == "{input}" else a for a in args]
    before = snapshot(store)
    result = run(*args, input=case.stdin, store=store)
    stderr = result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr, case.describe() + "\n" + stderr
    assert result.returncode == 2, case.describe() + "\n" + stderr
    assert stderr.startswith("memctl: error: ") and stderr.count("\n") == 1, case.describe() + "\n" + stderr
    assert snapshot(store) == before, case.describe()
    shutil.rmtree(store)
