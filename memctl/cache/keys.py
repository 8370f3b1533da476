"""The key of a tool call (H1): the tool's name and the canonical form of its arguments.

Two calls that mean the same must meet on one key, whoever makes them:
JSON arguments are compared with their object keys sorted, whole-valued
numbers written as integers (1.0 and 1 are one value), and runs of
whitespace in text collapsed to one space and trimmed. A command's argv is
kept exactly as given: to a program, "a  b" and "a b" may differ.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from memctl.errors import InputError
from memctl.store import store


def check_name(value: str, what: str) -> str:
    """A scope or tool name, as the store checks every name that becomes a path, named by its flag."""
    return store.check_name(value, what, source=f"--{what}")


def canonical(value: Any) -> Any:
    """The canonical form of JSON arguments (see the module doc)."""
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
    """JSON arguments as a caller wrote them, canonicalised."""
    try:
        return canonical(orjson.loads(text))
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc})", source=where, field="args") from None


def key_of(tool: str, args: Any) -> str:
    """The cache key: a digest of the tool name and the canonical arguments."""
    body = orjson.dumps([tool, args], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()[:32]
