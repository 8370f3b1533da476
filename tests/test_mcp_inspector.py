"""`memctl mcp` under a real MCP client: the MCP Inspector's command line (npm, pinned in
scripts/bootstrap.sh), which runs without a model. Real processes, the bundled model.

Skipped when the Inspector is not installed (.tools/, or `mcp-inspector` on PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

NOTES = "## Decisions\n- Kestrel uses PostgreSQL 16 for its main database\n"
INSPECTOR = next((str(p) for p in (REPO / ".tools" / "node_modules" / ".bin" / "mcp-inspector",)
                  if p.is_file()), None) or shutil.which("mcp-inspector")
pytestmark = [pytest.mark.process,
              pytest.mark.skipif(INSPECTOR is None, reason="no MCP Inspector (scripts/bootstrap.sh installs it with npm)")]


@pytest.fixture
def environment(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    # The Inspector keeps a catalog of servers in the user's home unless told where.
    return {**env, "MEMCTL_SERVER": "off", "MCP_CATALOG_PATH": str(tmp_path / "catalog.json")}


def inspector(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([INSPECTOR, "--cli", *args], capture_output=True, env=env, timeout=300)


def server(store: Path) -> list[str]:
    return [sys.executable, "-P", "-m", "memctl", "--store", str(store), "mcp"]


@pytest.fixture
def store(run, store_dir) -> Path:
    assert run("ingest", "--kind", "memory", "-", input=NOTES).returncode == 0
    return store_dir


def test_the_inspector_lists_every_tool_of_the_table(store, environment):
    from memctl.mcp.tools import TOOLS

    done = inspector(environment, "--method", "tools/list", "--", *server(store))
    assert done.returncode == 0, done.stderr
    tools = json.loads(done.stdout)["tools"]
    assert [t["name"] for t in tools] == list(TOOLS)
    assert all(t["inputSchema"]["type"] == "object" and t["description"] for t in tools)


def test_the_inspector_searches_and_a_bad_call_is_a_tool_error(store, environment):
    done = inspector(environment, "--method", "tools/call", "--tool-name", "search", "--tool-arg",
                     "query=which database does Kestrel use", "k=2", "--", *server(store))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert not answer.get("isError")
    results = json.loads(answer["content"][0]["text"])["results"]
    assert "PostgreSQL 16" in results[0]["text"]
    bad = inspector(environment, "--method", "tools/call", "--tool-name", "search", "--tool-arg", "k=-3", "--",
                    *server(store))
    answer = json.loads(bad.stdout) if bad.stdout.strip() else {}
    assert answer.get("isError") is True or bad.returncode != 0


def test_the_entry_mcp_install_writes_starts_in_the_inspector(run, store, environment, tmp_path, monkeypatch):
    """The client config `memctl mcp install` writes ("mcpServers", as Cursor keeps it) is read by a
    real client, which starts the server from it and calls a tool."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert run("mcp", "install", "--client", "cursor").returncode == 0
    config = home / ".cursor" / "mcp.json"
    environment = {k: v for k, v in environment.items() if k != "MCP_CATALOG_PATH"}  # --config is read-only: no catalog
    done = inspector(environment, "--config", str(config), "--server", "memctl", "--method", "tools/call",
                     "--tool-name", "context", "--tool-arg", "session=s1", "message=which database?")
    answer = json.loads(done.stdout)
    # No session s1 in this store: the server answers with a tool error naming it, and goes on.
    assert answer.get("isError") is True and "s1" in answer["content"][0]["text"]
    listed = inspector(environment, "--config", str(config), "--server", "memctl", "--method", "tools/list")
    assert listed.returncode == 0 and "search" in [t["name"] for t in json.loads(listed.stdout)["tools"]]
