"""Each JSON shape declared once (#32 item 3): a result's declaration is what `--json` prints, what an
MCP tool returns and declares as its output schema, and what the docs say (memctl/text/shape.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import jsonschema
import orjson
import pytest

from conftest import REPO
from memctl import Memory
from memctl.api.shapes import SHAPES, Chain, Entry, Result, TopicRow, TopicShown
from memctl.mcp.tools import TOOLS
from memctl.text.shape import ABSENT, Shape, derived, hidden, shown


@dataclass
class Part(Shape):
    name: str = shown("A name.")
    weight: float = shown(digits=2)


@dataclass
class Whole(Shape):
    """A whole."""
    id: str = shown()
    kind: Literal["a", "b"] = shown()
    before: str = shown(name="from")
    note: str = shown(omit="empty", default="")
    parts: list[Part] = shown(default_factory=list)
    extra: Part | None = shown(flatten=True, default=None)
    detail: dict = shown(when="explain", default_factory=dict)
    secret: str = hidden(default="kept")

    @derived("Twice the id, when kind is a.", after="id", optional=True)
    def twice(self) -> str:
        return self.id * 2 if self.kind == "a" else ABSENT


def test_a_shape_s_json_form_follows_its_declaration():
    whole = Whole("x", "a", "old", parts=[Part("p", 0.123)], extra=Part("e", 1.0), detail={"d": 1})
    assert list(whole.as_dict()) == ["id", "twice", "kind", "from", "parts", "name", "weight"]
    assert whole.as_dict() == {"id": "x", "twice": "xx", "kind": "a", "from": "old",
                               "parts": [{"name": "p", "weight": 0.12}], "name": "e", "weight": 1.0}
    assert whole.as_dict(explain=True)["detail"] == {"d": 1}
    plain = Whole("y", "b", "old", note="n")
    assert plain.as_dict() == {"id": "y", "kind": "b", "from": "old", "note": "n", "parts": []}
    schema = Whole.schema()
    assert schema["required"] == ["id", "kind", "from", "parts"]  # flattened None-able, omitted, asked: optional
    assert schema["properties"]["kind"] == {"enum": ["a", "b"]}
    assert schema["description"] == "A whole."
    for value in (whole.as_dict(), whole.as_dict(explain=True), plain.as_dict()):
        jsonschema.validate(value, schema)
    assert Whole.outline() == ('{"id", "twice"?, "kind": "a"|"b", "from", "note"?, "parts": [{"name", "weight"}], '
                               '"name"?, "weight"?, "detail"?}')


def test_no_result_writes_its_json_by_hand():
    """The one as_dict is the generic one: a shape cannot print keys its declaration does not have."""
    written = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "memctl").rglob("*.py"))
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               if re.match(r"\s*def as_dict\(", line)]
    assert written == ["memctl/text/shape.py:" + str(next(
        n for n, line in enumerate((REPO / "memctl/text/shape.py").read_text().splitlines(), 1)
        if "def as_dict(" in line))]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.__name__)
def test_every_result_shape_has_a_json_schema(shape):
    schema = shape.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"] and shape.outline().startswith("{")


NOW = {"MEMCTL_NOW": "2026-11-20T08:00:00Z"}


@pytest.fixture
def seeded(store_dir, monkeypatch):
    """A store with a version chain (one version soft-deleted by the lifecycle, one id named but stored
    nowhere), a pending note, messages, a topic and a cache entry."""
    monkeypatch.setenv("MEMCTL_NOW", NOW["MEMCTL_NOW"])
    memory = Memory(store_dir)
    first = memory.ingest('{"text": "Kestrel uses PostgreSQL 15.", "canonical_topic": "db", "summary": "pg"}',
                          kind="memory", section="Decisions", scope="project:kestrel").outcomes[0].id
    second = memory.ingest('{"text": "Kestrel moved to PostgreSQL 16.", "canonical_topic": "db"}', kind="memory",
                           section="Decisions", supersedes=[first], scope="project:kestrel").outcomes[0].id
    memory.ingest('{"text": "Mei demo on December 12th"}', pending=True)
    memory.ingest("\n".join(orjson.dumps({"session": "s1", "speaker": "Mei", "text": text}).decode() for text in
                            ("The Tamsui shop opens at seven", "Kestrel orders ship at noon")), fmt="jsonl")
    memory.cache.put("run-1", "quote", {"symbol": 2330}, "TSMC 1032", agent="pro")
    memory.cache.put("run-1", "bad", {"symbol": 1}, b"\xff\xfe", exit_code=1)
    return memory, first, second


CALLS = {
    "search": {"query": "Kestrel database", "explain": True, "min_score": 0},
    "layered_search": {"query": "what did we decide last time about Kestrel", "workspace": "project:kestrel"},
    "history": {"id": "SECOND"},
    "ingest": {"text": "Kestrel ships orders at noon", "kind": "memory", "section": "Ops"},
    "index": {},
    "review_pending": {},
    "state_plan": {"message": "what did we decide"},
    "state_record": {"sections": ["Decisions"], "dry_run": True},
    "health": {"scores": True},
    "cache_get": {"scope": "run-1", "tool": "quote", "args": {"symbol": 2330}},
    "cache_put": {"scope": "run-1", "tool": "bad2", "args": [1], "output": "", "exit_code": 3},
    "cache_search": {"query": "TSMC"},
    "cache_stats": {},
    "context": {"session": "s1", "message": "When does the Tamsui shop open?", "no_record": True},
    "topics_list": {},
    "topics_activate": {"query": "Tamsui shop"},
    "review_daily": {"dry_run": True},
    "forget": {"match": "Tamsui"},
}


def test_every_mcp_tool_returns_what_its_output_schema_declares(seeded):
    memory, _, second = seeded
    missing = set(TOOLS) - set(CALLS) - {"confirm", "reject", "topics_show"}
    assert not missing, f"give these tools a call here: {missing}"
    for name, arguments in CALLS.items():
        arguments = {k: second if v == "SECOND" else v for k, v in arguments.items()}
        result = TOOLS[name].run(memory, **arguments)
        jsonschema.validate(orjson.loads(orjson.dumps(result)), TOOLS[name].output_schema)
        assert f"Returns {TOOLS[name].returns.outline(always=TOOLS[name].always)}." in TOOLS[name].description
    pending = TOOLS["review_pending"].run(memory)["pending"]
    confirmed = TOOLS["confirm"].run(memory, ids=[pending[0]["id"]], dry_run=True)
    rejected = TOOLS["reject"].run(memory, ids=[pending[0]["id"]])
    for name, result in (("confirm", confirmed), ("reject", rejected)):
        jsonschema.validate(result, TOOLS[name].output_schema)
    assert TOOLS["search"].run(memory, query="Kestrel", explain=True)["results"][0]["explain"]
    assert "explain" not in TOOLS["search"].run(memory, query="Kestrel")["results"][0]


def test_the_command_line_prints_the_declared_shapes(seeded, run):
    memory, _, second = seeded
    lines = lambda done: [orjson.loads(line) for line in done.stdout.splitlines()]  # noqa: E731
    found = lines(run("search", "--json", "--explain", "--min-score", "0", "Kestrel", env=NOW))
    assert found and all(jsonschema.validate(row, Result.schema()) is None for row in found)
    (entry,) = lines(run("cache", "get", "--scope", "run-1", "--tool", "bad", "--args", '{"symbol": 1}', "--json",
                         env=NOW))
    jsonschema.validate(entry, Entry.schema())
    assert "output" not in entry and entry["output_base64"] == "//4=" and entry["negative"] is True
    (chain,) = lines(run("history", second, "--json", env=NOW))
    jsonschema.validate(chain, Chain.schema())
    for row in lines(run("topics", "list", "--json", env=NOW)):
        jsonschema.validate(row, TopicRow.schema())


@pytest.mark.parametrize("command, shape", [(["search"], Result), (["history"], Chain), (["cache", "get"], Entry),
                                            (["topics", "list"], TopicRow), (["topics", "show"], TopicShown)])
def test_a_command_s_json_help_names_every_key_of_its_shape(run, command, shape):
    """The help is written out (making it from the shape would import search at every start) and
    checked here against the declaration."""
    def keys(schema: dict) -> list[str]:  # the keys of a shape and of the shapes in it
        nested = [one for one in (schema.get("items"), *schema.get("anyOf", ())) if one]
        return [*schema.get("properties", {}), *(k for one in schema.get("properties", {}).values() for k in keys(one)),
                *(k for one in nested for k in keys(one))]

    shown_help = " ".join(run(*command, "--help").stdout.decode().split())
    assert [key for key in keys(shape.schema()) if f'"{key}"' not in shown_help] == []


def test_history_is_one_shape_on_the_command_line_and_through_mcp(seeded, run):
    """`memctl history --json`, the deprecated `search --history --json` and the MCP history tool give
    the same object, with a version soft-deleted, one named but stored nowhere, and a scope."""
    memory, first, second = seeded
    text = memory.store.memory_md.read_text()
    assert f'supersedes: ["{first}"]' in text
    memory.store.memory_md.write_text(text.replace(f'supersedes: ["{first}"]', f'supersedes: ["{first}", "mem-gone"]')
                                      .replace("status: deprecated", 'status: deprecated\nsupersedes: ["mem-older"]'))
    (memory.store.root / "deleted").mkdir()
    (memory.store.root / "deleted" / "2026-11.md").write_text(
        "## Decisions\n\n<!-- memory\nid: mem-older\nsummary: Kestrel used MySQL.\nscope: project:kestrel\n"
        "status: deprecated\ncreated_at: 2026-10-01T08:00:00Z\n-->\nKestrel used MySQL.\n")
    for scope in (None, "project:kestrel"):
        by_scope = ("--scope", scope) if scope else ()
        command = run("history", second, "--json", *by_scope, env=NOW)
        old_flag = run("search", "--history", second, "--json", *by_scope, env=NOW)
        assert command.returncode == old_flag.returncode == 0, command.stderr
        assert command.stdout == old_flag.stdout
        (printed,) = [orjson.loads(line) for line in command.stdout.splitlines()]
        assert printed == TOOLS["history"].run(Memory(memory.path), id=second, scope=scope)
        assert printed["current"] == [second]
        if scope is None:
            assert [(link["id"], link["status"]) for link in printed["links"]] == [
                ("mem-older", "deleted"), (first, "deprecated"), ("mem-gone", "missing"), (second, "active")]


def test_a_topic_is_one_shape_on_the_command_line_and_through_mcp(seeded, run):
    """`memctl topics show --json` once printed JSON lines (the header, then each message with the topic
    file's "type" tag) where the MCP topics_show tool gave {"topic", "messages"}: now both give the one
    declared TopicShown, links and all."""
    memory, _, _ = seeded
    memory.topics.split("s1", force=True, keep_recent=0)
    (topic,) = memory.topics.list()
    command = run("topics", "show", topic.id, "--json", env=NOW)
    assert command.returncode == 0, command.stderr
    (printed,) = [orjson.loads(line) for line in command.stdout.splitlines()]
    assert printed == TOOLS["topics_show"].run(Memory(memory.path), id=topic.id)
    jsonschema.validate(printed, TopicShown.schema())
    assert printed["topic"]["id"] == topic.id and printed["topic"]["links"] == []
    assert [m["text"] for m in printed["messages"]] == ["The Tamsui shop opens at seven", "Kestrel orders ship at noon"]
    assert all("type" not in one for one in (printed["topic"], *printed["messages"]))


@pytest.mark.process
def test_the_help_and_the_tool_table_import_no_shape_of_search():
    """`memctl --help` imports every command module, the MCP one with the tool table: the shapes the tools
    return are looked up when asked for, so neither imports search, the topics or numpy (it once did)."""
    import subprocess
    import sys

    code = ("import sys, contextlib, io\nfrom memctl.cli import cli\nimport memctl.mcp.tools\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    cli.main(['--help'], prog_name='memctl')\n"
            "print(sorted(m for m in ('numpy', 'memctl.search.search', 'memctl.topics.daily', 'memctl.api.shapes')"
            " if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stderr
