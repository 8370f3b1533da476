"""Each JSON shape declared once: a result's declaration is its JSON form and its JSON schema.

A result a command prints with --json and an MCP tool returns is a dataclass deriving `Shape`.
Its keys, in order, are its fields declared with `shown(...)` and its values declared with `@derived`
(a property computed from the fields); `as_dict()` is the JSON object and `schema()` its JSON
schema, both made from that one declaration, and `outline()` the one-line summary the MCP tool
descriptions give (and tests/test_shapes.py holds the command help to). So what is printed, what
the MCP server declares as a tool's output schema and what docs/api.md says (generated,
scripts/gen_docs.py) cannot drift apart.

    @dataclass
    class Problem(Shape):
        file: str = shown("The store file, relative to the store.")
        line: int | None = shown("Its line, or null for the whole file.")
        severity: Literal["error", "warning"] = shown()
        where: Path = hidden()  # kept for the code, not part of the JSON

A key may be renamed (`name="from"`), rounded (`digits=6`), left out when it is None or empty
(`omit="none"`, `omit="empty"`) or unless the caller asks for it (`when="explain"`:
`as_dict(explain=True)`), or be a nested shape whose keys are spliced in (`flatten=True`). A
derived value returns ABSENT to leave its key out, and goes after the key `after=` names (else
last); a class attribute `key_order` (attribute names) orders the keys otherwise. Types are read
from the annotations (str, int, float, bool, None, Any, Literal, lists, tuples, dicts, paths and
other shapes).

Standard library only: the commands import it (the thin client of the resident server does not: it
prints the server's bytes). Not msgspec: its import took 18 ms where this module's took 2 ms
(bench/README.md "Cited measurements"), and its Structs would replace dataclasses the code builds
and mutates in place.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from functools import cache
from pathlib import PurePath
from typing import Any, Callable, Literal

ABSENT = type("Absent", (), {"__repr__": lambda self: "ABSENT", "__bool__": lambda self: False})()
_HIDDEN = {"hidden": True}


def shown(doc: str = "", *, name: str | None = None, digits: int | None = None,
          omit: Literal["none", "empty"] | None = None, when: str | None = None, flatten: bool = False,
          default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING) -> Any:
    """A field shown in the JSON form, as a key (see the module doc)."""
    meta = {"doc": doc, "name": name, "digits": digits, "omit": omit, "when": when, "flatten": flatten}
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"shape": meta})


def hidden(*, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING) -> Any:
    """A field kept for the code, hidden from the JSON form."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"shape": _HIDDEN})


class derived(property):  # noqa: N801 (used as a decorator, as property is)
    """A key computed from the fields: `@derived("doc")` over a method, with shown()'s options. Its
    annotation is its type; returning ABSENT leaves the key out (then it is optional)."""

    def __init__(self, doc: str = "", *, name: str | None = None, digits: int | None = None,
                 omit: Literal["none", "empty"] | None = None, when: str | None = None,
                 optional: bool = False, after: str | None = None):
        self.meta = {"doc": doc, "name": name, "digits": digits, "omit": omit, "when": when, "flatten": False,
                     "optional": optional, "after": after}

    def __call__(self, method: Callable) -> "derived":
        made = derived.__new__(derived)
        property.__init__(made, method, doc=self.meta["doc"] or method.__doc__)
        made.meta = self.meta
        return made


class _Key(typing.NamedTuple):  # a NamedTuple, not a dataclass: making it costs every command's start less
    attribute: str
    name: str
    doc: str
    digits: int | None
    omit: str | None
    when: str | None
    flatten: bool
    optional: bool  # may be left out


@cache
def _keys(cls: type) -> tuple[_Key, ...]:
    """The keys of shape `cls` in order: its fields, each derived value placed after the key it
    names (`after=`; "" first), else at the end; or the order of `cls.key_order` (attribute names)."""
    keys = _declared_keys(cls)
    order = getattr(cls, "key_order", None)
    if order is not None:
        by_attribute = {k.attribute: k for k in keys}
        assert set(order) == set(by_attribute), f"{cls.__name__}.key_order: {sorted(set(order) ^ set(by_attribute))}"
        keys = [by_attribute[a] for a in order]
    return tuple(keys)


def _declared_keys(cls: type) -> list[_Key]:
    keys: list[_Key] = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("shape")
        if meta is None:
            meta = {"doc": "", "name": None, "digits": None, "omit": None, "when": None, "flatten": False}
        if meta.get("hidden"):
            continue
        keys.append(_Key(f.name, meta["name"] or f.name, meta["doc"], meta["digits"], meta["omit"], meta["when"],
                         meta["flatten"], bool(meta["omit"] or meta["when"])))
    for attribute, value in _derived_values(cls):
        meta = value.meta
        one = _Key(attribute, meta["name"] or attribute, meta["doc"] or (value.__doc__ or ""), meta["digits"],
                   meta["omit"], meta["when"], False, bool(meta["optional"] or meta["omit"] or meta["when"]))
        at = next((i + 1 for i, k in enumerate(keys) if k.name == meta["after"]), None) if meta["after"] else None
        keys.insert(0 if meta["after"] == "" else len(keys) if at is None else at, one)
    return keys


def _derived_values(cls: type) -> list[tuple[str, derived]]:
    seen: dict[str, derived] = {}
    for klass in reversed(cls.__mro__):
        for attribute, value in vars(klass).items():
            if isinstance(value, derived):
                seen[attribute] = value
            elif attribute in seen:
                del seen[attribute]
    return list(seen.items())


