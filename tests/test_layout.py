"""The code's shape, checked as CI checks behaviour: imports one way (README "Code layout"),
and the linter clean."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_layers  # noqa: E402  (scripts/ is not a package)


def test_imports_run_one_way_with_no_cycle():
    assert check_layers.problems(REPO / "memctl") == []


@pytest.mark.process
def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "memctl", "tests", "bench", "scripts"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.process
def test_the_library_imports_where_fcntl_does_not_exist():
    """Windows has no fcntl: importing memctl (the API, the CLI and the store) must still work."""
    code = ("import builtins\nreal = builtins.__import__\n"
            "def without_fcntl(name, *args, **kwargs):\n"
            "    if name == 'fcntl':\n        raise ImportError(name)\n    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = without_fcntl\n"
            "import memctl, memctl.cli, memctl.store.store, memctl.cache.files, memctl.index.index\n"
            "from memctl.store import locking\nassert locking.fcntl is None\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr
