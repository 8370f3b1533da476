"""Layered retrieval (G1, G3), MERA ranking (G4), chains in search (G6), isolation as a property (G7)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memctl.store import memoryfile
from memctl.ingest.ingest import ingest
from memctl.governance.layers import layered_search, trigger
from memctl.index.filters import Filters
from memctl.search.queries import Query
from memctl.search.search import search_store
from memctl.store.store import Store
from memctl.api import Memory
from conftest import runtime_of

NOW = "2026-11-22T12:00:00Z"


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", NOW)


def notes(store: Store, *items: dict, **options) -> None:
    ingest(runtime_of(store), b"".join(orjson.dumps(i) + b"\n" for i in items), source="<stdin>", kind="memory",
           fmt="jsonl", keep_noise=True, **options)


@pytest.fixture
def governed(tmp_path) -> Store:
    store = Store(tmp_path / "g")
    notes(store,
          {"id": "core-lang", "text": "Always answer in English.", "is_core": True, "memory_class": "policy",
           "section": "Rules"},
          {"id": "core-weight", "text": "Never push to main without review.", "user_weight": 9,
           "memory_class": "policy", "section": "Rules"},
          {"id": "core-b", "text": "Project B deploys only on Fridays.", "is_core": True, "scope": "project:b",
           "section": "Rules"},
          {"id": "a-db", "text": "Project A stores orders in PostgreSQL 16.", "scope": "project:a",
           "section": "Decisions"},
          {"id": "a-queue", "text": "Project A uses Redis Streams for its job queue.", "scope": "project:a",
           "section": "Decisions"},
          {"id": "g-style", "text": "Code style: black with line length 100.", "section": "Style"})
    return store


def test_layers_in_order_with_scope_isolation(governed):
    result = layered_search(runtime_of(governed), "which queue does the worker use", workspace="project:a", budget=2000)
    assert [i["id"] for i in result.layers["L0"]] == ["core-lang", "core-weight"]  # not project B's core
    assert {i["id"] for i in result.layers["L1"]} == {"a-db", "a-queue"}
    assert result.trigger == "decision question 'which'"
    assert "core-b" not in orjson.dumps(result.as_dict()).decode()
    every = [i["id"] for layer in result.layers.values() for i in layer]
    assert len(every) == len(set(every))
    assert result.tokens_used == sum(i["tokens"] for layer in result.layers.values() for i in layer)


def test_tight_budget_falls_back_to_summaries(governed):
    # The fixture's texts are no longer than their summaries: only a long one can fall back.
    notes(governed, {"id": "core-release", "text": "Before a release: " + "run the tests, tag it, write notes; " * 12,
                     "summary": "The release checklist.", "is_core": True, "memory_class": "policy",
                     "section": "Rules"})
    roomy = layered_search(runtime_of(governed), "hello", workspace="project:a", budget=2000)
    full = sum(i["tokens"] for i in roomy.layers["L0"])
    # Ten tokens short: the long text no longer fits, its summary does, and so does the next core memory.
    tight = layered_search(runtime_of(governed), "hello", workspace="project:a", budget=full - 10)
    assert [(i["id"], i["content"]) for i in tight.layers["L0"]] == [
        ("core-lang", "full"), ("core-release", "summary"), ("core-weight", "full")]
    assert tight.layers["L0"][1]["text"] == "The release checklist."
    assert tight.tokens_used <= full - 10


def test_no_trigger_no_query_layer_and_every_fifth_turn(governed):
    turns = [layered_search(runtime_of(governed), "tell me the code style", workspace="project:a", budget=500)
             for _ in range(5)]
    assert [t.trigger for t in turns[:4]] == [None] * 4
    assert turns[4].trigger == "every 5th turn (turn 5)"
    assert all(t.layers["L2"] == [] for t in turns[:4])


@pytest.mark.parametrize("query, fired", [
    ("what did we do last time", "history word"),
    ("我們之前怎麼部署的", "history word"),
    ("should we compare Kafka", "decision question"),
    ("How does KafkaConnect handle retries", "unresolved entity 'KafkaConnect'"),
    ("check `orders.py` for bugs", "unresolved entity 'orders.py'"),
    ("How is the weather", None),
])
def test_g3_triggers(query, fired):
    got = trigger(query, covered_text="Redis Streams PostgreSQL", turn=1)
    assert (got is None) if fired is None else got.startswith(fired)


def test_search_returns_only_chain_tails_even_after_hand_edits(tmp_path):
    store = Store(tmp_path / "c")
    notes(store, {"id": "db-v1", "text": "Kestrel uses MySQL for orders", "canonical_topic": "db"})
    notes(store, {"id": "db-v2", "text": "Kestrel uses PostgreSQL for orders", "canonical_topic": "db"},
          supersedes=["db-v1"])
    found = [r.record_id for r in search_store(runtime_of(store), [Query(text="Kestrel orders database", min_score=0)],
                                               count_access=False)[0]]
    assert found == ["db-v2"]
    # By hand: v1 made active again, still superseded by v2 -> still hidden.
    text = store.memory_md.read_text().replace("status: deprecated\n", "")
    store.memory_md.write_text(text)
    assert memoryfile.load(store.memory_md).find("db-v1").get("status") is None
    found = [r.record_id for r in search_store(runtime_of(store), [Query(text="Kestrel orders database", min_score=0)],
                                               count_access=False)[0]]
    assert found == ["db-v2"]


def test_cli_history_and_rank_mera(run, tmp_path):
    store = Store(tmp_path / "h")
    notes(store, {"id": "v1", "text": "Standup is at 9:00", "canonical_topic": "standup"})
    notes(store, {"id": "v2", "text": "Standup moved to 9:30", "canonical_topic": "standup"}, supersedes=["v1"])
    history = run("search", "--history", "v2", "--json", store=store.root, env={"MEMCTL_NOW": NOW})
    assert history.returncode == 0, history.stderr
    (chain,) = [orjson.loads(line) for line in history.stdout.splitlines()]
    assert [link["id"] for link in chain["links"]] == ["v1", "v2"] and chain["current"] == ["v2"]
    # one shape on both faces: the CLI's --json is the MCP history tool's answer
    from memctl.mcp.tools import TOOLS

    assert chain == TOOLS["history"].run(Memory(store.root), id="v2")
    command = run("history", "v2", "--json", store=store.root, env={"MEMCTL_NOW": NOW})
    assert (command.returncode, command.stdout) == (0, history.stdout)  # the old flag works one more release
    assert run("history", "nope", store=store.root).returncode == 2
    assert run("search", "--history", "nope", store=store.root).returncode == 2
    mera = run("search", "--rank", "mera", "--explain", "--json", "--min-score", "0", "standup time",
               store=store.root, env={"MEMCTL_NOW": NOW})
    (row,) = [orjson.loads(line) for line in mera.stdout.splitlines()]
    parts = row["explain"]["mera"]
    expected = (0.4 * parts["relevance"] + 0.25 * parts["recency_decay"] + 0.2 * parts["access_frequency"]
                + 0.15 * parts["user_weight"] / 10)
    assert row["score"] == pytest.approx(expected, abs=1e-5)


def test_cli_layered_json(run, governed):
    result = run("search", "--layered", "--workspace", "project:a", "--budget", "50", "--json",
                 "should we switch queues", store=governed.root, env={"MEMCTL_NOW": NOW})
    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    assert data["budget"] == 50 and data["tokens_used"] <= 50
    assert set(data["layers"]) == {"L0", "L1", "L2"} and data["trigger"].startswith("decision question")


# -- G7 as a property: no query ever returns another project's memory --------------------------
WORDS = ["deploy", "database", "queue", "invoice", "cache", "report", "schema", "retry", "部署", "資料庫", "報表"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(memories=st.lists(st.tuples(st.sampled_from(["global", "project:a", "project:b", "lang:zh"]),
                                   st.lists(st.sampled_from(WORDS), min_size=2, max_size=6)),
                         min_size=3, max_size=12),
       queries=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                                  st.sampled_from(["project:a", "project:b", "lang:zh"]),
                                  st.sampled_from(["hybrid", "bm25", "vector"])), min_size=1, max_size=4))
def test_no_search_returns_another_scope(tmp_path_factory, memories, queries):
    store = Store(tmp_path_factory.mktemp("iso") / "s")
    notes(store, *({"id": f"m{n}", "text": " ".join(words) + f" note {n}", "scope": scope}
                   for n, (scope, words) in enumerate(memories)))
    scope_of = {f"m{n}": scope for n, (scope, _) in enumerate(memories)}
    batch = [Query(text=" ".join(words), mode=mode, k=20, min_score=0, filters=Filters(scopes=(scope,)))
             for words, scope, mode in queries]
    for (words, scope, _mode), results in zip(queries, search_store(runtime_of(store), batch, count_access=False)):
        assert {scope_of[r.record_id] for r in results} <= {scope, "global"}
        layered = layered_search(runtime_of(store), " ".join(words), workspace=scope, budget=4000)
        shown = {i["id"] for layer in layered.layers.values() for i in layer}
        assert {scope_of[i] for i in shown} <= {scope, "global"}
