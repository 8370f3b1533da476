"""The declared parameters (memctl/api/params.py) agree with the Memory methods, the click commands and
the MCP schemas: a parameter changed in one place and not the others fails here."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from memctl import Memory
from memctl.api import params
from memctl.api.rooms import ReviewRoom, TopicsRoom
from memctl.cli.context import activate, context
from memctl.cli.forget import forget
from memctl.cli.ingest import ingest
from memctl.cli.review import review_confirm, review_pending, review_reject
from memctl.cli.search import search
from memctl.cli.topics import list_topics, show_topic

# (Memory method, click command, MCP tool, declaration)
OPERATIONS = [
    (Memory.search, search, "search", params.SEARCH),
    (Memory.ingest, ingest, "ingest", params.INGEST),
    (Memory.context, context, "context", params.CONTEXT),
    (TopicsRoom.activate, activate, "topics_activate", params.ACTIVATE),
    (TopicsRoom.list, list_topics, "topics_list", params.TOPICS_SCOPE),
    (TopicsRoom.show, show_topic, "topics_show", params.TOPICS_SCOPE),
    (Memory.forget, forget, "forget", params.FORGET),
    (ReviewRoom.pending, review_pending, "review_pending", params.REVIEW_SCOPE),
    (ReviewRoom.confirm, review_confirm, "confirm", params.REVIEW_SCOPE),
    (ReviewRoom.reject, review_reject, "reject", params.REVIEW_SCOPE),
]


@pytest.mark.parametrize(("method", "command", "tool", "declared"), OPERATIONS, ids=[o[2] for o in OPERATIONS])
def test_declarations_match_the_method(method, command, tool, declared):
    signature = inspect.signature(method).parameters
    for param in declared:
        assert param.name in signature, f"{method.__qualname__} has no parameter {param.name}"
        assert signature[param.name].default == (() if param.many else param.default), param.name


@pytest.mark.parametrize(("method", "command", "tool", "declared"), OPERATIONS, ids=[o[2] for o in OPERATIONS])
def test_command_and_tool_take_every_declared_parameter(method, command, tool, declared):
    from memctl.mcp.tools import TOOLS

    options = {option.name: option for option in command.params}
    schema = TOOLS[tool].input_schema["properties"]
    for param in declared:
        assert options[param.name].multiple == param.many, param.name
        assert schema[param.wire_name] == param.json_schema(), param.name


def test_the_mcp_kind_list_has_every_kind_a_search_finds():
    from memctl.mcp.tools import TOOLS

    assert TOOLS["search"].input_schema["properties"]["kind"]["items"]["enum"] == [
        "memory", "message", "log", "topic"]  # the drift that made one declaration worth it


@pytest.mark.process
def test_declarations_import_nothing_heavy():
    code = ("import sys, memctl.api.params; "
            "print(sorted(m for m in ('numpy', 'tantivy', 'onnxruntime', 'click') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
