"""The command line's side of the resident server: find the store's server, hand it the call, wait
for its exit status; and start one in the background.

Every `memctl` call runs this first, so it imports only what Python has already loaded or
builds in: `_socket` rather than `socket` (whose enums cost 2-5 ms of a ~25 ms call,
python -X importtime; bench/README.md "Cited measurements"), `_blake2` rather than `hashlib` (which loads
OpenSSL, ~10 ms),
marshal rather than json. Nothing here may make a call fail: whatever goes wrong before the
server has started the call, the caller runs it in-process (`forward` returns None).

The call itself: the client passes its stdin, stdout and stderr (the descriptors, SCM_RIGHTS)
with its argv, working directory, whole environment and umask; the server runs the command
on them, so what is printed, in what order, and what a terminal or a pipe sees are those of an
in-process run. The server then answers with the exit status.
"""

from __future__ import annotations

import marshal
import os
import sys

import _socket

SERVER_ENV = "MEMCTL_SERVER"   # off (0, no, false): every call in-process, no server started
OFF = ("off", "0", "no", "false")
# Not sent: `mcp` serves its own stdin and stdout for hours; `server` manages the servers.
IN_PROCESS = frozenset({"mcp", "server"})
# Run again in-process when their server dies during the call, not exit 2 ("outcome unknown"),
# which for `hooks` would block the agent's prompt. Running a hook twice is harmless (a
# transcript's lines are stored once each, by id); the event on stdin was read by the server, so
# the second run fails as any hook does: one line on stderr, exit 0.
RUN_AGAIN = frozenset({"hooks"})
# Generous: at load 29 on 2 cores a warm search's whole round trip took 173 ms at p90 (bench/server.py); one taken for
# wedged is killed, failing any call it was running for another client.
HELLO_SECONDS = 5.0     # a server that has not taken a call in this long is wedged: killed, replaced
SILENCE_SECONDS = 20.0  # ... or that sends no heartbeat (one a second) this long during a call
QUEUE_SECONDS = 2.0     # the server runs one call at a time; waiting longer, a call runs in-process

# Frames from the server: one byte, the exit status four more.
QUEUED, OUTDATED, FALLBACK, BUSY, STARTED, BEAT, EXIT = (bytes([c]) for c in b"QOFBS.X")


def stamp() -> tuple:
    """What a server must share with its client: the same memctl, from the same place, on the same Python."""
    import memctl

    return (memctl.__version__, os.path.dirname(memctl.__file__), sys.executable)


