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

REPO = Path(__file__).resolve().parent.parent
# This checkout's memctl, as the examples run it (PYTHONPATH, _demo_env): `python scripts/gen_docs.py`
# puts scripts/ first on the path, and an installed memctl (another checkout's, a worktree's main)
# wrote that one's help into this one's pages.
sys.path.insert(0, str(REPO))

from memctl import __version__  # noqa: E402
from memctl.cli import cli  # noqa: E402

SHELLS = {"bash": "memctl.bash", "zsh": "_memctl", "fish": "memctl.fish"}
# files whose cog blocks print from the code
COGGED = [REPO / "docs" / "cli.md", REPO / "docs" / "api.md", REPO / "README.md",
          *(REPO / "docs" / f"{name}.md" for name in ("governance", "topics", "state", "context", "cache")),
          REPO / "memctl" / "search" / "stages.py"]


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


def result_shapes() -> str:
    """Markdown of every result shape (memctl/api/shapes.py): its keys, their types and meanings, made
    from the declaration that makes the JSON (memctl/text/shape.py)."""
    from memctl.api.shapes import SHAPES

    out = []
    for shape in SHAPES:
        schema = shape.schema()
        required = set(schema.get("required", ()))
        out.append(f"### `{shape.__name__}`\n\n{schema.get('description', '')}\n\n```\n{shape.outline()}\n```\n\n"
                   "| key | type | meaning |\n| --- | --- | --- |\n")
        for key, one in schema["properties"].items():
            optional = "" if key in required else " (may be absent)"
            meaning = one.get("description", "").replace("|", "\\|")
            out.append(f"| `{key}` | {_type_name(one)}{optional} | {meaning} |\n")
        out.append("\n")
    return "".join(out)


def _type_name(one: dict) -> str:
    """A JSON schema's type in a few words: `string`, `array of object`, `"a" or "b"`."""
    if "enum" in one:
        return " or ".join(f"`{value}`" if isinstance(value, str) else str(value) for value in one["enum"])
    if "anyOf" in one:
        return " or ".join(_type_name(part) for part in one["anyOf"])
    kind = one.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and "prefixItems" in one:
        return "array of " + ", ".join(_type_name(part) for part in one["prefixItems"])
    if kind == "array":
        return "array of " + (_type_name(one["items"]) if "items" in one else "any")
    if kind == "object" and "properties" in one:
        return "object (" + ", ".join(f"`{key}`" for key in one["properties"]) + ")"
    if kind == "object" and "additionalProperties" in one:
        return "object of " + _type_name(one["additionalProperties"])
    return kind


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


# -- examples run on the demo store -------------------------------------------------------------------
# The README's examples print what they print: a cog block runs each against the bundled demo store
# (fixtures/demo, ingested fresh) with memctl's default model, at a fixed time, and writes the command
# and its output. A change that alters an output fails `gen_docs.py --check` until the docs are made
# again. Run in processes of their own, without the server, as a user at a terminal runs them.
DEMO_NOW = "2026-11-20T10:00:00+08:00"
_demo: dict[str, Path] = {}


def _scratch(prefix: str) -> Path:
    """A directory of this run, removed when it ends."""
    import atexit
    import shutil

    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _demo_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    if "config" not in _demo:
        _demo["config"] = _scratch("memctl-docs-config-")  # no settings of the user's
    env.update({"MEMCTL_SERVER": "off", "MEMCTL_NOW": DEMO_NOW, "PYTHONPATH": str(REPO),
                "XDG_CONFIG_HOME": str(_demo["config"])})
    return env


def demo_store(name: str = "demo") -> Path:
    """A demo store of this cog run, by name: fixtures/demo's chat and MEMORY.md, ingested and indexed
    (as scripts/demo.sh's first search leaves it, so that no example says it rebuilt the index). An
    example that writes uses a store of its own name, so that no other example's output depends on
    the order the files are made in. Each is a copy of one such store no example uses, which an
    unchanged store's next update finds up to date: three processes fewer a store."""
    import shutil

    if name not in _demo:
        if "pristine" not in _demo:
            _demo["pristine"] = _scratch("memctl-docs-") / "memory"
            for source in ("chat.jsonl", "MEMORY.md"):
                demo_run(["ingest", str(REPO / "fixtures" / "demo" / source)], store="pristine")
            demo_run(["index"], store="pristine")
        _demo[name] = _scratch("memctl-docs-") / "memory"
        shutil.copytree(_demo["pristine"], _demo[name], symlinks=True)
    return _demo[name]


def demo_run(args: list[str], stdin: str | None = None, store: str = "demo") -> str:
    """What `memctl --store STORE ARGS` prints on stdout (a failure raises: an example must run)."""
    path = _demo[store] if store in _demo else demo_store(store)
    done = subprocess.run([sys.executable, "-P", "-m", "memctl", "--store", str(path), *args], cwd=REPO,
                          input=stdin.encode() if stdin is not None else None, capture_output=True,
                          env=_demo_env())
    if done.returncode not in (0, 1):
        raise RuntimeError(f"memctl {' '.join(args)}: exit {done.returncode}: {done.stderr.decode()}")
    return done.stdout.decode()


