"""Generate man pages (man/), shell completions (completions/) and docs/cli.md from the click commands.

    python scripts/gen_docs.py           write them
    python scripts/gen_docs.py --check   exit 1 if the checked-in files are out of date

All come from the commands themselves (click-man for roff, click's own
completion scripts, cog blocks in docs/cli.md that print each `--help`, as
sqlite-utils and llm keep their READMEs), so `--help`, the man pages, the
completions and the docs never drift.
"""

from __future__ import annotations

import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path

import click
from click.shell_completion import get_completion_class
from click_man.core import write_man_pages

from memctl import __version__
from memctl.cli import cli

REPO = Path(__file__).resolve().parent.parent
SHELLS = {"bash": "memctl.bash", "zsh": "_memctl", "fish": "memctl.fish"}
# files whose cog blocks print from the code
COGGED = [REPO / "docs" / "cli.md", REPO / "docs" / "api.md", REPO / "README.md", REPO / "memctl" / "search" / "stages.py"]


def cli_reference(command: click.Command = cli, parent: click.Context | None = None, name: str = "memctl") -> str:
    """Markdown of `name --help` and of every subcommand's, depth first, as an 80-column terminal shows it."""
    ctx = command.make_context(name, [], parent=parent, resilient_parsing=True, terminal_width=80,
                               max_content_width=80)
    out = f"## {ctx.command_path}\n\n```\n{command.get_help(ctx)}\n```\n\n"
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if not sub.hidden:
                out += cli_reference(sub, ctx, sub_name)
    return out


def mcp_tools() -> str:
    """Markdown of the MCP server's tools, from its one table (memctl/mcp/tools.py)."""
    from memctl.mcp.tools import TOOLS, summary

    rows = "".join(f"| `{name}` | {summary(one)} |\n" for name, one in TOOLS.items())
    return f"| tool ({len(TOOLS)}) | what it does |\n| --- | --- |\n{rows}"


def mcp_tool_names() -> str:
    """The MCP server's tools as one line of names, from its table."""
    from memctl.mcp.tools import TOOLS

    return ", ".join(f"`{name}`" for name in TOOLS) + f" ({len(TOOLS)} tools).\n"

def stage_table() -> str:
    """The ranking stages in the order they run, a line or a few each, from their one list
    (memctl/search/stages.py STAGES)."""
    import textwrap

    from memctl.search.stages import STAGES

    return "".join(textwrap.fill(stage.summary, 100, initial_indent=f"{stage.name:<14}",
                                 subsequent_indent=" " * 14) + "\n" for stage in STAGES)


def run_cog(*options: str) -> int:
    """cog over COGGED, its blocks able to `import gen_docs`; cog's exit status.

    In a process of its own: click-man leaves the commands' help option cached without
    the group's `-h`, and the help cog prints must be the one users see.
    """
    argv = [sys.executable, "-m", "cogapp", "-I", str(REPO / "scripts"), *options, *map(str, COGGED)]
    return subprocess.run(argv, cwd=REPO).returncode


def generate(target: Path) -> None:
    for name in cli.list_commands(None):  # click-man reads `commands`: load the lazy ones first
        cli.get_command(None, name)
    (target / "man").mkdir(parents=True, exist_ok=True)
    (target / "completions").mkdir(parents=True, exist_ok=True)
    # A fixed date keeps the pages reproducible: they change when the commands do.
    write_man_pages("memctl", cli, version=__version__, target_dir=str(target / "man"), date="2026-11-22")
    for shell, name in SHELLS.items():
        source = get_completion_class(shell)(cli, {}, "memctl", "_MEMCTL_COMPLETE").source()
        (target / "completions" / name).write_text(source)


def stale_files() -> list[str]:
    """Checked-in files that differ from freshly generated ones (or are missing or extra)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        stale = []
        for folder in ("man", "completions"):
            new = {p.name for p in (fresh / folder).iterdir()}
            old = {p.name for p in (REPO / folder).iterdir()} if (REPO / folder).is_dir() else set()
            stale += [f"{folder}/{name}" for name in sorted(new ^ old)]
            stale += [f"{folder}/{name}" for name in sorted(new & old)
                      if not filecmp.cmp(fresh / folder / name, REPO / folder / name, shallow=False)]
        return stale


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        stale = stale_files()
        for name in stale:
            print(f"out of date: {name} (run: python scripts/gen_docs.py)", file=sys.stderr)
        cog_status = run_cog("--check", "--diff", "--check-fail-msg=run: python scripts/gen_docs.py")
        sys.exit(1 if stale or cog_status else 0)
    generate(REPO)
    sys.exit(run_cog("-r"))
