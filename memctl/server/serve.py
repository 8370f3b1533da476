"""The resident server of one store: takes the command line's calls on a Unix socket and runs each
in this process, where the model, the vectors and the Tantivy reader stay open.

A call runs on the main thread, one at a time: it takes over the process's descriptors 0, 1
and 2 (the client's own, passed over the socket), its working directory, environment, umask
and sys.std* streams, then runs the click command line on the client's argv, exactly as
`memctl` does in a process of its own. Those are the process's, so calls cannot overlap; a
call that waits more than client.QUEUE_SECONDS for its turn is told BUSY and runs in its own
process instead. A thread per connection reads the request, sends a heartbeat each second
while the call runs, and turns a client that goes away (Ctrl-C) into KeyboardInterrupt in the
call, as Ctrl-C does in-process.

The server leaves when idle for as long as it has been used (from [server] first_idle_minutes
to idle_minutes: _idle_limit), on `memctl server stop`, when its store is gone, or when a client
of another memctl (version, place, Python) or a changed source file shows it is outdated; the
client then runs its call in-process and starts a new server. One server a store: it holds the
store's record (client.RECORD) while it serves, which names its socket for calls made with
another runtime directory; and at most [server] max_running from one runtime directory.
"""

from __future__ import annotations

import fcntl
import io
import marshal
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from memctl.server import client
from memctl.server.ahead import Ahead

HEARTBEAT_SECONDS = 1.0
# Rows of the open index learned ahead between two looks for a call (Ahead): 256 rows took 3.6 ms
# of thread CPU (6k store; bench/README.md "Cited measurements"), so that a call waits little behind a step.
LEARN_ROWS = 128
KEPT_MEMORIES = 4  # open Memory objects kept: one a (store path as given, working directory)
KEPT_THREADS = 4   # connection threads kept waiting for the next connection


class _Call:
    """One call, handed from its connection's thread to the main thread."""

    def __init__(self, request: dict, fds: list[int]):
        self.request = request
        self.fds = fds
        self.lock = threading.Lock()
        self.taken = False                 # by the main thread, or by the connection that gave up waiting
        self.verdict = b""                 # STARTED, FALLBACK (run it in-process); sent to the client
        self.decided = threading.Event()
        self.done = threading.Event()
        self.code = 0
        self.connection: socket.socket | None = None


