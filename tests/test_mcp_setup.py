"""`memctl mcp install` on a temporary HOME, and the tool list in every doc made from the table."""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import REPO

OTHER_SERVER = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                "env": {"DEBUG": "1"}}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "APPDATA", "CODEX_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def where(home: Path, client: str) -> Path:
    return {"claude-code": home / ".claude.json", "cursor": home / ".cursor" / "mcp.json",
            "codex": home / ".codex" / "config.toml",
            "claude-desktop": (home / "Library" / "Application Support" if sys.platform == "darwin"
                               else home / ".config") / "Claude" / "claude_desktop_config.json"}[client]


def started_with(entry: dict) -> list[str]:
    """The command line the client will run."""
    return [entry["command"], *entry["args"]]


@pytest.mark.parametrize("client", ["claude-code", "claude-desktop", "cursor"])
def test_a_json_client_gains_the_server_and_keeps_everything_else(run, store_dir, home, client):
    path = where(home, client)
    path.parent.mkdir(parents=True, exist_ok=True)
    before = {"theme": "dark", "projects": {"/src/app": {"allowedTools": ["Bash"]}},
              "mcpServers": {"files": OTHER_SERVER}}
    path.write_text(json.dumps(before))
    path.chmod(0o600)
    plan = run("mcp", "install", "--client", client, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(path.read_text()) == before and b"nothing written" in plan.stderr
    done = run("mcp", "install", "--client", client)
    assert done.returncode == 0, done.stderr
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "mcpServers"} == {k: v for k, v in before.items()
                                                                     if k != "mcpServers"}
    assert after["mcpServers"]["files"] == OTHER_SERVER
    entry = after["mcpServers"]["memctl"]
    command = started_with(entry)
    assert os.path.isabs(command[0]) and command[-3:] == ["--store", str(store_dir), "mcp"]
    assert json.loads(done.stdout) == {"mcpServers": {"memctl": entry}}  # what was written, printed
    backups = list(path.parent.glob(f"{path.name}.*.bak"))
    assert len(backups) == 1 and json.loads(backups[0].read_text()) == before
    assert (path.stat().st_mode & 0o777) == 0o600
    again = run("mcp", "install", "--client", client)
    assert again.returncode == 0 and b"already set up" in again.stderr
    assert len(list(path.parent.glob(f"{path.name}.*.bak"))) == 1  # nothing written, nothing backed up


def test_a_client_without_a_config_gets_one(run, store_dir, home):
    done = run("mcp", "install", "--client", "cursor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "added" and report["backup"] is None
    assert json.loads(where(home, "cursor").read_text()) == {
        "mcpServers": {"memctl": {"command": report["command"], "args": report["args"]}}}


def test_codex_gains_a_table_and_its_toml_reads_as_before(run, store_dir, home, tmp_path):
    path = where(home, "codex")
    path.parent.mkdir()
    before_text = ('model = "gpt-5-codex"  # the default\napproval_policy = "on-request"\n\n'
                   '[mcp_servers.files]\ncommand = "npx"\nargs = ["-y", "@modelcontextprotocol/server-filesystem"]\n'
                   '\n[mcp_servers.files.env]\nDEBUG = "1"\n\n[profiles.fast]\nmodel = "gpt-5-mini"\n')
    path.write_text(before_text)
    before = tomllib.loads(before_text)
    done = run("mcp", "install", "--client", "codex")
    assert done.returncode == 0, done.stderr
    after = tomllib.loads(path.read_text())
    assert path.read_text().startswith(before_text)  # appended: the user's comments and layout stay
    assert after["mcp_servers"]["files"] == before["mcp_servers"]["files"]
    assert after["profiles"] == before["profiles"] and after["model"] == "gpt-5-codex"
    assert after["mcp_servers"]["memctl"]["args"][-3:] == ["--store", str(store_dir), "mcp"]
    assert tomllib.loads(done.stdout.decode()) == {"mcp_servers": {"memctl": after["mcp_servers"]["memctl"]}}

    other = tmp_path / "other-store"
    refused = run("mcp", "install", "--client", "codex", store=other)
    assert refused.returncode == 2 and b"--force" in refused.stderr
    assert tomllib.loads(path.read_text()) == after
    replaced = run("mcp", "install", "--client", "codex", "--force", store=other)
    assert replaced.returncode == 0, replaced.stderr
    final = tomllib.loads(path.read_text())
    assert final["mcp_servers"]["memctl"]["args"][-3:] == ["--store", str(other), "mcp"]
    assert {k: v for k, v in final.items() if k != "mcp_servers"} == \
        {k: v for k, v in before.items() if k != "mcp_servers"}
    assert final["mcp_servers"]["files"] == before["mcp_servers"]["files"]
    assert path.read_text().count("[mcp_servers.memctl]") == 1


def test_an_unreadable_config_is_left_alone(run, store_dir, home):
    path = where(home, "claude-code")
    path.write_text('{"mcpServers": {"files": ')
    refused = run("mcp", "install", "--client", "claude-code")
    assert refused.returncode == 2
    assert refused.stderr.decode().strip().startswith(f"memctl: error: {path}:1")
    assert path.read_text() == '{"mcpServers": {"files": '
    assert run("mcp", "install", "--client", "cursor", "--name", "../x").returncode == 2


@pytest.mark.process
def test_the_written_server_really_starts_for_the_store(run, store_dir, home):
    """The entry's command, run as the client runs it, answers an MCP initialize for this store."""
    import subprocess

    assert run("ingest", "-", input='{"role": "user", "text": "the demo is on December 12th"}\n').returncode == 0
    assert run("mcp", "install", "--client", "cursor").returncode == 0
    entry = json.loads(where(home, "cursor").read_text())["mcpServers"]["memctl"]
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout, whichever install the entry names
    answer = subprocess.run([entry["command"], *entry["args"]], input=json.dumps(hello).encode() + b"\n",
                            capture_output=True, env=env, timeout=120, cwd="/")
    assert b'"serverInfo"' in answer.stdout, answer.stderr


# -- the tool list in every doc -------------------------------------------------------------------
def test_every_doc_names_every_tool_of_the_table(run):
    from memctl.mcp.tools import TOOLS

    helped = run("mcp", "--help").stdout.decode()
    readme = (REPO / "README.md").read_text()
    table = re.search(r"\| tool \((\d+)\) \| what it does \|\n\| --- \| --- \|\n((?:\|.*\n)+)", readme)
    assert table and int(table[1]) == len(TOOLS)
    assert re.findall(r"^\| `(\w+)` \|", table[2], re.M) == list(TOOLS)
    assert f"Tools ({len(TOOLS)}):" in " ".join(helped.split())
    docs = (REPO / "docs" / "cli.md").read_text()
    api = (REPO / "docs" / "api.md").read_text()
    assert f"({len(TOOLS)} tools)" in api
    man = (REPO / "man" / "memctl-mcp.1").read_text().replace("\\_", "_").replace("\\-", "-")
    for name in TOOLS:
        assert re.search(rf"\b{name}\b", helped), name
        assert re.search(rf"\b{name}\b", docs), name
        assert f"`{name}`" in api, name
        assert re.search(rf"\b{name}\b", man), name
