"""Reading what callers hand to `ingest`: bytes in, located records out.

Every record keeps the line it came from, so that any error names the file,
the line and the field at fault (C5). Formats: JSON lines; a JSON document
(a list of messages, an OpenAI-style list of {role, content}, one message, or
a session object like PCAI's {"ID", "Messages": [...], "LastUpdate"}); a
Markdown notes file in MEMORY.md form; plain text.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from memctl.errors import InputError
from memctl.store.jsonl import MAX_DEPTH, Record, checked_record, json_type

FORMATS = ("auto", "jsonl", "json", "md", "text")
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
                   ".md": "md", ".markdown": "md", ".txt": "text"}
_SESSION_KEYS = ("messages", "Messages")
# One input is parsed whole, at several times its size in memory; past this, split it.
MAX_INPUT_BYTES = 256 << 20


def read_source(name: str) -> tuple[bytes, str]:
    """The bytes of a file, or of stdin for "-", with the name errors will use."""
    import sys

    try:
        if name == "-":
            data, source = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1), "<stdin>"
        else:
            with open(name, "rb") as fh:
                data, source = fh.read(MAX_INPUT_BYTES + 1), name
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), source=name) from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"larger than {MAX_INPUT_BYTES >> 20} MiB; split it into smaller inputs", source=source)
    return data, source


def detect_format(text: str, source: str) -> str:
    """The format of an input, from its file name or else its first characters."""
    for suffix, fmt in _SUFFIX_FORMATS.items():
        if source.lower().endswith(suffix):
            return fmt
    head = text.lstrip()
    if head.startswith("["):
        return "json"
    if head.startswith("{"):
        first_line = head.split("\n", 1)[0].strip()
        try:  # one object per line is JSON lines; an object spread over lines is JSON
            orjson.loads(first_line)
            return "jsonl"
        except orjson.JSONDecodeError:
            return "json"
    if head.startswith("#") or head.startswith("<!-- memory"):
        return "md"
    return "text"


def read_json(text: str, source: str) -> list[Record]:
    """Records of a JSON document, each with the line its object starts on."""
    decoder = json.JSONDecoder()
    start = _skip_ws(text, 0)
    try:
        document, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=source, line=exc.lineno) from None
    except RecursionError:  # the standard library's parser recurses once a level
        raise InputError(f"nested more than {MAX_DEPTH} levels deep", source=source, line=1) from None
    if _skip_ws(text, end) != len(text):
        line = text.count("\n", 0, _skip_ws(text, end)) + 1
        raise InputError("extra data after the JSON document (use --format jsonl for one object a line)",
                         source=source, line=line)
    if isinstance(document, list):
        return _located_items(text, start, document, source, None)
    if not isinstance(document, dict):
        raise InputError(f"expected a JSON object or list, got {json_type(document)}", source=source, line=1)
    key = next((k for k in _SESSION_KEYS if isinstance(document.get(k), list)), None)
    if key is None:
        return [checked_record(text.count("\n", 0, start) + 1, document, source)]
    defaults = {}
    for name in ("ID", "id", "session"):
        if isinstance(document.get(name), str):
            defaults["session"] = document[name]
            break
    for name in ("LastUpdate", "last_update", "ts"):
        if document.get(name) is not None:
            defaults["ts"] = document[name]
            break
    array_start = _value_offset(text, start, key)
    return _located_items(text, array_start, document[key], source, defaults)


def read_text(text: str, by: str) -> list[Record]:
    """Plain text: one record a non-blank line (by='line') or a paragraph (by='paragraph')."""
    records = []
    if by == "line":
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip():
                records.append(Record(number, line.strip()))
        return records
    paragraph: list[str] = []
    first = 0
    for number, line in enumerate(text.split("\n") + [""], 1):
        if line.strip():
            if not paragraph:
                first = number
            paragraph.append(line.rstrip())
        elif paragraph:
            records.append(Record(first, "\n".join(paragraph)))
            paragraph = []
    return records


def _located_items(text: str, array_start: int, items: list, source: str,
                   defaults: dict[str, Any] | None) -> list[Record]:
    decoder = json.JSONDecoder()
    records = []
    position = array_start + 1  # past the '['
    for index, item in enumerate(items):
        position = _skip_ws(text, position)
        line = text.count("\n", 0, position) + 1
        if not isinstance(item, dict):
            raise InputError(f"item {index + 1}: expected a JSON object, got {json_type(item)}",
                             source=source, line=line)
        records.append(checked_record(line, item, source, defaults))
        _, position = decoder.raw_decode(text, position)
        position = _skip_ws(text, position)
        if position < len(text) and text[position] == ",":
            position += 1
    return records


def _value_offset(text: str, object_start: int, wanted: str) -> int:
    """Offset of the value of top-level key `wanted` in the object at object_start."""
    decoder = json.JSONDecoder()
    position = _skip_ws(text, object_start + 1)
    while position < len(text) and text[position] != "}":
        key, position = decoder.raw_decode(text, position)
        position = _skip_ws(text, _skip_ws(text, position) + 1)  # past ':'
        if key == wanted:
            return position
        _, position = decoder.raw_decode(text, position)
        position = _skip_ws(text, position)
        if text[position] == ",":
            position = _skip_ws(text, position + 1)
    raise ValueError(wanted)  # unreachable: the key was found by the full parse


def _skip_ws(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position
