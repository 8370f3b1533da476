"""The code's shape, checked as CI checks behaviour: imports one way (README "Code layout"),
and the linter clean."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_layers  # noqa: E402  (scripts/ is not a package)


def test_imports_run_one_way_with_no_cycle():
    assert check_layers.problems(REPO / "memctl") == []


# What a face may import besides memctl.api: itself, the other face and the resident server that runs
# them, the bottom layers that hold no store (errors, text), and the agent client's own config files
# (configfiles: `mcp install`, `hooks install`), which are no part of a store.
FACE_MAY_IMPORT = ("memctl.api", "memctl.cli", "memctl.mcp", "memctl.server", "memctl.errors", "memctl.text",
                   "memctl.configfiles")


def memctl_imports(path) -> list[tuple[int, str]]:
    """(line, module) of every memctl module a file imports, at the top or inside a function;
    `from memctl import clock` is memctl.clock, `from memctl import __version__` memctl."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "memctl":
                found += [(node.lineno, f"memctl.{alias.name}") for alias in node.names
                          if (REPO / "memctl" / alias.name).is_dir() or (REPO / "memctl" / f"{alias.name}.py").exists()]
    return [(line, name) for line, name in found if name.split(".")[0] == "memctl" and name != "memctl"]


def test_the_faces_reach_the_library_only_through_memctl_api():
    """cli/ and mcp/ call Memory and nothing past it (#32): a face that imports ingest, search or
    the store can do what Memory does not, and the two faces drift apart."""
    past = [f"{path.relative_to(REPO)}:{line}: {name}"
            for face in ("cli", "mcp") for path in sorted((REPO / "memctl" / face).rglob("*.py"))
            for line, name in memctl_imports(path)
            if not any(name == allowed or name.startswith(allowed + ".") for allowed in FACE_MAY_IMPORT)]
    assert past == []


# A function a reader can hold in mind (#32): at most LONGEST lines, and at most COMPLEX_ALLOWED functions
# of McCabe complexity over COMPLEXITY (ruff's C901). Split a long one into named steps, not dict tricks.
LONGEST = 80
COMPLEXITY = 15
COMPLEX_ALLOWED = 3


def long_functions(root) -> list[str]:
    """`path:line name (N lines)` of every function or method under `root` longer than LONGEST lines,
    from its `def` line to its last (its docstring included, its decorators not)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > LONGEST:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_80_lines():
    assert long_functions(REPO / "memctl") == []


def test_the_length_check_finds_a_long_function(tmp_path):
    (tmp_path / "long.py").write_text("class C:\n    @staticmethod\n    def long():\n" + "        x = 1\n" * LONGEST
                                      + "\n\ndef short():\n    pass\n")
    (tmp_path / "fits.py").write_text("@decorated\ndef fits():\n" + "    x = 1\n" * (LONGEST - 1))
    assert [line.split(" ", 1)[1] for line in long_functions(tmp_path)] == [f"long ({LONGEST + 1} lines)"]


def too_complex(root) -> list[str]:
    """ruff's C901 findings over `root`, with only that rule and that limit (whatever pyproject.toml says)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "C901", "--config",
                           f"lint.mccabe.max-complexity={COMPLEXITY}", "--output-format", "json", str(root)],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return [f"{finding['filename']}:{finding['location']['row']} {finding['message']}"
            for finding in json.loads(done.stdout)]


@pytest.mark.process
def test_at_most_three_functions_are_over_mccabe_15():
    found = too_complex(REPO / "memctl")
    assert len(found) <= COMPLEX_ALLOWED, "\n".join(found)


@pytest.mark.process
def test_the_complexity_check_finds_a_complex_function(tmp_path):
    def function(name: str, branches: int) -> str:
        return f"def {name}(x):\n" + "".join(f"    if x == {n}:\n        return {n}\n" for n in range(branches)) \
            + "    return -1\n"

    (tmp_path / "branchy.py").write_text(function("branchy", COMPLEXITY))  # McCabe: 1 + a branch an `if`
    (tmp_path / "plain.py").write_text(function("plain", COMPLEXITY - 1))
    assert [line.split(" ", 1)[1] for line in too_complex(tmp_path)] == [
        f"`branchy` is too complex ({COMPLEXITY + 1} > {COMPLEXITY})"]


@pytest.mark.process
def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "memctl", "tests", "bench", "scripts"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.process
def test_the_library_imports_where_fcntl_does_not_exist():
    """Windows has no fcntl: importing memctl (the API, the CLI and the store) must still work."""
    code = ("import builtins\nreal = builtins.__import__\n"
            "def without_fcntl(name, *args, **kwargs):\n"
            "    if name == 'fcntl':\n        raise ImportError(name)\n    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = without_fcntl\n"
            "import memctl, memctl.cli, memctl.store.store, memctl.cache.files, memctl.index.index\n"
            "from memctl.store import locking\nassert locking.fcntl is None\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr
