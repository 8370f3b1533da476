"""Running a program the user named (an LLM command, a cache summary command): input on
stdin, the answer on stdout, bounded in time and in size.

- The program runs in a session of its own; past the timeout (or past the
  size limit) its whole process group is killed, so the children of a
  wrapper (`sh -c '...'`) do not outlive the call, and reading stops: the
  call takes at most `timeout` seconds however the program behaves.
- stdout is read as it arrives and refused past OUTPUT_LIMIT bytes, so no
  answer grows without bound in memory or in what parses it afterwards.
- stderr keeps only its tail, for the one line that says why a program failed.
- It dies with the memctl process that started it (dies_with_this_process): a resident
  server killed during a call leaves no program of that call running.

Which programs run is the user's choice alone (config.PROGRAM_SETTINGS).
This module sits beside config.py and errors.py, under every package: the
topics and the cache both run programs, and neither may import the other.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import sys
import time

from memctl.errors import MemctlError

# An answer memctl reads: 1 MiB, about 250,000 tokens, far over any split batch,
# summary or review it asks for, and small enough to parse at once.
OUTPUT_LIMIT = 1 << 20
_STDERR_TAIL = 4096
WAIT_NOTE_SECONDS = 3.0  # a program still silent this long: say on a terminal what memctl waits for
_CHUNK = 65536


class ProgramFailed(MemctlError):
    """The program could not start, outran its time, printed too much or exited with an error."""

    def __init__(self, program: str, reason: str, *, timed_out: bool = False):
        super().__init__(f"'{program}' {reason}")
        self.timed_out = timed_out


def program_argv(command: str, setting: str) -> list[str]:
    """The words of a program setting (split as a shell would, but never run by one); an unclosed
    quote or a blank command is one line naming the setting."""
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError as exc:  # an unclosed quote
        raise MemctlError(f"{setting} {command!r} cannot be split into words: {exc}") from None
    if not argv:
        raise MemctlError(f"{setting} is blank; give a command or leave it unset")
    return argv


def run_program(argv: list[str], stdin: bytes, timeout: float, output_limit: int = OUTPUT_LIMIT) -> bytes:
    """What the program printed on stdout, given `stdin`; ProgramFailed if it cannot start, takes
    longer than `timeout` seconds, prints more than `output_limit` bytes or exits with an error."""
    deadline = time.monotonic() + timeout
    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, preexec_fn=dies_with_this_process())
    except OSError as exc:
        raise ProgramFailed(argv[0], f"cannot be run: {exc.strerror or exc}") from None
    finished = False
    try:
        stdout, stderr = _exchange(process, stdin, deadline, output_limit, argv[0], timeout)
        try:
            status = process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # it closed its output but goes on running
            raise ProgramFailed(argv[0], f"gave no answer within {timeout:g} s", timed_out=True) from None
        finished = True
    finally:
        if not finished:
            _kill_group(process)
        for pipe in (process.stdin, process.stdout, process.stderr):
            pipe.close()
    if status != 0:
        said = stderr.decode(errors="replace").strip().splitlines()
        raise ProgramFailed(argv[0], f"exited with status {status}" + (f": {said[-1]}" if said else ""))
    return stdout


def dies_with_this_process():
    """The preexec_fn that has a program killed (SIGKILL) when the memctl process that started it
    dies, even by SIGKILL (PR_SET_PDEATHSIG; Linux): a resident server killed during a `cache
    run` left its command running, reparented to init, for as long as it ran. None where there is
    no prctl. (A program that starts its own children in a session of theirs is its own affair.)"""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def tie() -> None:
        prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the tie was made
            os.kill(os.getpid(), signal.SIGKILL)

    return tie


def _exchange(process: subprocess.Popen, stdin: bytes, deadline: float, output_limit: int, program: str,
              timeout: float) -> tuple[bytes, bytes]:
    """Write stdin and read stdout and stderr until both end: (stdout, the tail of stderr)."""
    stdout, stderr = bytearray(), bytearray()
    written = 0
    # A person at a terminal is told once what the call waits for when the program is slow to
    # answer (an LLM command can take its whole timeout); elsewhere (cron, an agent's pipe) the
    # line would only be noise, as progress is.
    note_at = time.monotonic() + WAIT_NOTE_SECONDS if _stderr_is_a_terminal() else None
    with selectors.DefaultSelector() as selector:
        if stdin:
            selector.register(process.stdin, selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        selector.register(process.stdout, selectors.EVENT_READ)
        selector.register(process.stderr, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                raise ProgramFailed(program, f"gave no answer within {timeout:g} s", timed_out=True)
            if note_at is not None and now >= note_at:
                note_at = None
                if not stdout:
                    print(f"memctl: waiting for '{program}' to answer (it is given {timeout:g} s in all)",
                          file=sys.stderr, flush=True)
            for key, _ in selector.select(left if note_at is None else min(left, note_at - now)):
                if key.fileobj is process.stdin:
                    try:  # at most PIPE_BUF: a write the selector found room for never blocks
                        written += os.write(key.fd, stdin[written:written + select.PIPE_BUF])
                    except BrokenPipeError:  # it stopped reading: its answer may still come
                        written = len(stdin)
                    if written >= len(stdin):
                        selector.unregister(key.fileobj)
                        key.fileobj.close()
                    continue
                data = os.read(key.fd, _CHUNK)
                if not data:
                    selector.unregister(key.fileobj)
                elif key.fileobj is process.stdout:
                    stdout += data
                    if len(stdout) > output_limit:
                        raise ProgramFailed(program, f"printed more than {output_limit} bytes, the most memctl "
                                                     "reads of an answer")
                else:
                    stderr = (stderr + data)[-_STDERR_TAIL:]
    return bytes(stdout), bytes(stderr)


def _stderr_is_a_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except ValueError:  # closed
        return False


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the program and everything it started, then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the whole group has exited already
        pass
    process.wait()