class Shape:
    """A result whose declaration is its JSON form (`as_dict`) and its JSON schema (`schema`)."""

    def as_dict(self, **asked: bool) -> dict[str, Any]:
        """The JSON object: the keys in declared order; `asked` turns on the keys declared `when=`."""
        out: dict[str, Any] = {}
        for one in _keys(type(self)):
            if one.when and not asked.get(one.when):
                continue
            value = getattr(self, one.attribute)
            if value is ABSENT or (one.omit == "none" and value is None) or (one.omit == "empty" and not value):
                continue
            if one.flatten:
                if value is not None:
                    out.update(_plain(value, asked))
                continue
            if one.digits is not None and value is not None:
                value = round(value, one.digits)
            out[one.name] = _plain(value, asked)
        return out

    @classmethod
    def schema(cls, *, always: tuple[str, ...] = ()) -> dict[str, Any]:
        """The JSON schema of `as_dict()`: a `when=` key may be missing, unless `always` names it."""
        return _object_schema(cls, always)

    @classmethod
    def outline(cls, *, always: tuple[str, ...] = ()) -> str:
        """The keys as one line of text, `{"id", "kind": "memory"|"message", "fields"?, ...}`: what the
        MCP tool descriptions and the command help say a result is."""
        return _outline(cls.schema(always=always))


def _plain(value: Any, asked: dict[str, bool]) -> Any:
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Shape):
        return value.as_dict(**asked)
    if isinstance(value, (list, tuple)):
        return [_plain(v, asked) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, asked) for k, v in value.items()}
    return value


# -- the JSON schema, from the annotations ----------------------------------------------------
def _object_schema(cls: type, always: tuple[str, ...] = ()) -> dict[str, Any]:
    hints = _hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for one in _keys(cls):
        kind = hints[one.attribute]
        if one.flatten:
            nested = _object_schema(_strip_none(kind))
            properties.update(nested["properties"])
            if not _allows_none(kind):
                required += nested.get("required", [])
            continue
        properties[one.name] = {**type_schema(kind), **({"description": one.doc} if one.doc else {})}
        if not one.optional or (one.when is not None and one.when in always):
            required.append(one.name)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):  # dataclass's own made-up doc is no doc
        out["description"] = " ".join(cls.__doc__.split())
    return out


def _hints(cls: type) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        module = sys.modules.get(klass.__module__)
        names = {**vars(typing), **(vars(module) if module else {}), klass.__name__: klass}
        for attribute, value in vars(klass).items():
            if isinstance(value, derived):
                hints[attribute] = _evaluated(value.fget.__annotations__.get("return", "Any"), names, klass)
        for attribute, annotation in vars(klass).get("__annotations__", {}).items():
            hints[attribute] = _evaluated(annotation, names, klass)
    return hints


def _evaluated(annotation: Any, names: dict[str, Any], klass: type) -> Any:
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, names)  # noqa: S307 (our own source)
    except NameError:  # a name the module imports only for type checkers
        return eval(annotation, {**_checking_names(klass.__module__), **names})  # noqa: S307


@cache
def _checking_names(module_name: str) -> dict[str, Any]:
    """What the module imports under `if TYPE_CHECKING:` (to keep its start-up light): the names its
    annotations use, imported now, as a type checker would, since only a schema needs them."""
    import ast

    module = sys.modules.get(module_name)
    source = getattr(module, "__file__", None)
    if source is None:
        return {}
    names: dict[str, Any] = {}
    for node in ast.parse(open(source, encoding="utf-8").read()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            exec(compile(ast.Module(node.body, []), source, "exec"), names)  # noqa: S102 (our own imports)
    return names


def _strip_none(kind: Any) -> Any:
    parts = [a for a in typing.get_args(kind) if a is not type(None)] if _is_union(kind) else [kind]
    return parts[0] if len(parts) == 1 else kind


def _allows_none(kind: Any) -> bool:
    return _is_union(kind) and type(None) in typing.get_args(kind)


def _is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def type_schema(kind: Any) -> dict[str, Any]:
    """The JSON schema of a Python type annotation."""
    if kind is Any or kind is object:
        return {}
    if kind in _SIMPLE:
        return {"type": _SIMPLE[kind]}
    if isinstance(kind, type) and issubclass(kind, PurePath):
        return {"type": "string"}
    if isinstance(kind, type) and issubclass(kind, Shape):
        return _object_schema(kind)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return {"enum": list(args)}
    if _is_union(kind):
        parts = [type_schema(a) for a in args]
        if all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}
    if origin in (list, set, frozenset) or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        return {"type": "array", "prefixItems": [type_schema(a) for a in args], "minItems": len(args),
                "maxItems": len(args)}
    if origin is dict or kind is dict:
        return {"type": "object", "additionalProperties": type_schema(args[1])} if args else {"type": "object"}
    if kind is list:
        return {"type": "array"}
    raise TypeError(f"no JSON schema for {kind!r}")


# -- the outline, from the schema --------------------------------------------------------------
def _outline(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    parts = []
    for name, one in schema["properties"].items():
        shown = f'"{name}"' + ("" if name in required else "?")
        value = _outline_value(one)
        parts.append(f"{shown}: {value}" if value else shown)
    return "{" + ", ".join(parts) + "}"


def _outline_value(one: dict[str, Any]) -> str:
    if "enum" in one:
        return "|".join(f'"{v}"' if isinstance(v, str) else str(v).lower() for v in one["enum"])
    if "properties" in one:
        return _outline(one)
    if one.get("type") == "array" and "properties" in one.get("items", {}):
        return f"[{_outline(one['items'])}]"
    for part in one.get("anyOf", ()):  # a nested shape or null: the shape
        if "properties" in part:
            return _outline(part) + " | null"
    return ""