def runtime_dir(create: bool = False) -> str | None:
    """$XDG_RUNTIME_DIR/memctl, else $TMPDIR/memctl-UID: a directory only this user may enter (else None)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(base):
        path = os.path.join(base, "memctl")
    else:
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"memctl-{os.getuid()}")
    try:
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path if _private(path) else None


def _private(directory: str) -> bool:
    """A directory (not a link), ours, closed to others: else someone else could put a socket where ours goes."""
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return info.st_mode & 0o170000 == 0o040000 and info.st_uid == os.getuid() and not info.st_mode & 0o077


def identity(store: str) -> str:
    """What a server and its calls know a store by: a folder's real path, or a PostgreSQL URL as given
    (sent only over this user's own socket, shown nowhere: messages name the store without its password)."""
    from memctl.store import is_url

    return store if is_url(store) else os.path.realpath(store)


def place(store_root: str, create: bool = False) -> str | None:
    """The path, without its suffix (.sock, .lock, .log), of the server files of the store at
    `store_root`, named by a hash of its identity."""
    directory = runtime_dir(create)
    if directory is None:
        return None
    return os.path.join(directory, _key(store_root))


def _key(store_root: str) -> str:
    from _blake2 import blake2b

    return blake2b(identity(store_root).encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()


# The store's own record of its server: held (flock) by the server while it serves, and naming its
# socket. A login shell and cron have different runtime directories; the store is what both share,
# so a second start finds the first server there, wherever it listens.
RECORD = ".server"


def recorded_socket(store_root: str) -> str | None:
    """The socket the store's record names while a server holds it, if it is one this user's own
    server could listen on: a store is data anyone may have written, so the path must be the socket
    a server of this store's real path makes (its hash's name) in a runtime directory (memctl or
    memctl-UID) that is this user's, 0700; each side then checks the other's uid, and the server
    that this store is its own."""
    descriptor = _open_record(store_root)
    if descriptor is None:
        return None
    try:
        if not _held(descriptor):
            return None  # a record no server holds (it left): stale
        lines = os.read(descriptor, 4096).decode("utf-8", "surrogateescape").split("\n")
    except OSError:
        return None
    finally:
        os.close(descriptor)
    socket_path = lines[1] if len(lines) > 2 else ""
    directory, name = os.path.split(socket_path)
    if (not os.path.isabs(socket_path) or os.path.normpath(socket_path) != socket_path
            or name != _key(store_root) + ".sock"
            or os.path.basename(directory) not in ("memctl", f"memctl-{os.getuid()}") or not _private(directory)):
        return None
    return socket_path


def recorded(store_root: str) -> bool:
    """Whether a server holds the store's record (it serves, or is starting, from any runtime directory)."""
    descriptor = _open_record(store_root)
    if descriptor is None:
        return False
    try:
        return _held(descriptor)
    finally:
        os.close(descriptor)


def _open_record(store_root: str) -> int | None:
    """The record, opened to read: never through a link, never blocking (a FIFO put in its place),
    only a regular file; a store on PostgreSQL keeps none (its server is found in the runtime
    directory only)."""
    from memctl.store import is_url

    if is_url(store_root):
        return None
    try:
        descriptor = os.open(os.path.join(store_root, RECORD),
                             os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        regular = os.fstat(descriptor).st_mode & 0o170000 == 0o100000
    except OSError:
        regular = False
    if not regular:
        os.close(descriptor)
        return None
    return descriptor


def _held(descriptor: int) -> bool:
    import fcntl

    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(descriptor, fcntl.LOCK_UN)
    return False


def _sockets(store_root: str):
    """Where the store's server may listen, in turn (a generator: the record is read only when no
    server answers in this caller's runtime directory): there, else where the store's record says
    (a server that a call of another runtime directory started)."""
    where = place(store_root)
    if where is not None:
        yield where + ".sock"
    other = recorded_socket(store_root)
    if other is not None and (where is None or other != where + ".sock"):
        yield other


def store_of(argv: list[str]) -> tuple[str, str] | None:
    """(command, store directory) of a call to send; None for one that runs in-process: no
    command (the help), --help or --version, an option this parse does not know, `mcp`, `server`."""
    store = None
    at = 0
    while at < len(argv):
        arg = argv[at]
        if arg == "--store" and at + 1 < len(argv):
            store, at = argv[at + 1], at + 2
        elif arg.startswith("--store="):
            store, at = arg[len("--store="):], at + 1
        elif arg in ("-q", "--quiet"):
            at += 1
        elif arg.startswith("-"):
            return None
        else:
            break
    else:
        return None
    command = argv[at]
    if command in IN_PROCESS or "--help" in argv or "-h" in argv:
        return None
    # As Store.locate: the flag, else $MEMCTL_STORE, else ./.memory.
    return command, store or os.environ.get("MEMCTL_STORE") or ".memory"


def forward(argv: list[str]) -> int | None:
    """Run the call in the store's server: its exit status, or None to run it in-process."""
    if os.environ.get(SERVER_ENV, "").lower() in OFF:
        return None
    from memctl.store import is_url

    routed = store_of(argv)
    if routed is None or not (is_url(routed[1]) or os.path.isdir(routed[1])):
        return None
    for socket_path in _sockets(routed[1]):
        try:
            connection, pid = _connect(socket_path)
        except OSError:
            continue  # no server (or a dead one's socket: the in-process run starts another)
        try:
            return _call(connection, pid, argv, identity(routed[1]), rerun=routed[0] in RUN_AGAIN)
        finally:
            connection.close()
    return None


def _connect(path: str):
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        connection.settimeout(HELLO_SECONDS)
        connection.connect(path)
        pid, uid = _peer(connection)
        if uid != os.getuid():
            raise PermissionError(f"{path}: the server is not this user's")
    except BaseException:
        connection.close()
        raise
    return connection, pid


def _peer(connection) -> tuple[int, int]:
    """The pid and uid of the process at the other end (SO_PEERCRED: a struct of three ints)."""
    creds = connection.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[0:4], sys.byteorder), int.from_bytes(creds[4:8], sys.byteorder)


def send(connection, request: dict, fds: tuple[int, ...] = ()) -> None:
    """A request: its length (4 bytes), then its marshal bytes; the descriptors ride on the first byte."""
    payload = marshal.dumps(request)
    header = len(payload).to_bytes(4, "big")
    if fds:
        rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        connection.sendmsg([header[:1]], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        header = header[1:]
    connection.sendall(header + payload)


def _call(connection, pid: int, argv: list[str], store: str, *, rerun: bool = False) -> int | None:
    streams = (sys.stdin, sys.stdout, sys.stderr)
    if any(stream is None for stream in streams):
        return None  # a closed descriptor 0, 1 or 2: in-process, as Python itself copes
    umask = os.umask(0o077)
    os.umask(umask)
    try:
        request = {"op": "call", "stamp": stamp(), "store": store, "argv": argv, "cwd": os.getcwd(),
                   "env": dict(os.environ), "umask": umask, "encodings": [(s.encoding, s.errors) for s in streams]}
        send(connection, request, (0, 1, 2))
        first = _frame(connection, HELLO_SECONDS)
    except TimeoutError:
        return _replace(pid)  # silent: wedged
    except OSError:
        return None  # it died
    if first != QUEUED:
        return None  # OUTDATED (it is leaving), FALLBACK (not its store, or it will not serve this call), or it died
    try:
        verdict = _frame(connection, QUEUE_SECONDS + HELLO_SECONDS)
    except TimeoutError:
        return _replace(pid)
    except OSError:
        return None
    if verdict != STARTED:
        return None  # BUSY with another call: in-process, which waits on the store lock as any writer
    try:
        try:
            return _exit_status(connection)
        except KeyboardInterrupt:
            # Ctrl-C: the server hears the connection's end and interrupts the command, which
            # says so and exits as it would in-process; its exit status is still ours.
            connection.shutdown(_socket.SHUT_WR)
            return _exit_status(connection)
    except TimeoutError:
        _replace(pid)
    except OSError:
        pass
    if rerun:
        return None
    # The call ran, wrote who knows what, and its server is gone: running it again could do it twice.
    print(f"memctl: error: the memctl server (pid {pid}) stopped during the call; its outcome is unknown, "
          f"run it again (MEMCTL_SERVER=off runs it in this process)", file=sys.stderr)
    return 2


def _exit_status(connection) -> int:
    while True:
        frame = _frame(connection, SILENCE_SECONDS)
        if frame == EXIT:
            return int.from_bytes(_exactly(connection, 4, SILENCE_SECONDS), "big", signed=True)
        if frame != BEAT:
            raise ConnectionResetError(f"unexpected frame {frame!r}")


def _frame(connection, seconds: float) -> bytes:
    return _exactly(connection, 1, seconds)


def _exactly(connection, size: int, seconds: float) -> bytes:
    connection.settimeout(seconds)
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        data += chunk
    return data


def _replace(pid: int) -> None:
    """A server that stopped answering is killed (it is this user's: SO_PEERCRED said so); the call
    runs in-process, which starts another. None: run in-process."""
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    return None


def start(store_root: str, most: int) -> int | None:
    """Start the server of the store at `store_root` in the background, unless one runs (or starts),
    from this runtime directory or another (the store's record), or `most` servers run from this
    one: `memctl --store ROOT server run`, in its own session, its output in the runtime dir's
    .log; the memctl found on the module path as this one was (PYTHONPATH, the install), never the
    working directory's. The pid of the process started, if one was."""
    if os.environ.get(SERVER_ENV, "").lower() in OFF:
        return None
    where = place(store_root, create=True)
    if where is None or held(where + ".lock") or recorded(store_root) or running(os.path.dirname(where)) >= most:
        return None
    log = os.open(where + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    quiet = os.open(os.devnull, os.O_RDONLY)
    try:
        # -P: `python -m` puts the working directory first on the module path, and the call's is
        # the user's: a `memctl` folder there (a checkout, a download) would have run as the server.
        # A URL goes in the environment, never the arguments, which every user's `ps` shows.
        return os.posix_spawn(sys.executable, [sys.executable, "-P", "-m", "memctl", *_store_argument(store_root),
                                               "server", "run"], _store_environment(store_root),
                              file_actions=[(os.POSIX_SPAWN_DUP2, quiet, 0), (os.POSIX_SPAWN_DUP2, log, 1),
                                            (os.POSIX_SPAWN_DUP2, log, 2)], setsid=True)
    finally:
        os.close(log)
        os.close(quiet)


def _store_argument(store: str) -> list[str]:
    from memctl.store import is_url

    return [] if is_url(store) else ["--store", os.path.realpath(store)]


def _store_environment(store: str) -> dict:
    from memctl.store import is_url

    return {**os.environ, "MEMCTL_STORE": store} if is_url(store) else os.environ


def running(directory: str, but: str = "") -> int:
    """How many servers run from a runtime directory (each holds its .lock there), `but` one's lock."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    return sum(held(os.path.join(directory, name)) for name in names if name.endswith(".lock") and name != but)


def held(lock_path: str) -> bool:
    """Whether a server holds the lock file of its store (it does, as long as it lives)."""
    try:
        descriptor = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return _held(descriptor)
    finally:
        os.close(descriptor)


def starting(store_root: str) -> bool:
    """Whether a process of this user is a server of the store, answering or not yet (it opens the
    model before it listens): `memctl --store ROOT server run` as start() runs it. Not at once
    after start() returns: the kernel lets the starter go on before the new program's arguments
    are in place (False 2 times in 15 at load 20)."""
    tail = [*_store_argument(store_root), "server", "run"]
    url = None if tail[0] == "--store" else f"MEMCTL_STORE={store_root}".encode("utf-8", "surrogateescape")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                argv = file.read().decode("utf-8", "surrogateescape").split("\0")[:-1]
        except OSError:
            continue
        if argv[-len(tail):] == tail and (url is None or argv[-3:-2] == ["memctl"] and _environment_has(pid, url)):
            return True
    return False


def _environment_has(pid: str, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            return entry in file.read().split(b"\0")
    except OSError:
        return False


def ask(store_root: str, op: str) -> dict | None:
    """A request that is not a call (status, stop) to the store's server: its answer, or None when none runs."""
    for socket_path in _sockets(store_root):
        try:
            connection, _ = _connect(socket_path)
        except OSError:
            continue
        try:
            send(connection, {"op": op, "store": identity(store_root)})
            size = int.from_bytes(_exactly(connection, 4, HELLO_SECONDS), "big")
            return marshal.loads(_exactly(connection, size, HELLO_SECONDS))
        except (OSError, ValueError, EOFError):
            continue
        finally:
            connection.close()
    return None
