"""Every shell example of README.md and docs/*.md, and whether what it prints is made by running it.

    python scripts/doc_examples.py     list them: file:line, class, first line; exit 1 if any is neither

An example is a fenced block in a shell language (sh, bash, shell, console, cron), or one with no
language, holding a memctl command line. Each is one of:

- generated: inside a cog block (scripts/gen_docs.py runs it on the demo store and writes what it
  prints; `gen_docs.py --check` fails when that changes);
- not run: right after a `<!-- not run: REASON -->` comment, for what cannot run against the demo
  by nature (an install line, a config file edited, a crontab, a synopsis, a server of the user's);
- not generated: neither. tests/test_docs.py fails on any, so that a new example cannot drift.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHELL_LANGUAGES = {"sh", "bash", "shell", "console", "cron", ""}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.+?)\s*-->")
FENCE = re.compile(r"^\s*(?P<fence>```+)(?P<language>[\w-]*)\s*$")
# memctl run as a command: in a shell block, anywhere a word starts (after a pipe, `&&`, `$(`, a
# crontab's times); in a block of no language, only at a line's start, since such a block is as
# often a program's output that names a command ("(memctl review drops it)")
SHELL_COMMAND = re.compile(r"(^|[\s|;&(])(memctl|\$MEMCTL)\s", re.M)
LINE_COMMAND = re.compile(r"^(\$ )?memctl\s", re.M)


@dataclass
class Example:
    file: str
    line: int  # the opening fence's
    language: str
    text: str
    kind: str  # "generated", "not run" or "not generated"
    reason: str = ""


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def examples(path: Path) -> list[Example]:
    """The shell blocks of one Markdown file that run memctl, each classified."""
    found, in_cog, previous = [], False, ""
    lines = path.read_text(encoding="utf-8").split("\n")
    number = 0
    while number < len(lines):
        line = lines[number]
        stripped = line.strip()
        if stripped.startswith("<!-- [[[cog"):
            in_cog = True
        elif stripped.startswith("<!-- [[[end]]]"):
            in_cog = False
        opening = FENCE.match(line)
        if opening is None:
            if stripped:
                previous = stripped
            number += 1
            continue
        end = next((i for i in range(number + 1, len(lines)) if lines[i].strip() == opening["fence"]), len(lines))
        text = "\n".join(lines[number + 1:end])
        language = opening["language"]
        if (SHELL_COMMAND if language else LINE_COMMAND).search(text) and language in SHELL_LANGUAGES:
            marker = NOT_RUN.fullmatch(previous)
            kind = "generated" if in_cog else "not run" if marker else "not generated"
            found.append(Example(str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path), number + 1, language or "-", text, kind,
                                 marker["reason"] if marker else ""))
        previous = ""
        number = end + 1
    return found


def every_example() -> list[Example]:
    return [one for path in documents() for one in examples(path)]


if __name__ == "__main__":
    listed = every_example()
    for one in listed:
        first = one.text.strip().split("\n")[0][:70]
        print(f"{one.file}:{one.line}\t{one.kind}{': ' + one.reason if one.reason else ''}\t{first}")
    missing = [one for one in listed if one.kind == "not generated"]
    print(f"{len(listed)} examples: {sum(o.kind == 'generated' for o in listed)} generated, "
          f"{sum(o.kind == 'not run' for o in listed)} not run, {len(missing)} not generated", file=sys.stderr)
    sys.exit(1 if missing else 0)