class Server:
    """The server of the store at `root`; `command` is the click group the calls run
    (memctl.cli.cli, passed in: this package lies below the command line)."""

    def __init__(self, root: str, command, *, idle_minutes: float, first_idle_minutes: float, most: int,
                 make_memory: Callable[..., Any]):
        from memctl.api import open_store

        self.root = client.identity(root)  # a folder's real path, or a URL
        self.command = command
        self.idle_seconds = idle_minutes * 60
        self.first_idle_seconds = min(first_idle_minutes, idle_minutes) * 60
        self.most = most
        self.make_memory = make_memory
        self.where = client.place(self.root, create=True)
        self.stamp = client.stamp()
        self.sources = _sources_stamp()
        self._sources_seen = time.monotonic()
        self._sources_differ = False
        self.calls: queue.Queue[_Call | None] = queue.Queue()
        self._connections: queue.Queue[socket.socket] = queue.Queue()  # to the connection threads waiting
        self._idle_threads = 0
        self._threads_lock = threading.Lock()
        self.store = open_store(self.root)
        # The calls, with the open indexes of the kept Memories learned ahead between them
        self.ahead = Ahead(self.calls, rows=LEARN_ROWS, written=self.store.written_stamp(), say=self.say)
        self._call_memory = None  # the Memory the running call's command made, if it made one
        self.started = time.time()
        self.last_call = self.began = time.monotonic()
        self.served = 0
        self.leaving = ""
        self._running: _Call | None = None
        self._in_command = False
        self._log = os.fdopen(os.dup(2), "w", buffering=1)  # stays the log while a call borrows 2
        self._own_fds = [os.dup(n) for n in (0, 1, 2)]  # what 0, 1 and 2 are again after each call
        self.environment = dict(os.environ)  # ... and the environment

    # -- life ------------------------------------------------------------------------
    def run(self) -> str:
        """Serve until idle, stopped or outdated; why it stopped (or why it never started)."""
        if self.where is None:
            return "no private runtime directory ($XDG_RUNTIME_DIR or /tmp/memctl-UID)"
        lock = self._lock()
        if isinstance(lock, str):
            return lock
        record = self._claim()
        if isinstance(record, str):
            os.close(lock)
            return record
        self.ahead.written = self.store.written_stamp()  # the record, made at the root, moved it
        os.chdir("/")  # a call runs in its client's directory; between calls none is held
        self._warm()
        signal.signal(signal.SIGINT, self._on_interrupt)
        listener = self._listen()
        self.last_call = self.began = time.monotonic()  # idle from now: opening the model can take a minute
        self.say(f"serving {self.store.shown} (pid {os.getpid()}, idle limit {self.first_idle_seconds / 60:g} to "
                 f"{self.idle_seconds / 60:g} min, as long as it is used)")
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="accept").start()
        try:
            while not self.leaving:
                try:
                    call = self.ahead.next_call(timeout=HEARTBEAT_SECONDS)
                except queue.Empty:
                    call = None
                except KeyboardInterrupt:
                    self.leaving = self.leaving or "interrupted"
                    break
                try:
                    if call is not None:
                        self._take(call)
                    self._check_idle()
                except KeyboardInterrupt:
                    self.leaving = "interrupted"
        finally:
            self._unlisten(listener)
            if record is not None:
                os.ftruncate(record, 0)  # names no socket once it is gone
                os.close(record)
            os.close(lock)
        self.say(f"leaving: {self.leaving}")
        return self.leaving

    def _warm(self) -> None:
        """Load numpy and the store's model before the first call. numpy now, because a call runs
        in its client's environment, where the OPENBLAS_NUM_THREADS=1 the command line sets is
        missing: imported in a call, numpy started an OpenBLAS thread that spun ~19 ms of CPU a
        warm search (2 cores, 6k store; bench/README.md "Cited measurements"). The model now, so that the
        first call finds
        it, its session laid out for many calls (Memory.warm)."""
        import numpy  # noqa: F401

        try:
            memory = self.make_memory(self.root, say=None)
            memory.warm()
            self.say(f"model open: {type(memory.runtime.embedder).__name__}")
        except Exception as exc:  # the calls will say what is wrong, each as in-process
            self.say(f"could not open the model: {exc}")

    def say(self, message: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} memctl server: {message}", file=self._log)

    def _lock(self) -> int | str:
        """The store's server lock in the runtime directory, held while serving; or why not: another
        server holds it (one that is leaving lets go within seconds), or [server] max_running others
        run from this directory. Counted and taken under the directory's .starting lock, so that
        servers starting together count each other."""
        directory, name = os.path.split(self.where)
        starting = os.open(os.path.join(directory, ".starting"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        descriptor = os.open(self.where + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            for _ in range(50):
                fcntl.flock(starting, fcntl.LOCK_EX)
                try:
                    try:
                        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        time.sleep(0.1)
                        continue
                    others = client.running(directory, but=name + ".lock")
                    if others >= self.most:
                        os.close(descriptor)
                        return (f"{others} servers run from {directory} already, [server] max_running is "
                                f"{self.most}; calls on this store run in their own processes")
                finally:
                    fcntl.flock(starting, fcntl.LOCK_UN)
                os.ftruncate(descriptor, 0)
                os.write(descriptor, f"{os.getpid()}\n".encode())
                return descriptor
        finally:
            os.close(starting)
        os.close(descriptor)
        return "another server serves this store"

    def _claim(self) -> int | str | None:
        """The store's record (client.RECORD), held while serving, naming this server's socket: so
        that a call made with another runtime directory (cron, a login shell) finds this server
        instead of starting its own. Why not, when another server holds it; None when the store
        cannot keep one (read-only, a link in its place): served all the same."""
        from memctl.errors import MemctlError
        from memctl.store.store import FILE_MODE

        if not self.store.is_folder:
            return None  # a database keeps no record: its server is found in the runtime directory only
        try:
            path = self.store.path(client.RECORD)  # the store's one path check: no link on the way
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                                 FILE_MODE)
        except (OSError, MemctlError) as exc:
            self.say(f"serving without the store's record: {exc}")
            return None
        if os.fstat(descriptor).st_mode & 0o170000 != 0o100000:
            os.close(descriptor)
            self.say(f"serving without the store's record: {path} is not a regular file")
            return None
        for _ in range(50):  # a server leaving lets go within seconds
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.1)
        else:
            named = os.pread(descriptor, 4096, 0).decode(errors="replace").split("\n")
            os.close(descriptor)
            return f"another server (pid {named[0]}) serves this store, at {named[1] if len(named) > 1 else '?'}"
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n{self.where}.sock\n".encode(), 0)
        return descriptor

    def _listen(self) -> socket.socket:
        """The socket, 0600, made under a temporary name and renamed into place: a client never
        finds it half made, and a dead server's socket file is simply replaced."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        temporary = f"{self.where}.{os.getpid()}.sock"
        mask = os.umask(0o177)
        try:
            listener.bind(temporary)
        finally:
            os.umask(mask)
        listener.listen(64)
        os.replace(temporary, self.where + ".sock")
        self._socket_inode = os.stat(self.where + ".sock").st_ino
        return listener

    def _unlisten(self, listener: socket.socket) -> None:
        try:
            if os.stat(self.where + ".sock").st_ino == self._socket_inode:
                os.unlink(self.where + ".sock")
        except OSError:
            pass
        listener.close()

    def _idle_limit(self) -> float:
        """How long it waits for a call: as long as it has been used (from its start, which a call
        made, to its last call), at least first_idle and at most idle_minutes. A one-off call's server
        leaves after a short wait; an agent's, used turn after turn, waits up to half an hour."""
        return min(self.idle_seconds, max(self.first_idle_seconds, self.last_call - self.began))

    def _check_idle(self) -> None:
        limit = self._idle_limit()
        if time.monotonic() - self.last_call > limit:
            self.leaving = f"idle for {limit / 60:.3g} min"
        elif self.store.is_folder and not os.path.isdir(self.root):  # a database is asked by each call
            self.leaving = "the store is gone"

    # -- connections (a thread each) ---------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        """Each connection to a thread of its own at once (a call waiting its turn must still be
        answered QUEUED, then BUSY): a thread that served one and waits for another if there is
        one (_idle_threads, counted here as they are handed work), else a new one. Starting a
        thread a call cost ~0.1 ms of CPU and ~0.2 ms before the request was read (bench/README.md "Cited
        measurements")."""
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed: leaving
            with self._threads_lock:
                waiting = self._idle_threads > 0
                self._idle_threads -= waiting
            if waiting:
                self._connections.put(connection)  # exactly one waiting thread takes it
            else:
                threading.Thread(target=self._connection_thread, args=(connection,), daemon=True).start()

    def _connection_thread(self, connection: socket.socket) -> None:
        while True:
            self._serve_connection(connection)
            with self._threads_lock:
                if self._idle_threads >= KEPT_THREADS:
                    return
                self._idle_threads += 1
            connection = self._connections.get()

    def _serve_connection(self, connection: socket.socket) -> None:
        fds: list[int] = []
        try:
            with connection:
                connection.settimeout(client.HELLO_SECONDS)
                pid, uid = client._peer(connection)
                if uid != os.getuid():
                    self.say(f"refused a connection of uid {uid} (pid {pid})")
                    return
                request, fds = _receive(connection)
                op = request.get("op")
                if op == "call":
                    self._converse(connection, _Call(request, fds))
                    fds = []  # the call closed them
                elif request.get("store", self.root) != self.root:
                    return  # a status or stop meant for another store's server: none runs for it here
                elif op == "status":
                    _answer(connection, self.status())
                elif op == "stop":
                    # Answered before leaving: once it leaves, the main thread may end the process
                    # before this (daemon) thread has sent the answer, and `server stop` said "no
                    # server runs" of the server it had just stopped.
                    why = "stopped (memctl server stop)"
                    _answer(connection, {**self.status(), "leaving": why})
                    self._leave(why)
        except (OSError, ValueError, EOFError) as exc:
            self.say(f"a connection failed: {exc!r}")
        finally:
            for fd in fds:
                os.close(fd)

    def _converse(self, connection: socket.socket, call: _Call) -> None:
        if call.request.get("store") != self.root:  # found through a record that is not its store's
            _close_all(call.fds)
            connection.sendall(client.FALLBACK)
            return
        if tuple(call.request.get("stamp", ())) != self.stamp or self._sources_changed():
            self._leave(f"outdated: a client of {call.request.get('stamp')} (or a changed source file)")
            _close_all(call.fds)
            connection.sendall(client.OUTDATED)
            return
        connection.sendall(client.QUEUED)
        call.connection = connection
        self.calls.put(call)
        if not call.decided.wait(client.QUEUE_SECONDS):
            with call.lock:
                if not call.taken:
                    call.taken = True
                    _close_all(call.fds)
                    connection.sendall(client.BUSY)
                    return
        call.decided.wait()
        if call.verdict != client.STARTED:
            return
        # Every frame of a call is sent under its lock: the main thread sends its verdict and, the
        # moment it ends, its exit status; this thread beats meanwhile, and learns from the
        # socket's end that the client left.
        connection.settimeout(HEARTBEAT_SECONDS)
        interrupted = False
        while not call.done.is_set():
            if interrupted:
                call.done.wait(HEARTBEAT_SECONDS)
                gone = False
            else:
                try:
                    gone = connection.recv(1) == b""
                except TimeoutError:
                    gone = False
                except OSError:
                    gone = True
            with call.lock:
                if call.done.is_set():
                    return
                try:
                    connection.sendall(client.BEAT)  # a client that only stopped writing still reads
                except OSError:
                    gone = True
                if gone and not interrupted:
                    interrupted = True
                    self._interrupt()

    def _on_interrupt(self, signum, frame) -> None:
        """SIGINT (or a client gone, see _interrupt): stops the command running, or, idle, the
        server; one that comes as a call ends, after its command, is dropped (the call's clean-up,
        which gives the process its own descriptors back, must not be cut short)."""
        if self._in_command or self._running is None:
            raise KeyboardInterrupt

    def _interrupt(self) -> None:
        """The client left (Ctrl-C, killed): stop its call as Ctrl-C stops an in-process one. A
        real SIGINT, to the main thread: it also ends the system call the command waits in
        (_thread.interrupt_main only raises once the call returns)."""
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _sources_changed(self) -> bool:
        """Whether a source file changed since the start: looked at once a second at most (the
        look costs ~1 ms, a warm call ~20)."""
        if time.monotonic() - self._sources_seen > 1:
            self._sources_seen = time.monotonic()
            self._sources_differ = _sources_stamp() != self.sources
        return self._sources_differ

    def _leave(self, why: str) -> None:
        """Leave at once: the socket goes now, so that no new client finds this server."""
        if not self.leaving:
            self.leaving = why
            try:
                if os.stat(self.where + ".sock").st_ino == self._socket_inode:
                    os.unlink(self.where + ".sock")
            except OSError:
                pass
        self.calls.put(None)

    def status(self) -> dict:
        return {"pid": os.getpid(), "store": self.store.shown, "version": self.stamp[0], "python": self.stamp[2],
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
                "calls": self.served, "running": self._running is not None, "idle_seconds": round(time.monotonic() - self.last_call, 1),
                "idle_limit_minutes": round(self._idle_limit() / 60, 2), "rss_mb": _rss_mb(), "leaving": self.leaving}

    # -- running a call (the main thread) ------------------------------------------------
    def _take(self, call: _Call) -> None:
        with call.lock:
            if call.taken:  # BUSY: its client runs it in-process
                return
            call.taken = True
            self._running = call
            self._call_memory = None
        umask = os.umask(call.request["umask"])
        try:
            call.code = self._run(call)
        finally:
            with call.lock:
                self._running = None
                if call.verdict == client.STARTED:
                    _send(call.connection, client.EXIT + call.code.to_bytes(4, "big", signed=True))
                call.done.set()  # after the send: its connection's thread closes the connection then
            self._decide(call, client.FALLBACK)  # if it never started
            # Embedding ahead still in the call's directory and environment: 20 new messages take
            # ~47 ms of a `memctl index` on two threads, done while the agent behind the call goes on
            self.ahead.after_call(self._call_memory if call.verdict == client.STARTED else None)
            # The rest of the process's own state back after the exit status: the client's wait is
            # over, and on another core it runs on while this is done.
            os.umask(umask)
            _set_environment(self.environment)
            os.chdir("/")
            self.served += call.verdict == client.STARTED
            self.last_call = time.monotonic()

    def _decide(self, call: _Call, verdict: bytes) -> None:
        with call.lock:
            if not call.verdict:
                call.verdict = verdict
                _send(call.connection, verdict)
        call.decided.set()

    def _run(self, call: _Call) -> int:
        """Run the call on the client's descriptors, directory and environment; it returns once
        its output is flushed and the descriptors are the server's again."""
        request = call.request
        saved_streams = (sys.stdin, sys.stdout, sys.stderr)
        for stream in saved_streams:
            _flush(stream)
        try:
            for n, fd in enumerate(call.fds):
                os.dup2(fd, n)
            _close_all(call.fds)
            os.chdir(request["cwd"])
            _set_environment(request["env"])
            sys.stdin, sys.stdout, sys.stderr = _streams(request["encodings"])
            if not self._serves():
                return 0  # FALLBACK: the client runs it
            self._decide(call, client.STARTED)
            return self._run_command(request["argv"])
        except OSError:  # the working directory is gone, say: the client runs it, and says so
            return 0
        finally:
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                _flush(stream)  # sys.__stderr__ too: a note written there went to descriptor 2, the client's
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            for n, fd in enumerate(self._own_fds):
                os.dup2(fd, n)

    def _serves(self) -> bool:
        """Whether the client's settings still want a server ([server] enabled; read as its call
        would: its files, its variables; config.load keeps them while those stay the same)."""
        from memctl.config import load
        from memctl.errors import MemctlError

        try:
            return load(self.store.config_file, notes=False).server.enabled  # the call says the notes
        except MemctlError:
            return True  # the call itself reports a broken settings file

    def _run_command(self, argv: list[str]) -> int:
        from memctl.config import say_notes_again
        from memctl.text.tokens import say_warnings_again

        say_notes_again()  # a call is a process to its user: the once-a-process notes are said again
        say_warnings_again()
        self._in_command = True
        try:
            self.command.main(args=argv, prog_name="memctl", obj=self._memory)
        except SystemExit as done:
            if done.code is None or isinstance(done.code, int):
                return done.code or 0
            print(done.code, file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        except BaseException:
            traceback.print_exc()
            return 1
        finally:
            self._in_command = False
        return 0

    def _memory(self, path, *, say):
        """The Memory a call's command gets: made anew, as in a process of its own (settings, clock),
        with the open index and vectors of the last call on the same store path from the same
        working directory (memctl.Memory.adopt)."""
        memory = self.make_memory(path, say=say)
        key = (str(memory.path), os.getcwd())
        kept = self.ahead.memories
        previous = kept.pop(key, None)
        if previous is not None:
            memory.adopt(previous)
        kept[key] = memory
        self._call_memory = memory
        while len(kept) > KEPT_MEMORIES:
            kept.popitem(last=False)
        return memory


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """A request and the descriptors that came with it (client.send)."""
    first, fds, _, _ = socket.recv_fds(connection, 1, 3)
    try:
        if not first:
            raise EOFError("no request")
        header = first + client._exactly(connection, 3, client.HELLO_SECONDS)
        request = marshal.loads(client._exactly(connection, int.from_bytes(header, "big"), client.HELLO_SECONDS))
        if not isinstance(request, dict) or (request.get("op") == "call" and len(fds) != 3):
            raise ValueError("not a request")
    except BaseException:
        _close_all(fds)
        raise
    return request, fds


def _send(connection: socket.socket, frame: bytes) -> None:
    try:
        connection.sendall(frame)
    except OSError:
        pass  # the client left: its connection's thread interrupts the call


def _answer(connection: socket.socket, answer: dict) -> None:
    payload = marshal.dumps(answer)
    connection.sendall(len(payload).to_bytes(4, "big") + payload)


def _streams(encodings: list) -> tuple:
    """sys.stdin, stdout and stderr on descriptors 0, 1, 2, made as Python makes them at start:
    stdout line-buffered on a terminal, stderr always; no newline translation."""
    (in_encoding, in_errors), (out_encoding, out_errors), (err_encoding, err_errors) = encodings
    stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), in_encoding, in_errors, newline="\n")
    stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), out_encoding, out_errors, newline="\n",
                              line_buffering=os.isatty(1))
    stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), err_encoding, err_errors, newline="\n",
                              line_buffering=True)
    return stdin, stdout, stderr


def _set_environment(values: dict) -> None:
    """os.environ made `values`, changing only what differs: clearing and filling it (a putenv a
    variable, twice a call) cost 0.07-0.2 ms of a warm call, the difference ~0.02 (bench/README.md "Cited
    measurements")."""
    environment = os.environ
    changed_zone = values.get("TZ") != environment.get("TZ")
    for name in [name for name in environment if name not in values]:
        del environment[name]
    for name, value in values.items():
        if environment.get(name) != value:
            environment[name] = value
    if changed_zone:
        time.tzset()


def _flush(stream) -> None:
    try:
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def _sources_stamp() -> int:
    """The newest modification time of memctl's source files: one edited (or a package installed over
    this one with the same version) makes the server outdated."""
    # os.scandir, not Path.rglob: 0.4 ms instead of 1.1 for ~100 files, looked at once a second
    # before a call is queued (bench/README.md "Cited measurements").
    newest, folders = 0, [str(Path(__file__).resolve().parents[1])]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.name.endswith(".py"):
                    newest = max(newest, entry.stat().st_mtime_ns)
    return newest


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0
