"""How every command prints: data on stdout, notes on stderr, one rule each."""

from __future__ import annotations

import sys
import unicodedata

import click

EXIT_OK, EXIT_NOTHING, EXIT_ERROR = 0, 1, 2


def json_lines(rows) -> None:
    """Data on stdout, one JSON object a line (a single object is a one-line stream)."""
    import orjson

    sys.stdout.buffer.write(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    sys.stdout.flush()


QUIET_KEY = "memctl.quiet"  # in the run's click meta when -q/--quiet was given
STDERR_KEY = "memctl.stderr"  # the real stderr, while a quiet command's goes nowhere


def quiet() -> bool:
    """Whether this run has --quiet (-q): see `with_quiet` in memctl/cli/__init__.py."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.meta.get(QUIET_KEY, False)


def say(message: str) -> None:
    """A note for the person at the terminal: stderr, never mixed into the data; none under --quiet."""
    if not quiet():
        click.echo(message, err=True)


def alert(message: str) -> None:
    """A line on stderr even under --quiet: an error, or why the exit status says something failed."""
    ctx = click.get_current_context(silent=True)
    stream = ctx.meta.get(STDERR_KEY) if ctx is not None else None
    click.echo(message, file=stream, err=stream is None)


def read_input(file: str) -> tuple[bytes, str]:
    """The bytes of FILE, or of stdin for '-', and the name errors should give them."""
    from memctl.api import read_input

    return read_input(file)


def hours(value) -> str:
    if value is None:
        return "?"
    return f"{value:.1f}h" if abs(value) < 48 else f"{value / 24:.1f}d"


def columns(rows, right=()) -> list[str]:
    """Rows of cells aligned in columns; CJK characters are two columns wide."""

    def width(text: str) -> int:
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)

    widths = [max(width(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - width(cell))
            cells.append(pad + cell if i in right else cell + pad)
        out.append("  ".join(cells))
    return out


def dry_run_note(count: int, what: str) -> None:
    say(f"memctl: dry run: {count} would be {what}, nothing written")


def on_terminal() -> bool:
    """Whether progress may be shown: stderr is a terminal and no --quiet."""
    return sys.stderr.isatty() and not quiet()


class progress:
    """A progress bar per stage on stderr, only when stderr is a terminal (cron logs stay clean).

    Gives the library's callback `(stage, done, total)`, `done` counted since the last call.
    """

    def __enter__(self):
        self._bar = None
        self._stage = None
        return self._advance if on_terminal() else None

    def _advance(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self._close()
            self._stage = stage
            self._bar = click.progressbar(length=total, label=stage, file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(done)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def __exit__(self, *exc):
        self._close()
        return False


def store_reached(memory) -> bool:
    """Whether the store exists, for an installer's note: a database out of reach now says so
    (a note, as the client will reach it later), never failing what was written."""
    from memctl.errors import MemctlError

    try:
        return memory.store.exists()
    except MemctlError as exc:
        say(f"memctl: note: {exc}")
        return True
