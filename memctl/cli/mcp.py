"""`memctl mcp`: serve the store to agents over the Model Context Protocol."""

from __future__ import annotations

import os
import sys

import click

from memctl.cli.output import EXIT_ERROR, say


@click.command("mcp")
@click.pass_obj
def mcp(memory):
    """Serve the store as an MCP server over stdio, for agents.

    Speaks the Model Context Protocol (JSON-RPC) on stdin and stdout until
    stdin closes; notes go to stderr. One store stays open, so the index and
    the embedding model load once and later searches take milliseconds.
    Tools: search, layered_search, history, ingest, index, review_pending,
    confirm, reject, state_plan, state_record, health, and the shared tool
    cache's cache_get, cache_put, cache_search, cache_stats; each carries its
    JSON schema and what it returns. Bad arguments get a tool error, and the
    server goes on.

    Needs the MCP SDK: pip install 'memctl[mcp]'.

    \b
    Examples:
      MEMCTL_STORE=~/agent/.memory memctl mcp
      claude mcp add memory -- memctl --store ~/agent/.memory mcp
    """
    try:
        # The SDK takes about 2 s to import: only this command pays for it.
        from memctl.mcp.server import serve
    except ModuleNotFoundError as exc:
        say(f"memctl: error: memctl mcp needs the MCP SDK ({exc.name} is missing): pip install 'memctl[mcp]'")
        raise SystemExit(EXIT_ERROR) from None
    if not serve(memory):
        # The client left during a call that runs on, and a thread cannot be stopped: only the
        # process can. What the call was writing is rolled back by the store's journal, as after a kill.
        sys.stderr.flush()
        os._exit(0)