def example(command: str, stdin: str | None = None, store: str = "demo") -> str:
    """A shell block with `command` (memctl ..., after `echo STDIN |` when it reads stdin), then a
    block with what it prints on the demo store `store` (demo_store)."""
    import shlex

    argv = shlex.split(command)
    assert argv[0] == "memctl", command
    shown = f"echo {shlex.quote(stdin.rstrip(chr(10)))} | {command}" if stdin is not None else command
    return f"```sh\n{shown}\n```\n```\n{demo_run(argv[1:], stdin, store)}```\n"


def console(lines: list[str], place: str = "/tmp/d", store: str | None = None) -> str:
    """A console block: each line run in turn by bash, as a user types it (`memctl` this checkout's,
    in the repository, no server), shown after "$ " with what it prints, stdout and stderr as a
    terminal interleaves them. `export` lines set the variables of the lines after them. `place`
    stands for a fresh directory of this run: in the commands as shown, and in what they print.
    `store`: the lines run on that demo store (demo_store) as $MEMCTL_STORE, shown as `.memory`."""
    out = []
    for line, printed in _run_lines(lines, place, store):
        out += ["$ " + line.replace("\n", "\n> "), printed]
    return "```console\n" + "\n".join(o for o in out if o) + "\n```\n"


def script(text: str, store: str = "demo") -> str:
    """A shell block with the script `text`, then a block with what bash prints running it (stdout
    and stderr as a terminal shows them) on the demo store `store` as $MEMCTL_STORE."""
    [(_, printed)] = _run_lines([text], "/tmp/d", store)
    return f"```sh\n{text}\n```\n```\n{printed}\n```\n" if printed else f"```sh\n{text}\n```\n"


def _run_lines(lines: list[str], place: str, store: str | None) -> list[tuple[str, str]]:
    """Each line and what bash printed running it (see console)."""
    import os
    import shlex

    where = str(_scratch("memctl-docs-console-"))
    bin_dir = Path(where) / "bin"
    bin_dir.mkdir()
    (bin_dir / "memctl").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -P -m memctl "$@"\n')
    (bin_dir / "memctl").chmod(0o755)
    env = {**_demo_env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    shown = {where: place}
    if store is not None:
        env["MEMCTL_STORE"] = str(demo_store(store))
        shown[env["MEMCTL_STORE"]] = ".memory"
    out = []
    for line in lines:
        run = line.replace(place, where)
        if run.startswith("export "):
            env.update(dict(pair.split("=", 1) for pair in shlex.split(run, comments=True)[1:]))
            out.append((line, ""))
            continue
        done = subprocess.run(["bash", "-c", run], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
        printed = done.stdout.decode()
        for real, name in sorted(shown.items(), key=lambda pair: -len(pair[0])):
            printed = printed.replace(real, name)
        out.append((line, printed.rstrip("\n")))
    return out


def crontab_jobs() -> list[str]:
    """The commands of README's ```cron block (each line after its five time fields), as
    tests/test_cron.py reads them."""
    import re

    block = re.search(r"```cron\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    return [line.split(None, 5)[5] for line in block.splitlines() if line and not line.startswith(("#", "MEMCTL="))]


def run_cog(*options: str) -> int:
    """cog over COGGED, its blocks able to `import gen_docs`; cog's exit status.

    In a process of its own: click-man leaves the commands' help option cached without
    the group's `-h`, and the help cog prints must be the one users see.
    """
    argv = [sys.executable, "-m", "cogapp", "-I", str(REPO / "scripts"), *options, *map(str, COGGED)]
    return subprocess.run(argv, cwd=REPO).returncode


# click-man writes the help text into roff as it is: a backslash starts an escape (`%APPDATA%\\Claude`,
# jq's "\\(.key)"), a line starting with "." or "'" is a request ("...", "'global'."), and
# groff without preconv reads UTF-8 (…, 待辦) as invalid bytes; the command list cut each summary at
# 45 characters ("kept in..."). groff -ww -z checks every page (tests/test_cli.py).


def roff_text(text: str) -> str:
    """Help text as roff shows it verbatim: backslashes escaped, no line read as a request."""
    lines = text.replace("\\", "\\e").split("\n")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in lines)


def roff_ascii(page: str) -> str:
    """The page in ASCII: every other character as its \\[uXXXX] escape (no preconv needed)."""
    return "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in page)


def write_pages(target: Path) -> None:
    from click_man import core, man

    plain_blank_lines = man.ManPage.replace_blank_lines
    plain_short_help = core.get_short_help_str
    man.ManPage.replace_blank_lines = lambda self, s: plain_blank_lines(self, roff_text(s))
    core.get_short_help_str = lambda command, limit=45: plain_short_help(command, limit=1000)  # its first sentence, whole
    try:
        # A fixed date keeps the pages reproducible: they change when the commands do.
        write_man_pages("memctl", cli, version=__version__, target_dir=str(target), date="2026-11-22")
    finally:
        man.ManPage.replace_blank_lines = plain_blank_lines
        core.get_short_help_str = plain_short_help
    for page in target.glob("*.1"):
        page.write_text(roff_ascii(page.read_text(encoding="utf-8")), encoding="ascii")


def generate(target: Path) -> None:
    for name in cli.list_commands(None):  # click-man reads `commands`: load the lazy ones first
        cli.get_command(None, name)
    (target / "man").mkdir(parents=True, exist_ok=True)
    (target / "completions").mkdir(parents=True, exist_ok=True)
    write_pages(target / "man")
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
