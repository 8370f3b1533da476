"""`memctl mcp` driven by the MCP SDK's own stdio client, as an agent's host drives it."""

from __future__ import annotations

import fcntl
import itertools
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import anyio
import orjson
import pytest

from conftest import memctl_command

mcp = pytest.importorskip("mcp")
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR  # noqa: E402 (the SDK's, installed with it)

REQUIRED_TOOLS = {"search", "ingest", "review_pending", "confirm", "history", "state_plan", "state_record",
                  "health"}


def server(store, env: dict[str, str] | None = None) -> "mcp.StdioServerParameters":
    command, *args = memctl_command()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    return mcp.StdioServerParameters(command=command, args=[*args, "--store", str(store), "mcp"],
                                     env={**clean, **(env or {})})


async def session_run(store, body, env: dict[str, str] | None = None, log_dir=None):
    log = (log_dir or store.parent) / "mcp-stderr.log"
    try:
        with open(log, "w") as errlog:
            async with mcp.stdio_client(server(store, env), errlog=errlog) as (read, write):
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


@pytest.mark.process
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


@pytest.mark.process
def test_an_ingest_is_embedded_ahead_and_the_search_after_it_writes_the_vectors_a_process_writes(tmp_path):
    """After an ingest, `memctl mcp` embeds the new messages in a thread (Memory.embed_ahead); the
    search that follows takes them: byte for byte the vectors an update in a process of its own
    makes (an int8 vector depends on its batch-mates), and the new message is found."""
    env = {"MEMCTL_NOW": "2026-11-20T10:00:00Z", "MEMCTL_SERVER": "off"}
    first = b'{"id": "a1", "session": "s1", "text": "The Kestrel database moved to PostgreSQL 16"}\n'
    new = "".join(orjson.dumps({"id": f"n{n}", "session": "s1", "text": text}).decode() + "\n" for n, text in
                  enumerate(["Alice sold three lake paintings in Taipei", "The Tamsui shop opens at seven",
                             "Kyoto hotel booked near the station"]))
    stores = [tmp_path / "by-process", tmp_path / "by-mcp"]
    for store in stores:
        for args, data in ((["ingest", "-f", "jsonl", "-"], first), (["index"], b"")):
            done = subprocess.run([*memctl_command(), "--store", str(store), *args], input=data, timeout=120,
                                  capture_output=True, env={**os.environ, **env})
            assert done.returncode == 0, done.stderr
    done = subprocess.run([*memctl_command(), "--store", str(stores[0]), "ingest", "-f", "jsonl", "-"],
                          input=new.encode(), capture_output=True, env={**os.environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert subprocess.run([*memctl_command(), "--store", str(stores[0]), "index"], capture_output=True,
                          env={**os.environ, **env}, timeout=120).returncode == 0

    async def body(session):
        payload(await session.call_tool("ingest", {"text": new, "format": "jsonl"}))
        return payload(await session.call_tool("search", {"query": "lake paintings", "k": 1}))

    found = anyio.run(session_run, stores[1], body, env)
    assert found["results"][0]["id"] == "n0"
    vectors = [(store / ".index" / "vectors.npy").read_bytes() for store in stores]
    assert vectors[0] == vectors[1]


@pytest.mark.process
def test_the_server_on_a_postgresql_store_reads_and_writes_the_database(tmp_path, postgres_url):
    """`memctl --store URL mcp`: an ingest lands in the database (read back by another process's
    search and by `store copy`), and a search, context and pending review answer from it."""
    async def body(session):
        stored = payload(await session.call_tool("ingest", {
            "text": "Kestrel uses PostgreSQL for JSONB recipe metadata, one schema per tenant bakery.",
            "kind": "memory", "section": "Decisions", "pending": True}))
        (waiting,) = payload(await session.call_tool("review_pending", {}))["pending"]
        payload(await session.call_tool("confirm", {"ids": [waiting["id"]]}))
        payload(await session.call_tool("ingest", {"text": '{"speaker": "Mei", "text": "The Tamsui shop '
                                                           'opens at seven every morning"}', "format": "jsonl"}))
        found = payload(await session.call_tool("search", {"query": "which database does Kestrel use", "k": 3}))
        return stored, found

    stored, found = anyio.run(session_run, postgres_url, body, None, tmp_path)
    assert found["results"][0]["section"] == "Decisions" and "PostgreSQL" in found["results"][0]["text"]
    listed = subprocess.run([*memctl_command(), "--store", postgres_url, "search", "--json", "--mode", "bm25",
                             "Tamsui"], capture_output=True, timeout=120, env={**os.environ, "MEMCTL_SERVER": "off"})
    assert listed.returncode == 0 and b"Tamsui" in listed.stdout, listed.stderr
    copied = subprocess.run([*memctl_command(), "store", "copy", postgres_url, str(tmp_path / "look")],
                            capture_output=True, timeout=120)
    assert copied.returncode == 0, copied.stderr
    assert "Kestrel uses PostgreSQL" in (tmp_path / "look" / "MEMORY.md").read_text()


@pytest.mark.process
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


@pytest.mark.process
def test_plain_cli_does_not_import_the_sdk():
    probe = "import sys; from memctl.cli import cli; print(any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.process
def test_cache_tools_share_a_call_between_agents(store_dir, run):
    call = {"scope": "debate-7", "tool": "quote", "args": {"symbol": "2330"}}
    # Another agent stored a call through the command line, its arguments written otherwise.
    stored = run("cache", "put", "--scope", "debate-7", "--tool", "news", "--args", '{"q": " TSMC  earnings", "n": 5.0}',
                 input=b"TSMC beats estimates")
    assert stored.returncode == 0, stored.stderr

    async def body(session):
        miss = payload(await session.call_tool("cache_get", call))
        put = payload(await session.call_tool("cache_put", {**call, "output": "2330 TSMC: close 1032 TWD",
                                                            "agent": "pro"}))
        hit = payload(await session.call_tool("cache_get", call))
        other = payload(await session.call_tool("cache_get", {**call, "args": {"symbol": "3444"}}))
        from_cli = payload(await session.call_tool("cache_get", {"scope": "debate-7", "tool": "news",
                                                                 "args": {"n": 5.0, "q": "TSMC   earnings "}}))
        stats = payload(await session.call_tool("cache_stats", {"scope": "debate-7"}))
        return miss, put, hit, other, from_cli, stats

    miss, put, hit, other, from_cli, stats = anyio.run(session_run, store_dir, body)
    assert miss == {"hit": False, "entry": None} and other["hit"] is False
    assert hit["hit"] is True and hit["entry"]["output"] == "2330 TSMC: close 1032 TWD"
    assert hit["entry"]["id"] == put["entry"]["id"] and hit["entry"]["agent"] == "pro"
    assert from_cli["hit"] is True and from_cli["entry"]["output"] == "TSMC beats estimates"
    rows = {row["tool"]: row for row in stats["stats"]}
    assert (rows["quote"]["hits"], rows["quote"]["misses"]) == (1, 2)


@pytest.mark.process
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
        assert [a["topic_id"] for a in activated["activated"]] == [hotel] and activated["method"] == "id"
        shown = payload(await session.call_tool("topics_show", {"id": hotel}))
        assert shown["topic"]["id"] == hotel and shown["topic"]["links"] == []
        assert "ACG-42" in " ".join(m["text"] for m in shown["messages"])
        plan = payload(await session.call_tool("review_daily", {"dry_run": True}))
        assert plan["dry_run"] is True and {c["topic_id"] for c in plan["compressed"]} == {t["id"] for t in listed}
        # The library names a bad option by its flag; a client is told the argument it sent.
        bad_month = await session.call_tool("topics_list", {"archived": True, "since": "2026-13"})
        assert bad_month.is_error
        assert bad_month.content[0].text == "argument 'since': not a month (YYYY-MM) or an ISO 8601 date: '2026-13'"
        bad_scope = await session.call_tool("search", {"query": "hotel", "scope": "everywhere"})
        assert bad_scope.is_error and bad_scope.content[0].text.startswith("argument 'scope': ")

    anyio.run(session_run, store_dir, body)


# -- work ahead of the calls: the model opened at start, the index learned between calls -------
# Loaded by the server process (first on its PYTHONPATH): it logs, a line each, every call the
# lane of searches answers and every step of its learning ahead, and holds the first step that
# has an open index until a call waits for the lane, so that a call surely comes during learning.
LEARNING_LOG = """
import os, time
from pathlib import Path
import memctl.mcp.server as server
from memctl.server.ahead import Ahead

log = Path(os.environ["MEMCTL_TEST_LEARNING_LOG"])
learn, answer = Ahead._learn, server.Lane._answer

def logged(line):
    with open(log, "a") as out:
        out.write(line + "\\n")

def held_learn(self):
    opened = any(memory._retriever is not None for memory in self.memories.values())
    if opened and "held" not in log.read_text():
        logged("held")
        deadline = time.monotonic() + 60
        while self.calls.empty() and time.monotonic() < deadline:
            time.sleep(0.01)
    more = learn(self)
    logged("learn" if more else "learned")
    return more

def logged_answer(self, name, arguments):
    logged("call " + name)
    return answer(self, name, arguments)

log.touch()
Ahead._learn, server.Lane._answer = held_learn, logged_answer
"""


def test_a_call_during_learning_ahead_waits_one_step_and_no_result_changes(store_dir, tmp_path, run_process):
    goods = ("flour", "butter", "sugar", "yeast", "salt", "cocoa", "honey", "milk")
    shops = ("Tamsui", "Beitou", "Xinyi", "Daan", "Shilin", "Neihu", "Banqiao", "Zhonghe", "Yonghe", "Tianmu",
             "Songshan", "Wanhua", "Nangang", "Wenshan", "Xizhi")  # 120 messages: learned in 4 steps of 32 rows
    # Rows unlike each other (ages, lengths, sessions), so that facts learned for the wrong row would show.
    messages = [{"id": f"m{n}", "session": f"s{n // 10}", "speaker": "Mei" if n % 2 else "Tom",
                 "ts": f"2026-{n % 9 + 1:02d}-{n % 28 + 1:02d}T09:00:00Z",
                 "text": f"Note {n}: the {good} shipment for the {shop} shop arrives on day {n % 28 + 1}."
                         + " Call ahead." * (n % 4)}
                for n, (good, shop) in enumerate(itertools.product(goods, shops))]
    run_process("ingest", "-f", "jsonl", "-", input=b"\n".join(orjson.dumps(m) for m in messages))
    questions = ["when does the butter for Beitou arrive", "which shop gets honey", "yeast shipment Daan",
                 "what arrives on day 5", "the milk for Nangang", "cocoa"]
    # The server and the fresh process rank at the same moment, and from few candidates: a search
    # then learns only some of the rows itself (48 of 120), and later ones find the rest learned ahead.
    same = {"MEMCTL_NOW": "2026-11-24T12:00:00Z", "MEMCTL_RETRIEVAL_CANDIDATES": "20"}
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(LEARNING_LOG)
    log = tmp_path / "learning.log"
    env = {**same, "MEMCTL_TEST_LEARNING_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(hook), os.environ["PYTHONPATH"]])}

    async def logged(line: str) -> None:
        with anyio.fail_after(DEADLINE):
            while line not in log.read_text().splitlines():
                await anyio.sleep(0.01)

    async def body(session):
        async def search(question):
            return payload(await session.call_tool("search", {"query": question, "k": 5}))["results"]

        found = [await search(questions[0])]  # opens the index; the lane then learns it ahead, held at once
        await logged("held")
        found.append(await search(questions[1]))  # comes during learning: answered after that one step
        await logged("learned")
        return found + [await search(question) for question in questions[2:]]

    served = anyio.run(session_run, store_dir, body, env)
    lines = log.read_text().splitlines()
    held = lines.index("held")
    assert lines[held + 1:held + 3] == ["learn", "call search"], lines  # the held step, then the call
    assert lines.count("learn") >= 2, lines  # rows were learned ahead around the call

    batch = b"\n".join(orjson.dumps({"id": n, "query": q, "k": 5}) for n, q in enumerate(questions))
    fresh = run_process("search", "--batch", "-", input=batch, env=same)  # learns its candidates itself
    assert fresh.returncode == 0, fresh.stderr
    expected = [orjson.loads(line)["results"] for line in fresh.stdout.splitlines()]
    assert served == expected and all(expected)


# -- the wire: raw JSON-RPC lines to a real `memctl mcp` process ---------------------------
DEADLINE = 60.0  # seconds a reply or an exit may take before the test calls it a hang (a loaded machine)


class Wire:
    """`memctl mcp` as a process spoken to in raw JSON-RPC lines, each reply read with a deadline."""

    def __init__(self, store, env: dict[str, str] | None = None):
        self.log = store.parent / "mcp-stderr.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
        with open(self.log, "w") as errlog:
            self.process = subprocess.Popen([*memctl_command(), "--store", str(store), "mcp"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
                                            env={**clean, **(env or {})})
        self._unread = b""

    def send(self, message: dict | bytes) -> None:
        self.process.stdin.write((message if isinstance(message, bytes) else orjson.dumps(message)) + b"\n")
        self.process.stdin.flush()

    def reply(self) -> dict:
        """The next line the server writes, read here (a reading thread would stop stdout from closing)."""
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._unread:
            if not select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                pytest.fail(f"no reply within {DEADLINE} s: the server hangs")
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                pytest.fail("the server closed stdout instead of replying")
            self._unread += chunk
        line, _, self._unread = self._unread.partition(b"\n")
        return orjson.loads(line)

    def request(self, request_id, method: str, params: dict | None = None) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})})

    def call(self, request_id, tool: str, arguments: dict) -> None:
        self.request(request_id, "tools/call", {"name": tool, "arguments": arguments})

    def initialize(self) -> None:
        self.request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {"name": "test", "version": "0"}})
        assert self.reply()["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def exited(self) -> int | None:
        """The exit status once the process has ended, polled up to the deadline; None if it still runs."""
        deadline = time.monotonic() + DEADLINE
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.process.poll()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        print(self.log.read_text())  # the server's stderr, which pytest shows when the test fails


@pytest.fixture
def wire(store_dir):
    opened: list[Wire] = []

    def start(env: dict[str, str] | None = None) -> Wire:
        opened.append(Wire(store_dir, env))
        return opened[-1]

    yield start
    for server_process in opened:
        server_process.close()


def error_of(reply: dict, request_id) -> int:
    assert reply["id"] == request_id and "result" not in reply, reply
    return reply["error"]["code"]


@pytest.mark.process
def test_malformed_requests_get_a_json_rpc_error_and_the_server_goes_on(wire):
    server_process = wire()
    server_process.initialize()
    nested = b"[" * 900 + b"]" * 900
    refused = [  # (line, the id its error carries, the code)
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", ', 1, PARSE_ERROR),
        (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search", "arguments": '
         b'{"query": ' + nested + b"}}}", 2, INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": ' + nested * 2 + b"}", 3, PARSE_ERROR),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": [1, 2]}', 4, INVALID_PARAMS),
        (b'[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]', None, INVALID_REQUEST),
        (b'"ping"', None, INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', None, INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 8}', 8, INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"text": "\xff"}}', 9, PARSE_ERROR),
    ]
    for number, (line, request_id, code) in enumerate(refused):
        server_process.send(line)
        server_process.request(f"ping-{number}", "ping")
        assert error_of(server_process.reply(), request_id) == code, line[:80]
        assert server_process.reply() == {"jsonrpc": "2.0", "id": f"ping-{number}", "result": {}}

    # A notification is never answered, not even when it is malformed: the next reply is the ping's.
    server_process.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]}')
    server_process.request("after-notification", "ping")
    assert server_process.reply()["id"] == "after-notification"
    server_process.request("tools", "tools/list")
    served = server_process.reply()
    assert served["id"] == "tools" and "search" in {t["name"] for t in served["result"]["tools"]}

    server_process.process.stdin.close()
    assert server_process.exited() == 0


