"""`memctl server`: the store's resident server (memctl/server/): status, start, stop, run."""

from __future__ import annotations

import os
import sys
import time

import click

from memctl.cli.output import EXIT_ERROR, EXIT_NOTHING, EXIT_OK, json_lines, say


@click.group("server")
def server():
    """The resident memctl that keeps a store's model and index open.

    The first call that opens a store's index (search, index, context,
    ...) starts a server for that store in the background; later `memctl`
    calls on the store find it through a Unix socket in $XDG_RUNTIME_DIR/memctl
    (else /tmp/memctl-UID), named by a hash of the store's real path, and
    run there: same output, same exit status, milliseconds instead of the
    model's load. Every command is sent but `mcp`, `server` and --help.
    A server waits for calls as long as its store has been used, from
    [server] first_idle_minutes (2: a one-off call's) to idle_minutes (30),
    and at most [server] max_running (4) run from one runtime directory.
    The store records its server, so calls with another runtime directory
    (cron, a login shell) find it. A server is replaced when it stops
    answering or another memctl version calls it; a call never fails
    because of it (it runs in-process instead).
    MEMCTL_SERVER=off, or [server] enabled = false, runs every call in its
    own process and starts no server.

    \b
    Examples:
      memctl server status
      memctl --store ~/agent/.memory server stop
    """


def _root(memory) -> str:
    """The store as its server knows it (client.identity); messages name it as memory.store.shown."""
    from memctl.server.client import identity

    return identity(str(memory.path))


@server.command("status")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"pid", "store", "version", "python", '
              '"started", "calls", "running", "idle_seconds", "idle_limit_minutes", "rss_mb", "leaving"}.')
@click.pass_obj
def status(memory, as_json):
    """Whether a server runs for the store, and what it holds.

    Exit status: 0 one runs, 1 none.
    """
    from memctl.server.client import ask

    found = ask(_root(memory), "status")
    if found is None:
        say(f"memctl: no server runs for {memory.store.shown}")
        sys.exit(EXIT_NOTHING)
    if as_json:
        json_lines([found])
    else:
        click.echo(f"pid {found['pid']}  store {found['store']}  memctl {found['version']}\n"
                   f"started {found['started']}  calls {found['calls']}  idle {found['idle_seconds']:.0f} s "
                   f"of {found['idle_limit_minutes']:g} min  memory {found['rss_mb']:.0f} MB")
    sys.exit(EXIT_OK)


@server.command("stop")
@click.pass_obj
def stop(memory):
    """Stop the store's server (a call it is running finishes first).

    Exit status: 0 stopped, 1 none ran.
    """
    from memctl.server.client import ask, recorded, starting

    found = ask(_root(memory), "stop")
    # One still opening its model (started by the call just before, say) listens within seconds:
    # it is waited for, else a script's last `server stop` would leave it running.
    for _ in range(600):
        if found is not None or not starting(_root(memory)):
            break
        time.sleep(0.1)
        found = ask(_root(memory), "stop")
    if found is None:
        say(f"memctl: no server runs for {memory.store.shown}")
        sys.exit(EXIT_NOTHING)
    for _ in range(300):  # it lets go of the store's record as it leaves (after a call it is running)
        if not recorded(_root(memory)) and not starting(_root(memory)):
            break
        time.sleep(0.1)
    say(f"memctl: stopped the server of {found['store']} (pid {found['pid']})")
    sys.exit(EXIT_OK)


@server.command("start")
@click.pass_obj
def start(memory):
    """Start the store's server in the background, unless one runs.

    Exit status: 0 one runs, 2 it could not start (its log names why).
    """
    from memctl.server.client import ask, place, start as start_server, starting

    memory.store.require()
    if not memory.runtime.settings.server.enabled or os.environ.get("MEMCTL_SERVER", "").lower() in (
            "off", "0", "no", "false"):
        say("memctl: error: the server is turned off ([server] enabled = false or MEMCTL_SERVER=off)")
        sys.exit(EXIT_ERROR)
    started = start_server(_root(memory), memory.runtime.settings.server.max_running)
    for _ in range(600):  # it listens once the model is open: seconds, more on a busy machine
        if ask(_root(memory), "status") is not None:
            sys.exit(EXIT_OK)
        if started is not None and os.waitpid(started, os.WNOHANG)[0] or started is None and not starting(
                _root(memory)):
            break  # it left (its log says why), or none started and none starts ([server] max_running run)
        time.sleep(0.1)
    say(f"memctl: error: the server did not start; see {place(_root(memory))}.log")
    sys.exit(EXIT_ERROR)


@server.command("run")
@click.pass_obj
def run(memory):
    """Serve the store in the foreground until idle or stopped (what `start` runs in the background).

    Exit status: 0 served and left, 2 could not serve (another server serves the store, say).
    """
    from memctl.api import Memory
    from memctl.server.serve import Server

    memory.store.require()
    settings = memory.runtime.settings.server
    ctx = click.get_current_context()
    serving = Server(_root(memory), ctx.find_root().command, idle_minutes=settings.idle_minutes,
                     first_idle_minutes=settings.first_idle_minutes, most=settings.max_running, make_memory=Memory)
    why = serving.run()
    if not serving.served and why and not serving.leaving:
        say(f"memctl: error: {why}")
        sys.exit(EXIT_ERROR)
