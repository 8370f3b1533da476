"""`memctl mcp` driven by the MCP SDK's own stdio client, as an agent's host drives it."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import orjson
import pytest

from conftest import memctl_command

mcp = pytest.importorskip("mcp")

REQUIRED_TOOLS = {"search", "ingest", "review_pending", "confirm", "history", "state_plan", "state_record",
                  "health"}


def server(store) -> "mcp.StdioServerParameters":
    command, *args = memctl_command()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    return mcp.StdioServerParameters(command=command, args=[*args, "--store", str(store), "mcp"], env=env)


async def session_run(store, body):
    log = store.parent / "mcp-stderr.log"
    try:
        with open(log, "w") as errlog:
            async with mcp.stdio_client(server(store), errlog=errlog) as (read, write):
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(session)
    finally:
        print(log.read_text())  # the server's stderr, which pytest shows when the test fails


def payload(result) -> dict:
    assert not result.is_error, result.content[0].text
    data = orjson.loads(result.content[0].text)
    assert data == result.structured_content
    return data


def test_tools_ingest_search_and_errors(store_dir):
    async def body(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert REQUIRED_TOOLS <= set(tools)
        for t in tools.values():
            assert t.input_schema["type"] == "object" and "Returns" in t.description, t.name

        stored = payload(await session.call_tool("ingest", {
            "text": "Kestrel uses PostgreSQL for JSONB recipe metadata, one schema per tenant bakery.",
            "kind": "memory", "section": "Decisions"}))
        (outcome,) = stored["outcomes"]
        assert (outcome["kind"], outcome["status"], outcome["file"]) == ("memory", "stored", "MEMORY.md")
        payload(await session.call_tool("ingest", {"text": '{"speaker": "Mei", "text": "The Tamsui shop '
                                                           'opens at seven every morning"}', "format": "jsonl"}))

        found = payload(await session.call_tool("search", {"query": "which database does Kestrel use", "k": 3}))
        assert found["results"][0]["id"] == outcome["id"]
        assert found["results"][0]["section"] == "Decisions"
        words_only = payload(await session.call_tool("search", {"query": "Tamsui shop", "mode": "bm25",
                                                                "kind": ["message"]}))
        assert [r["speaker"] for r in words_only["results"]] == ["Mei"]

        bad_type = await session.call_tool("search", {"query": "database", "k": "three"})
        unknown = await session.call_tool("search", {"query": "database", "limit": 3})
        refused = await session.call_tool("ingest", {"text": '{"text": 42}', "format": "jsonl"})
        no_tool = await session.call_tool("forget_everything", {})
        for result in (bad_type, unknown, refused, no_tool):
            assert result.is_error
            (message,) = result.content
            assert message.text and "\n" not in message.text
        assert "'k'" in bad_type.content[0].text
        assert "limit" in unknown.content[0].text
        assert refused.content[0].text.startswith("<mcp>:1: field 'text':")

        again = payload(await session.call_tool("search", {"query": "which database does Kestrel use"}))
        return again, payload(await session.call_tool("history", {"id": outcome["id"]})), outcome["id"]

    again, history, memory_id = anyio.run(session_run, store_dir, body)
    assert again["results"][0]["id"] == memory_id
    assert [link["id"] for link in history["links"]] == history["current"] == [memory_id]
    # What the server wrote is the store the command line reads.
    listed = subprocess.run([*memctl_command(), "--store", str(store_dir), "search", "--json", "--mode", "bm25",
                             "Tamsui"], capture_output=True, timeout=120)
    assert listed.returncode == 0 and b"Tamsui" in listed.stdout


def test_pending_review_and_state_through_the_server(store_dir):
    async def body(session):
        held = payload(await session.call_tool("ingest", {"text": "Mei's demo is on December 12th",
                                                          "pending": True, "section": "Plans"}))
        (pending_id,) = [o["id"] for o in held["outcomes"]]
        listed = payload(await session.call_tool("review_pending", {}))
        confirmed = payload(await session.call_tool("confirm", {"ids": [pending_id]}))
        empty = payload(await session.call_tool("review_pending", {}))
        empty_ids = await session.call_tool("confirm", {"ids": []})
        recorded = payload(await session.call_tool("state_record", {"sections": ["Plans"]}))
        plan = payload(await session.call_tool("state_plan", {"message": "when is the demo?"}))
        health = payload(await session.call_tool("health", {}))
        return pending_id, listed, confirmed, empty, empty_ids, recorded, plan, health

    pending_id, listed, confirmed, empty, empty_ids, recorded, plan, health = anyio.run(session_run, store_dir, body)
    assert [row["id"] for row in listed["pending"]] == [pending_id]
    assert [(row["id"], row["status"]) for row in confirmed["confirmed"]] == [(pending_id, "confirmed")]
    assert empty["pending"] == []
    assert empty_ids.is_error and "'ids'" in empty_ids.content[0].text
    assert recorded["sections_hit"] == ["Plans"] and recorded["dry_run"] is False
    assert plan["has_state"] is True and "Plans" in plan["dominant"]
    assert [p for p in health["problems"] if p["severity"] == "error"] == []
    assert "Mei's demo" in (store_dir / "MEMORY.md").read_text()


def test_plain_cli_does_not_import_the_sdk():
    probe = "import sys; from memctl.cli import cli; print(any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_cache_tools_share_a_call_between_agents(store_dir):
    call = {"scope": "debate-7", "tool": "quote", "args": {"symbol": "2330"}}

    async def body(session):
        miss = payload(await session.call_tool("cache_get", call))
        put = payload(await session.call_tool("cache_put", {**call, "output": "2330 TSMC: close 1032 TWD",
                                                            "agent": "pro"}))
        hit = payload(await session.call_tool("cache_get", call))
        other = payload(await session.call_tool("cache_get", {**call, "args": {"symbol": "3444"}}))
        stats = payload(await session.call_tool("cache_stats", {"scope": "debate-7"}))
        return miss, put, hit, other, stats

    miss, put, hit, other, stats = anyio.run(session_run, store_dir, body)
    assert miss == {"hit": False, "entry": None} and other["hit"] is False
    assert hit["hit"] is True and hit["entry"]["output"] == "2330 TSMC: close 1032 TWD"
    assert hit["entry"]["id"] == put["entry"]["id"] and hit["entry"]["agent"] == "pro"
    (row,) = stats["stats"]
    assert (row["tool"], row["hits"], row["misses"]) == ("quote", 1, 2)


def test_context_and_topic_tools_through_the_server(store_dir, run):
    from test_topics import HOTEL, TAXI, WEATHER, session_lines

    run("ingest", "-", input=session_lines(WEATHER + HOTEL + TAXI))
    run("split", "--session", "s1", "--force", "--keep-recent", "2")

    async def body(session):
        listed = payload(await session.call_tool("topics_list", {}))["topics"]
        assert len(listed) >= 2 and all(t["state"] == "active" for t in listed)
        built = payload(await session.call_tool("context", {"session": "s1", "budget": 3000, "no_record": True,
                                                            "message": "What was the Acorn Guest House reference?"}))
        assert built["tokens"] <= 3000 and "ACG-42" in built["text"]
        assert built["sections"][-1]["kind"] == "recent"
        hotel = next(s["topic_id"] for s in built["sections"] if s["kind"] == "topic")
        activated = payload(await session.call_tool("topics_activate", {"query": hotel}))
        assert [a["topic_id"] for a in activated["activated"]] == [hotel]
        # The library names a bad option by its flag; a client is told the argument it sent.
        bad_month = await session.call_tool("topics_list", {"archived": True, "since": "2026-13"})
        assert bad_month.is_error
        assert bad_month.content[0].text == "argument 'since': not a month (YYYY-MM) or an ISO 8601 date: '2026-13'"
        bad_scope = await session.call_tool("search", {"query": "hotel", "scope": "everywhere"})
        assert bad_scope.is_error and bad_scope.content[0].text.startswith("argument 'scope': ")

    anyio.run(session_run, store_dir, body)