@pytest.mark.process
def test_oversize_request_and_argument_get_an_error_and_the_next_call_is_served(wire):
    server_process = wire()
    server_process.initialize()
    default_limit = 1_048_576  # [mcp] max_request_bytes
    server_process.call(1, "search", {"query": "x" * default_limit})
    refused = server_process.reply()
    assert error_of(refused, 1) == INVALID_REQUEST and "max_request_bytes" in refused["error"]["message"]

    server_process.call(2, "search", {"query": "Tamsui " * 2000})  # 14,000 characters: under the byte limit
    too_long = server_process.reply()["result"]
    assert too_long["isError"] is True
    (message,) = too_long["content"]
    assert message["text"] == "argument 'query': longer than 10000 characters (14000)"
    server_process.call(5, "search", {"query": "Tamsui", "k": "seven" * 2000})
    (message,) = server_process.reply()["result"]["content"]
    assert message["text"].startswith("argument 'k': 'sevenseven") and len(message["text"]) < 400

    server_process.call(3, "ingest", {"text": "The Tamsui shop opens at seven every morning"})
    server_process.call(4, "search", {"query": "when does the Tamsui shop open", "mode": "bm25"})
    stored, found = server_process.reply(), server_process.reply()
    assert stored["id"] == 3 and found["id"] == 4 and found["result"]["isError"] is False
    assert "Tamsui" in found["result"]["structuredContent"]["results"][0]["text"]


