"""`memctl hooks`: memory given to every prompt and the conversation kept, by an agent client's own hooks."""

from __future__ import annotations

import sys

import click

from memctl.cli.output import EXIT_OK, alert, json_lines, say, store_reached


@click.group("hooks")
@click.pass_context
def hooks(ctx):
    """Memory without asking: an agent client's hooks call memctl.

    The client runs `memctl hooks run CLIENT` at points of its loop: each
    prompt is given what memory holds for it (core rules, memories, earlier
    messages found), and after each turn, before a compaction and at the end
    of a session the transcript's new messages are stored, so neither depends
    on the model remembering to call a tool. `memctl hooks install CLIENT`
    adds the hooks to the client's settings.

    Clients: claude-code, codex, gemini-cli (README "Hooks" says why not
    Cursor or OpenClaw).

    \b
    Examples:
      memctl hooks install claude-code --store ~/agent/.memory
      memctl hooks install codex --store ~/agent/.memory
      memctl hooks uninstall gemini-cli --store ~/agent/.memory
    """


@hooks.command("run")
@click.argument("client")
@click.pass_obj
def hooks_run(memory, client):
    """Handle one hook event of CLIENT, read as JSON on stdin.

    \b
    claude-code events:
      UserPromptSubmit  prints {"hookSpecificOutput": {"hookEventName":
                        "UserPromptSubmit", "additionalContext": TEXT}}: what
                        memory has for the prompt, within [hooks]
                        context_budget tokens (2000) and Claude Code's 10,000
                        characters; nothing when memory has nothing
      Stop, PreCompact, SessionEnd
                        store the transcript's new user and assistant text in
                        the session named by session_id (each line once, by
                        its uuid; tool calls and results are not stored)
    codex events:
      UserPromptSubmit  as claude-code's, within Codex's 10,000 bytes
      Stop, PreCompact, SessionEnd
                        store the rollout file's new user and assistant
                        messages (each line once, by its hash)
    gemini-cli events:
      BeforeAgent       prints {"hookSpecificOutput": {"hookEventName":
                        "BeforeAgent", "additionalContext": TEXT}}
      AfterAgent        stores the turn's prompt and answer the event carries
                        (each once); prints {}

    It never stops the agent: on any failure (no store, a broken one, a lock
    held past [hooks] timeout_seconds) it prints nothing on stdout, one line
    on stderr, and exits 0; exit 2 would block the prompt.

    \b
    Example (what Claude Code does on each prompt):
      echo '{"hook_event_name": "UserPromptSubmit", "session_id": "s1",
             "transcript_path": "/tmp/s1.jsonl", "cwd": "/tmp",
             "prompt": "which database does Kestrel use?"}' |
        memctl --store ~/agent/.memory hooks run claude-code

    Exit status: 0, always.
    """
    try:
        answer = memory.hooks.run(client, sys.stdin.buffer.read())
    except Exception as exc:  # noqa: BLE001 -- whatever it is, the agent must go on: one line, exit 0
        from memctl.errors import MemctlError

        what = str(exc) if isinstance(exc, (MemctlError, OSError)) else f"{type(exc).__name__}: {exc}"
        alert(f"memctl: hook not run: {what}")
        sys.exit(EXIT_OK)
    sys.stdout.write(answer.stdout)
    sys.stdout.flush()
    if answer.note:
        say(answer.note)
    sys.exit(EXIT_OK)


def _settings_options(command):
    command = click.option("-n", "--dry-run", is_flag=True, help="Print what would change; write nothing.")(command)
    command = click.option("--json", "as_json", is_flag=True, help='Print {"client", "path", "command", "status": '
                           '"added"|"removed"|"unchanged", "events", "backup"}.')(command)
    command = click.option("--project", is_flag=True, help="The project's settings in the working directory "
                           "(.claude/settings.json, .codex/hooks.json, .gemini/settings.json), shared with the "
                           "project's other users.")(command)
    command = click.option("--settings", "settings_file", metavar="FILE",
                           help="This settings file. [default: the user's: ~/.claude/settings.json "
                                "($CLAUDE_CONFIG_DIR), ~/.codex/hooks.json ($CODEX_HOME), ~/.gemini/settings.json "
                                "($GEMINI_CLI_HOME)]")(command)
    command = click.option("--store", "store_dir", metavar="DIR", type=click.Path(file_okay=False),
                           help="The store the hooks use. [default: memctl's --store, else $MEMCTL_STORE, "
                                "else ./.memory; made absolute]")(command)
    from memctl.api.params import HOOK_CLIENTS

    return click.argument("client", type=click.Choice(HOOK_CLIENTS))(command)


@hooks.command("install")
@_settings_options
@click.pass_obj
def hooks_install(memory, client, store_dir, settings_file, project, as_json, dry_run):
    """Add memctl's hooks to CLIENT's settings.

    One entry for each event CLIENT's `hooks run` handles (claude-code and
    codex: UserPromptSubmit, Stop, PreCompact, SessionEnd; gemini-cli:
    BeforeAgent, AfterAgent), running `memctl --store DIR hooks run CLIENT`
    by absolute paths. Every
    other key and hook of the file is kept; the old file is kept beside it
    (FILE.<time>.bak); running it again changes nothing. A file that is not
    valid JSON is refused with one line, and nothing is written.

    \b
    Examples:
      memctl --store ~/agent/.memory hooks install claude-code
      memctl hooks install claude-code --project --store .memory --dry-run

    Exit status: 0 written (or already so), 2 an unreadable settings file.
    """
    _settings_change(memory, client, store_dir, settings_file, project, as_json, dry_run, remove=False)


@hooks.command("uninstall")
@_settings_options
@click.pass_obj
def hooks_uninstall(memory, client, store_dir, settings_file, project, as_json, dry_run):
    """Take out of CLIENT's settings exactly the hooks `install` added for the store.

    Other hooks, and memctl's hooks for other stores, stay.

    Exit status: 0 removed (or none there), 2 an unreadable settings file.
    """
    _settings_change(memory, client, store_dir, settings_file, project, as_json, dry_run, remove=True)


def _settings_change(memory, client, store_dir, settings_file, project, as_json, dry_run, *, remove):
    if store_dir is not None:
        from memctl.api import Memory

        memory = Memory(store_dir, say=say)
    if settings_file and project:
        raise click.UsageError("give --settings FILE or --project, not both")
    change = memory.hooks.uninstall if remove else memory.hooks.install
    setup = change(client, settings=settings_file, project=project, dry_run=dry_run)
    if as_json:
        json_lines([setup.as_dict()])
    else:
        click.echo(setup.command)
    events = ", ".join(setup.events)
    if setup.status == "unchanged":
        say(f"memctl: {setup.path}: " + ("no memctl hooks for this store there; nothing written" if remove else
                                          "the hooks are already there; nothing written"))
    elif dry_run:
        say(f"memctl: dry run: {events} would be {setup.status} in {setup.path}; nothing written")
    else:
        kept = f" (the old file is {setup.backup})" if setup.backup else ""
        say(f"memctl: {setup.status} {events} hooks in {setup.path}{kept}; they apply to {client}'s next session")
    if not remove and memory.hooks.note(client):
        say(f"memctl: note: {memory.hooks.note(client)}")
    if not remove and not store_reached(memory):
        say(f"memctl: note: no store at {memory.store.name_to_keep} yet; the first turn stored makes it")
