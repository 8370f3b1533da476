"""Setting up agent clients: each client's MCP config gains a server entry for one store.

Where each client keeps its servers (from the clients' documentation, 2026-11):

    claude-code     ~/.claude.json, top-level "mcpServers" (Claude Code's user scope, every project)
    claude-desktop  claude_desktop_config.json, "mcpServers": in ~/Library/Application Support/Claude
                    (macOS), %APPDATA%\\Claude (Windows), $XDG_CONFIG_HOME/Claude (Linux builds)
    cursor          ~/.cursor/mcp.json, "mcpServers" (Cursor's global file)
    codex           $CODEX_HOME/config.toml (~/.codex), a [mcp_servers.<name>] table

A config is the user's file and holds their other servers and settings: it is read,
the one entry is added, and the result is checked to hold everything the old file
held before it replaces it (atomically, the old one kept beside it as a backup).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memctl import configfiles
from memctl.errors import InputError
from memctl.text.shape import Shape, derived, hidden, shown

CLIENTS = ("claude-code", "claude-desktop", "cursor", "codex")
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a bare TOML key, and a name every client shows


@dataclass
class Setup(Shape):
    """What `install` did (or, dry, would do) to one client's config."""

    client: str = shown()
    path: Path = shown("The client's config file.")
    name: str = shown("The server's name there.")
    entry: dict[str, Any] = hidden()  # {"command", "args"}
    snippet: str = hidden()  # the entry as it stands in the file
    status: Literal["added", "replaced", "unchanged"] = shown()
    backup: Path | None = shown("The copy of the file before the change, or null.", default=None)

    key_order = ("client", "path", "name", "command", "args", "status", "backup")

    @derived("The command the client runs.")
    def command(self) -> str:
        return self.entry["command"]

    @derived("Its arguments.")
    def args(self) -> list[str]:
        return self.entry["args"]


def config_path(client: str, home: Path | None = None) -> Path:
    """Where `client` keeps its MCP servers, for the user whose home is `home` (else $HOME)."""
    home = home or Path.home()
    if client == "claude-code":
        return home / ".claude.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "codex":
        return Path(os.environ.get("CODEX_HOME") or home / ".codex") / "config.toml"
    if client == "claude-desktop":
        if sys.platform == "darwin":
            base = home / "Library" / "Application Support"
        elif sys.platform == "win32":
            base = Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
        else:
            base = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        return base / "Claude" / "claude_desktop_config.json"
    raise InputError(f"unknown client '{client}'; one of {', '.join(CLIENTS)}", source="--client")


def server_entry(store: str) -> dict[str, Any]:
    """How a client starts memctl's MCP server for `store` (configfiles.memctl_argv)."""
    argv = configfiles.memctl_argv(store, "mcp")
    return {"command": argv[0], "args": argv[1:]}


def install(client: str, store: str, *, name: str = "memctl", force: bool = False, dry_run: bool = False,
            home: Path | None = None) -> Setup:
    """Add (or with `force`, replace) server `name` for `store` in `client`'s config."""
    if not SERVER_NAME.fullmatch(name):
        raise InputError(f"must be 1-64 letters, digits, - or _, got {name!r:.80}", source="--name")
    path = config_path(client, home)
    entry = server_entry(store)
    old = configfiles.read_text(path)
    if client == "codex":
        new, status = _merged_toml(old, str(path), name, entry, force)
        snippet = _toml_table(name, entry)
    else:
        new, status = _merged_json(old, str(path), name, entry, force)
        snippet = configfiles.json_text({"mcpServers": {name: entry}})
    setup = Setup(client, path, name, entry, snippet, status)
    if dry_run or status == "unchanged":
        return setup
    setup.backup = configfiles.replace(path, new)
    return setup


def _decided(existing: Any, entry: dict[str, Any], name: str, source: str, force: bool) -> str:
    """added, unchanged or replaced; an entry of another shape is replaced only with `force`."""
    if existing is None:
        return "added"
    if isinstance(existing, dict) and {k: existing.get(k) for k in entry} == entry:
        return "unchanged"
    if not force:
        shown = json.dumps(existing, ensure_ascii=False)
        raise InputError(f"a server named '{name}' is already set up otherwise ({shown:.200}); --force replaces "
                         "it, --name adds another", source=source)
    return "replaced"


def _merged_json(old: str, source: str, name: str, entry: dict[str, Any], force: bool) -> tuple[str, str]:
    """A JSON config (Claude Code, Claude Desktop, Cursor) with the entry under "mcpServers"."""
    document = configfiles.json_object(old, source, container="mcpServers")
    servers = document.setdefault("mcpServers", {})
    status = _decided(servers.get(name), entry, name, source, force)
    # Keys a client keeps beside command and args (env, "type", "disabled") stay as they were.
    servers[name] = {**(servers.get(name) or {}), **entry} if status == "replaced" else \
        servers.get(name) or dict(entry)
    return configfiles.json_text(document), status


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def _toml_table(name: str, entry: dict[str, Any]) -> str:
    args = ", ".join(_toml_string(a) for a in entry["args"])
    return f"[mcp_servers.{name}]\ncommand = {_toml_string(entry['command'])}\nargs = [{args}]\n"


def _merged_toml(old: str, source: str, name: str, entry: dict[str, Any], force: bool) -> tuple[str, str]:
    """Codex's config.toml with the [mcp_servers.<name>] table. No TOML writer is needed: the
    table is appended, or its lines replaced, and the result is parsed again to prove that
    everything else in the file reads as it did."""
    import tomllib

    try:
        before = tomllib.loads(old)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc}); fix it first, nothing was written", source=source) from None
    servers = before.get("mcp_servers", {})
    existing = servers.get(name) if isinstance(servers, dict) else None
    status = _decided(existing, entry, name, source, force)
    table = _toml_table(name, entry)
    if status == "unchanged":
        return old, status
    if status == "added":
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old.strip() else "") + table
    else:
        header = re.compile(rf'^\[\s*mcp_servers\s*\.\s*(?:{name}|"{name}")\s*\]\s*(#.*)?$', re.M)
        found = header.search(old)
        if found is None:
            raise InputError(f"server '{name}' is not written as a [mcp_servers.{name}] table; replace it by "
                             "hand", source=source)
        following = re.compile(rf'^\[(?!\s*mcp_servers\s*\.\s*"?{name}"?\s*\.)', re.M).search(old, found.end())
        end = following.start() if following else len(old)
        new = old[:found.start()] + table + ("\n" if following else "") + old[end:]
    after = tomllib.loads(new)
    kept = {k: v for k, v in after.get("mcp_servers", {}).items() if k != name}
    was = {k: v for k, v in servers.items() if k != name} if isinstance(servers, dict) else {}
    others_after = {k: v for k, v in after.items() if k != "mcp_servers"}
    others_before = {k: v for k, v in before.items() if k != "mcp_servers"}
    ours = after["mcp_servers"][name]
    if kept != was or others_after != others_before or {k: ours.get(k) for k in entry} != entry:
        raise InputError("could not add the server without changing the rest of the file; add this by hand:\n"
                         + table, source=source)
    return new, status
