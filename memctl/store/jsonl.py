"""The one JSON-lines reader: every file and input of one JSON object a line goes through it.

It numbers lines, parses each and says what is wrong with a bad one. Callers
choose what a bad line means: input (ingest, --batch, state record) stops at
the first, naming file, line and problem; a store file being read skips it
(the store check reports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, AnyStr, Iterator

import orjson

from memctl.errors import InputError
from memctl.store.store import read_file

# orjson writes at most 254 levels: a 1,000-deep value read fine and failed only when stored.
MAX_DEPTH = 100
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


@dataclass
class Record:
    """One item of input: a JSON object, or text, with where it came from."""
    line: int
    value: dict[str, Any] | str
    defaults: dict[str, Any] | None = None  # session-level values (PCAI session ID, LastUpdate)


def decode(data: bytes, source: str) -> str:
    """Input bytes as text; binary or non-UTF-8 input is an InputError."""
    if b"\x00" in data:
        raise InputError("binary input (contains NUL bytes); expected UTF-8 text", source=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"not valid UTF-8 (byte 0x{data[exc.start]:02x})", source=source, line=line) from None
    return text.removeprefix("\ufeff")


def read_input(text: str, source: str) -> list[Record]:
    """Records of JSON lines input (ingest, --batch, state record); the first bad line stops it
    (InputError naming the line)."""
    records = []
    for line in parse(text):
        if line.problem:
            raise InputError(line.problem, source=source, line=line.number)
        records.append(checked_record(line.number, line.value, source))
    return records


def checked_record(line: int, value: dict, source: str, defaults: dict[str, Any] | None = None) -> Record:
    """A record, refused when a value in it is nested deeper than memctl can write back."""
    level = [value]
    for _ in range(MAX_DEPTH + 1):
        level = [child for item in level if isinstance(item, (dict, list))
                 for child in (item.values() if isinstance(item, dict) else item)]
        if not level:
            return Record(line, value, defaults)
    raise InputError(f"nested more than {MAX_DEPTH} levels deep", source=source, line=line)


def read(path: Path, *, unterminated: bool = False) -> Iterator[Line]:
    """The lines of a store file (none if it does not exist); bad lines come with their problem."""
    try:
        data = read_file(path)
    except FileNotFoundError:
        return
    yield from parse(data, unterminated=unterminated)


def json_type(value) -> str:
    """A JSON value's type as error messages name it."""
    return {list: "a list", str: "text", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number", dict: "an object"}.get(type(value), type(value).__name__)
