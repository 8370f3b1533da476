"""`memctl hooks`: Claude Code's hooks give each prompt memory's context and store the transcript.

Claude Code itself needs a model account, which no machine of this project has: the events and
the transcript are fixtures written from its documented formats (tests/fixtures/claude-code/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, memctl_command
from test_server import made_store, make_store, memctl, servers, start, status  # noqa: F401 -- fixtures among them

TRANSCRIPT = REPO / "tests" / "fixtures" / "claude-code" / "transcript.jsonl"
SESSION = "5d3e8f0a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
SAID = ["9a0c6f1e-0000-4000-8000-000000000001", "9a0c6f1e-0000-4000-8000-000000000005",
        "9a0c6f1e-0000-4000-8000-000000000007", "9a0c6f1e-0000-4000-8000-000000000010"]
NOTES = ("## Decisions\n- The Kestrel sync job moves from RabbitMQ to Redis streams, one consumer group per "
         "tenant\n\n## People\n- Jonas from operations reviews the December 12th demo\n")


def event(name: str, **fields) -> str:
    return json.dumps({"hook_event_name": name, "session_id": SESSION, "transcript_path": str(TRANSCRIPT),
                       "cwd": "/home/mei/kestrel", **fields})


# A hook process that loads the real models, for a test of what it answers, not of how fast: the
# default [hooks] timeout_seconds (10 s) was passed by a cold process (both models loaded) at load ~8
# (the suite on two workers beside other work), and the hook then rightly printed nothing.
UNHURRIED = {"MEMCTL_SERVER": "off", "MEMCTL_HOOKS_TIMEOUT_SECONDS": "120"}


def prompt(text: str, session: str = SESSION) -> str:
    return json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": session, "cwd": "/home/mei/kestrel",
                       "transcript_path": str(TRANSCRIPT), "permission_mode": "default", "prompt": text})


def context_of(done: subprocess.CompletedProcess) -> str:
    assert done.stdout, done.stderr  # a hook that gave up says why on stderr
    answer = json.loads(done.stdout)
    assert list(answer) == ["hookSpecificOutput"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    return answer["hookSpecificOutput"]["additionalContext"]


def stored(store: Path, session: str = SESSION) -> list[dict]:
    path = store / "sessions" / f"{session}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def one_line_and_nothing_else(done: subprocess.CompletedProcess) -> str:
    """A hook that failed: exit 0 (2 would block the prompt), nothing on stdout, one line on stderr."""
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""
    err = done.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("memctl: "), err
    return err


def test_a_prompt_is_given_what_memory_holds_for_it(run, store_dir):
    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    done = run("hooks", "run", "claude-code", input=prompt("which queue should the Kestrel sync job use?"))
    assert done.returncode == 0, done.stderr
    context = context_of(done)
    assert "Redis streams, one consumer group per tenant" in context
    # A new session's first prompt: nothing stored, no session made; the prompt itself is not given back.
    assert not (store_dir / "sessions").exists()
    assert "which queue should" not in context


def test_a_later_prompt_finds_the_sessions_earlier_messages_but_not_the_last_ones(run, store_dir):
    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    assert run("hooks", "run", "claude-code", input=event("Stop", stop_hook_active=False)).returncode == 0
    filler = [{"id": f"later-{n}", "role": "user" if n % 2 else "assistant",
               "text": f"Step {n} of the tenant migration checklist is done"} for n in range(25)]
    data = "\n".join(json.dumps(m) for m in filler)
    assert run("ingest", "--session", SESSION, "-f", "jsonl", "-", input=data).returncode == 0
    context = context_of(run("hooks", "run", "claude-code", input=prompt("what lag spike did the dashboard show?")))
    assert "spikes every night at 02:00" in context  # an earlier message of the session, found
    assert "Step 24 of" not in context  # the last ones: Claude Code holds them itself


def test_a_stop_stores_each_transcript_line_once_and_no_tool_output(run, store_dir):
    first = run("hooks", "run", "claude-code", input=event("Stop", stop_hook_active=False))
    assert (first.returncode, first.stdout) == (0, b""), first.stderr
    messages = stored(store_dir)
    assert [m["id"] for m in messages] == SAID
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    text = (store_dir / "sessions" / f"{SESSION}.jsonl").read_text()
    for never in ("rabbitmq-legacy",  # a tool's result
                  "grep -rn queue",  # a tool call
                  "check the repo first",  # thinking
                  "every place the queue name",  # a sub-agent's
                  "being continued from a previous conversation",  # a compaction's summary
                  "/clear", "iVBORw0KGgo"):  # a meta note; an image's bytes
        assert never not in text
    assert messages[2]["text"].startswith("[image: image/png]")
    again = run("hooks", "run", "claude-code", input=event("Stop", stop_hook_active=True))
    assert again.returncode == 0 and stored(store_dir) == messages
    # The progress lost (or the transcript rewritten): every line is read again, each stored once by its id.
    shutil.rmtree(store_dir / "hooks")
    for name in ("PreCompact", "SessionEnd"):
        done = run("hooks", "run", "claude-code", input=event(name, trigger="auto", reason="exit"))
        assert done.returncode == 0 and stored(store_dir) == messages


def test_only_what_the_transcript_gained_is_read_and_a_line_being_written_waits(run, store_dir, tmp_path):
    transcript = tmp_path / f"{SESSION}.jsonl"
    lines = TRANSCRIPT.read_bytes().splitlines(keepends=True)
    transcript.write_bytes(b"".join(lines[:5]))
    stop = json.dumps({"hook_event_name": "Stop", "session_id": SESSION, "transcript_path": str(transcript)})
    assert run("hooks", "run", "claude-code", input=stop).returncode == 0
    assert [m["id"] for m in stored(store_dir)] == SAID[:1]
    progress = json.loads((store_dir / "hooks" / "claude-code" / f"{SESSION}.json").read_text())
    assert progress == {"transcript": str(transcript), "offset": len(b"".join(lines[:5]))}
    half = lines[7][:40]
    transcript.write_bytes(b"".join(lines[:7]) + half)  # the client is writing line 8
    assert run("hooks", "run", "claude-code", input=stop).returncode == 0
    assert [m["id"] for m in stored(store_dir)] == SAID[:1]
    transcript.write_bytes(b"".join(lines))
    assert run("hooks", "run", "claude-code", input=stop).returncode == 0
    assert [m["id"] for m in stored(store_dir)] == SAID


@pytest.mark.parametrize("case", ["no store", "settings not TOML", "store is a file", "not JSON",
                                  "unknown event", "bad session id", "unknown client", "no transcript file"])
def test_a_failure_never_blocks_the_agent(run, store_dir, case):
    client = "claude-code"
    data = prompt("which queue should the sync job use?")
    if case != "no store":
        assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    if case == "settings not TOML":
        (store_dir / "memctl.toml").write_text("[hooks\ncontext_budget = 10\n")
    elif case == "store is a file":
        shutil.rmtree(store_dir)
        store_dir.write_text("not a store")
    elif case == "not JSON":
        data = '{"hook_event_name": "UserPromptSubmit", '
    elif case == "unknown event":
        data = event("PostToolUse", tool_name="Bash")
    elif case == "bad session id":
        data = prompt("which queue?", session="../../etc/passwd")
    elif case == "unknown client":
        client = "claude-desktop"
    elif case == "no transcript file":
        data = json.dumps({"hook_event_name": "Stop", "session_id": SESSION, "transcript_path": "/nonexistent/t.jsonl"})
    one_line_and_nothing_else(run("hooks", "run", client, input=data))
    if case == "bad session id":
        assert not (store_dir / "sessions").exists()


def test_a_store_locked_too_long_is_given_up_on_in_a_real_process(run_process, run, store_dir):
    """A writer holds the store (a long rebuild): the hook waits [hooks] timeout_seconds, then lets
    the agent go on; nothing is half stored."""
    import fcntl

    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    with open(store_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        done = run_process("hooks", "run", "claude-code", input=event("Stop"),
                           env={"MEMCTL_HOOKS_TIMEOUT_SECONDS": "1"})
        waited = time.monotonic() - started
    err = one_line_and_nothing_else(done)
    assert "timeout_seconds" in err and waited < 60
    assert stored(store_dir) == []
    assert run("hooks", "run", "claude-code", input=event("Stop")).returncode == 0  # free again: stored
    assert [m["id"] for m in stored(store_dir)] == SAID


def test_the_context_stays_within_claude_codes_10000_characters(run, store_dir):
    notes = "## Runbook\n" + "".join(f"- Kestrel sync step {n}: restart the Redis stream consumer of tenant {n} "
                                     f"after draining its pending entries, then check the lag dashboard\n"
                                     for n in range(400))
    assert run("ingest", "--kind", "memory", "-", input=notes).returncode == 0
    done = run("hooks", "run", "claude-code", input=prompt("how do I restart the Kestrel sync consumers?"),
               env={"MEMCTL_HOOKS_CONTEXT_BUDGET": "100000", "MEMCTL_GOVERNANCE_LAYER_QUERY_MAX": "400"})
    context = context_of(done)
    assert 5000 < len(context) <= 10_000
    smaller = context_of(run("hooks", "run", "claude-code", input=prompt("how do I restart the Kestrel sync consumers?"),
                             env={"MEMCTL_HOOKS_CONTEXT_BUDGET": "200", "MEMCTL_GOVERNANCE_LAYER_QUERY_MAX": "400"}))
    assert len(smaller) < 1500  # the setting names the budget


# -- settings.json ---------------------------------------------------------------------------------
OTHER_HOOKS = {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/check-bash.sh"}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}],
}


@pytest.fixture
def settings(tmp_path) -> Path:
    path = tmp_path / "home" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"model": "opus", "permissions": {"allow": ["Bash(git:*)"]}, "hooks": OTHER_HOOKS},
                               indent=2))
    return path


def test_install_keeps_every_other_hook_and_key_and_is_idempotent(run, store_dir, settings, monkeypatch):
    before = json.loads(settings.read_text())
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(settings.parent))
    plan = run("hooks", "install", "claude-code", "--dry-run")
    assert plan.returncode == 0 and b"nothing written" in plan.stderr
    assert json.loads(settings.read_text()) == before
    done = run("hooks", "install", "claude-code", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "added" and report["events"] == ["UserPromptSubmit", "Stop", "PreCompact", "SessionEnd"]
    after = json.loads(settings.read_text())
    assert {k: v for k, v in after.items() if k != "hooks"} == {k: v for k, v in before.items() if k != "hooks"}
    assert after["hooks"]["PreToolUse"] == OTHER_HOOKS["PreToolUse"]
    assert after["hooks"]["Stop"][0] == OTHER_HOOKS["Stop"][0]
    ours = {"type": "command", "command": report["command"], "timeout": 30}
    for name in report["events"]:
        assert {"hooks": [ours]} in after["hooks"][name]
    assert report["command"].endswith(f"--store {store_dir} hooks run claude-code")
    assert json.loads(Path(report["backup"]).read_text()) == before
    again = run("hooks", "install", "claude-code", "--json")
    assert json.loads(again.stdout)["status"] == "unchanged" and json.loads(settings.read_text()) == after
    assert len(list(settings.parent.glob("settings.json.*.bak"))) == 1
    # Another store's hooks are another entry; uninstall takes out exactly this store's.
    other = run("hooks", "install", "claude-code", "--store", str(store_dir.parent / "other"))
    assert other.returncode == 0
    removed = run("hooks", "uninstall", "claude-code", "--json")
    assert json.loads(removed.stdout)["status"] == "removed"
    run("hooks", "uninstall", "claude-code", "--store", str(store_dir.parent / "other"))
    assert json.loads(settings.read_text()) == before
    assert json.loads(run("hooks", "uninstall", "claude-code", "--json").stdout)["status"] == "unchanged"


@pytest.mark.process
def test_the_installed_command_is_what_claude_code_would_run(run, store_dir, tmp_path):
    """The command written runs as the client runs it (a shell, another working directory, the
    event on stdin) and gives the prompt its context."""
    path = tmp_path / "settings.json"
    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    assert run("hooks", "install", "claude-code", "--settings", str(path)).returncode == 0
    command = json.loads(path.read_text())["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    done = subprocess.run(command, shell=True, input=prompt("which queue should the sync job use?").encode(),
                          capture_output=True, cwd=tmp_path, env={**env, **UNHURRIED}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Redis streams" in context_of(done)


@pytest.mark.parametrize("text, line", [('{"hooks": {"Stop": [}', 1), ('{\n  "hooks": []\n}', None),
                                        ('{"hooks": {"Stop": {"command": "x"}}}', None)])
def test_install_refuses_a_broken_settings_file_in_one_line(run, tmp_path, text, line):
    path = tmp_path / "settings.json"
    path.write_text(text)
    done = run("hooks", "install", "claude-code", "--settings", str(path))
    assert done.returncode == 2 and done.stderr.decode().count("\n") == 1
    assert str(path) + (f":{line}" if line else "") in done.stderr.decode()
    assert path.read_text() == text and list(tmp_path.glob("*.bak")) == []


def test_project_settings_are_the_working_directorys(run, store_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = run("hooks", "install", "claude-code", "--project")
    assert done.returncode == 0, done.stderr
    assert set(json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]) == {
        "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd"}


@pytest.mark.process
def test_a_prompt_through_the_resident_server(servers, tmp_path, make_store):  # noqa: F811 -- the fixtures
    store = tmp_path / "store"
    make_store(store)
    servers = {**servers, "MEMCTL_HOOKS_TIMEOUT_SECONDS": UNHURRIED["MEMCTL_HOOKS_TIMEOUT_SECONDS"]}
    start(servers, store)
    calls = status(servers, store)["calls"]
    data = prompt("what database does Kestrel use?").encode()
    done = memctl(servers, store, "hooks", "run", "claude-code", input=data)
    assert done.returncode == 0, done.stderr
    assert "PostgreSQL 16" in context_of(done)
    assert status(servers, store)["calls"] == calls + 1
    local = subprocess.run([*memctl_command(), "--store", str(store), "hooks", "run", "claude-code"], input=data,
                           capture_output=True, env={**servers, "MEMCTL_SERVER": "off"}, timeout=120)
    assert local.stdout == done.stdout
