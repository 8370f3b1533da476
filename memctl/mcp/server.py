"""`memctl mcp`: the tools of memctl.mcp.tools served over stdio with the official MCP SDK.

One `Memory` lives as long as the server, so its index and embedding model are
loaded once and reused by every later search (a warm search costs milliseconds;
bench/mcp_latency.py). Work is done ahead of the calls, as the resident server
does (memctl/server/serve.py): the model is opened at start on a thread of its
own (_warm: its sessions laid out for many queries), and the lane of searches
takes its calls through the resident server's `Ahead` (memctl/server/ahead.py):
between calls it learns the open index ahead, so that a search does not learn
its candidates itself, and after an ingest it embeds the new messages ahead of
the search that follows. Neither changes a result.

Where calls run. A Memory is used by one thread only (its SQLite connection may
only be used by the thread that opened it), and the event loop never runs a
call, so it stays free to read requests and answer. Calls run on two lanes,
each one thread with a Memory of its own, one call at a time:

- the tools marked read_only (history, state_plan, health, cache_stats,
  topics_list, topics_show), on a second Memory of the same store: a long call
  on the other lane (the index update after a large ingest embeds for a minute)
  does not hold them. The two Memories share the store as two processes do:
  every read and write takes the store's flock on a descriptor of its own, so
  each sees the other's writes whole; none of these tools opens the index.
- every other tool, on the server's Memory, in the order they came. Searches
  are not spread over more threads: each would load an index and a model of
  its own (hundreds of MB), and a search behind an index update would wait for
  the update's lock all the same.

Each call's work is bounded too: a request is at most [mcp] max_request_bytes
(memctl/mcp/wire.py), and a text a search reads at most MAX_QUERY_CHARS
characters (memctl/text/bounds.py, the bound of every face), so no search takes minutes.

When the client goes (its stdin ends, or it stops reading), the session ends:
calls still waiting for a lane are dropped, a call under way gets LEAVE_GRACE
seconds to finish (an ingest commits), and `serve` says whether one still runs.
A thread cannot be stopped, so `memctl mcp` then ends the process; what that
call was writing is rolled back by the store's journal, as after a kill.

A call never brings the server down: bad arguments, refused input and even a
bug come back as a tool error (`isError`, one line of text), and the next call
is served as usual; a request that is not one (not JSON, too long or deep, a
bad shape) gets a JSON-RPC error (memctl/mcp/wire.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import sys
import threading
import traceback
from typing import Any

import anyio
import jsonschema
import mcp_types as types
import orjson
from mcp.server.lowlevel import Server

from memctl import __version__
from memctl.api import Memory
from memctl.errors import InputError, MemctlError
from memctl.mcp.tools import TOOLS, Tool
from memctl.mcp.wire import note, stdio_wire
from memctl.server.ahead import Ahead
from memctl.text.clip import clip

# Seconds a call under way when the client goes may take to finish: an ingest or a
# confirm commits in well under a second; an index update is only cut short (search resumes it).
LEAVE_GRACE = 3.0

# Rows of the open index learned ahead in one step between calls (Ahead): a request that
# comes during a step waits for its end. 32 rows took 0.25 ms of thread CPU, 128 0.9 ms (6k store,
# bench/README.md "Cited measurements"); the whole 6k index ~45 ms.
LEARN_ROWS = 32

# How often the warming thread (_warm) hands the GIL over to a call that waits for it, only while
# it warms. At Python's default, 5 ms, it held a first call that needs no model (an ingest right
# after the handshake) for about as long as the warming took: 103 ms p50 where main took 46; at
# 0.5 ms, 66 where main took 39 (0.1 ms no better; 6k store; bench/README.md "Cited measurements").
WARM_SWITCH_SECONDS = 0.0005

# An argument error is one line a person can read, whatever the client sent.
ARGUMENT_ERROR_CHARS = 300

INSTRUCTIONS = """\
memctl is this agent's long-term memory, kept in plain files. At the start of a turn
that may depend on the past, call `search` with the user's words (or `layered_search`
once per task for a budgeted context); store decisions, preferences and facts with
`ingest` (kind "memory"), and the conversation with `ingest` (kind "message"). Notes
stored with pending=true wait for the user: `review_pending`, then `confirm` or `reject`.
"""


class ToolError(Exception):
    """A call the tool refused; its message is the one line the client sees."""


def _argument_error(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    if error.validator == "maxLength":
        what = f"longer than {error.validator_value} characters ({len(error.instance)})"
    else:  # jsonschema quotes the value at fault, which may be the whole of a large argument
        what = clip(error.message, ARGUMENT_ERROR_CHARS)
    return f"argument '{where}': {what}" if where else f"arguments: {what}"


class Tools:
    """The tool table bound to one Memory: schema checks, then the call; errors become ToolError."""

    def __init__(self, memory: Memory, tools: dict[str, Tool] = TOOLS):
        self.memory = memory
        self.tools = tools
        self._validators = {name: jsonschema.Draft202012Validator(t.input_schema) for name, t in tools.items()}

    def describe(self) -> list[types.Tool]:
        return [types.Tool(name=t.name, description=t.description, input_schema=t.input_schema,
                           output_schema=t.output_schema, annotations=types.ToolAnnotations(read_only_hint=t.read_only))
                for t in self.tools.values()]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool '{name}'; the tools are: {', '.join(self.tools)}")
        error = jsonschema.exceptions.best_match(self._validators[name].iter_errors(arguments))
        if error is not None:
            raise ToolError(_argument_error(error))
        try:
            return tool.run(self.memory, **arguments)
        except InputError as exc:
            raise ToolError(_in_argument_terms(exc)) from None
        except MemctlError as exc:
            raise ToolError(str(exc)) from None
        except OSError as exc:
            raise ToolError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}") from None
        except Exception as exc:  # a bug of ours: told to the client and logged, and the server goes on
            traceback.print_exc(file=sys.stderr)
            raise ToolError(f"internal error: {type(exc).__name__}: {exc}") from None


def _in_argument_terms(exc: InputError) -> str:
    """The library names a bad option by its command-line flag (`--min-score: ...`); a client sent an argument."""
    if exc.source and exc.source.startswith("--"):
        return f"argument '{exc.source[2:].replace('-', '_')}': {exc.message}"
    return str(exc)


class Lane:
    """One thread and the Tools of a Memory only it uses: calls run on it one at a time, in order.
    With `learn_ahead`, it takes them through an Ahead: between calls it learns its Memory's open
    index ahead, LEARN_ROWS rows a step, and after a call it embeds the store's new messages ahead."""

    def __init__(self, name: str, memory: Memory, *, learn_ahead: bool = False):
        self.tools = Tools(memory)
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future, str, dict[str, Any]] | None] = \
            queue.SimpleQueue()
        self._ahead = None
        if learn_ahead:
            self._ahead = Ahead(self._jobs, rows=LEARN_ROWS, written=memory.store.written_stamp(),
                                say=note)
            self._ahead.memories[name] = memory
        self._calls: set[concurrent.futures.Future] = set()
        self._thread = threading.Thread(target=self._work, name=name)
        self._thread.start()

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """The call's result; cancelled (the client cancelled it, or left), a call still waiting
        for the lane never runs, and one under way runs on with nobody to hear it."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.add(future)
        future.add_done_callback(self._calls.discard)
        self._jobs.put((future, name, arguments))
        return await asyncio.wrap_future(future)

    def _work(self) -> None:
        while True:
            job = self._jobs.get() if self._ahead is None else self._ahead.next_call()
            if job is None:
                return
            future, name, arguments = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self._answer(name, arguments))
                except Exception as exc:  # a result that would not serialise: the SDK answers with an error
                    future.set_exception(exc)
            if self._ahead is not None:
                self._ahead.after_call(self.tools.memory)

    def _answer(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            payload = self.tools.call(name, arguments)
        except ToolError as exc:
            return types.CallToolResult(content=[types.TextContent(text=str(exc))], is_error=True)
        text = orjson.dumps(payload).decode()
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=payload)

    def close(self) -> set[concurrent.futures.Future]:
        """Drop the calls waiting for the lane; the call under way, if one is, runs on: its future."""
        for future in list(self._calls):
            future.cancel()  # only a call not yet started is cancelled
        self._jobs.put(None)
        return {future for future in self._calls if not future.done()}


def build(calls: Lane, reads: Lane) -> Server:
    """The MCP server of the lanes' tools (not yet running): read-only tools run on `reads`, the rest on `calls`."""
    tools = calls.tools
    read_only = {name for name, tool in tools.tools.items() if tool.read_only}

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools.describe())

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        lane = reads if params.name in read_only else calls
        return await lane.call(params.name, params.arguments or {})

    return Server("memctl", version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _warm(memory: Memory) -> None:
    """Open the model ahead of the first search (Memory.warm), on a thread of its own: a first
    call that needs no model is not held up by it, and one that does waits only for what it
    would have opened itself."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(WARM_SWITCH_SECONDS)
    try:
        memory.warm()
    except Exception as exc:  # the first search meets the same trouble and says it as a tool error
        note(f"could not open the model ahead: {type(exc).__name__}: {exc}")
    finally:
        sys.setswitchinterval(interval)


def serve(memory: Memory) -> bool:
    """Answer MCP requests on stdin/stdout until the client goes; whether every call has ended
    (False: one still runs on its thread, and only ending the process stops it)."""
    max_request_bytes = memory.runtime.settings.mcp.max_request_bytes
    threading.Thread(target=_warm, args=(memory,), name="memctl-warm").start()
    lanes = (Lane("memctl-calls", memory, learn_ahead=True), Lane("memctl-reads", Memory(memory.path, say=memory.say)))

    async def run() -> None:
        server = build(*lanes)
        async with stdio_wire(max_request_bytes) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
    running = set().union(*(lane.close() for lane in lanes))
    _, unfinished = concurrent.futures.wait(running, timeout=LEAVE_GRACE)
    if unfinished:
        note(f"the client left during a call that did not end within {LEAVE_GRACE:g} s; it is cut short")
    return not unfinished
