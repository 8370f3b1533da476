"""`memctl hooks` for Codex and Gemini CLI: their events in, memory's context out, their turns stored.

Neither client can run here (each needs a model account): the events, Codex's rollout file and
the settings are fixtures written from each client's documentation and code, named in
tests/fixtures/codex/README.md and tests/fixtures/gemini-cli/README.md. What both share with
Claude Code's hooks (tests/test_hooks.py) runs through the same code, tested there too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from test_hooks import one_line_and_nothing_else, stored

FIXTURES = REPO / "tests" / "fixtures"
ROLLOUT = FIXTURES / "codex" / "rollout.jsonl"
CODEX_SESSION = "019d036d-c7fa-72d2-b6fd-78878bfe34e4"
BEFORE_AGENT = json.loads((FIXTURES / "gemini-cli" / "before-agent.json").read_text())
AFTER_AGENT = json.loads((FIXTURES / "gemini-cli" / "after-agent.json").read_text())
GEMINI_SESSION = BEFORE_AGENT["session_id"]
NOTES = ("## Decisions\n- The Kestrel sync job moves from RabbitMQ to Redis streams, one consumer group per "
         "tenant\n\n## People\n- Jonas from operations reviews the December 12th demo\n")


def codex_event(name: str, **fields) -> str:
    """An event as Codex gives it (codex-rs/hooks/schema/generated/*.command.input.schema.json)."""
    return json.dumps({"session_id": CODEX_SESSION, "turn_id": "019d036e-3164-72c3-a170-98925564c4fc",
                       "transcript_path": str(ROLLOUT), "cwd": "/home/mei/kestrel", "hook_event_name": name,
                       "model": "gpt-5-codex", "permission_mode": "default", **fields})


def codex_prompt(text: str) -> str:
    return codex_event("UserPromptSubmit", prompt=text)


def gemini_event(base: dict, **fields) -> str:
    return json.dumps({**base, **fields})


def context_of(done: subprocess.CompletedProcess, event: str) -> str:
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert list(answer) == ["hookSpecificOutput"]
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    return answer["hookSpecificOutput"]["additionalContext"]


# -- Codex ------------------------------------------------------------------------------------------
def test_a_codex_prompt_is_given_what_memory_holds_for_it(run, store_dir):
    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    done = run("hooks", "run", "codex", input=codex_prompt("which queue should the Kestrel sync job use?"))
    context = context_of(done, "UserPromptSubmit")
    assert "Redis streams, one consumer group per tenant" in context
    assert "which queue should" not in context
    assert not (store_dir / "sessions").exists()


def test_a_codex_stop_stores_each_message_of_the_rollout_once_and_nothing_else(run, store_dir):
    first = run("hooks", "run", "codex", input=codex_event("Stop", stop_hook_active=False,
                                                           last_assistant_message="The 02:00 spike"))
    assert (first.returncode, first.stdout) == (0, b""), first.stderr
    messages = stored(store_dir, CODEX_SESSION)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0]["text"].startswith("Which queue should the Kestrel sync job use?")
    assert messages[0]["ts"].startswith("2026-11-20T09:00:01.2")  # the line's time
    assert messages[2]["text"] == "Here is the lag dashboard: it spikes every night at 02:00.\n\n[image: image/png]"
    assert messages[3]["text"].startswith("The 02:00 spike is the nightly tenant export")
    assert len({m["id"] for m in messages}) == 4
    text = (store_dir / "sessions" / f"{CODEX_SESSION}.jsonl").read_text()
    for never in ("rabbitmq-legacy\\\"", "grep -rn queue",  # a shell call and its output
                  "Check the repo config first",  # reasoning
                  "AGENTS.md", "environment_context", "permissions instructions",  # what Codex gives the model
                  "hook context that must never",  # a hook's context, memctl's own
                  "Begin Patch", "Success. Updated",  # a patch and its result
                  "iVBORw0KGgo"):  # an image's bytes
        assert never not in text, never
    again = run("hooks", "run", "codex", input=codex_event("Stop", stop_hook_active=True))
    assert again.returncode == 0 and stored(store_dir, CODEX_SESSION) == messages
    # The progress lost (or the rollout rewritten): every line is read again, each stored once.
    shutil.rmtree(store_dir / "hooks")
    for name, fields in (("PreCompact", {"trigger": "auto"}), ("SessionEnd", {"reason": "other"})):
        done = run("hooks", "run", "codex", input=codex_event(name, **fields))
        assert done.returncode == 0 and stored(store_dir, CODEX_SESSION) == messages, done.stderr


def test_a_codex_session_without_a_rollout_stores_nothing(run, store_dir):
    done = run("hooks", "run", "codex", input=codex_event("Stop", transcript_path=None, stop_hook_active=False))
    assert (done.returncode, done.stdout) == (0, b"")
    assert "names no transcript" in done.stderr.decode()
    assert stored(store_dir, CODEX_SESSION) == []


def test_a_codex_sub_agents_turn_is_not_stored(run, store_dir):
    """An event fired inside a sub-agent carries agent_id (codex-rs/hooks, #22882): its turns are the
    sub-agent's work, not the conversation, as Claude Code's sidechain lines are not."""
    done = run("hooks", "run", "codex", input=codex_event("Stop", stop_hook_active=False, agent_id="019d0400-0000-7000",
                                                          agent_type="explorer"))
    assert (done.returncode, done.stdout) == (0, b"") and "sub-agent" in done.stderr.decode()
    assert stored(store_dir, CODEX_SESSION) == []


def test_the_codex_context_stays_within_its_10000_bytes(run, store_dir):
    """Codex counts a hook's text as UTF-8 bytes / 4 up to 2,500 tokens: 10,000 bytes, which
    Chinese reaches at a third of 10,000 characters."""
    notes = "## 运维手册\n" + "".join(f"- 红隼同步步骤 {n}：排空租户 {n} 的待处理条目后重启 Redis 流消费者，再查看延迟面板\n"
                                    for n in range(400))
    assert run("ingest", "--kind", "memory", "-", input=notes).returncode == 0
    env = {"MEMCTL_HOOKS_CONTEXT_BUDGET": "100000", "MEMCTL_GOVERNANCE_LAYER_QUERY_MAX": "400"}
    context = context_of(run("hooks", "run", "codex", input=codex_prompt("怎么重启红隼同步的 Redis 流消费者？"), env=env),
                         "UserPromptSubmit")
    assert 5000 < len(context.encode()) <= 10_000
    assert context.endswith("\n")  # whole lines


# -- Gemini CLI -------------------------------------------------------------------------------------
def test_a_gemini_prompt_is_given_what_memory_holds_for_it(run, store_dir):
    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    done = run("hooks", "run", "gemini-cli", input=gemini_event(BEFORE_AGENT))
    context = context_of(done, "BeforeAgent")
    assert "Redis streams, one consumer group per tenant" in context
    assert not (store_dir / "sessions").exists()


def test_a_gemini_turn_is_stored_once_from_its_after_agent_event(run, store_dir):
    first = run("hooks", "run", "gemini-cli", input=gemini_event(AFTER_AGENT))
    # Gemini CLI shows stderr as a message to the user when stdout is empty: a handled event says {}.
    assert (first.returncode, first.stdout) == (0, b"{}\n"), first.stderr
    messages = stored(store_dir, GEMINI_SESSION)
    assert [(m["role"], m["text"]) for m in messages] == [("user", AFTER_AGENT["prompt"]),
                                                          ("assistant", AFTER_AGENT["prompt_response"])]
    assert all(m["ts"].startswith("2026-11-20T09:00:09") for m in messages)  # the event's time
    assert run("hooks", "run", "gemini-cli", input=gemini_event(AFTER_AGENT)).returncode == 0
    assert stored(store_dir, GEMINI_SESSION) == messages
    # A retry another hook asked for: its answer is new, its prompt is the turn's, already stored.
    retry = gemini_event(AFTER_AGENT, timestamp="2026-11-20T09:00:15.000Z", stop_hook_active=True,
                         prompt_response="Redis streams; the config is switched and the tests pass.")
    assert run("hooks", "run", "gemini-cli", input=retry).returncode == 0
    after = stored(store_dir, GEMINI_SESSION)
    assert [(m["role"], m["text"]) for m in after[2:]] == [("assistant", "Redis streams; the config is switched "
                                                                          "and the tests pass.")]
    # A turn the model did not answer: Gemini CLI's placeholder is not a message.
    silent = gemini_event(AFTER_AGENT, timestamp="2026-11-20T09:01:00.000Z", prompt="and the demo?",
                          prompt_response="[no response text]")
    assert run("hooks", "run", "gemini-cli", input=silent).returncode == 0
    assert [m["text"] for m in stored(store_dir, GEMINI_SESSION)[3:]] == ["and the demo?"]


def test_a_later_gemini_prompt_finds_an_earlier_turn_of_its_session(run, store_dir):
    assert run("hooks", "run", "gemini-cli", input=gemini_event(AFTER_AGENT)).returncode == 0
    filler = [{"id": f"later-{n}", "role": "user" if n % 2 else "assistant",
               "text": f"Step {n} of the tenant migration checklist is done"} for n in range(25)]
    data = "\n".join(json.dumps(m) for m in filler)
    assert run("ingest", "--session", GEMINI_SESSION, "-f", "jsonl", "-", input=data).returncode == 0
    context = context_of(run("hooks", "run", "gemini-cli",
                             input=gemini_event(BEFORE_AGENT, prompt="what did we switch the sync queue to?")),
                         "BeforeAgent")
    assert "one consumer group per tenant" in context


# -- every client -----------------------------------------------------------------------------------
PROMPTS = {"claude-code": json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "which queue?"}),
           "codex": codex_prompt("which queue?"), "gemini-cli": gemini_event(BEFORE_AGENT)}


@pytest.mark.parametrize("client", ["codex", "gemini-cli"])
@pytest.mark.parametrize("case", ["no store", "store is a file", "not JSON", "another client's event",
                                  "bad session id"])
def test_a_failure_never_blocks_the_agent(run, store_dir, client, case):
    data = PROMPTS[client]
    if case != "no store":
        assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    if case == "store is a file":
        shutil.rmtree(store_dir)
        store_dir.write_text("not a store")
    elif case == "not JSON":
        data = data[:30]
    elif case == "another client's event":
        data = PROMPTS["gemini-cli" if client == "codex" else "codex"]
    elif case == "bad session id":
        data = json.dumps({**json.loads(data), "session_id": "../../etc/passwd"})
    one_line_and_nothing_else(run("hooks", "run", client, input=data))
    assert not (store_dir.is_dir() and (store_dir / "sessions").exists())


# -- settings files ---------------------------------------------------------------------------------
# What each install writes where: (the environment variable naming its home, the file under it,
# the events, the timeout in the client's unit).
SETTINGS = {
    "codex": ("CODEX_HOME", "hooks.json", ["UserPromptSubmit", "Stop", "PreCompact", "SessionEnd"], 30),
    "gemini-cli": ("GEMINI_CLI_HOME", ".gemini/settings.json", ["BeforeAgent", "AfterAgent"], 30_000),
}
OTHER = {
    "codex": {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/check.sh"}]}],
                        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}]}},
    "gemini-cli": {"general": {"vimMode": True}, "hooksConfig": {"enabled": True},
                   "hooks": {"BeforeTool": [{"matcher": "run_shell_command",
                                             "hooks": [{"type": "command", "command": "~/bin/check.sh"}]}],
                             "AfterAgent": [{"hooks": [{"name": "notify", "type": "command",
                                                        "command": "notify-send done", "timeout": 5000}]}]}},
}


@pytest.mark.parametrize("client", ["codex", "gemini-cli"])
def test_install_keeps_every_other_hook_and_key_and_uninstall_takes_out_only_its_own(run, store_dir, tmp_path,
                                                                                    monkeypatch, client):
    variable, name, events, timeout = SETTINGS[client]
    home = tmp_path / "home"
    path = home / name
    path.parent.mkdir(parents=True)
    before = OTHER[client]
    path.write_text(json.dumps(before, indent=2))
    monkeypatch.setenv(variable, str(home))
    plan = run("hooks", "install", client, "--dry-run")
    assert plan.returncode == 0 and b"nothing written" in plan.stderr and json.loads(path.read_text()) == before
    done = run("hooks", "install", client, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["status"], report["events"], report["path"]) == ("added", events, str(path))
    assert report["command"].endswith(f"--store {store_dir} hooks run {client}")
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "hooks"} == {k: v for k, v in before.items() if k != "hooks"}
    for event, groups in before["hooks"].items():
        assert after["hooks"][event][:len(groups)] == groups
    for event in events:
        assert {"hooks": [{"type": "command", "command": report["command"], "timeout": timeout}]} in after["hooks"][event]
    assert json.loads(Path(report["backup"]).read_text()) == before
    if client == "codex":
        assert "trust" in done.stderr.decode()  # Codex runs a new hook only once the user trusts it
    again = run("hooks", "install", client, "--json")
    assert json.loads(again.stdout)["status"] == "unchanged" and json.loads(path.read_text()) == after
    assert len(list(path.parent.glob(f"{path.name}.*.bak"))) == 1
    other = run("hooks", "install", client, "--store", str(store_dir.parent / "other"))
    assert other.returncode == 0
    removed = run("hooks", "uninstall", client, "--json")
    assert json.loads(removed.stdout)["status"] == "removed"
    run("hooks", "uninstall", client, "--store", str(store_dir.parent / "other"))
    assert json.loads(path.read_text()) == before
    assert json.loads(run("hooks", "uninstall", client, "--json").stdout)["status"] == "unchanged"


@pytest.mark.parametrize("client, project_file", [("codex", ".codex/hooks.json"),
                                                  ("gemini-cli", ".gemini/settings.json")])
def test_project_settings_are_the_working_directorys(run, store_dir, tmp_path, monkeypatch, client, project_file):
    monkeypatch.chdir(tmp_path)
    done = run("hooks", "install", client, "--project")
    assert done.returncode == 0, done.stderr
    assert set(json.loads((tmp_path / project_file).read_text())["hooks"]) == set(SETTINGS[client][2])


@pytest.mark.parametrize("client", ["codex", "gemini-cli"])
@pytest.mark.parametrize("text, line", [('{"hooks": {"Stop": [}', 1), ('{\n  "hooks": []\n}', None),
                                        ('{"hooks": {"AfterAgent": {"command": "x"}, "Stop": {"command": "x"}}}', None),
                                        ('// comments\n{"hooks": {}}', 1)])
def test_install_refuses_a_broken_settings_file_in_one_line(run, tmp_path, client, text, line):
    path = tmp_path / "settings.json"
    path.write_text(text)
    done = run("hooks", "install", client, "--settings", str(path))
    assert done.returncode == 2 and done.stderr.decode().count("\n") == 1, done.stderr
    assert str(path) + (f":{line}" if line else "") in done.stderr.decode()
    assert path.read_text() == text and list(tmp_path.glob("*.bak")) == []
