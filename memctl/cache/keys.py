"""The key of a tool call (H1): the tool's name and the canonical form of its arguments.

Two calls that mean the same must meet on one key, whoever makes them:
JSON arguments are compared with their object keys sorted, whole-valued
numbers written as integers (1.0 and 1 are one value), and runs of
whitespace in text collapsed to one space and trimmed. A command's argv is
kept exactly as given: to a program, "a  b" and "a b" may differ.

Arguments are bounded (check_args): a key is made of JSON that orjson can
write and canonical() can walk, whoever sent it (a flag, an MCP client, a
file edited by hand).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from memctl.errors import InputError
from memctl.store import store

ARGS_MAX_DEPTH = 64  # arrays and objects nested in each other; canonical() recurses once a level
ARGS_MAX_BYTES = 64 * 1024  # the arguments as canonical JSON (an argv too)
# The integers orjson writes, so the integers a key can hold: signed 64-bit up to unsigned 64-bit.
INT_MIN, INT_MAX = -2**63, 2**64 - 1


def check_name(value: str, what: str) -> str:
    """A scope or tool name, as the store checks every name that becomes a path, named by its flag."""
    return store.check_name(value, what, source=f"--{what}")


def check_args(value: Any, source: str | None = "--args") -> Any:
    """`value` if a key can be made of it, else InputError naming source and what is wrong, where:
    JSON values only, nested at most ARGS_MAX_DEPTH deep, numbers finite, integers (and
    whole-valued floats, which canonical() writes as integers) within 64 bits.

    A loop, not recursion: it guards canonical() and orjson, which would overflow."""
    pending: list[tuple[Any, int, str]] = [(value, 0, "")]
    seen = 0
    while pending:
        item, depth, where = pending.pop()
        seen += 1
        if seen > ARGS_MAX_BYTES:  # every value takes a byte of JSON; and a Python caller's shared lists end here
            raise InputError(f"more than {ARGS_MAX_BYTES} values", source=source, field="args")
        if isinstance(item, (dict, list, tuple)):
            if depth == ARGS_MAX_DEPTH:  # said without the path: 64 steps of it say nothing
                raise InputError(f"nested deeper than {ARGS_MAX_DEPTH} levels", source=source, field="args")
            if isinstance(item, dict):
                for name in item:
                    if not isinstance(name, str):
                        raise _bad_args(f"object keys must be text, not {type(name).__name__}", where, source)
            parts = item.items() if isinstance(item, dict) else enumerate(item)
            pending.extend((part, depth + 1, f"{where}/{name}") for name, part in parts)
        else:
            problem = _scalar_problem(item)
            if problem:
                raise _bad_args(problem, where, source)
    return value


def _scalar_problem(item: Any) -> str | None:
    if isinstance(item, float):
        if not math.isfinite(item):  # orjson would write null: inf and None would be one key
            return f"{item!r} is not a finite number"
        if item.is_integer() and not INT_MIN <= item <= INT_MAX:
            return f"{item!r} is a whole number beyond 64-bit integers"
    elif isinstance(item, int):  # bool too: True and False are in range
        if not INT_MIN <= item <= INT_MAX:
            return "an integer beyond 64 bits"  # not shown: a huge int has too many digits to print
    elif item is not None and not isinstance(item, str):
        return f"{type(item).__name__} is not a JSON value"
    return None


def _bad_args(problem: str, where: str, source: str | None) -> InputError:
    at = f" at {where!r:.80}" if where else ""  # repr: a key with a newline stays on the one line
    return InputError(f"{problem}{at}", source=source, field="args")


def canonical(value: Any) -> Any:
    """The canonical form of JSON arguments (see the module doc) that check_args passed."""
    if isinstance(value, dict):
        return {" ".join(str(k).split()): canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def parse_args(text: str, where: str = "--args") -> Any:
    """JSON arguments as a caller wrote them, checked and canonicalised."""
    if len(text) > ARGS_MAX_BYTES:  # checked before parsing: nobody waits for megabytes to be read
        raise InputError(f"longer than {ARGS_MAX_BYTES} bytes", source=where, field="args")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc})", source=where, field="args") from None
    return json_args(value, where)


def json_args(value: Any, where: str = "--args") -> Any:
    """Arguments already JSON (an MCP call's), checked and canonicalised as parse_args does text."""
    return canonical(check_args(value, where))


def key_of(tool: str, args: Any, source: str = "--args") -> str:
    """The cache key: a digest of the tool name and the arguments (canonical JSON, or an argv),
    which must pass check_args and be at most ARGS_MAX_BYTES as JSON (else InputError)."""
    encoded = orjson.dumps(check_args(args, source), option=orjson.OPT_SORT_KEYS)
    if len(encoded) > ARGS_MAX_BYTES:
        raise InputError(f"{len(encoded)} bytes as JSON; at most {ARGS_MAX_BYTES}", source=source, field="args")
    # The bytes of orjson.dumps([tool, args]), the key's form since H1: keys stay what they were.
    body = b"[" + orjson.dumps(tool) + b"," + encoded + b"]"
    return hashlib.sha256(body).hexdigest()[:32]
