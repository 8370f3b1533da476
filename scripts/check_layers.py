#!/usr/bin/env python3
"""Which way memctl's imports run: the package order of README "Code layout", checked.

Every import counts, those made inside functions too (they are dependencies
all the same). A package may import only from packages below it in ORDER;
within a package, files may not import each other in a cycle. Prints each
import that breaks the order or closes a cycle; exit 0 when there is none.

    python scripts/check_layers.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# Bottom first. Modules at memctl/'s top level count as packages of their own name.
ORDER = [
    ["errors", "clock"],
    ["text"],
    ["store"],
    ["config", "programs", "configfiles"],  # configfiles: an agent client's own config file, read and written
    ["runtime"],                # settings (read on first use), clock and embedder of one Memory
    ["index"],
    ["search"],
    ["governance", "window", "topics", "cache"],
    ["check", "forget", "overview"],  # forget: out of every file; overview: show, status
    ["context"],                # the per-turn context: governance layers, search, topics and window together
    ["ingest"],
    ["hooks"],                  # agent clients' hooks: their events and transcripts, through context and ingest
    ["api", "memctl"],          # memctl/__init__.py, the package's face, is the API
    ["server"],                 # the resident server: runs the command line it is handed
    ["cli", "mcp"],
    ["__main__"],
]
RANK = {name: level for level, names in enumerate(ORDER) for name in names}
# Siblings of one level that may use each other, one way only (the first uses the second).
SIDEWAYS = {("cli", "mcp"), ("memctl", "api")}


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "memctl":
                continue
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "memctl"]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target not in (name, "memctl"):
                out.add(target)
    return out


def package_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "memctl"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    seen, found = set(), []

    def visit(node, stack, on_stack):
        seen.add(node)
        on_stack.add(node)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other in on_stack:
                found.append(stack[stack.index(other):] + [other])
            elif other not in seen:
                visit(other, stack, on_stack)
        on_stack.discard(node)
        stack.pop()

    for node in sorted(graph):
        if node not in seen:
            visit(node, [], set())
    return found


def problems(root: Path) -> list[str]:
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    out = []
    for name in sorted(graph):
        mine = package_of(name)
        if mine not in RANK:
            out.append(f"{name}: package '{mine}' has no place in ORDER")
            continue
        for target in sorted(graph[name]):
            theirs = package_of(target)
            if theirs == mine or (mine, theirs) in SIDEWAYS:
                continue
            if theirs not in RANK or RANK[theirs] >= RANK[mine]:
                out.append(f"{name} -> {target}: '{mine}' may import only from below it")
    out += ["file cycle: " + " -> ".join(cycle) for cycle in cycles(graph)]
    return out


def main() -> int:
    found = problems(Path(__file__).resolve().parent.parent / "memctl")
    print("\n".join(found) or "one direction, no cycle")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
