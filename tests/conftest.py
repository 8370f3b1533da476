"""Shared helpers: a fresh store per test and a real `memctl` process."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

import pytest
from redis_server import RedisServer

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


# Every memctl process a test starts runs the code of this checkout: the venv's
# console script may belong to an editable install of another worktree.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
# ... and reads no settings of the developer's own (~/.config/memctl/config.toml).
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="memctl-test-config-")


def memctl_command() -> list[str]:
    """`python -m memctl` of this checkout (see PYTHONPATH above)."""
    return [sys.executable, "-m", "memctl"]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def run(store_dir: Path):
    """Run memctl in a subprocess against the test's store."""

    def _run(*args: str, input: str | bytes | None = None, env: dict | None = None,
             store: Path | None = None) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
        full_env.update(env or {})
        data = input.encode() if isinstance(input, str) else input
        return subprocess.run(
            [*memctl_command(), "--store", str(store or store_dir), *args],
            input=data, capture_output=True, env=full_env, timeout=120,
        )

    return _run


@pytest.fixture
def python_command(tmp_path: Path):
    """A shell command running Python source as a real process: the stand-in for an
    outside program (an LLM command) in tests, answering well or badly as written."""

    def command(name: str, source: str) -> str:
        script = tmp_path / f"{name}.py"
        script.write_text(textwrap.dedent(source))
        return f"{sys.executable} {script}"

    return command


def killed_after(seconds: float, script: str, *args: str, once: Callable[[], bool] | None = None) -> str:
    """Run Python source as a process and SIGKILL it `seconds` after it prints its first line,
    "ready" (imports done: on a loaded machine they alone can outlast the delay), or, with
    `once`, at the first moment after that when once() is true (within 10 s); what it printed
    after that by then (its acknowledged writes)."""
    process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    time.sleep(seconds)
    deadline = time.monotonic() + 10
    while once is not None and not once() and time.monotonic() < deadline:
        time.sleep(0.0001)
    process.send_signal(signal.SIGKILL)
    return process.communicate()[0]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root with a digest of its bytes, to prove nothing changed."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"
    }


def _redis_server_or_skip(folder: Path) -> RedisServer:
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server binary on this machine (scripts/bootstrap.sh installs Debian's "
                    "redis-server package)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'memctl[redis]')")
    server = RedisServer(folder)
    server.start()
    return server


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One redis-server for the session's tests, emptied before each (see cache_backend)."""
    server = _redis_server_or_skip(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def own_redis_server(tmp_path):
    """A redis-server for one test alone, which may kill and restart it."""
    server = _redis_server_or_skip(tmp_path)
    yield server
    server.stop()


@pytest.fixture(params=["files", "redis"])
def cache_backend(request) -> str:
    """The [cache] backend setting: the same behavioural tests run on both."""
    if request.param == "files":
        return "files"
    server = request.getfixturevalue("redis_server")
    server.flush()
    return server.url
