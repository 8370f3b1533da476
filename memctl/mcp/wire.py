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

Reading and writing happen on the event loop, which waits for the pipes to be
ready (a pipe's writes are made non-blocking for the session): no thread hands
a message over on the way in or out. With a reading thread and a worker thread a
write (as the SDK's transport does) the server spent 0.70 ms of CPU on a tool
call refused at once, 0.54 ms without them, and its round trip took 1.03 ms p50,
0.84 without (load 2-2.6; bench/README.md "Cited measurements"). Input that cannot be waited for (a file)
is read as it is, and output to a terminal or a file is written on a worker
thread. Like the SDK's
transport, it takes the client's pipes for itself: fd 0 then reads /dev/null
and fd 1 writes to stderr, so neither a stray print nor a child process (an
LLM command) can corrupt the wire or swallow a request.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import sys
from typing import Any, AsyncIterator, Iterator

import anyio
import anyio.to_thread
import mcp_types as types
import orjson
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

# Far deeper than any MCP message (a tool call's arguments sit 3 levels down), and well
# inside what the rest of a call walks recursively: jsonschema, orjson.dumps (255 levels).
MAX_DEPTH = 64

# Input is read in pieces of this size.
_READ_CHUNK = 1 << 16
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


class Lines:
    """The lines of a byte stream that comes in chunks, without their newlines. A line longer
    than `max_bytes` is Refused as soon as it passes the limit, and the rest of it is skipped as
    it comes: it is never held whole."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._held = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> list[bytes | Refused]:
        lines: list[bytes | Refused] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._skipping:
                self._skipping = False
            else:
                self._held += chunk[start:end]
                lines.append(self._line())
            start = end + 1
        if not self._skipping:
            self._held += chunk[start:]
            if len(self._held) > self.max_bytes:
                lines.append(self._too_long())
        return lines

    def end(self) -> list[bytes | Refused]:
        """What is left at the end of input: a last line without its newline."""
        return [self._line()] if self._held and not self._skipping else []

    def _line(self) -> bytes | Refused:
        line = bytes(self._held).rstrip(b"\r\n")
        self._held.clear()
        return line if len(line) <= self.max_bytes else self._too_long(line)

    def _too_long(self, line: bytes | bytearray | None = None) -> Refused:
        request_id = leading_id(bytes((self._held if line is None else line)[:_ID_WINDOW]))
        self._held.clear()
        self._skipping = line is None  # cut short before its end: the rest of the line is skipped
        return Refused(types.INVALID_REQUEST, f"Invalid Request: longer than {self.max_bytes} bytes "
                       "(memctl.toml [mcp] max_request_bytes)", request_id)


def note(message: str) -> None:
    print(f"memctl: mcp: {message}", file=sys.stderr, flush=True)


def _claim_stdio() -> tuple[int, int]:
    """The client's pipes on private descriptors (closed in child processes); fd 0 then reads
    /dev/null and fd 1 writes to stderr."""
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


# What handing a message on raises once the session is over: its streams are closed.
_SESSION_OVER = (anyio.BrokenResourceError, anyio.ClosedResourceError)


async def _chunk(wire: int) -> bytes:
    """The next bytes of input once there are some; b"" at its end."""
    try:
        await anyio.wait_readable(wire)
    except PermissionError:  # a file (or /dev/null), which epoll cannot watch: reading it never waits
        pass
    return os.read(wire, _READ_CHUNK)


async def _read(wire: int, max_bytes: int, incoming: MemoryObjectSendStream[SessionMessage],
                outgoing: MemoryObjectSendStream[SessionMessage]) -> None:
    """Each line's message to the server, each refusal's reply to the client, until input ends."""
    lines = Lines(max_bytes)
    try:
        async with incoming:  # however reading ends, the server's stream ends with it
            while chunk := await _chunk(wire):
                for line in lines.feed(chunk):
                    await _hand_on(line, incoming, outgoing)
            for line in lines.end():
                await _hand_on(line, incoming, outgoing)
    except OSError as exc:  # nothing more can come: as good as the end of input
        note(f"reading stdin failed ({exc.strerror or exc}); ending the session")
    except _SESSION_OVER:
        pass  # the session ended first (the client stopped reading): nothing is left to tell


async def _hand_on(line: bytes | Refused, incoming: MemoryObjectSendStream[SessionMessage],
                   outgoing: MemoryObjectSendStream[SessionMessage]) -> None:
    if isinstance(line, bytes):
        if not line.strip():
            return  # a blank line carries no message
        try:
            line = message_of(line)
        except Refused as refused:
            line = refused
    if not isinstance(line, Refused):
        await incoming.send(SessionMessage(line))
    elif line.answer:
        await outgoing.send(line.reply())
    else:
        note(f"dropped a message no one waits an answer for: {line}")


async def _write(wire: int, outgoing: MemoryObjectReceiveStream[SessionMessage], session: anyio.CancelScope,
                 waits: bool) -> None:
    """Every message the server and the reader send, a line each, until the server closes its end.
    `waits`: the descriptor is non-blocking, and a write the client is not ready for waits here;
    else (a terminal, a file) each write runs on a worker thread, where blocking holds no other task."""
    async with outgoing:
        async for message in outgoing:
            data = memoryview(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
            try:
                while data:
                    if not waits:
                        data = data[await anyio.to_thread.run_sync(os.write, wire, data):]
                        continue
                    try:
                        data = data[os.write(wire, data):]
                    except BlockingIOError:
                        await anyio.wait_writable(wire)
            except OSError as exc:  # the client closed its end of the pipe: nobody hears the session
                note(f"the client stopped reading ({exc.strerror or exc}); ending the session")
                session.cancel()
                return


@contextlib.contextmanager
def _non_blocking(wire: int) -> Iterator[bool]:
    """Writes to `wire` made non-blocking for the session, if it is a pipe or a socket (its flags
    restored after); whether they are. A terminal is left as it is: its flags are the shell's too."""
    mode = os.fstat(wire).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        yield False
        return
    flags = fcntl.fcntl(wire, fcntl.F_GETFL)
    fcntl.fcntl(wire, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        yield True
    finally:
        fcntl.fcntl(wire, fcntl.F_SETFL, flags)


@contextlib.asynccontextmanager
async def stdio_wire(max_bytes: int) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage],
                                                            MemoryObjectSendStream[SessionMessage]]]:
    """(read stream, write stream) for `Server.run` over the process's stdin and stdout; the
    session is cancelled when the client stops reading, and ends when it stops writing."""
    wire_in, wire_out = _claim_stdio()
    incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage](0)
    outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        with _non_blocking(wire_out) as waits:
            async with anyio.create_task_group() as session:
                session.start_soon(_write, wire_out, outgoing_reader, session.cancel_scope, waits)
                reading = anyio.CancelScope()

                async def read() -> None:
                    with reading:
                        await _read(wire_in, max_bytes, incoming_writer, outgoing)

                session.start_soon(read)
                try:
                    yield incoming, outgoing
                finally:
                    reading.cancel()  # the server is done: a line still coming is nobody's
    finally:
        os.close(wire_in)
        os.close(wire_out)
