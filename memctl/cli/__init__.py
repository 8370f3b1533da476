"""The `memctl` command line: parse, call `memctl.Memory`, print.

One module a command group; this one holds the group, the one translator of
errors into a line on stderr and an exit status, and `main`. Imports of
anything heavier than click happen inside the commands, so that `memctl
--help` and `memctl ingest` start fast; memctl runs once per agent turn.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys

# Before anything imports numpy: searches multiply one query vector by the stored ones, a
# memory-bound product that OpenBLAS's extra threads only slow down, badly on a busy machine
# (6,000 x 384, 2 cores under load 13: 26 ms with 2 threads, 0.1 ms with 1). Starting no
# threads also makes importing numpy about 40 ms faster.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click  # noqa: E402

import importlib  # noqa: E402

from memctl import __version__  # noqa: E402
from memctl.cli.output import (EXIT_ERROR, EXIT_NOTHING, EXIT_OK, QUIET_KEY, STDERR_KEY, alert, quiet,  # noqa: E402
                               say)

# Command -> (module, attribute). A command's module is imported only when that command
# runs or a help lists it: importing all eleven cost every call about 8 ms
# (python -X importtime, a cache hit; bench/README.md "Cited measurements").
_COMMANDS = {
    "ingest": ("memctl.cli.ingest", "ingest"), "index": ("memctl.cli.ingest", "index"),
    "search": ("memctl.cli.search", "search"), "history": ("memctl.cli.search", "history"),
    "split": ("memctl.cli.topics", "split"),
    "topics": ("memctl.cli.topics", "topics"), "context": ("memctl.cli.context", "context"),
    "review": ("memctl.cli.review", "review"), "health": ("memctl.cli.health", "health"),
    "state": ("memctl.cli.state", "state"), "cache": ("memctl.cli.cache", "cache"),
    "mcp": ("memctl.cli.mcp", "mcp"), "forget": ("memctl.cli.forget", "forget"),
    "show": ("memctl.cli.overview", "show"), "status": ("memctl.cli.overview", "status"),
    "config": ("memctl.cli.overview", "config"), "server": ("memctl.cli.server", "server"),
    "hooks": ("memctl.cli.hooks", "hooks"), "store": ("memctl.cli.store", "store"),
}
def _set_quiet(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.meta[QUIET_KEY] = True  # meta is shared by the whole run: `memctl -q X` and `memctl X -q` alike


def quiet_option() -> click.Option:
    return click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, is_eager=True, callback=_set_quiet,
                        help="Print nothing on success (for cron): no data, no notes; an error is still "
                             "one line on stderr, and the exit status says what happened.")


# Commands whose stdout is not for a person: `mcp` speaks the protocol there.
_STDOUT_KEPT = {"mcp"}


def with_quiet(command: click.Command) -> click.Command:
    """Give `command` (and every subcommand of a group) -q/--quiet: one option for all of them,
    declared here, so no command can lack it. Under it the command's stdout and stderr go
    nowhere (whatever prints there: a note of a library, of the settings, of a model's first
    export); errors and `alert` still reach the real stderr."""
    if getattr(command, "_memctl_quiet", False):
        return command
    command._memctl_quiet = True
    command.params.append(quiet_option())
    body = command.callback
    if body is not None and command.name not in _STDOUT_KEPT:
        def run(*args, **kwargs):
            if not quiet():
                return body(*args, **kwargs)
            ctx = click.get_current_context()
            ctx.meta.setdefault(STDERR_KEY, sys.stderr)
            with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere), \
                    contextlib.redirect_stderr(nowhere):
                return body(*args, **kwargs)

        command.callback = functools.update_wrapper(run, body)
    for sub in getattr(command, "commands", {}).values():
        with_quiet(sub)
    return command


class MemctlGroup(click.Group):
    """Loads each command when it is used; turns library and usage errors into one line
    on stderr and exit status 2."""

    def list_commands(self, ctx) -> list[str]:
        return sorted({*self.commands, *_COMMANDS})

    def get_command(self, ctx, name: str):
        if name not in self.commands and name in _COMMANDS:
            module, attribute = _COMMANDS[name]
            self.add_command(with_quiet(getattr(importlib.import_module(module), attribute)), name)
        return self.commands.get(name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # bare `memctl` or a bare group: the help is the answer
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            # click's own form is four lines (Usage, Try, blank, Error); the README promises one.
            usage = getattr(exc, "ctx", None)
            hint = f" (see '{usage.command_path} --help')" if usage is not None else ""
            alert(f"memctl: error: {exc.format_message()}{hint}")
            sys.exit(EXIT_OK if _hook_call(args) else exc.exit_code)
        except click.exceptions.Abort:
            alert("memctl: aborted")
            sys.exit(EXIT_NOTHING)
        sys.exit(code if isinstance(code, int) else EXIT_OK)

    def invoke(self, ctx: click.Context):
        from memctl.errors import MemctlError

        try:
            return super().invoke(ctx)
        except MemctlError as exc:
            memory = ctx.obj if hasattr(ctx.obj, "store") else None  # a file of a PostgreSQL store named by its URL
            alert(f"memctl: error: {memory.store.named(str(exc)) if memory else exc}")
            ctx.exit(exc.exit_code)
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                # The reader went away (memctl search | head): not an error of ours.
                sys.stderr.close()
                ctx.exit(EXIT_OK)
            where = f"{exc.filename}: " if exc.filename else ""
            alert(f"memctl: error: {where}{exc.strerror or exc}")
            ctx.exit(EXIT_ERROR)


def _hook_call(args) -> bool:
    """Whether the call is `memctl [--store DIR] [-q] hooks run ...`: an agent client's hook, which exits 0
    whatever fails, a bad --store too (exit 2 would block the agent's prompt; memctl/cli/hooks.py)."""
    args = list(sys.argv[1:] if args is None else args)
    while args and args[0] in ("--store", "-q", "--quiet") or args and args[0].startswith("--store="):
        del args[:2 if args[0] == "--store" else 1]
    return args[:2] == ["hooks", "run"]


@click.group(cls=MemctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="memctl")
@click.option("--store", "store_path", metavar="DIR|URL", type=click.Path(file_okay=False),
              help="The memory store: a folder, or a postgresql:// URL (README: \"A store on "
                   "PostgreSQL\"). [default: $MEMCTL_STORE, else ./.memory; a store made there unasked is named "
                   "on stderr]")
@click.pass_context
def cli(ctx: click.Context, store_path: str | None) -> None:
    """Long-term memory for LLM agents, kept in plain files.

    A store is a directory of files a person can read and edit: MEMORY.md
    (long-term memory, sections are its headings), memory/YYYY-MM-DD.md
    (daily logs), sessions/*.jsonl (messages), pending.jsonl, memctl.toml.
    Everything under .index/ is derived and can be deleted.

    \b
    Examples:
      memctl ingest chat.jsonl                  store a chat's messages
      memctl ingest --kind memory notes.md      add notes to MEMORY.md
      echo "I moved to Taipei" | memctl ingest -
      memctl --store ~/agent/.memory search "where does Bob live"

    Exit status: 0 found or done, 1 nothing found, 2 usage or input error.
    """
    from memctl.api import Memory

    # A caller may pass the maker of the command's Memory as obj: main() keeps it, a resident
    # server gives it the open index of its last call (memctl/server/serve.py).
    ctx.obj = (ctx.obj or Memory)(store_path, say=say)
    if store_path is None and not os.environ.get("MEMCTL_STORE") and not ctx.obj.store.exists():
        ctx.call_on_close(lambda: _name_unasked_store(ctx.obj.store.root))


def _name_unasked_store(root) -> None:
    """A store nobody named, made in the current directory (a cron job's is $HOME): said even
    under --quiet, once, as the one sign that memctl wrote somewhere no one chose."""
    if root.is_dir():
        alert(f"memctl: warning: made a new store at {os.path.abspath(root)}, as no --store or "
              "MEMCTL_STORE named one")


with_quiet(cli)


def main() -> None:
    # A cold hybrid search allocates ~36,000 objects (imports, then a few hundred candidates),
    # nearly all freed by reference counting; at the default threshold of 700 the cycle
    # collector ran 55 times for 6.5 ms of a ~190 ms process. Cycles are still collected, only
    # after 100,000 new objects instead of 700. Set here, for a memctl process, not for every
    # program that imports this module.
    gc.set_threshold(100_000)
    made = []

    def memory(path, *, say):
        from memctl.api import Memory

        made.append(Memory(path, say=say))
        return made[-1]

    try:
        cli(prog_name="memctl", obj=memory)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit as done:
        _start_server(made)
        for memory in made:
            memory.close()  # _exit_at_once skips atexit: a PostgreSQL store's working folder goes now
        if done.code is None or isinstance(done.code, int):
            _exit_at_once(done.code or 0)
        raise


def _start_server(made: list) -> None:
    """After a call that opened the index (and so, for a hybrid search, the model), start the
    store's resident server for the calls to come (README "The resident server"), unless
    MEMCTL_SERVER=off or [server] enabled = false. Nothing here may fail the call."""
    if not made or "memctl.index.index" not in sys.modules or {"memctl.server.serve", "memctl.mcp.server"} & set(
            sys.modules):
        return  # a server (resident, leaving; or MCP, which keeps its store open itself) starts none
    from memctl.errors import MemctlError
    from memctl.server.client import start

    memory = made[0]
    try:
        if memory.store.exists() and memory.runtime.settings.server.enabled:
            start(str(memory.path), memory.runtime.settings.server.max_running)
    except (MemctlError, OSError):
        pass


def _exit_at_once(code: int) -> None:
    """End the process without tearing the interpreter down: after a hybrid search, freeing
    every module and object (the ONNX session, numpy) cost 25-30 ms of a ~230 ms process
    (cold `memctl search`, 6,000 messages, os._exit against a normal exit; bench/README.md "Cited
    measurements").
    Everything memctl writes is committed and closed before a command returns; the output
    is flushed and the atexit handlers run here. Anything unusual (another thread still
    running, an output that cannot be flushed) takes the normal way out."""
    import atexit
    import threading

    if threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        return
    atexit._run_exitfuncs()
    os._exit(code)
