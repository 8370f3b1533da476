"""`memctl context` as the per-turn call (issue 21): core rules, current memories, found messages, topics and
recent messages under one budget, on real stores (real files, real Tantivy, the fake embedder)."""

from __future__ import annotations

import json

import orjson
import pytest

from conftest import snapshot
from memctl import Memory
from memctl.mcp import tools
from memctl.text.tokens import count_tokens
from test_topics import HOTEL, TAXI, WEATHER, session_lines

# The defaults find the current memory for the question: the bundled model, as a user runs memctl.
pytestmark = pytest.mark.real_model
NOW = {"MEMCTL_NOW": "2026-11-21T09:00:00Z", "MEMCTL_TOPICS_KEEP_RECENT": "2"}
QUESTION = "Which database does Harbor use now?"
CORE_RULE = "Always answer in English and name the memory you relied on."
CURRENT = ("Harbor moved to PostgreSQL 16 in October: the orders, the invoices and the audit trail all live "
           "there now, with logical replication to the reporting replica.")


def notes(run, *items: dict, args: tuple[str, ...] = ()) -> None:
    done = run("ingest", "--kind", "memory", "--format", "jsonl", *args, "-",
               input=b"".join(orjson.dumps(i) + b"\n" for i in items), env=NOW)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def harbor(run, store_dir, monkeypatch):
    """A core rule, "Harbor uses MySQL 8" superseded by "Harbor moved to PostgreSQL 16", an unrelated
    note and a chat split into topics (the last two messages recent)."""
    for key, value in NOW.items():
        monkeypatch.setenv(key, value)
    notes(run, {"id": "rule-english", "text": CORE_RULE, "is_core": True, "section": "Rules"},
          {"id": "harbor-db", "text": "Harbor uses MySQL 8.", "section": "Decisions"},
          {"id": "kestrel-deploy", "text": "Kestrel deploys only on Fridays.", "section": "Decisions"})
    notes(run, {"id": "harbor-db-2", "text": CURRENT, "section": "Decisions",
                "summary": "Harbor: PostgreSQL 16 since October."}, args=("--supersedes", "harbor-db"))
    assert run("ingest", "-", input=session_lines(WEATHER + HOTEL + TAXI), env=NOW).returncode == 0
    done = run("split", "--session", "s1", "--force", "--keep-recent", "2", env=NOW)
    assert done.returncode == 0, done.stderr
    assert run("index", env=NOW).returncode == 0
    return store_dir


def context_json(run, *args: str):
    done = run("context", "--session", "s1", "--json", *args, env=NOW)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr.decode()


def memory_ids(result: dict, kind: str) -> list[str]:
    return [s["id"] for s in result["sections"] if s["kind"] == kind]


def test_the_context_holds_the_core_rule_and_the_current_memory_not_the_superseded_one(run, harbor):
    result, _ = context_json(run, "--message", QUESTION, "--budget", "1500", "--no-record")
    assert memory_ids(result, "core") == ["rule-english"]
    memory = next(s for s in result["sections"] if s["kind"] == "memory" and s["id"] == "harbor-db-2")
    assert memory["section"] == "Decisions" and memory["score"] > 0 and memory["content"] == "full"
    assert memory["summary"] == "Harbor: PostgreSQL 16 since October." and memory["text"] == CURRENT
    assert "harbor-db" not in memory_ids(result, "memory")
    text = run("context", "--session", "s1", "--message", QUESTION, "--budget", "1500", "--no-record",
               env=NOW).stdout.decode()
    assert CORE_RULE in text and CURRENT in text and "MySQL" not in text
    # In the documented order: the core rules first, the conversation last, the new message at its end.
    kinds = [s["kind"] for s in result["sections"]]
    assert kinds[0] == "core" and kinds[-1] == "recent" and kinds.index("memory") < kinds.index("recent")
    assert result["sections"][-1]["messages"][-1]["text"] == QUESTION
    shown = [m["id"] for s in result["sections"] for m in s["messages"]]
    assert len(shown) == len(set(shown))  # no message twice


def test_the_budget_is_never_exceeded_and_every_drop_is_named(run, harbor):
    full, _ = context_json(run, "--message", QUESTION, "--budget", "8000", "--no-record")
    assert full["dropped"] == []
    every_message = {m["id"] for s in full["sections"] for m in s["messages"]}
    every_memory = {s["id"] for s in full["sections"] if s["kind"] in ("core", "memory")}
    for budget in (40, 60, 90, 130, 200, 300, 500):
        done = run("context", "--session", "s1", "--message", QUESTION, "--budget", str(budget), "--no-record",
                   env=NOW)
        assert done.returncode == 0, done.stderr
        assert count_tokens(done.stdout.decode()) <= budget
        result, said = context_json(run, "--message", QUESTION, "--budget", str(budget), "--no-record")
        assert result["tokens"] == count_tokens(done.stdout.decode()) <= budget
        shown = {m["id"] for s in result["sections"] for m in s["messages"]}
        kept = {s["id"] for s in result["sections"] if s["kind"] in ("core", "memory")}
        dropped_messages = {d["message_id"] for d in result["dropped"] if "message_id" in d}
        dropped_memories = {d["memory_id"] for d in result["dropped"] if "memory_id" in d}
        # Each part of the full context is either shown or named as dropped, on stderr too.
        assert shown | dropped_messages == every_message and not shown & dropped_messages
        assert kept | dropped_memories == every_memory and not kept & dropped_memories
        for dropped in result["dropped"]:
            label = dropped.get("message_id") or dropped.get("memory_id") or f"summary of {dropped['topic_id']}"
            assert label in said
    # Tight: the current memory is given as its summary before it is dropped (G1), the core rule kept longest.
    tight, _ = context_json(run, "--message", QUESTION, "--budget", "90", "--no-record")
    assert memory_ids(tight, "core") == ["rule-english"]
    harbor_now = [s for s in tight["sections"] if s.get("id") == "harbor-db-2"]
    assert harbor_now and harbor_now[0]["content"] == "summary"
    assert harbor_now[0]["text"] == "Harbor: PostgreSQL 16 since October."


def test_a_preview_writes_nothing_and_a_plain_call_records(run, harbor):
    before = snapshot(harbor)
    stamps = {p: p.stat().st_mtime_ns for p in harbor.rglob("*") if p.is_file()}
    context_json(run, "--message", QUESTION, "--no-record")
    assert snapshot(harbor) == before
    assert {p: p.stat().st_mtime_ns for p in harbor.rglob("*") if p.is_file()} == stamps
    context_json(run, "--message", QUESTION)
    assert (harbor / "topics" / "activation.json").exists() and snapshot(harbor) != before


def test_mcp_tool_memory_context_and_the_cli_return_the_same(run, harbor):
    cli, _ = context_json(run, "--message", QUESTION, "--budget", "700", "--no-record")
    memory = Memory(harbor)
    api = memory.context("s1", QUESTION, budget=700, no_record=True)
    assert api.as_dict() == cli
    tool = tools.context(memory, "s1", QUESTION, budget=700, no_record=True)
    assert {k: v for k, v in tool.items() if k != "text"} == cli
    assert tool["text"] == run("context", "--session", "s1", "--message", QUESTION, "--budget", "700",
                               "--no-record", env=NOW).stdout.decode()


def test_memories_of_another_scope_stay_out(run, harbor):
    notes(run, {"id": "bob-bank", "text": "Harbor's owner Bob banks with Northwind.", "scope": "user:bob",
                "section": "People", "is_core": True})
    result, _ = context_json(run, "--message", "Which bank does the Harbor owner use?", "--no-record")
    assert "bob-bank" not in json.dumps(result)
