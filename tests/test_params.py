"""The declared parameters agree with the Memory methods, the click commands and the MCP schemas."""

from __future__ import annotations

import inspect

import pytest

from memctl import Memory
from memctl.api import params
from memctl.cli.search import search as search_command

DECLARED = [(Memory.search, params.SEARCH)]


@pytest.mark.parametrize(("method", "declared"), DECLARED, ids=lambda x: getattr(x, "__qualname__", ""))
def test_declarations_match_the_method(method, declared):
    signature = inspect.signature(method).parameters
    for param in declared:
        assert param.name in signature, f"{method.__qualname__} has no parameter {param.name}"
        default = signature[param.name].default
        assert default == (() if param.many else param.default), param.name


def test_search_command_and_tool_take_every_declared_parameter():
    from memctl.mcp.tools import TOOLS

    options = {option.name: option for option in search_command.params}
    schema = TOOLS["search"].input_schema["properties"]
    for param in params.SEARCH:
        assert options[param.name].multiple == param.many, param.name
        assert schema[param.wire_name] == param.json_schema()
    assert "topic" in schema["kind"]["items"]["enum"]  # the drift that made one declaration worth it


def test_declarations_import_nothing_heavy():
    import subprocess
    import sys

    code = "import sys, memctl.api.params; print(sorted(m for m in ('numpy', 'tantivy', 'click') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
