"""The stdio wire of `memctl mcp`: JSON-RPC messages one a line, checked before the MCP SDK sees them.

The SDK's own transport (mcp.server.stdio) reads a line of any length (a
10 MB line is held, then parsed, whole) and hands its dispatcher an exception
for a line that is no valid message; the dispatcher logs it at debug level and
drops it, so the client waits forever for an answer that never comes. This
transport reads a line to at most `max_bytes` and answers what it does not
hand on with the error JSON-RPC names, then reads the next line:

    -32700 parse error      not JSON: cut short, not UTF-8, or nested past the parser's 1024 levels
    -32600 invalid request  not one request object (an array, a scalar, no method, a bad id or
                            jsonrpc), nested deeper than MAX_DEPTH, or longer than max_bytes
    -32602 invalid params   params that are not an object (MCP names every parameter)

A refused request is answered with its id when it can be read: from the
parsed object, or, from a line that could not be parsed, when "id" is the
first member after string-valued ones ({"jsonrpc": "2.0", "id": 7, ...}, the
order clients write). An answer with id null matches no request, so a client
would still wait for that one. A notification or a response is never
answered (JSON-RPC): a bad one is noted on stderr and dropped.

Reading happens on a daemon thread of its own: a read blocks until the client
writes, and a process whose client is gone must not wait for that thread to
end. Like the SDK's transport, it takes the client's pipes for itself: fd 0
then reads /dev/null and fd 1 writes to stderr, so neither a stray print nor a
child process (an LLM command) can corrupt the wire or swallow a request.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import re
import sys
import threading
from typing import Any, AsyncIterator, BinaryIO

import anyio
import anyio.from_thread
import mcp_types as types
import orjson
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

# Far deeper than any MCP message (a tool call's arguments sit 3 levels down), and well
# inside what the rest of a call walks recursively: jsonschema, orjson.dumps (255 levels).
MAX_DEPTH = 64

# A line longer than max_bytes is skipped in pieces of this size, never held whole.
_SKIP_CHUNK = 1 << 16
# How much of an unparsed line is searched for its id.
_ID_WINDOW = 4096
_STRING = rb'"(?:[^"\\]|\\.)*"'
# "id" as a member of the outermost object: only string-valued members ("jsonrpc", "method") before it.
_LEADING_ID = re.compile(rb'\s*\{(?:\s*' + _STRING + rb'\s*:\s*' + _STRING + rb'\s*,)*\s*"id"\s*:\s*('
                         + _STRING + rb'|-?(?:0|[1-9][0-9]*)(?![0-9.eE]))', re.DOTALL)


class Refused(Exception):
    """A line that is not handed on; `answer` says whether the sender waits for a reply."""

    def __init__(self, code: int, message: str, request_id: types.RequestId | None, *, answer: bool = True):
        super().__init__(message)
        self.error = types.ErrorData(code=code, message=message)
        self.request_id = request_id
        self.answer = answer

    def reply(self) -> SessionMessage:
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=self.request_id, error=self.error))


def message_of(line: bytes) -> types.JSONRPCMessage:
    """The JSON-RPC message of one line (without its newline); Refused says why not."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise Refused(types.PARSE_ERROR, f"Parse error: {exc}", leading_id(line)) from None
    if not isinstance(data, dict):
        raise Refused(types.INVALID_REQUEST, "Invalid Request: a message is one JSON object", None)
    kind = _kind(data)
    answer = kind is types.JSONRPCRequest
    request_id = data.get("id") if _is_request_id(data.get("id")) else None
    if _deeper_than(data, MAX_DEPTH):
        raise Refused(types.INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels",
                      request_id, answer=answer)
    if "id" in data and request_id is None:
        raise Refused(types.INVALID_REQUEST, "Invalid Request: id must be a string or an integer", None,
                      answer=answer)
    params = data.get("params")
    if "method" in data and params is not None and not isinstance(params, dict):
        raise Refused(types.INVALID_PARAMS, "Invalid params: params must be an object", request_id,
                      answer=answer)
    try:
        return kind.model_validate(data, by_name=False)
    except pydantic.ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise Refused(types.INVALID_REQUEST, f"Invalid Request: {where + ': ' if where else ''}{problem['msg']}",
                      request_id, answer=answer) from None


def _kind(data: dict[str, Any]) -> type[pydantic.BaseModel]:
    """What a message means to be: a notification (a method, no id), a response (a result or an
    error, no method), else a request, which is answered even when it is no valid message at all."""
    if "method" in data:
        return types.JSONRPCRequest if "id" in data else types.JSONRPCNotification
    if "error" in data:
        return types.JSONRPCError
    return types.JSONRPCResponse if "result" in data else types.JSONRPCRequest


