"""Errors that reach the user as one line and an exit status (C5)."""

from __future__ import annotations


class MemctlError(Exception):
    """A failure the user can act on; the CLI prints it as one line, exit 2."""

    exit_code = 2


class InputError(MemctlError):
    """Bad input: names the file, line and field at fault."""

    def __init__(self, message: str, *, source: str | None = None,
                 line: int | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        # A flag (source "-k") names its own field; a file names the field inside the record.
        what = f"field '{self.field}': " if self.field and not where.startswith("-") else ""
        return f"{where}: {what}{self.message}"


class StoreError(MemctlError):
    """The store on disk is unreadable or in a state memctl will not touch."""


class NotFound(MemctlError):
    """What was asked for by id is not in the store (or not in the scope looked into): exit 1, as a
    search that finds nothing."""

    exit_code = 1
