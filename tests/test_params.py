"""The declared parameters (memctl/api/params.py) agree with the Memory methods, the click commands and
the MCP schemas: a parameter changed in one place and not the others fails here."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from memctl import Filters, Memory
from memctl.api import params
from memctl.errors import InputError
from memctl.api.groups import ReviewGroup, TopicsGroup
from memctl.cli.context import context
from memctl.cli.forget import forget
from memctl.cli.ingest import ingest
from memctl.cli.review import review_confirm, review_pending, review_reject
from memctl.cli.search import history, search
from memctl.cli.topics import activate, list_topics, show_topic

# (Memory method, click command, MCP tool, declaration)
OPERATIONS = [
    (Memory.search, search, "search", params.SEARCH),
    (Memory.ingest, ingest, "ingest", params.INGEST),
    (Memory.context, context, "context", params.CONTEXT),
    (TopicsGroup.activate, activate, "topics_activate", params.ACTIVATE),
    (TopicsGroup.list, list_topics, "topics_list", params.TOPICS_SCOPE),
    (TopicsGroup.show, show_topic, "topics_show", params.TOPICS_SCOPE),
    (Memory.forget, forget, "forget", params.FORGET),
    (Memory.history, history, "history", params.HISTORY_SCOPE),
    (ReviewGroup.pending, review_pending, "review_pending", params.REVIEW_SCOPE),
    (ReviewGroup.confirm, review_confirm, "confirm", params.REVIEW_SCOPE),
    (ReviewGroup.reject, review_reject, "reject", params.REVIEW_SCOPE),
]


@pytest.mark.parametrize(("method", "command", "tool", "declared"), OPERATIONS, ids=[o[2] for o in OPERATIONS])
def test_declarations_match_the_method(method, command, tool, declared):
    signature = dict(inspect.signature(method).parameters)
    if "where" in signature:  # a search's filters are the fields of its `where`
        signature.update(inspect.signature(Filters).parameters)
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


def test_the_search_filters_are_declared_by_the_fields_of_filters_alone():
    assert [p.name for p in params.SEARCH_FILTERS] == [f for f in inspect.signature(Filters).parameters]
    assert {p.name for p in params.SEARCH_RANKING} | {"where"} <= set(inspect.signature(Memory.search).parameters)
    assert not {p.name for p in params.SEARCH_FILTERS} & set(inspect.signature(Memory.search).parameters)


def test_a_search_takes_its_filters_as_one_value_or_as_keywords(store_dir):
    memory = Memory(store_dir)
    memory.ingest("Kestrel orders run on PostgreSQL\n", kind="memory", section="Decisions", scope="project:kestrel")
    memory.ingest("Kestrel orders were on MySQL once\n", kind="memory", section="Notes")
    memory.ingest('{"text": "Kestrel orders are slow today, says the team", "session": "s1"}\n', kind="message")

    def ids(**options):
        return [r.id for r in memory.search("Kestrel orders", min_score=0, **options)]

    every = ids()
    assert len(every) == 3
    where = Filters(kinds=["memory"], sections=("Decisions",))
    assert ids(where=where) == ids(kinds=["memory"], sections=["Decisions"])
    assert len(ids(where=where)) == 1 and ids(where=where)[0] in every
    assert ids(where=where, sections=["Notes"]) == ids(kinds=["memory"], sections=["Notes"])  # a keyword wins
    assert ids(where=Filters(scope="project:kestrel"), kinds=["memory"]) == ids(scope="project:kestrel",
                                                                                kinds=["memory"])
    with pytest.raises(TypeError, match="kind"):
        memory.search("Kestrel", kind=["memory"])  # not a field: the MCP name is not the API's
    with pytest.raises(InputError, match="--since"):
        memory.search("Kestrel", where=Filters(since="yesterday"))
    assert memory.filters(where) == memory.filters(kinds=["memory"], sections=["Decisions"])


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
