"""The one JSON-lines reader: every file and input of one JSON object a line goes through it.

It numbers lines, parses each and says what is wrong with a bad one. Callers
choose what a bad line means: input (ingest, --batch, state record) stops at
the first, naming file, line and problem; a store file being read skips it
(health reports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import AnyStr, Iterator

import orjson

UNTERMINATED = "last line has no newline (a write cut short?); readers ignore it until it is completed"


@dataclass
class Line:
    number: int
    value: dict | None   # None when the line is not a JSON object; `problem` says why
    raw: bytes | str
    problem: str | None = None


def parse(data: AnyStr, *, unterminated: bool = True) -> Iterator[Line]:
    """Every non-blank line of `data`. A last line without its newline is an append
    under way (or cut off by a crash); it is reported as a problem unless `unterminated`
    accepts it (input, and files people edit by hand)."""
    newline = b"\n" if isinstance(data, bytes) else "\n"
    lines = data.split(newline)
    last = len(lines)
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if number == last and not unterminated:
            yield Line(number, None, raw, UNTERMINATED)
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield Line(number, None, raw, f"not valid JSON ({str(exc).split(':', 1)[0]})")
            continue
        if not isinstance(value, dict):
            yield Line(number, None, raw, f"expected a JSON object, got {json_type(value)}")
            continue
        yield Line(number, value, raw)


def read(path: Path, *, unterminated: bool = False) -> Iterator[Line]:
    """The lines of a store file (none if it does not exist); bad lines come with their problem."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    yield from parse(data, unterminated=unterminated)


def json_type(value) -> str:
    """A JSON value's type as error messages name it."""
    return {list: "a list", str: "text", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number", dict: "an object"}.get(type(value), type(value).__name__)
