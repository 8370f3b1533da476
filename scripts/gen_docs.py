"""Generate man pages (man/) and shell completions (completions/) from the click commands.

    python scripts/gen_docs.py           write them
    python scripts/gen_docs.py --check   exit 1 if the checked-in files are out of date

Both come from the commands themselves (click-man for roff, click's own
completion scripts), so `--help`, the man pages and completion never drift.
"""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

from click.shell_completion import get_completion_class
from click_man.core import write_man_pages

from memctl import __version__
from memctl.cli import cli

REPO = Path(__file__).resolve().parent.parent
SHELLS = {"bash": "memctl.bash", "zsh": "_memctl", "fish": "memctl.fish"}


def generate(target: Path) -> None:
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
        sys.exit(1 if stale else 0)
    generate(REPO)
