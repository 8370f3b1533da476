"""`memctl mcp`: serve the store to agents over the Model Context Protocol, and set clients up for it."""

from __future__ import annotations

import os
import sys

import click

from memctl.cli.output import EXIT_ERROR, alert, json_lines, say, store_reached
from memctl.mcp.clients import CLIENTS


@click.group("mcp", invoke_without_command=True)
@click.pass_context
def mcp(ctx):
    """Serve the store as an MCP server over stdio, for agents.

    Speaks the Model Context Protocol (JSON-RPC) on stdin and stdout until
    stdin closes; notes go to stderr. One store stays open, so the index and
    the embedding model load once and later searches take milliseconds.
    Tools ({count}): {tools}; each carries its JSON schema, when to call it
    and what it returns. Bad arguments get a tool error, and the server goes
    on.

    Needs the MCP SDK: pip install 'memctl[mcp]'. `memctl mcp install`
    writes a client's config to start it.

    \b
    Examples:
      MEMCTL_STORE=~/agent/.memory memctl mcp
      memctl --store ~/agent/.memory mcp install --client claude-desktop
    """
    if ctx.invoked_subcommand is not None:
        return
    memory = ctx.obj
    try:
        # The SDK takes about 2 s to import: only serving pays for it (the tool table does not import it).
        from memctl.mcp.server import serve
    except ModuleNotFoundError as exc:
        alert(f"memctl: error: memctl mcp needs the MCP SDK ({exc.name} is missing): pip install 'memctl[mcp]'")
        raise SystemExit(EXIT_ERROR) from None
    if not serve(memory):
        # The client left during a call that runs on, and a thread cannot be stopped: only the
        # process can. What the call was writing is rolled back by the store's journal, as after a kill.
        sys.stderr.flush()
        os._exit(0)


@mcp.command("install")
@click.option("--client", required=True, type=click.Choice(CLIENTS),
              help="The agent client whose config gains the server.")
@click.option("--name", default="memctl", show_default=True, help="The server's name in the client.")
@click.option("--force", is_flag=True, help="Replace a server of that name that is set up otherwise.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help='Print {"client", "path", "name", "command", "args", '
              '"status": "added"|"replaced"|"unchanged", "backup"}.')
@click.pass_obj
def mcp_install(memory, client, name, force, dry_run, as_json):
    """Set an agent client up to use this store's MCP server.

    Adds a server to the client's own config: the memctl of this install,
    by absolute path, serving this store (--store, else $MEMCTL_STORE, else
    ./.memory, made absolute). The client's other servers and settings are
    kept; the old file is kept beside it (FILE.<time>.bak); the server entry
    is printed. Restart the client to load it.

    \b
    Where each client keeps its servers:
      claude-code     ~/.claude.json ("mcpServers": every project of the user)
      claude-desktop  claude_desktop_config.json in ~/Library/Application
                      Support/Claude (macOS), %APPDATA%\\Claude (Windows),
                      ~/.config/Claude (Linux)
      cursor          ~/.cursor/mcp.json
      codex           ~/.codex/config.toml ($CODEX_HOME), [mcp_servers.NAME]

    \b
    Examples:
      memctl --store ~/agent/.memory mcp install --client claude-desktop --dry-run
      memctl --store ~/agent/.memory mcp install --client codex
      memctl --store ~/work/.memory mcp install --client cursor --name work-memory

    Exit status: 0 written (or already so), 2 an unreadable config, or a
    server of that name set up otherwise (without --force).
    """
    from memctl.mcp.clients import install

    setup = install(client, memory.store.name_to_keep, name=name, force=force, dry_run=dry_run)
    if as_json:
        json_lines([setup.as_dict()])
    else:
        click.echo(setup.snippet, nl=False)
    if setup.status == "unchanged":
        say(f"memctl: {setup.path}: server '{name}' is already set up so; nothing written")
    elif dry_run:
        say(f"memctl: dry run: server '{name}' would be {setup.status} in {setup.path}; nothing written")
    else:
        kept = f" (the old file is {setup.backup})" if setup.backup else ""
        say(f"memctl: {setup.status} server '{name}' in {setup.path}{kept}; restart {client} to load it")
    if not store_reached(memory):
        say(f"memctl: note: no store at {memory.store.name_to_keep} yet; the server makes it on the "
            "first write")


def _name_the_tools(command: click.Command) -> None:
    """The help names every tool of the table, so it cannot fall behind the server (it named 15 of 20)."""
    from memctl.mcp.tools import TOOLS

    command.help = command.help.replace("{count}", str(len(TOOLS))).replace("{tools}", ", ".join(TOOLS))


_name_the_tools(mcp)