@pytest.mark.process
def test_request_limit_is_a_setting(wire, run):
    small = wire({"MEMCTL_MCP_MAX_REQUEST_BYTES": "8192"})
    small.initialize()
    small.call("big", "ingest", {"text": "word " * 2000})
    small.call("small", "ingest", {"text": "word " * 1000})
    assert error_of(small.reply(), "big") == INVALID_REQUEST
    assert small.reply()["result"]["isError"] is False

    refused = run("mcp", env={"MEMCTL_MCP_MAX_REQUEST_BYTES": "100"})
    assert refused.returncode == 2
    assert b"mcp.max_request_bytes must be a whole number of bytes >= 4096" in refused.stderr


def hold_index_lock(store) -> int:
    """Take the index's lock as another process would, so an index update waits for it; its descriptor."""
    (store / ".index").mkdir(mode=0o700, parents=True, exist_ok=True)
    held = os.open(store / ".index" / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


def wait_until_blocked_on(lock, pid: int) -> None:
    """Return once process `pid` waits for the flock on `lock` (Linux lists waiters in /proc/locks,
    marked "->"); elsewhere at once, the call then only sent."""
    if not os.path.exists("/proc/locks"):
        return
    inode = os.stat(lock).st_ino
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for entry in Path("/proc/locks").read_text().splitlines():
            fields = entry.split()
            if "->" in fields and str(pid) in fields and fields[-3].endswith(f":{inode}"):
                return
        time.sleep(0.05)
    pytest.fail(f"process {pid} never waited for {lock}")


@pytest.mark.process
def test_a_read_only_call_is_answered_while_a_long_call_runs(wire, store_dir):
    server_process = wire()
    server_process.initialize()
    server_process.call("note", "ingest", {"text": "Kestrel uses PostgreSQL", "kind": "memory"})
    (stored,) = server_process.reply()["result"]["structuredContent"]["outcomes"]

    held = hold_index_lock(store_dir)
    try:
        server_process.call("long", "index", {})  # waits for the index lock as long as the test holds it
        wait_until_blocked_on(store_dir / ".index" / ".lock", server_process.process.pid)
        server_process.call("quick", "history", {"id": stored["id"]})
        quick = server_process.reply()
    finally:
        os.close(held)
    assert quick["id"] == "quick" and quick["result"]["structuredContent"]["current"] == [stored["id"]]
    long = server_process.reply()
    assert long["id"] == "long" and long["result"]["isError"] is False


@pytest.mark.process
def test_the_server_exits_when_its_client_goes_mid_call(wire, store_dir):
    server_process = wire()
    server_process.initialize()
    server_process.call("note", "ingest", {"text": "Kestrel uses PostgreSQL", "kind": "memory"})
    server_process.reply()

    held = hold_index_lock(store_dir)
    try:
        server_process.call("long", "index", {})
        wait_until_blocked_on(store_dir / ".index" / ".lock", server_process.process.pid)
        server_process.process.stdin.close()
        status = server_process.exited()  # the call still waits for the lock: only leaving ends it
    finally:
        os.close(held)
    assert status is not None, "the server outlived its client"


@pytest.mark.process
def test_the_server_exits_when_its_client_stops_reading(wire):
    server_process = wire()
    server_process.initialize()
    server_process.process.stdout.close()
    server_process.request("unheard", "ping")  # its answer finds the pipe closed
    assert server_process.exited() is not None, "the server outlived its client"