def leading_id(line: bytes) -> types.RequestId | None:
    """The id of a line that is not parsed (too long, or not JSON), if it is cheap to read."""
    found = _LEADING_ID.match(line[:_ID_WINDOW])
    if found is None:
        return None
    try:
        return orjson.loads(found.group(1))
    except orjson.JSONDecodeError:  # a string with a bad escape
        return None


def _is_request_id(value: Any) -> bool:
    return isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool)


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` levels, walked a level at a time (no recursion to overflow)."""
    level: list[Any] = [data]
    for _ in range(limit):
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
        if not level:
            return False
    return True


def read_line(wire: BinaryIO, max_bytes: int) -> bytes | Refused | None:
    """The next line without its newline; Refused for one over `max_bytes` (read to its end
    in pieces, never held whole); None at the end of input."""
    line = wire.readline(max_bytes + 1)
    if not line:
        return None
    if len(line) <= max_bytes or line.endswith(b"\n"):
        return line.rstrip(b"\r\n")
    rest = line
    while rest and not rest.endswith(b"\n"):
        rest = wire.readline(_SKIP_CHUNK)
    return Refused(types.INVALID_REQUEST, f"Invalid Request: longer than {max_bytes} bytes "
                   "(memctl.toml [mcp] max_request_bytes)", leading_id(line))


def note(message: str) -> None:
    print(f"memctl: mcp: {message}", file=sys.stderr, flush=True)


def _claim_stdio() -> tuple[BinaryIO, BinaryIO]:
    """The client's pipes on private descriptors (closed in child processes); fd 0 then reads
    /dev/null and fd 1 writes to stderr."""
    wire_in = os.fdopen(fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3), "rb")
    wire_out = os.fdopen(fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3), "wb")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


# What the reader's handing on raises once the session is over: its streams are closed, its
# portal stopped (RuntimeError) or a call in flight cancelled.
_SESSION_OVER = (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError,
                 concurrent.futures.CancelledError)


def _read(wire: BinaryIO, max_bytes: int, portal: anyio.from_thread.BlockingPortal,
          incoming: MemoryObjectSendStream[SessionMessage], outgoing: MemoryObjectSendStream[SessionMessage]) -> None:
    """The reader thread: each line's message goes to the server, each refusal's reply to the client."""
    try:
        while (line := read_line(wire, max_bytes)) is not None:
            if isinstance(line, bytes):
                if not line.strip():
                    continue  # a blank line carries no message
                try:
                    line = message_of(line)
                except Refused as refused:
                    line = refused
            if not isinstance(line, Refused):
                portal.call(incoming.send, SessionMessage(line))
            elif line.answer:
                portal.call(outgoing.send, line.reply())
            else:
                note(f"dropped a message no one waits an answer for: {line}")
    except OSError as exc:  # nothing more can come: as good as the end of input
        note(f"reading stdin failed ({exc.strerror or exc}); ending the session")
    except _SESSION_OVER:
        pass  # the session ended first (the client stopped reading): nothing is left to tell
    finally:
        # However reading ends, the server's stream ends with it, or the session would wait forever.
        with contextlib.suppress(*_SESSION_OVER):
            portal.call(incoming.aclose)


async def _write(wire: BinaryIO, outgoing: MemoryObjectReceiveStream[SessionMessage],
                 session: anyio.CancelScope) -> None:
    """Every message the server and the reader send, a line each, until the server closes its end."""

    def put(data: bytes) -> None:
        wire.write(data)
        wire.flush()

    async with outgoing:
        async for message in outgoing:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
            try:
                await anyio.to_thread.run_sync(put, data)
            except OSError as exc:  # the client closed its end of the pipe: nobody hears the session
                note(f"the client stopped reading ({exc.strerror or exc}); ending the session")
                session.cancel()
                return


@contextlib.asynccontextmanager
async def stdio_wire(max_bytes: int) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage],
                                                            MemoryObjectSendStream[SessionMessage]]]:
    """(read stream, write stream) for `Server.run` over the process's stdin and stdout; the
    session is cancelled when the client stops reading, and ends when it stops writing."""
    wire_in, wire_out = _claim_stdio()
    incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage](0)
    outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.from_thread.BlockingPortal() as portal:
        try:
            async with anyio.create_task_group() as session:
                session.start_soon(_write, wire_out, outgoing_reader, session.cancel_scope)
                threading.Thread(target=_read, args=(wire_in, max_bytes, portal, incoming_writer, outgoing),
                                 name="memctl-mcp-stdin", daemon=True).start()
                yield incoming, outgoing
        finally:
            # A reader's hand-over still waiting (the session ended before the client did) is dropped.
            await portal.stop(cancel_remaining=True)
