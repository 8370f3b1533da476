"""memctl cache (H1-H5): the same behaviour on files in the store and on a real Redis server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import memctl_command
from memctl.cache import Cache, cache_problems, canonical, key_of, parse_args
from memctl.cache.keys import ARGS_MAX_BYTES, ARGS_MAX_DEPTH, INT_MAX, INT_MIN
from memctl.errors import InputError
from memctl.store.store import Store
from conftest import runtime_of


def tool_command(side_effect: Path, output: str = "result", status: int = 0, sleep: float = 0.0) -> list[str]:
    """A command that leaves one line in side_effect each time it really runs."""
    code = (f"import sys, time; open({str(side_effect)!r}, 'a').write('ran\\n'); time.sleep({sleep}); "
            f"sys.stdout.write({output!r}); sys.stderr.write('note on stderr\\n'); sys.exit({status})")
    return [sys.executable, "-c", code]


def runs(side_effect: Path) -> int:
    return len(side_effect.read_text().splitlines()) if side_effect.exists() else 0


@pytest.fixture
def cache_run(run, cache_backend):
    def _run(*args: str, env: dict | None = None):
        return run("cache", *args, env={"MEMCTL_CACHE_BACKEND": cache_backend, **(env or {})})
    return _run


@pytest.mark.process
def test_second_agent_gets_the_first_agents_output_without_a_second_run(cache_run, tmp_path):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="TSMC 1032\n")
    first = cache_run("run", "--scope", "debate-1", "--tool", "price", "--agent", "pro", "--", *command)
    second = cache_run("run", "--scope", "debate-1", "--tool", "price", "--agent", "con", "--json", "--", *command)
    assert first.returncode == 0 and first.stdout == b"TSMC 1032\n"
    assert b"note on stderr" in first.stderr
    entry = orjson.loads(second.stdout)
    assert (entry["hit"], entry["output"], entry["agent"], entry["access_count"]) == (True, "TSMC 1032\n", "pro", 2)
    assert entry["stderr_tail"] == "note on stderr"
    assert runs(effect) == 1
    stats = [orjson.loads(line) for line in cache_run("stats", "--json").stdout.splitlines()]
    assert stats == [{"scope": "debate-1", "tool": "price", "hits": 1, "misses": 1, "negative_hits": 0, "keys": 1,
                      "negative_keys": 0, "bytes": 10, "consolidated": 0}]


@pytest.mark.process
def test_failed_and_empty_results_are_cached_with_their_own_ttl(cache_run, tmp_path):
    effect = tmp_path / "effect"
    failing = tool_command(effect, output="", status=3)
    env = {"MEMCTL_CACHE_NEGATIVE_TTL": "2", "MEMCTL_NOW": "2026-11-24T10:00:00Z"}
    first = cache_run("run", "--scope", "s", "--tool", "lookup", "--", *failing, env=env)
    again = cache_run("run", "--scope", "s", "--tool", "lookup", "--json", "--", *failing, env=env)
    assert first.returncode == again.returncode == 3
    assert orjson.loads(again.stdout)["negative"] is True and runs(effect) == 1
    empty = tool_command(effect, output="")
    cache_run("run", "--scope", "s", "--tool", "lookup", "--", *empty, env=env)
    assert cache_run("run", "--scope", "s", "--tool", "lookup", "--", *empty, env=env).returncode == 0
    assert runs(effect) == 2
    row = orjson.loads(cache_run("stats", "--scope", "s", "--json").stdout)
    assert (row["negative_hits"], row["hits"]) == (2, 0)
    # Three seconds on by the pinned clock: the negative TTL ran out; the ordinary TTL (an hour) has not.
    later = {**env, "MEMCTL_NOW": "2026-11-24T10:00:03Z"}
    cache_run("run", "--scope", "s", "--tool", "lookup", "--", *failing, env=later)
    assert runs(effect) == 3


@pytest.mark.process
def test_refresh_runs_again_and_replaces_the_output(cache_run, tmp_path):
    effect = tmp_path / "effect"
    cache_run("run", "--scope", "s", "--tool", "t", "--", *tool_command(effect))
    fresh = cache_run("run", "--scope", "s", "--tool", "t", "--refresh", "--json", "--", *tool_command(effect))
    assert orjson.loads(fresh.stdout)["hit"] is False and runs(effect) == 2


def test_get_and_put_meet_on_the_canonical_arguments(cache_run):
    put = cache_run("put", "--scope", "s", "--tool", "search", "--args", '{"q": "TSMC  price", "limit": 5.0}',
                    "--json", "--input", "-")
    assert put.returncode == 0
    got = cache_run("get", "--scope", "s", "--tool", "search", "--args", '{"limit":5, "q":" TSMC price "}')
    assert got.returncode == 0
    missing = cache_run("get", "--scope", "s", "--tool", "search", "--args", '{"limit": 6, "q": "TSMC price"}')
    other_tool = cache_run("get", "--scope", "s", "--tool", "news", "--args", '{"limit": 5, "q": "TSMC price"}')
    assert (missing.returncode, other_tool.returncode) == (1, 1)
    bad = cache_run("get", "--scope", "s", "--tool", "search", "--args", "{not json")
    assert bad.returncode == 2 and len(bad.stderr.decode().strip().splitlines()) == 1


def test_canonical_form_ignores_key_order_number_form_and_whitespace():
    assert canonical({"b": [1.0, " x  y "], "a": {"d": 2, "c": "z"}}) == {"a": {"c": "z", "d": 2}, "b": [1, "x y"]}
    assert key_of("t", canonical({"a": 1.0, "b": "p  q"})) == key_of("t", canonical({"b": " p q", "a": 1}))
    assert key_of("t", ["ls", "a  b"]) != key_of("t", ["ls", "a b"])  # argv is kept exactly


@pytest.mark.process
def test_concurrent_misses_run_the_command_once(cache_backend, store_dir, tmp_path):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="slow answer", sleep=0.6)
    env = {**os.environ, "MEMCTL_CACHE_BACKEND": cache_backend}
    procs = [subprocess.Popen([*memctl_command(), "--store", str(store_dir), "cache", "run", "--scope", "s",
                               "--tool", "slow", "--json", "--", *command], stdout=subprocess.PIPE, env=env)
             for _ in range(6)]
    answers = [orjson.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert runs(effect) == 1
    assert {a["output"] for a in answers} == {"slow answer"}
    assert sum(not a["hit"] for a in answers) == 1 and sum(a["waited"] for a in answers) >= 1


@pytest.mark.process
def test_a_dead_runner_leaves_nothing_stuck(cache_backend, store_dir, tmp_path):
    effect = tmp_path / "effect"
    env = {**os.environ, "MEMCTL_CACHE_BACKEND": cache_backend, "MEMCTL_CACHE_LOCK_TTL": "1"}
    base = [*memctl_command(), "--store", str(store_dir), "cache", "run", "--scope", "s", "--tool", "t", "--"]
    runner = subprocess.Popen([*base, *tool_command(effect, sleep=30)], env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while runs(effect) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(runner.pid, signal.SIGKILL)  # the runner and its command die mid-run
    runner.wait()
    # The timeout guards against a hang only: the lock runs out after MEMCTL_CACHE_LOCK_TTL (1 s).
    after = subprocess.run([*base, *tool_command(effect, output="second try")], env=env, capture_output=True,
                           timeout=30)
    assert after.returncode == 0 and after.stdout == b"second try" and runs(effect) == 2


@pytest.mark.process
def test_a_waiter_gives_up_after_its_timeout_with_one_line(cache_backend, store_dir, tmp_path):
    effect = tmp_path / "effect"
    env = {**os.environ, "MEMCTL_CACHE_BACKEND": cache_backend}
    base = [*memctl_command(), "--store", str(store_dir), "cache", "run", "--scope", "s", "--tool", "t"]
    runner = subprocess.Popen([*base, "--", *tool_command(effect, sleep=3)], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while runs(effect) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runs(effect) == 1, "the runner never started its command"
        waiter = subprocess.run([*base, "--timeout", "0.3", "--", *tool_command(effect, sleep=3)], env=env,
                                capture_output=True, timeout=30)
        assert waiter.returncode == 2
        lines = waiter.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "waited 0.3 s" in lines[0]
    finally:
        runner.kill()
        runner.wait()


@pytest.mark.process
def test_consolidation_writes_useful_items_once_and_search_finds_them(cache_run, run, tmp_path, store_dir):
    effect = tmp_path / "effect"
    shared = tool_command(effect, output="Kestrel inventory service runs on PostgreSQL 16\n")
    once = tool_command(effect, output="Harbour bakery opens at seven\n")
    for agent in ("pro", "con"):
        cache_run("run", "--scope", "debate-9", "--tool", "db_lookup", "--agent", agent, "--", *shared)
    cache_run("run", "--scope", "debate-9", "--tool", "hours", "--agent", "pro", "--", *once)
    first = cache_run("consolidate", "--scope", "debate-9", "--json")
    rows = [orjson.loads(line) for line in first.stdout.splitlines()]
    assert [(r["tool"], r["status"], r["access_count"]) for r in rows] == [("db_lookup", "stored", 2)]
    memory = (store_dir / "MEMORY.md").read_text()
    assert memory.count("<!-- memory") == 1 and "Harbour" not in memory
    for field in ("tool: db_lookup", "agent: pro", "cache_scope: debate-9", "access_count: 2"):
        assert field in memory
    again = cache_run("consolidate", "--scope", "debate-9", "--all", "--json")
    statuses = sorted((orjson.loads(line)["tool"], orjson.loads(line)["status"]) for line in again.stdout.splitlines())
    assert statuses == [("db_lookup", "marked"), ("hours", "stored")]
    assert (store_dir / "MEMORY.md").read_text().count(f"id: {rows[0]['memory_id']}") == 1

    # The memory's text is mostly the command line (with this test's temporary path): the
    # query names Kestrel so that its relevance clears the default minimum whatever the path.
    found = run("search", "--json", "--tool", "db_lookup", "which database does the Kestrel inventory service use")
    assert [orjson.loads(line)["id"] for line in found.stdout.splitlines()] == [rows[0]["memory_id"]]
    assert run("search", "--tool", "hours", "--agent", "con", "bakery opens").returncode == 1
    shared_search = cache_run("search", "--scope", "debate-9", "--json", "bakery opening time")
    assert orjson.loads(shared_search.stdout.splitlines()[0])["fields"]["tool"] == "hours"
    assert cache_run("search", "--scope", "debate-1", "bakery opening time").returncode == 1


@pytest.mark.process
def test_clear_ends_a_run_and_consolidates_first(cache_run, tmp_path, store_dir):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="the answer is 42\n")
    for _ in range(2):
        cache_run("run", "--scope", "job-1", "--tool", "calc", "--", *command)
    cache_run("run", "--scope", "job-2", "--tool", "calc", "--", *command)
    dry = orjson.loads(cache_run("clear", "--scope", "job-1", "--dry-run", "--json").stdout)
    assert dry["entries"] == 1 and not (store_dir / "MEMORY.md").exists()
    report = orjson.loads(cache_run("clear", "--scope", "job-1", "--json").stdout)
    assert report["entries"] == 1 and [c["status"] for c in report["consolidated"]] == ["stored"]
    assert cache_run("stats", "--scope", "job-1").returncode == 1
    assert cache_run("get", "--scope", "job-2", "--tool", "calc", "--", *command).returncode == 0


def _cache(store: Store, backend: str) -> Cache:
    cache = Cache(runtime_of(store), backend=backend)
    cache.backend.clear("a")
    cache.backend.clear("a:e")
    cache.backend.clear("b")
    return cache


SCOPES = st.sampled_from(["a", "a:e", "b"])  # "a:e" would share a naive "a:" prefix
CALLS = st.tuples(SCOPES, st.sampled_from(["t", "e"]), st.sampled_from([{"x": 1}, {"x": 2}, ["e", "1"]]),
                  st.binary(max_size=8))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(puts=st.lists(CALLS, max_size=12), cleared=st.sets(SCOPES, max_size=1))
def test_scopes_never_cross(cache_backend, tmp_path, puts, cleared):
    cache = _cache(Store(tmp_path / "store"), cache_backend)
    expected: dict[tuple, bytes] = {}
    for scope, tool, args, output in puts:
        cache.put(scope, tool, args, output)
        expected[(scope, tool, str(args))] = output
    for scope in cleared:
        cache.clear(scope)
        expected = {k: v for k, v in expected.items() if k[0] != scope}
    for scope in ("a", "a:e", "b"):
        for tool in ("t", "e"):
            for args in ({"x": 1}, {"x": 2}, ["e", "1"]):
                entry = cache.get(scope, tool, args)
                assert (entry.output if entry else None) == expected.get((scope, tool, str(args)))
        stored = {(e.tool, str(e.args)) for e in cache.entries(scope)}
        assert stored == {(t, a) for s, t, a in expected if s == scope}


@pytest.mark.process
def test_a_hit_through_the_api_counts_its_access(cache_backend, tmp_path):
    cache = Cache(runtime_of(Store(tmp_path / "store")), backend=cache_backend)
    made = cache.run("s", "echo", [sys.executable, "-c", "print('hi')"])
    hit = cache.run("s", "echo", [sys.executable, "-c", "print('hi')"])
    assert (made.hit, hit.hit, hit.entry.output, hit.entry.access_count) == (False, True, b"hi\n", 2)
    assert cache.get("s", "echo", [sys.executable, "-c", "print('hi')"]).access_count == 3


@pytest.mark.process
def test_bad_settings_and_names_are_one_line_errors(run, tmp_path):
    bad_backend = run("cache", "stats", env={"MEMCTL_CACHE_BACKEND": "memcached://x"})
    bad_scope = run("cache", "run", "--scope", "../up", "--tool", "t", "--", "true")
    missing = run("cache", "run", "--scope", "s", "--tool", "t", "--", str(tmp_path / "no-such-program"))
    bad_agent = run("cache", "run", "--scope", "s", "--tool", "t", "--agent", "two\nlines", "--", "true")
    for result in (bad_backend, bad_scope, missing, bad_agent):
        assert result.returncode == 2
        assert len(result.stderr.decode().strip().splitlines()) == 1, result.stderr


def test_a_dead_redis_server_is_a_one_line_error_and_recovers(run, own_redis_server, tmp_path):
    effect = tmp_path / "effect"
    env = {"MEMCTL_CACHE_BACKEND": own_redis_server.url, "MEMCTL_CACHE_SOCKET_TIMEOUT": "1"}
    command = tool_command(effect, output="value")
    assert run("cache", "run", "--scope", "s", "--tool", "t", "--", *command, env=env).returncode == 0
    own_redis_server.stop()
    for args in (["run", "--scope", "s", "--tool", "t", "--", *command], ["stats"],
                 ["get", "--scope", "s", "--tool", "t", "--", *command]):
        result = run("cache", *args, env=env)
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and own_redis_server.url in lines[0], result.stderr
        assert result.stdout == b""
    own_redis_server.start()  # an empty server again: the call runs anew, and works
    again = run("cache", "run", "--scope", "s", "--tool", "t", "--", *command, env=env)
    assert again.returncode == 0 and again.stdout == b"value" and runs(effect) == 2


@pytest.mark.process
def test_consolidate_on_hit_writes_an_item_when_it_reaches_the_threshold(cache_run, tmp_path, store_dir):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="Harbour bakery opens at seven\n")
    env = {"MEMCTL_CACHE_CONSOLIDATE_ON": '["hit"]'}
    cache_run("run", "--scope", "s", "--tool", "hours", "--", *command, env=env)
    assert not (store_dir / "MEMORY.md").exists()
    hit = orjson.loads(cache_run("run", "--scope", "s", "--tool", "hours", "--json", "--", *command, env=env).stdout)
    assert hit["consolidated"] is not None and f"id: {hit['consolidated']}" in (store_dir / "MEMORY.md").read_text()
    cache_run("run", "--scope", "s", "--tool", "hours", "--", *command, env=env)  # a third access: not again
    assert (store_dir / "MEMORY.md").read_text().count("<!-- memory") == 1


# -- hostile and careless input (Hardening II): one line and exit 2, or a documented miss ---------------


def one_line_error(result: subprocess.CompletedProcess, *named: str) -> str:
    """The one line of a refused call, which names `named` (its flag or file and field)."""
    text = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"", text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    for name in named:
        assert name in text, text
    return text


def nested(levels: int, leaf=1):
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.process
@pytest.mark.parametrize("option, value", [
    *[("--ttl", v) for v in ("inf", "-inf", "nan", "0", "-1", "1e308", "315360001", "1" + "0" * 400)],
    *[("--timeout", v) for v in ("nan", "inf", "-1")],
])
def test_a_bad_duration_is_refused_before_the_command_runs(run, tmp_path, option, value):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="fine")
    one_line_error(run("cache", "run", "--scope", "s", "--tool", "t", option, value, "--", *command), option)
    if option == "--ttl":
        one_line_error(run("cache", "put", "--scope", "s", "--tool", "t", "--ttl", value, "--", *command,
                           input="stored"), "--ttl")
    assert runs(effect) == 0
    fine = run("cache", "run", "--scope", "s", "--tool", "t", "--ttl", "315360000", "--", *command)
    again = run("cache", "get", "--scope", "s", "--tool", "t", "--", *command)
    assert (fine.stdout, again.stdout, runs(effect)) == (b"fine", b"fine", 1)


@pytest.mark.parametrize("exit_code", ["256", "-1", "9" * 30])
def test_put_refuses_a_status_no_process_can_exit_with(run, exit_code):
    one_line_error(run("cache", "put", "--scope", "s", "--tool", "t", "--args", "{}", "--exit-code", exit_code,
                       input=""), "--exit-code")
    assert run("cache", "put", "--scope", "s", "--tool", "t", "--args", "{}", "--exit-code", "255",
               input="").returncode == 0


@pytest.mark.parametrize("setting, env", [
    ("[cache]\nttl = 1e308\n", {}),
    ("[cache]\nnegative_ttl = 315360001\n", {}),
    ("", {"MEMCTL_CACHE_LOCK_TTL": "1e308"}),
])
def test_a_ttl_setting_past_ten_years_is_a_one_line_error(run, store_dir, setting, env):
    store_dir.mkdir()
    (store_dir / "memctl.toml").write_text(setting)
    source = f"${next(iter(env))}" if env else "memctl.toml"
    one_line_error(run("cache", "put", "--scope", "s", "--tool", "t", "--args", "{}", input="x", env=env), source)


DEEP = "[" * 500 + "]" * 500
BAD_ARGS = {
    "nested 500 deep": (DEEP, "nested deeper than 64"),
    "objects nested 100 deep": (orjson.dumps(nested(100)).decode(), "nested deeper than 64"),
    "one level too deep": ("[" * (ARGS_MAX_DEPTH + 1) + "]" * (ARGS_MAX_DEPTH + 1), "nested deeper than 64"),
    "past orjson's own depth limit": ("[" * 5000 + "]" * 5000, "not JSON"),
    "larger than 64 KB": (orjson.dumps({"q": "x" * ARGS_MAX_BYTES}).decode(), "longer than"),
    "a float that is a huge whole number": ('{"q": 1e300}', "beyond 64-bit"),
    "an integer past unsigned 64 bits": ('{"q": 18446744073709551616}', "beyond 64-bit"),
    "an integer below signed 64 bits": ("[-9223372036854777856]", "beyond 64-bit"),
    "infinity": ('{"q": 1e400}', "not JSON"),
}


@pytest.mark.process
@pytest.mark.parametrize("text, problem", BAD_ARGS.values(), ids=BAD_ARGS.keys())
def test_bad_args_are_one_line_errors_and_the_next_call_works(run, tmp_path, text, problem):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="fine")
    one_line_error(run("cache", "get", "--scope", "s", "--tool", "t", "--args", text), "--args", problem)
    one_line_error(run("cache", "run", "--scope", "s", "--tool", "t", "--args", text, "--", *command), "--args",
                   problem)
    assert runs(effect) == 0
    assert run("cache", "run", "--scope", "s", "--tool", "t", "--args", '{"q": 1}', "--", *command).stdout == b"fine"
    assert run("cache", "get", "--scope", "s", "--tool", "t", "--args", '{"q": 1.0}').stdout == b"fine"


def test_args_at_the_bounds_are_keyed_and_keys_stay_what_they_were():
    # Keys computed before the bounds existed: a valid call still meets its old entries.
    assert key_of("stock", ["./stock.sh", "2330"]) == "9bd750eaadc6d6d5404e661b2b6caa36"
    call = '{"q": " TSMC  price", "limit": 5.0, "nested": [1.0, {"b": null, "a": true}, -2.5, 1e18]}'
    assert key_of("search", parse_args(call)) == "e54c7e9a67fe6ca0b75a71813f9aa3e4"
    assert key_of("t", parse_args(str(INT_MAX))) == "abd1f11007b11ab920afc3e74ef98865"
    assert key_of("t", parse_args(str(INT_MIN))) == "bec077c30817a9f2e0627d79fad7f9b0"
    deepest = "[" * ARGS_MAX_DEPTH + "]" * ARGS_MAX_DEPTH
    largest = orjson.dumps("x" * (ARGS_MAX_BYTES - 2)).decode()
    for text in (deepest, largest, "1.8446744073709550e19", "1e-300"):
        assert len(key_of("t", parse_args(text))) == 32


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers(min_value=-2**70, max_value=2**70) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, depth=st.integers(0, 80))
def test_any_json_args_are_keyed_or_refused_with_an_input_error(value, depth):
    import json  # writes what orjson will not: NaN, Infinity, integers of any size

    whole = json.dumps(nested(depth, value))
    for text in (whole, whole[:-1]):  # and the same cut short
        try:
            key = key_of("t", parse_args(text))
        except InputError as exc:
            assert "\n" not in str(exc)
        else:
            assert len(key) == 32


def test_the_library_and_mcp_refuse_what_the_command_line_refuses(store_dir):
    pytest.importorskip("mcp")
    from memctl.api import Memory
    from memctl.mcp.server import ToolError, Tools

    tools = Tools(Memory(store_dir))
    call = {"scope": "s", "tool": "t", "args": {"q": 1}}
    for name, arguments, argument in [
        ("cache_put", {**call, "output": "x", "ttl": 1e308}, "ttl"),
        ("cache_put", {**call, "output": "x", "exit_code": 300}, "exit_code"),
        ("cache_put", {**call, "args": nested(100), "output": "x"}, "args"),
        ("cache_get", {**call, "args": {"q": 2**70}}, "args"),
        ("cache_get", {**call, "args": [1e300]}, "args"),
    ]:
        with pytest.raises(ToolError, match=f"^argument '{argument}': "):
            tools.call(name, arguments)
    assert tools.call("cache_put", {**call, "output": "x", "ttl": 60})["entry"]["output"] == "x"
    cache = Cache(runtime_of(Store(store_dir)))
    cycle: list = []
    cycle.append(cycle)
    shared = [1]
    for _ in range(60):  # 2**60 values to walk, in 61 lists
        shared = [shared, shared]
    for args in ({"q": float("inf")}, {"q": float("nan")}, {"q": {1, 2}}, {1: "q"}, [b"bytes"], cycle, shared):
        with pytest.raises(InputError):
            cache.get("s", "t", args)


MISSING = object()
DEEPEST_JSON = "[" * 1023 + "]" * 1023  # in an entry, as deep as orjson reads; Python cannot repr it
BAD_ENTRIES = {
    "not JSON": (b"{not json", "not valid JSON"),
    "not UTF-8": (b'{"id": "\xff"}', "not valid JSON"),
    "a list": (b"[]", "expected an entry"),
    "expires_at text": ({"expires_at": "soon"}, "field 'expires_at'"),
    "expires_at null": ({"expires_at": None}, "field 'expires_at'"),
    "expires_at past the year 9999": ({"expires_at": 1e308}, "field 'expires_at'"),
    "expires_at a boolean": ({"expires_at": True}, "field 'expires_at'"),
    "id a number": ({"id": 7}, "field 'id'"),
    "id a path": ({"id": "../../victim"}, "field 'id'"),
    "another scope's": ({"scope": "other"}, "field 'scope'"),
    "another key's": ({"key": "0" * 32}, "field 'key'"),
    "args too deep": ({"args": nested(100)}, "field 'args'"),
    "output a number": ({"output": 5}, "field 'output'"),
    "output_base64 not base64": ({"output_base64": "!!"}, "field 'output_base64'"),
    "output_base64 not ASCII": ({"output_base64": "é"}, "field 'output_base64'"),
    "exit_code text": ({"exit_code": "1"}, "field 'exit_code'"),
    "exit_code past 255": ({"exit_code": 300}, "field 'exit_code'"),
    "exit_code 1023 arrays deep": ({"exit_code": DEEPEST_JSON}, "field 'exit_code'"),
    "duration_ms below 0": ({"duration_ms": -1}, "field 'duration_ms'"),
    "created_at not a time": ({"created_at": "yesterday"}, "field 'created_at'"),
    "agent not a name": ({"agent": "two words"}, "field 'agent'"),
    "output missing": ({"output": MISSING}, "field 'output'"),
    "expires_at missing": ({"expires_at": MISSING}, "field 'expires_at'"),
}


def bad_entry(good: bytes, bad: bytes | dict) -> bytes:
    if isinstance(bad, bytes):
        return bad
    data = {**orjson.loads(good), **bad}
    text = orjson.dumps({k: v for k, v in data.items() if v is not MISSING})
    return text.replace(orjson.dumps(DEEPEST_JSON), DEEPEST_JSON.encode())  # deeper than orjson writes


@pytest.mark.process
@pytest.mark.parametrize("bad, problem", BAD_ENTRIES.values(), ids=BAD_ENTRIES.keys())
def test_an_entry_edited_into_nonsense_is_a_miss_reported_and_replaced(cache_backend, tmp_path, bad, problem):
    effect = tmp_path / "effect"
    store = Store(tmp_path / "store")
    cache = Cache(runtime_of(store), backend=cache_backend)
    command = tool_command(effect, output="fine")
    key = cache.run("s", "t", command).entry.key
    if cache_backend == "files":
        path = tmp_path / "store" / "cache" / "s" / "entries" / f"{key}.json"
        path.write_bytes(bad_entry(path.read_bytes(), bad))
    else:
        name = cache.backend._prefix("s") + "e:" + key
        cache.backend.client.set(name, bad_entry(cache.backend.client.get(name), bad), px=60_000)
    assert cache.get("s", "t", command) is None
    assert [row["keys"] for row in cache.stats("s").rows] == [0]
    if cache_backend == "files":
        ((file, line, message),) = cache_problems(store, runtime_of(store).clock)
        assert (file, line) == (f"cache/s/entries/{key}.json", None) and problem in message, message
    again = cache.run("s", "t", command)
    assert (again.hit, again.entry.output, runs(effect)) == (False, b"fine", 2)
    assert cache.get("s", "t", command).output == b"fine" and cache_problems(store, runtime_of(store).clock) == []


@pytest.mark.process
def test_the_command_line_reads_a_nonsense_entry_as_a_miss(run, tmp_path, store_dir):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="fine")
    run("cache", "run", "--scope", "s", "--tool", "t", "--", *command)
    (entry_file,) = (store_dir / "cache" / "s" / "entries").iterdir()
    entry_file.write_bytes(orjson.dumps({**orjson.loads(entry_file.read_bytes()), "expires_at": "soon"}))
    for args, status in ((["get", "--scope", "s", "--tool", "t", "--", *command], 1), (["stats"], 0)):
        result = run("cache", *args)
        assert result.returncode == status and b"Traceback" not in result.stderr, result.stderr
    again = run("cache", "run", "--scope", "s", "--tool", "t", "--", *command)
    assert again.returncode == 0 and again.stdout == b"fine" and runs(effect) == 2
    assert orjson.loads(entry_file.read_bytes())["output"] == "fine"


@pytest.mark.process
def test_bad_events_marks_and_folders_are_skipped_and_reported(run, tmp_path, store_dir):
    effect = tmp_path / "effect"
    command = tool_command(effect, output="fine")
    env = {"MEMCTL_CACHE_CONSOLIDATE_ON": '["hit"]'}
    for _ in range(2):  # a miss, then a hit that consolidates it
        run("cache", "run", "--scope", "s", "--tool", "t", "--", *command, env=env)
    scope = store_dir / "cache" / "s"
    with open(scope / "events", "ab") as events:  # lines 3 to 6 are not events; line 7, a miss, is
        events.write(b"h\tt\xff\n" + b"x\tt\n" + b"\n" + b"h\ttwo words\n" + b"m\tt\n")
    (mark,) = (scope / "consolidated").iterdir()
    mark.write_bytes(b"\xfe not an id")
    (store_dir / "cache" / "no good").mkdir()
    stats = run("cache", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    rows = [orjson.loads(line) for line in stats.stdout.splitlines()]
    assert [(r["scope"], r["hits"], r["misses"], r["consolidated"]) for r in rows] == [("s", 1, 2, 0)]
    problems = cache_problems(Store(store_dir), runtime_of(Store(store_dir)).clock)
    assert [(file, line) for file, line, _ in problems] == [
        ("cache/no good", None), (f"cache/s/consolidated/{mark.name}", None),
        *[("cache/s/events", n) for n in (3, 4, 5, 6)]]
    assert ["not UTF-8" in m for _, _, m in problems[2:]] == [True, False, False, False]
    assert "unknown event 'x'" in problems[3][2] and "tool must be" in problems[5][2]


def test_cache_problems_reports_links_and_folders_one_by_one(tmp_path):
    store = Store(tmp_path / "store")
    cache = Cache(runtime_of(store))
    for scope in ("s", "u"):
        cache.put(scope, "t", {"q": 1}, "x")
    root = tmp_path / "store" / "cache"
    (root / "linked").symlink_to(tmp_path)
    (root / "s" / "entries" / f"{'a' * 32}.json").mkdir()
    (root / "u" / "entries" / f"{'b' * 32}.json").symlink_to(tmp_path / "elsewhere.json")
    (root / "u" / "events").symlink_to(tmp_path / "elsewhere")
    problems = cache_problems(store, runtime_of(store).clock)  # one link does not hide the rest, and nothing raises
    assert [(file, line) for file, line, _ in problems] == [
        ("cache/linked", None), (f"cache/s/entries/{'a' * 32}.json", None),
        (f"cache/u/entries/{'b' * 32}.json", None), ("cache/u/events", None)]
    messages = [message for _, _, message in problems]
    assert ["symbolic link" in m for m in messages] == [True, False, True, True] and "directory" in messages[1]


def test_redis_values_edited_by_hand_are_misses_and_skipped(redis_server, tmp_path):
    redis_server.flush()
    effect = tmp_path / "effect"
    cache = Cache(runtime_of(Store(tmp_path / "store")), backend=redis_server.url)
    command = tool_command(effect, output="fine")
    key = cache.run("s", "t", command).entry.key
    client, prefix = cache.backend.client, cache.backend._prefix("s")
    client.set(prefix + "a:" + key, b"many")  # INCR could not add to it
    assert cache.get("s", "t", command) is None
    assert cache.run("s", "t", command).hit is False and cache.get("s", "t", command).access_count == 2
    client.set(prefix + "c:" + key, b"\xff\xfe")
    assert cache.get("s", "t", command).consolidated is None
    client.hset(prefix + "s", mapping={b"hits\t\xff": 1, b"hits\tt": b"lots", b"bogus\tt": 4})
    client.sadd("memctl:cache:scopes", b"\xff", b"two words")
    client.set(prefix + "e:\xff", b"{}")
    assert [(r["scope"], r["tool"], r["hits"], r["keys"]) for r in cache.stats().rows] == [("s", "t", 0, 1)]


def test_memory_cache_is_the_cache_itself_on_one_backend_or_another(store_dir, cache_backend):
    """`memory.cache` is memctl.cache.Cache, not a group forwarding some of its methods (#32): every
    method of the cache is there, the one object each time, and `on` another backend shares the
    consolidator, so what it stores can become long-term memory."""
    from memctl import Memory

    memory = Memory(store_dir)
    cache = memory.cache.on(cache_backend)
    assert isinstance(memory.cache, Cache) and memory.cache is memory.cache
    assert cache.on(None) is cache and memory.cache.on(memory.cache.backend_spec) is memory.cache
    cache.put("run-1", "quote", cache.json_args({"symbol": 2330.0}), "TSMC 1032", error="slow\nretried", agent="pro")
    cache.put("run-1", "quote", cache.json_args({"symbol": 2330}), "TSMC 1032", agent="pro")
    (entry,) = cache.entries("run-1")  # 2330.0 and 2330 are one call: the later put replaced the first
    assert (entry.agent, entry.stderr_tail, entry.args) == ("pro", "", {"symbol": 2330})
    assert cache.get("run-1", "quote", cache.parse_args('{"symbol": 2330}')).id == entry.id
    rows = cache.consolidate("run-1", everything=True)
    assert [row.status for row in rows] == ["stored"]
    assert [r.record_id or r.id for r in cache.search("TSMC", scope="run-1")] == [rows[0].memory_id]
    with pytest.raises(InputError):
        cache.search("  ")
    cleared = cache.clear("run-1")  # consolidated before: marked, not written again
    assert (cleared.entries, [row.status for row in cleared.consolidated]) == (1, ["marked"])
    assert cache.entries("run-1") == []
