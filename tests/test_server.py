"""The resident server (memctl/server/): real processes, real sockets, the bundled model.

Every test has its own runtime directory (XDG_RUNTIME_DIR), and the `servers` fixture kills
whatever server a test left running there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import kill_servers_of, kill_servers_under, memctl_command

from memctl import __version__
from memctl.cli import cli

# Nearly every test here starts servers and memctl processes (the few that do not are quick anyway).
pytestmark = pytest.mark.process

NOW = "2026-11-20T10:00:00Z"
MESSAGES = "\n".join(json.dumps(m) for m in [
    {"id": "m1", "session": "s1", "role": "user", "text": "We moved the Kestrel database to PostgreSQL 16"},
    {"id": "m2", "session": "s1", "role": "assistant", "text": "Noted: Kestrel runs on PostgreSQL 16 now"},
    {"id": "m3", "session": "s1", "role": "user", "text": "Book the Kyoto trip for the second week of April"},
    {"id": "m4", "session": "s1", "role": "user", "text": "My sister Alice lives in Taipei and paints lakes"},
])
NOTES = "## Decisions\n- Kestrel uses PostgreSQL 16 for its main database\n\n## People\n- Alice lives in Taipei\n"


@pytest.fixture
def servers(tmp_path):
    """The environment of a test's memctl processes: server on, a runtime directory of its own
    (short: a socket's path has a limit of ~100 bytes); every server left is killed after."""
    runtime = tempfile.mkdtemp(prefix="mr-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update({"XDG_RUNTIME_DIR": runtime, "MEMCTL_NOW": NOW})
    yield env
    kill_servers_of(Path(runtime))
    kill_servers_under(tmp_path)
    shutil.rmtree(runtime, ignore_errors=True)


def memctl(env: dict, store: Path, *args: str, input: bytes | None = None, server: bool = True,
           cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**env, "MEMCTL_SERVER": "on" if server else "off"}
    return subprocess.run([*memctl_command(), "--store", str(store), *args], input=input or b"",
                          capture_output=True, env=env, timeout=120, cwd=cwd)


def status(env: dict, store: Path) -> dict | None:
    done = memctl(env, store, "server", "status", "--json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def start(env: dict, store: Path) -> dict:
    done = memctl(env, store, "server", "start")
    assert done.returncode == 0, (done.stderr, server_log(env, store))
    return status(env, store)


def server_log(env: dict, store: Path) -> str:
    """What the store's server wrote to its log (why it left, among others): for a failing assert."""
    from memctl.server.client import place

    saved = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = env["XDG_RUNTIME_DIR"]
    try:
        where = place(str(store))
    finally:
        if saved is None:
            del os.environ["XDG_RUNTIME_DIR"]
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved
    try:
        return Path(where + ".log").read_text()
    except (OSError, TypeError):
        return "(no server log)"


@pytest.fixture(scope="session")
def made_store(tmp_path_factory) -> Path:
    """MESSAGES and NOTES ingested and indexed by memctl processes (server off), made once a test
    process: three processes with the real models, which each of ~40 tests used to pay again."""
    store = tmp_path_factory.mktemp("server-store") / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_NOW"] = NOW
    for args, data in ((["ingest", "-f", "jsonl", "-"], MESSAGES), (["ingest", "--kind", "memory", "-"], NOTES),
                       (["index"], "")):
        done = memctl(env, store, *args, input=data.encode(), server=False)
        assert done.returncode == 0, done.stderr
    return store


@pytest.fixture
def make_store(made_store):
    """make_store(store): a copy of made_store of the test's own at `store` (it may write to it)."""

    def copy(store: Path) -> None:
        shutil.copytree(made_store, store, symlinks=True)

    return copy


# One call of each command with arguments that make it do its work; a command missing here (a new
# one) is still compared, called bare. Commands that write run on a fresh copy of the same store.
CALLS = {
    "ingest": [["ingest", "-f", "jsonl", "-"], ["ingest", "--kind", "memory", "--pending", "-"]],
    "index": [["index", "--json"], ["index", "--rebuild"], ["-q", "index", "--rebuild"]],
    "search": [["search", "Kestrel database"], ["search", "--json", "--explain", "-k", "2", "where does Alice live"],
               ["search", "--mode", "bm25", "zzz-nothing-matches"], ["search", "--layered", "Kyoto"],
               ["search", "-k", "0", "bad k"], ["search", "-q", "Kestrel"]],
    "split": [["split", "--session", "s1", "--force", "--dry-run"]],
    "topics": [["topics", "list"], ["topics", "activate", "Kyoto trip"]],
    "context": [["context", "--session", "s1", "--message", "what database does Kestrel use?"]],
    "review": [["review", "pending", "--json"], ["review", "lifecycle", "--dry-run"]],
    "health": [["health"], ["health", "check"]],
    "state": [["state", "plan", "what did we decide about the database?"], ["state", "show"]],
    "cache": [["cache", "stats"], ["cache", "run", "--scope", "job", "--tool", "echo", "--", "echo", "hi"]],
    "bogus": [["no-such-command"]],
}
STDIN = b'{"text": "Kestrel backups run nightly at 02:00"}\n'


def every_call() -> list[list[str]]:
    import click

    names = cli.list_commands(click.Context(cli))
    calls = [call for name in names if name not in ("mcp", "server") for call in CALLS.get(name, [[name]])]
    return calls + CALLS["bogus"]


@pytest.mark.parametrize("argv", every_call(), ids=" ".join)
def test_a_call_prints_and_exits_as_in_process(servers, tmp_path, argv, make_store):
    """Byte for byte the same stdout and stderr, and the same exit status, with the server and without;
    and the server did run it."""
    store = tmp_path / "store"
    outcomes = []
    for server in (False, True):
        shutil.rmtree(store, ignore_errors=True)
        make_store(store)
        if server:
            before = start(servers, store)["calls"]
        done = memctl(servers, store, *argv, input=STDIN, server=server, cwd=tmp_path)
        outcomes.append((done.returncode, done.stdout.decode(), done.stderr.decode()))
    assert outcomes[0] == outcomes[1]
    assert status(servers, store)["calls"] == before + 1


def test_the_first_call_starts_a_server_and_later_calls_use_it(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    assert status(servers, store) is None  # a store's making ran in-process, and started none
    first = memctl(servers, store, "search", "Kestrel database")
    assert first.returncode == 0 and b"PostgreSQL" in first.stdout
    deadline = time.monotonic() + 60
    while status(servers, store) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    running = status(servers, store)
    assert running is not None and running["store"] == os.path.realpath(store)
    again = memctl(servers, store, "search", "Kestrel database")
    assert (again.returncode, again.stdout) == (0, first.stdout)
    assert status(servers, store)["calls"] == running["calls"] + 1
    runtime = Path(servers["XDG_RUNTIME_DIR"], "memctl")
    assert oct(runtime.stat().st_mode & 0o777) == "0o700"
    assert [oct(p.stat().st_mode & 0o777) for p in runtime.glob("*.sock")] == ["0o600"]


def test_a_memctl_folder_in_the_working_directory_never_runs_as_the_server(servers, tmp_path, make_store):
    """`python -m` puts the working directory first on the module path, and a server starts from
    the directory of the call that needed it, the user's: a `memctl` folder there (a checkout, a
    download) must not be what runs. The client runs as a console script does (-P: not from it)."""
    store = tmp_path / "store"
    make_store(store)
    planted = tmp_path / "downloads" / "memctl"
    planted.mkdir(parents=True)
    ran = tmp_path / "the planted memctl ran"
    for name in ("__init__.py", "__main__.py"):
        (planted / name).write_text(f"open({str(ran)!r}, 'w').close()\n")
    first = subprocess.run([sys.executable, "-P", "-m", "memctl", "--store", str(store), "search", "Kestrel"],
                           cwd=planted.parent, env={**servers, "MEMCTL_SERVER": "on"}, capture_output=True,
                           timeout=120)
    assert first.returncode == 0 and b"PostgreSQL" in first.stdout, first.stderr
    deadline = time.monotonic() + 60
    while status(servers, store) is None and time.monotonic() < deadline and not ran.exists():
        time.sleep(0.2)
    assert not ran.exists()
    assert status(servers, store) is not None, server_log(servers, store)


def test_an_ingest_then_an_index_through_the_server_write_what_in_process_calls_write(servers, tmp_path, make_store):
    """The server embeds an ingest's new messages ahead of the index that follows (Index.embed_ahead):
    the same output, and byte for byte the same vectors (an int8 vector depends on its batch-mates)."""
    new = "\n".join(json.dumps({"id": f"n{n}", "session": "s2", "role": "user", "text": text}) for n, text in
                    enumerate(["The Kestrel backups now run at 03:00", "Alice sold three lake paintings",
                               "Kyoto hotel booked near the station"])).encode()
    outcomes = []
    for server in (False, True):
        store = tmp_path / f"store-{server}"
        make_store(store)
        if server:
            start(servers, store)
        ingested = memctl(servers, store, "ingest", "-f", "jsonl", "-", input=new, server=server)
        indexed = memctl(servers, store, "index", "--json", server=server)
        outcomes.append(([(done.returncode, done.stdout, done.stderr) for done in (ingested, indexed)],
                         (store / ".index" / "vectors.npy").read_bytes()))
    assert outcomes[0] == outcomes[1]
    assert json.loads(outcomes[1][0][1][1])["embedded"] == 3
    assert status(servers, tmp_path / "store-True")["calls"] == 2


def test_off_runs_everything_in_process(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    memctl(servers, store, "search", "Kestrel", server=False)
    (store / "memctl.toml").write_text("[server]\nenabled = false\n")
    memctl(servers, store, "search", "Kestrel")
    time.sleep(1)
    assert status(servers, store) is None
    refused = memctl(servers, store, "server", "start")
    assert refused.returncode == 2 and refused.stderr.count(b"\n") == 1


def test_a_setting_turned_off_sends_calls_back_in_process(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    running = start(servers, store)
    (store / "memctl.toml").write_text("[server]\nenabled = false\n")
    done = memctl(servers, store, "search", "Kestrel")
    assert done.returncode == 0 and b"PostgreSQL" in done.stdout
    assert status(servers, store)["calls"] == running["calls"]


def test_a_hand_edit_is_seen_on_the_next_call(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    assert memctl(servers, store, "search", "--mode", "bm25", "Zanzibar").returncode == 1
    with open(store / "MEMORY.md", "a") as memory:
        memory.write("- The offsite is in Zanzibar this year\n")
    found = memctl(servers, store, "search", "--mode", "bm25", "Zanzibar")
    assert found.returncode == 0 and b"Zanzibar" in found.stdout
    # a write by another process (in-process here) is seen too: the server reopens the index it updated
    memctl(servers, store, "ingest", "-f", "jsonl", "-", server=False,
           input=b'{"id": "m9", "session": "s2", "text": "the Zanzibar hotel is booked"}')
    assert memctl(servers, store, "index", server=False).returncode == 0
    found = memctl(servers, store, "search", "--mode", "bm25", "--json", "Zanzibar hotel")
    assert b"m9" in found.stdout
    assert status(servers, store)["calls"] == 3


def test_settings_variables_and_new_files_are_the_calls_own(servers, tmp_path, make_store):
    """What a server keeps between calls (settings, the store's listing) never hides a change: an
    edit of memctl.toml, a variable of one call, a session file made by hand."""
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    assert memctl(servers, store, "search", "Kestrel").returncode == 0
    (store / "memctl.toml").write_text("[retrieval]\ncandidates = 0\n")
    refused = memctl(servers, store, "search", "Kestrel")
    assert refused.returncode == 2 and b"memctl.toml" in refused.stderr and b"candidates" in refused.stderr
    (store / "memctl.toml").write_text("[retrieval]\ncandidates = 9\n")  # the same size, at once
    assert memctl(servers, store, "search", "Kestrel").returncode == 0
    by_variable = memctl({**servers, "MEMCTL_RETRIEVAL_CANDIDATES": "0"}, store, "search", "Kestrel")
    assert by_variable.returncode == 2 and b"MEMCTL_RETRIEVAL_CANDIDATES" in by_variable.stderr
    assert memctl(servers, store, "search", "--mode", "bm25", "Zanzibar").returncode == 1
    time.sleep(0.3)  # the sessions folder is old enough for the server to keep its listing
    assert memctl(servers, store, "search", "--mode", "bm25", "Zanzibar").returncode == 1
    (store / "sessions" / "s9.jsonl").write_text(
        '{"id": "m9", "session": "s9", "role": "user", "text": "the offsite is in Zanzibar"}\n')
    found = memctl(servers, store, "search", "--mode", "bm25", "--json", "Zanzibar")
    assert found.returncode == 0 and b'"m9"' in found.stdout, found.stderr
    assert status(servers, store)["calls"] == 7  # every call above, in the server


def test_two_stores_two_servers(servers, tmp_path, make_store):
    first, second = tmp_path / "one", tmp_path / "two"
    make_store(first)
    make_store(second)
    (second / "MEMORY.md").write_text("## Notes\n- only the second store knows about Zanzibar\n")
    a, b = start(servers, first), start(servers, second)
    assert a["pid"] != b["pid"] and {a["store"], b["store"]} == {str(first.resolve()), str(second.resolve())}
    assert memctl(servers, first, "search", "--mode", "bm25", "Zanzibar").returncode == 1
    assert memctl(servers, second, "search", "--mode", "bm25", "Zanzibar").returncode == 0
    stopped = memctl(servers, first, "server", "stop")
    assert stopped.returncode == 0, server_log(servers, first)  # why it left, if it had
    assert status(servers, first) is None and status(servers, second)["pid"] == b["pid"], server_log(servers, second)


def test_a_server_of_another_version_is_replaced(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    # A server of "memctl 0.0.1": the same code under another version, as after an upgrade.
    old = subprocess.Popen([sys.executable, "-c", "import sys, memctl; memctl.__version__ = '0.0.1'; "
                            "from memctl.cli import main; sys.argv[1:] = ['--store', sys.argv[1], 'server', 'run']; "
                            "main()", str(store)], env=servers, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while (status(servers, store) or {}).get("version") != "0.0.1" and time.monotonic() < deadline:
            time.sleep(0.2)
        done = memctl(servers, store, "search", "Kestrel database")
        assert done.returncode == 0 and b"PostgreSQL" in done.stdout, done.stderr
        assert old.wait(timeout=30) == 0  # it left
        deadline = time.monotonic() + 60
        while status(servers, store) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status(servers, store)["version"] == __version__  # and the call started today's
    finally:
        old.kill()
        old.wait()


def test_a_server_killed_mid_call_fails_the_call_in_one_line(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    running = start(servers, store)
    # `cache run` runs a command that takes its time: the server is killed while it runs.
    call = subprocess.Popen([*memctl_command(), "--store", str(store), "cache", "run", "--scope", "job", "--tool",
                             "sleepy", "--", "sleep", "5"], env={**servers, "MEMCTL_SERVER": "on"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not status(servers, store)["running"] and time.monotonic() < deadline and call.poll() is None:
        time.sleep(0.1)
    os.kill(running["pid"], signal.SIGKILL)
    out, err = call.communicate(timeout=60)
    assert call.returncode == 2
    assert err.decode().count("\n") == 1 and "server" in err.decode()
    # the next call runs in-process, and starts a new server
    done = memctl(servers, store, "search", "Kestrel database")
    assert done.returncode == 0 and b"PostgreSQL" in done.stdout


def test_a_wedged_server_is_replaced(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    running = start(servers, store)
    os.kill(running["pid"], signal.SIGSTOP)
    try:
        began = time.monotonic()
        done = memctl(servers, store, "search", "Kestrel database")
        assert done.returncode == 0 and b"PostgreSQL" in done.stdout, done.stderr
        assert time.monotonic() - began < 60
        with pytest.raises(ProcessLookupError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(running["pid"], 0)  # gone (killed: it was this user's and answered nothing)
                time.sleep(0.1)
    finally:
        try:
            os.kill(running["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_concurrent_clients_each_get_their_own_answer(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    queries = ["Kestrel database", "Kyoto trip", "Alice Taipei", "zzzz-nothing"] * 3
    expected = {q: memctl(servers, store, "search", "--mode", "bm25", q, server=False) for q in set(queries)}
    got: dict[int, subprocess.CompletedProcess] = {}

    def one(n: int, query: str) -> None:
        got[n] = memctl(servers, store, "search", "--mode", "bm25", query)

    threads = [threading.Thread(target=one, args=(n, q)) for n, q in enumerate(queries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, query in enumerate(queries):
        want = expected[query]
        assert (got[n].returncode, got[n].stdout, got[n].stderr) == (want.returncode, want.stdout, want.stderr)
    assert status(servers, store)["calls"] >= 1


def test_stdin_is_read_only_when_the_command_reads_it(servers, tmp_path, make_store):
    """A call whose stdin never closes (an agent's shell tool) does not hang: stdin is the client's
    own descriptor, read by the command if and when it reads it."""
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    reader, writer = os.pipe()
    try:
        done = subprocess.run([*memctl_command(), "--store", str(store), "search", "Kestrel"], stdin=reader,
                              capture_output=True, env={**servers, "MEMCTL_SERVER": "on"}, timeout=60)
    finally:
        os.close(reader)
        os.close(writer)
    assert done.returncode == 0 and b"PostgreSQL" in done.stdout


def test_the_client_imports_neither_click_nor_the_api(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "memctl", "--store", str(store), "search",
                           "Kestrel"], capture_output=True, env={**servers, "MEMCTL_SERVER": "on"}, timeout=60)
    assert done.returncode == 0 and b"PostgreSQL" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "memctl.server.client" in imported
    assert not imported & {"click", "memctl.api", "memctl.cli", "numpy", "socket"}


def test_ctrl_c_stops_the_command_in_the_server_as_in_process(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    outcomes = []
    for server in (False, True):
        call = subprocess.Popen([*memctl_command(), "--store", str(store), "cache", "run", "--scope", "job",
                                 "--tool", f"slow{server}", "--", "sleep", "30"],
                                env={**servers, "MEMCTL_SERVER": "on" if server else "off"},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while server and not status(servers, store)["running"] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2 if not server else 0.5)  # in-process: past its imports, into the command
        call.send_signal(signal.SIGINT)
        out, err = call.communicate(timeout=30)
        outcomes.append((call.returncode, out, err))
    assert outcomes[0] == outcomes[1]
    after = status(servers, store)
    assert after is not None and not after["running"]  # the server lives on, idle


def test_the_client_knows_every_option_of_the_command_line_before_the_command():
    """The client parses the options before the command itself (it must not import click): an
    option it does not know sends the call in-process, the server silently unused. A new top-level
    option fails here until store_of() learns it."""
    from memctl.server.client import store_of

    for param in cli.params:
        if param.name in ("version", "help") or not param.opts:
            continue
        for opt in param.opts:
            argv = [opt] if getattr(param, "is_flag", False) else [opt, "somewhere"]
            assert store_of([*argv, "search", "kestrel"]) is not None, opt
    assert store_of(["--store", "s", "search", "kestrel"]) == ("search", "s")
    assert store_of(["--store=s", "-q", "index"]) == ("index", "s")
    assert store_of(["--store", "s", "server", "status"]) is None and store_of(["--version"]) is None


def test_an_edited_source_file_anywhere_in_the_package_moves_the_stamp(tmp_path, monkeypatch):
    """A server compares _sources_stamp() once a second: it must see a .py file of any subpackage."""
    import memctl
    from memctl.server import serve

    package = Path(memctl.__file__).parent
    assert serve._sources_stamp() == max(p.stat().st_mtime_ns for p in package.rglob("*.py"))
    copy = tmp_path / "memctl"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(serve, "__file__", str(copy / "server" / "serve.py"))
    before = serve._sources_stamp()
    deep = copy / "index" / "index.py"
    os.utime(deep, ns=(before + 10**9, before + 10**9))
    assert serve._sources_stamp() == before + 10**9


def test_each_clients_environment_drives_its_own_call(servers, tmp_path, make_store):
    """Two clients with different environments, alternating through one server: each call prints
    what the same call prints in a process of its own (a token encoding the first caller named
    once stayed the server's for every later call; an embedding model named by a path relative to
    the caller's directory, or under its $HOME, was the first caller's)."""
    store = tmp_path / "store"
    make_store(store)
    start(servers, store)
    plain = dict(servers)
    bogus = {**servers, "MEMCTL_TOKEN_ENCODING": "no_such_encoding"}
    argv = ["context", "--json", "--session", "s1", "--message", "what database does Kestrel use?"]
    expected = {name: memctl(env, store, *argv, server=False) for name, env in (("plain", plain), ("bogus", bogus))}
    assert expected["plain"].stdout != expected["bogus"].stdout  # the two environments count tokens apart
    before = status(servers, store)["calls"]
    for name in ("bogus", "plain", "bogus", "plain"):
        done = memctl(plain if name == "plain" else bogus, store, *argv)
        want = expected[name]
        assert (done.returncode, done.stdout, done.stderr) == (want.returncode, want.stdout, want.stderr), name
    assert status(servers, store)["calls"] == before + 4


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Running (a zombie has ended: only its exit status waits to be read)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_server_killed_during_cache_run_leaves_no_orphan_of_the_command(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    running = start(servers, store)
    call = subprocess.Popen([*memctl_command(), "--store", str(store), "cache", "run", "--scope", "job", "--tool",
                             "sleepy", "--", "sleep", "300"], env={**servers, "MEMCTL_SERVER": "on"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not children_of(running["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    [command] = children_of(running["pid"])
    assert Path(f"/proc/{command}/cmdline").read_bytes() == b"sleep\x00300\x00"
    try:
        os.kill(running["pid"], signal.SIGKILL)
        call.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while alive(command) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(command)
    finally:
        if alive(command):
            os.kill(command, signal.SIGKILL)


def servers_of(store: Path) -> list[int]:
    """The pids of this user's `memctl --store STORE server run` processes (answering or still starting)."""
    tail = ["--store", os.path.realpath(store), "server", "run"]
    return [int(cmdline.parent.name) for cmdline in Path("/proc").glob("[0-9]*/cmdline")
            if _argv(cmdline)[-4:] == tail and alive(int(cmdline.parent.name))]


def _argv(cmdline: Path) -> list[str]:
    try:
        return cmdline.read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def test_a_call_with_another_runtime_directory_finds_the_stores_server(servers, tmp_path, make_store):
    """A login shell and cron have different $XDG_RUNTIME_DIR: the store, which both share, says
    where its server listens, and no second server starts."""
    store = tmp_path / "store"
    make_store(store)
    running = start(servers, store)
    cron = {**servers, "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="mr-", dir="/tmp")}
    try:
        done = memctl(cron, store, "search", "Kestrel database")
        assert done.returncode == 0 and b"PostgreSQL" in done.stdout
        assert status(servers, store)["calls"] == running["calls"] + 1  # it ran there
        assert servers_of(store) == [running["pid"]]  # and started none beside it
        assert memctl(cron, store, "server", "start").returncode == 0
        assert status(cron, store)["pid"] == running["pid"] and servers_of(store) == [running["pid"]]
        assert memctl(cron, store, "server", "stop").returncode == 0
        assert servers_of(store) == [] and status(servers, store) is None
    finally:
        kill_servers_under(tmp_path)
        shutil.rmtree(cron["XDG_RUNTIME_DIR"], ignore_errors=True)


def test_a_crafted_record_sends_no_call_anywhere(servers, tmp_path, make_store):
    """The record is the store's, and a store is anyone's data: one naming another store's server,
    or a FIFO in its place, is passed over (the call runs in-process), and a server refuses a call
    for a store that is not its own."""
    import fcntl

    from memctl.server import client

    mine, crafted = tmp_path / "mine", tmp_path / "crafted"
    make_store(mine)
    make_store(crafted)
    running = start(servers, mine)
    other = {**servers, "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="mr-", dir="/tmp")}
    expected = memctl(servers, crafted, "search", "--mode", "bm25", "Kestrel", server=False)
    try:
        socket_of_mine = (mine / ".server").read_text().split("\n")[1]
        with open(crafted / ".server", "w") as record:
            record.write(f"{running['pid']}\n{socket_of_mine}\n")
            record.flush()
            fcntl.flock(record, fcntl.LOCK_EX)  # as a live server holds it
            done = memctl(other, crafted, "search", "--mode", "bm25", "Kestrel")
            assert (done.returncode, done.stdout) == (expected.returncode, expected.stdout)
            assert status(servers, mine)["calls"] == running["calls"]  # never reached the other store's server
            # ... and that server, asked straight for a call on another store, declines it
            connection, _ = client._connect(socket_of_mine)
            try:
                client.send(connection, {"op": "call", "stamp": client.stamp(), "store": str(crafted.resolve()),
                                         "argv": ["--store", str(crafted), "search", "Kestrel"]}, (0, 1, 2))
                assert client._frame(connection, 60) == client.FALLBACK
            finally:
                connection.close()
            assert status(servers, mine)["calls"] == running["calls"]
        (crafted / ".server").unlink()
        os.mkfifo(crafted / ".server")
        done = memctl(other, crafted, "search", "--mode", "bm25", "Kestrel")  # does not hang on the FIFO
        assert (done.returncode, done.stdout) == (expected.returncode, expected.stdout)
    finally:
        kill_servers_under(tmp_path)
        shutil.rmtree(other["XDG_RUNTIME_DIR"], ignore_errors=True)


def test_a_one_off_calls_server_leaves_after_the_first_idle_time(servers, tmp_path, make_store):
    store = tmp_path / "store"
    make_store(store)
    brief = {**servers, "MEMCTL_SERVER_FIRST_IDLE_MINUTES": "0.05"}  # 3 s
    running = start(brief, store)
    assert running["idle_limit_minutes"] == 0.05
    deadline = time.monotonic() + 120
    while servers_of(store) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert servers_of(store) == [], server_log(servers, store)
    assert "leaving: idle for 0.05 min" in server_log(servers, store)


def test_a_server_waits_as_long_as_its_store_has_been_used(tmp_path, monkeypatch):
    """The idle limit: [server] first_idle_minutes for a one-off call's server, then as long as the
    server has been used (its start to its last call), at most idle_minutes."""
    from memctl.server.serve import Server

    monkeypatch.setenv("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="mr-", dir="/tmp"))
    server = Server(str(tmp_path), None, idle_minutes=30, first_idle_minutes=2, most=4, make_memory=None)
    limits = []
    for used_minutes in (0, 1, 2, 10, 29, 30, 31, 600):
        server.last_call = server.began + used_minutes * 60
        limits.append(server._idle_limit() / 60)
    assert limits == pytest.approx([2, 2, 2, 10, 29, 30, 30, 30])  # began: seconds of uptime, not exact sums
    shutil.rmtree(os.environ["XDG_RUNTIME_DIR"])


def test_servers_of_one_runtime_directory_are_bounded(servers, tmp_path, make_store):
    first, second = tmp_path / "one", tmp_path / "two"
    make_store(first)
    make_store(second)
    bounded = {**servers, "MEMCTL_SERVER_MAX_RUNNING": "1"}
    start(bounded, first)
    refused = memctl(bounded, second, "server", "start")
    assert refused.returncode == 2 and refused.stderr.count(b"\n") == 1
    done = memctl(bounded, second, "search", "Kestrel database")
    assert done.returncode == 0 and b"PostgreSQL" in done.stdout  # in its own process
    assert servers_of(second) == []
    # a server run by hand past the bound leaves at once, saying why
    ran = memctl(bounded, second, "server", "run")
    assert ran.returncode == 2 and b"max_running" in ran.stderr
    assert memctl(bounded, first, "server", "stop").returncode == 0
    assert start(bounded, second) is not None
