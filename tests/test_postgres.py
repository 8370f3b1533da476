"""A store on PostgreSQL (#35, memctl/store/postgres.py): a real PostgreSQL 18 with pgvector (one
server for the session, tests/postgres_server.py; a database a test), the store copied there and
back byte for byte, its ids unique under writers at once, a killed writer leaving nothing, scopes
kept in columns, the working folder brought up to date by what changed, and the URL's password in
no message. What is not on PostgreSQL yet says so in one line, exit 2 (these need no server: they
never connect). tests/test_seam.py runs every command on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from conftest import FIXTURES, killed_after, snapshot
from memctl.errors import StoreError
from memctl.store.postgres import FORMAT, PostgresStore, shown

CHAT = FIXTURES / "demo" / "chat.jsonl"
NOTES = FIXTURES / "demo" / "MEMORY.md"
NOW = {"MEMCTL_NOW": "2026-11-20T10:00:00Z"}


def demo_store(run, store_dir):
    """The bundled demo (scripts/demo.sh) ingested, with a pending note and a user's session beside it."""
    assert run("ingest", str(CHAT), env=NOW).returncode == 0
    assert run("ingest", str(NOTES), env=NOW).returncode == 0
    assert run("ingest", "--pending", "-", input='{"text": "Kestrel might move to Redis streams"}',
               env=NOW).returncode == 0
    assert run("ingest", "--scope", "user:alice", "--session", "alice-1", "-",
               input='{"role": "user", "text": "my locker code is 4711, keep it to yourself"}',
               env=NOW).returncode == 0
    # A hand edit the parser keeps as it is: an entry without a metadata block, odd blank lines.
    with open(store_dir / "MEMORY.md", "a") as notes:
        notes.write("\n\n\n- a hand-written note\n  over two lines\n")
    return store_dir


def truth(root) -> dict[str, str]:
    """The files a copy carries: all but the hidden (.index/, .lock, .journal/)."""
    return {path: digest for path, digest in snapshot(root).items() if not path.startswith(".")}


def test_a_store_goes_to_postgresql_and_back_byte_for_byte(run, store_dir, tmp_path, postgres_url):
    demo_store(run, store_dir)
    there = run("store", "copy", str(store_dir), postgres_url)
    assert there.returncode == 0, there.stderr
    back = tmp_path / "back"
    again = run("store", "copy", "--json", postgres_url, str(back))
    assert again.returncode == 0, again.stderr
    assert truth(back) == truth(store_dir)
    assert {"MEMORY.md", "pending.jsonl", "sessions/alice-1.jsonl", "memory/2026-11-09.md"} <= set(truth(back))
    import orjson

    report = orjson.loads(again.stdout)
    assert report["kinds"] == {"notes": 1, "sessions": 4, "pending": 1, "other": 4}
    assert report["source"] == shown(postgres_url) and "***" in report["source"]

    import psycopg

    with psycopg.connect(postgres_url) as conn:  # the records, each with its scope, in SQL
        scopes = dict(conn.execute("SELECT session, scope FROM memctl_sessions").fetchall())
        assert scopes["alice-1"] == "user:alice" and scopes["2026-11-02-planning"] == "global"
        assert conn.execute("SELECT count(*) FROM memctl_messages WHERE scope = 'user:alice'").fetchone()[0] == 1
        notes = conn.execute("SELECT id, scope FROM memctl_notes WHERE kind = 'entry'").fetchall()
        assert ("mem-kestrel-db", "project:kestrel") in notes
        assert conn.execute("SELECT scope FROM memctl_pending").fetchall() == [("global",)]


def test_tables_of_another_format_are_neither_read_nor_written(run, store_dir, tmp_path, postgres_url):
    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE memctl_store SET format = %s", (FORMAT + 1,))
    newer = f"format {FORMAT + 1}".encode()
    for call in (("store", "copy", postgres_url, str(tmp_path / "out")), ("store", "copy", str(store_dir), postgres_url)):
        done = run(*call)
        assert done.returncode == 2 and (newer in done.stderr or b"not empty" in done.stderr), done.stderr
    assert f"this memctl reads format {FORMAT}".encode() in run("store", "copy", postgres_url, str(tmp_path / "out")).stderr
    with pytest.raises(StoreError, match=f"format {FORMAT + 1}"):
        with PostgresStore(postgres_url).transaction() as tx:
            tx.append("sessions/x.jsonl", b'{"id": "x1", "text": "x"}\n')
    assert not (tmp_path / "out").exists()


def test_a_copy_goes_only_into_an_empty_store_and_a_dry_run_writes_nothing(run, store_dir, postgres_url):
    demo_store(run, store_dir)
    dry = run("store", "copy", "-n", str(store_dir), postgres_url)
    assert dry.returncode == 0 and b"would copy\tMEMORY.md\t" in dry.stdout
    assert not PostgresStore(postgres_url).exists()  # not even the tables
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    twice = run("store", "copy", str(store_dir), postgres_url)
    assert twice.returncode == 2 and b"not empty" in twice.stderr
    assert len(twice.stderr.splitlines()) == 1
    into_folder = run("store", "copy", postgres_url, str(store_dir))  # a folder with files: refused alike
    assert into_folder.returncode == 2 and b"not empty" in into_folder.stderr


def test_ids_stay_unique_and_a_refused_transaction_leaves_nothing_under_writers_at_once(postgres_url):
    """Eight writers on connections of their own write at once; each also writes the one id they all
    share. One of them lands it; every other's whole transaction is refused, none half written."""
    writers, landed, refused = 8, [], []
    start = threading.Barrier(writers)

    def write(number: int) -> None:
        store = PostgresStore(postgres_url)
        start.wait()
        try:
            with store.transaction() as tx:
                lines = [f'{{"id": "w{number}-{n}", "text": "writer {number} line {n}"}}\n' for n in range(20)]
                lines.append(f'{{"id": "shared", "text": "writer {number}"}}\n')
                tx.append(f"sessions/s{number}.jsonl", "".join(lines).encode())
            landed.append(number)
        except StoreError as exc:
            refused.append(str(exc))
        finally:
            store.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(landed) == 1 and len(refused) == writers - 1
    assert all("Key (id)=(shared) already exists" in why for why in refused), refused
    files = PostgresStore(postgres_url).files()
    assert list(files) == [f"sessions/s{landed[0]}.jsonl"]  # nothing of a refused writer
    assert files[f"sessions/s{landed[0]}.jsonl"].count(b"\n") == 21


# seam.Writes as the features use it, torn JSON lines included: both backends must end with the same files.
WRITES = [
    ("replace", "MEMORY.md", b"# Notes\n\n## General\n\nfirst\n"),
    ("append", "MEMORY.md", b"\n- second\n"),
    ("append", "sessions/s1.jsonl", b'{"id": "a", "text": "x", "scope": "user:bob"}\n'),
    ("append", "sessions/s1.jsonl", b'{"id": "b", "text": "y", "scope": "user:bob"}\n{"id": "c", "te'),  # torn
    ("append", "sessions/s1.jsonl", b'{"id": "d", "text": "z", "scope": "user:bob"}\n'),  # cuts the torn line
    ("append", "pending.jsonl", b'{"id": "p", "text": "maybe", "fields": {"scope": "user:bob"}}'),  # unended
    ("append", "pending.jsonl", b'{"id": "q", "text": "q"}\n'),  # ends it first
    ("replace", "topics/t-1.jsonl", b'{"id": "t-1"}\n'),
    ("append", "memory/2026-11-20.md", b"# 2026-11-20\n\n"),
    ("append", "memory/2026-11-20.md", b"### 10:00:00 user\n"),
    ("replace", "sessions/s2.jsonl", b'{"id": "e", "text": "gone"}\n'),
    ("delete", "sessions/s2.jsonl", None),
    ("delete", "memory/2026-11-21.md", None),  # not there: nothing to do
]


def test_writes_land_the_same_on_a_folder_and_on_postgresql(store_dir, postgres_url):
    from pathlib import PurePosixPath

    from memctl.store.copy import folder_files
    from memctl.store.store import Store

    folder, database = Store(store_dir), PostgresStore(postgres_url)
    assert database.written_stamp() is None
    for number, (operation, path, data) in enumerate(WRITES, 1):
        for store, place in ((folder, folder.path(*path.split("/"))), (database, PurePosixPath(path))):
            with store.transaction() as tx:
                getattr(tx, operation)(place, *([] if data is None else [data]))
        assert database.written_stamp() == number
    with database.transaction(dry_run=True) as tx:
        tx.replace("MEMORY.md", b"dry\n")
    assert database.written_stamp() == len(WRITES)
    assert database.files() == folder_files(folder)
    assert b'"id": "c"' not in database.files()["sessions/s1.jsonl"]
    database.close()


def test_a_killed_writer_leaves_nothing_and_no_lock(postgres_url):
    script = ("import sys, time\n"
              "from memctl.store.postgres import PostgresStore\n"
              "store = PostgresStore(sys.argv[1])\n"
              "with store.transaction() as tx:\n"
              "    tx.append('sessions/k.jsonl', b'{\"id\": \"k-1\", \"text\": \"half\"}\\n')\n"
              "    tx.replace('memory/2026-11-20.md', b'# 2026-11-20\\n')\n"
              "    print('ready', flush=True)\n"
              "    time.sleep(60)\n")
    killed_after(0.2, script, postgres_url)
    store = PostgresStore(postgres_url)
    # The server ends the dead writer's transaction when its connection goes; its lock goes with it.
    with store.transaction() as tx:
        tx.append("sessions/after.jsonl", b'{"id": "a-1", "text": "after the kill"}\n')
    assert list(store.files()) == ["sessions/after.jsonl"]
    store.close()


def test_the_password_is_in_no_message(run, postgres_server, postgres_url, store_dir):
    password = postgres_server.password
    wrong = postgres_url.replace(password, "not-the-" + password)
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    calls = [("store", "copy", wrong, str(store_dir / "x")), ("store", "copy", missing, str(store_dir / "x")),
             ("store", "copy", str(store_dir), postgres_url), ("store", "copy", "-n", postgres_url, str(store_dir)),
             ("--store", wrong, "search", "kestrel"), ("store", "copy", "--json", postgres_url, "/dev/null/x")]
    for call in calls:
        done = run(*call)
        said = done.stdout + done.stderr
        assert done.returncode == 2, (call, said)
        assert password.encode() not in said and len(done.stderr.splitlines()) == 1, (call, said)
    assert b"password authentication failed" in run(*calls[0]).stderr


INSTALLERS = [["hooks", "install", "claude-code", "--json"], ["mcp", "install", "--client", "cursor", "--json"]]


@pytest.mark.parametrize("argv", INSTALLERS, ids=lambda argv: " ".join(argv[:2]))
def test_an_installer_names_a_url_store_by_its_url_and_never_writes_a_password(run, argv, tmp_path, monkeypatch):
    """The hook or MCP server a client runs names the store by its URL; a URL holding a password is
    refused in one line (it would sit in the client's settings in clear), nothing written."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    (home / ".claude").mkdir(parents=True)
    (home / ".cursor").mkdir()
    refused = run(*argv, store="postgresql://mei:s3cret-pw@127.0.0.1:1/memory")
    assert refused.returncode == 2 and refused.stdout == b"" and len(refused.stderr.splitlines()) == 1
    assert b"holds a password" in refused.stderr and b"s3cret" not in refused.stderr
    assert [p for p in home.rglob("*") if p.is_file()] == []
    done = run(*argv, store="postgresql://mei@127.0.0.1:1/memory")  # never reached: nothing connects
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    command = written.get("command", "") + " " + " ".join(written.get("args", []))
    assert "--store postgresql://mei@127.0.0.1:1/memory" in command, written


def test_a_hook_on_a_database_out_of_reach_never_blocks_the_agent(run):
    done = run("hooks", "run", "claude-code", store="postgres://mei:s3cret-pw@127.0.0.1:1/memory",
               input='{"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "which database?"}')
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    assert b"cannot connect" in done.stderr and b"s3cret" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_memctl_store_may_name_a_url(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from memctl.cli import cli

    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["status"], env={"MEMCTL_STORE": "postgresql://mei:s3cret-pw@127.0.0.1:1/m"})
    assert done.exit_code == 2 and "postgresql://mei:***@127.0.0.1:1/m: cannot connect" in done.stderr
    assert "s3cret" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no folder made of the URL's name


@pytest.mark.parametrize("url", ["postgresql://mei:s3cret-pw@[::1/memory", "postgresql://mei:s3cret-pw@db:port/m",
                                 "postgresql://mei:s3cret-pw@127.0.0.1:1/m?password=s3cret-pw"])
def test_a_url_that_does_not_parse_or_connect_shows_no_password(run, url, tmp_path):
    done = run("store", "copy", url, str(tmp_path / "out"))
    assert done.returncode == 2 and b"s3cret" not in done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1 and b"Traceback" not in done.stderr


def test_shown_hides_the_password_wherever_the_url_holds_it():
    assert shown("postgresql://mei:pa:ss@db.example:5432/memory") == "postgresql://mei:***@db.example:5432/memory"
    assert shown("postgresql://db/memory?sslmode=require&password=pw") == \
        "postgresql://db/memory?sslmode=require&password=***"
    assert shown("postgresql://mei@db/memory") == "postgresql://mei@db/memory"


@pytest.mark.process
def test_a_folder_store_never_imports_psycopg(tmp_path):
    """Cold start unchanged: a folder store's commands, its copy included, load no PostgreSQL code."""
    probe = ("import sys\n"
             "from click.testing import CliRunner\n"
             "from memctl.cli import cli\n"
             "store, copy = sys.argv[1], sys.argv[2]\n"
             "for argv in (['ingest', '-'], ['status'], ['store', 'copy', store, copy]):\n"
             "    assert CliRunner().invoke(cli, ['--store', store, *argv], input='{\"text\": \"kestrel uses "
             "postgres now\"}').exit_code == 0, argv\n"
             "print(sorted(m for m in sys.modules if m.startswith(('psycopg', 'memctl.store.postgres'))))\n")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "store"), str(tmp_path / "copy")],
                          capture_output=True, text=True, env={**os.environ, "MEMCTL_STORE": ""}, timeout=120)
    assert done.stdout == "[]\n", done.stderr
    assert truth(tmp_path / "copy") == truth(tmp_path / "store")


def test_the_library_on_a_database_out_of_reach_says_so_in_one_line():
    """Memory on a URL no server answers: every call a command makes stops with a MemctlError (one
    line, no password), never another exception."""
    from memctl import Memory
    from memctl.errors import MemctlError

    postgres_url = "postgresql://mei:s3cret-pw@127.0.0.1:1/memory"
    memory = Memory(postgres_url)
    calls = [lambda: memory.search("kestrel"), lambda: memory.ingest('{"text": "kestrel uses postgres now"}'),
             memory.status, lambda: memory.show("s1-01"), lambda: memory.topics.list(), memory.config,
             memory.index, lambda: memory.context("s1", "which database does kestrel use"),
             lambda: memory.forget(["s1-01"]), lambda: memory.review.pending(), lambda: memory.health.scores(),
             lambda: memory.history("mem-kestrel-db"), lambda: memory.cache.stats()]
    for call in calls:
        with pytest.raises(MemctlError) as refused:
            call()
        assert "\n" not in str(refused.value) and urlsplit(postgres_url).password not in str(refused.value)
        assert "cannot connect" in str(refused.value)


# -- the index in the database (#35 item 2) -------------------------------------------------------------
def units_in(url: str) -> dict[str, tuple]:
    """id -> (row, text, embed digest, vector) of every unit the database's index holds."""
    import psycopg

    with psycopg.connect(url) as database:
        return {unit_id: (row, text, digest, vector) for unit_id, row, text, digest, vector in database.execute(
            "SELECT id, row, text, embed_digest, embedding::float4[] FROM memctl_units")}


def test_index_on_postgresql_embeds_what_is_new_or_changed_and_deletes_what_is_gone(run, store_dir, postgres_url):
    import orjson

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    first = run("index", "--json", store=postgres_url)
    built = orjson.loads(first.stdout)
    assert first.returncode == 0 and built["rebuilt"] and built["units"] == built["embedded"] > 10
    before = units_in(postgres_url)
    assert len(before) == built["units"]
    again = orjson.loads(run("index", "--json", store=postgres_url).stdout)  # idempotent: nothing to do
    assert (again["units"], again["added"], again["changed"], again["removed"], again["embedded"]) == \
        (built["units"], 0, 0, 0, 0)
    assert units_in(postgres_url) == before

    # One message's text changed, another message forgotten, in one write of the store.
    store = PostgresStore(postgres_url)
    session = store.files()["sessions/2026-11-02-planning.jsonl"].decode().splitlines(keepends=True)
    changed = orjson.loads(session[2])
    changed["text"] = "Python with FastAPI, and SQLite after all: one file is enough for a bakery"
    with store.transaction() as tx:
        tx.replace("sessions/2026-11-02-planning.jsonl",
                   "".join([session[0], session[1], orjson.dumps(changed).decode() + "\n", *session[4:]]).encode())
    store.close()
    gone = orjson.loads(session[3])["id"]
    done = run("index", "--json", store=postgres_url)
    assert done.returncode == 0, done.stderr
    update = orjson.loads(done.stdout)
    # embedded again: the changed message, and the one after the forgotten one, which now reads it as
    # its turn before; the later lines of the file moved (new rows, their vectors kept)
    assert (update["removed"], update["added"], update["embedded"]) == (1, 0, 2)
    after = units_in(postgres_url)
    assert gone in before and gone not in after and len(after) == len(before) - 1
    assert after[changed["id"]][1] == changed["text"] and after[changed["id"]][2] != before[changed["id"]][2]
    assert after[changed["id"]][3] != before[changed["id"]][3]
    elsewhere = [unit_id for unit_id in after if not unit_id.startswith("s1-")]  # another file's units: untouched
    assert len(elsewhere) > 10 and all(after[unit_id] == before[unit_id] for unit_id in elsewhere)
    # What an update leaves is what indexing the same store from scratch makes, vector for vector.
    rebuilt = orjson.loads(run("index", "--rebuild", "--json", store=postgres_url).stdout)
    assert rebuilt["rebuilt"] and rebuilt["reason"] == "asked" and rebuilt["units"] == len(after)
    assert {k: v[1:] for k, v in units_in(postgres_url).items()} == {k: v[1:] for k, v in after.items()}


def test_a_text_said_many_times_on_postgresql_is_embedded_once(run, tmp_path, postgres_url):
    import orjson

    said = ["The Kestrel demo is on December 12th.", "Standup moves to 10:15 from November."] * 2
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(b"".join(orjson.dumps({"id": f"{session}-{n}", "session": session, "speaker": "Mei", "text": text,
                                            "ts": f"2026-07-{day:02d}T{8 + 3 * n:02d}:00:00Z"}) + b"\n"
                              for day, session in ((7, "first"), (8, "copied")) for n, text in enumerate(said)))
    assert run("ingest", "--keep-noise", str(chat), store=postgres_url).returncode == 0
    built = orjson.loads(run("index", "--json", store=postgres_url).stdout)
    # eight messages, each read alone (hours apart), two texts: each embedded once
    assert (built["units"], built["embedded"]) == (8, 2)
    vectors = {unit_id: unit[3] for unit_id, unit in units_in(postgres_url).items()}
    assert len({tuple(vectors[i]) for i in vectors if int(i[-1]) % 2 == 0}) == 1
    assert len({tuple(vectors[i]) for i in vectors if int(i[-1]) % 2 == 1}) == 1


def test_a_search_on_postgresql_indexes_the_store_written_since(run, store_dir, postgres_url):
    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    assert run("search", "--json", "--mode", "bm25", "quokka", store=postgres_url).returncode == 1
    store = PostgresStore(postgres_url)
    with store.transaction() as tx:
        tx.append("sessions/zoo.jsonl", b'{"id": "zoo-1", "role": "user", "text": "we saw a quokka at the zoo"}\n')
    store.close()
    done = run("search", "--json", "--mode", "bm25", "quokka", store=postgres_url)
    assert done.returncode == 0 and b'"id":"zoo-1"' in done.stdout
    assert b"updated the index: 1 added" in done.stderr and postgres_url.encode() not in done.stderr


def test_a_search_on_postgresql_judges_its_index_fresh_by_the_settings_as_on_a_folder(run, store_dir, postgres_url,
                                                                                     monkeypatch):
    """Whether a search indexes first is judged by the settings that name the model (its name,
    its precision, the turn before), as a folder's index is: the model's identity, worked out
    by opening its packages (~30 ms a cold search), only when they differ. One whose identity
    changed under the same name is rebuilt by the next update; another setting is not fresh."""
    import psycopg

    from memctl import Memory
    from memctl.index import postgres

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    memory = Memory(postgres_url)
    try:
        memory.index()
        index = postgres.PgIndex(memory.runtime)
        with monkeypatch.context() as patched:
            patched.setattr(postgres, "_Model", None)  # not opened: calling it would raise
            assert index.is_fresh()
            with psycopg.connect(postgres_url) as database:
                database.execute("""UPDATE memctl_index SET built = jsonb_set(built, '{model,sha256}', '"another"')""")
            assert index.is_fresh()
        update = memory.index()
        assert update.rebuilt and update.reason.startswith("model changed")
        assert index.is_fresh()
        with psycopg.connect(postgres_url) as database:
            database.execute("UPDATE memctl_index SET built = jsonb_set(built, '{with_previous_turn}', 'false')")
        assert not index.is_fresh()
    finally:
        memory.close()


def index_state(url: str) -> tuple:
    import psycopg

    with psycopg.connect(url) as database:
        return database.execute("SELECT format, built, written, units, body_tokens, context_tokens, updated_at "
                                "FROM memctl_index").fetchone()


def test_an_index_on_postgresql_that_fails_as_its_rows_go_in_leaves_it_as_it_was(postgres_url, monkeypatch):
    """The rows of an update or a rebuild go in by one COPY, each sent as it is made (_insert):
    when the last cannot be made, the ones before it, sent already (hundreds of KB), are not kept:
    the rows and the state of the index are as they were (a rebuild's dropped table is back), and
    the next update makes what a rebuild makes."""
    import orjson

    from memctl import Memory
    from memctl.index import postgres

    def session(name: str, day: int, last: str = "") -> bytes:
        return b"".join(orjson.dumps(
            {"id": f"{name}-{n}", "session": name, "speaker": "Mei", "ts": f"2026-07-{day:02d}T{8 + n // 60:02d}:{n % 60:02d}:00Z",
             "text": f"note {n} of {name}: the kestrel pipeline moved its nightly batch to shard {n * 7 % 31}"
                     + (last if n == 149 else "")}) + b"\n" for n in range(150))

    memory = Memory(postgres_url)
    try:
        memory.ingest(session("first", 7), fmt="jsonl", keep_noise=True)
        memory.index()
        before, state = units_in(postgres_url), index_state(postgres_url)
        assert len(before) == 150
        memory.ingest(session("second", 8, " (unmakeable)"), fmt="jsonl", keep_noise=True)
        made: list[str] = []
        row = postgres._row

        def failing(unit, *args):
            if "unmakeable" in unit.text:
                raise RuntimeError("this row cannot be made")
            made.append(unit.id)
            return row(unit, *args)

        monkeypatch.setattr(postgres, "_row", failing)
        for rebuild, rows_before in ((False, 149), (True, 299)):
            made.clear()
            with pytest.raises(RuntimeError, match="cannot be made"):
                memory.index(rebuild=rebuild)
            assert len(made) == rows_before
            assert units_in(postgres_url) == before and index_state(postgres_url) == state
        monkeypatch.undo()
        update = memory.index()
        assert (update.rebuilt, update.added, update.units) == (False, 150, 300)
        after = units_in(postgres_url)
        assert all(after[unit_id] == unit for unit_id, unit in before.items())
        assert memory.index(rebuild=True).units == 300
        assert {k: v[1:] for k, v in units_in(postgres_url).items()} == {k: v[1:] for k, v in after.items()}
    finally:
        memory.close()


def test_a_notes_field_a_hand_edit_made_a_number_or_a_list_is_indexed_as_its_text(run, store_dir, postgres_url):
    """tool, agent, cache_scope and created_at are text (the store's check says so); one a hand edit made
    a number, true or a list is indexed as MEMORY.md writes it, not refused."""
    import psycopg

    store_dir.mkdir(parents=True, exist_ok=True)
    (store_dir / "MEMORY.md").write_text("## Tools\n\n<!-- memory\nid: mem-odd\ntool: 42\nagent: true\n"
                                         "cache_scope: [1, 2]\ncreated_at: 2026\n-->\nThe deploy script lives in ops/.\n")
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    assert run("index", store=postgres_url).returncode == 0
    with psycopg.connect(postgres_url) as database:
        assert database.execute("SELECT tool, agent, cache_scope, ts FROM memctl_units WHERE id = 'mem-odd'"
                                ).fetchone() == ("42", "true", "[1,2]", "2026")


# -- the working folder (store/postgres.py Mirror) ---------------------------------------------------------
FOLDER_OF = ("import sys, time\n"
             "from memctl import Memory\n"
             "memory = Memory(sys.argv[1])\n"
             "memory.status()\n"
             "print(memory.store.root, flush=True)\n"
             "if sys.argv[2] == 'wait':\n"
             "    time.sleep(60)\n")


@pytest.mark.process
def test_the_working_folder_is_private_and_gone_when_its_process_ends_or_is_killed(postgres_url, store_dir, run):
    """A process's working folder (the truth as files, while it runs) is its user's alone and removed
    at exit; one a killed process left is removed by the next process that makes one."""
    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    ended = subprocess.run([sys.executable, "-c", FOLDER_OF, postgres_url, "end"], capture_output=True, text=True,
                           timeout=120)
    assert ended.returncode == 0, ended.stderr
    assert not os.path.exists(ended.stdout.strip())
    waiting = subprocess.Popen([sys.executable, "-c", FOLDER_OF, postgres_url, "wait"], stdout=subprocess.PIPE,
                               text=True)
    try:
        folder = waiting.stdout.readline().strip()
        assert os.stat(folder).st_mode & 0o777 == 0o700
        assert (Path(folder) / "MEMORY.md").read_bytes() == (store_dir / "MEMORY.md").read_bytes()
        settings = list(Path(folder).parent.glob(f"memctl-settings-{waiting.pid}-*"))  # the settings' copy
        assert len(settings) == 1
    finally:
        waiting.kill()
        waiting.wait()
    assert os.path.exists(folder) and settings[0].exists()  # a kill runs no exit handler
    after = subprocess.run([sys.executable, "-c", FOLDER_OF, postgres_url, "end"], capture_output=True, text=True,
                           timeout=120)
    assert after.returncode == 0 and not os.path.exists(folder) and not settings[0].exists(), after.stderr


def test_a_folder_brought_up_to_date_reads_only_what_changed_and_drops_what_went(postgres_url):
    """Two handles on one store, as two processes: what one writes, removes or empties, the other's
    working folder shows at its next transaction, and only the changed files are written again."""
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    try:
        with first.transaction() as tx:
            tx.append("sessions/a.jsonl", b'{"id": "a1", "text": "one"}\n')
            tx.append("sessions/b.jsonl", b'{"id": "b1", "text": "two"}\n')
            tx.replace("topics/t-1.jsonl", b'{"id": "t-1"}\n')
        with second.reading():
            folder = Path(second.root)
            assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == \
                ["sessions/a.jsonl", "sessions/b.jsonl", "topics/t-1.jsonl"]
        untouched = os.stat(folder / "sessions/b.jsonl").st_mtime_ns
        with first.transaction() as tx:
            tx.append("sessions/a.jsonl", b'{"id": "a2", "text": "three"}\n')
            tx.delete("topics/t-1.jsonl")
            tx.replace("pending.jsonl", b"")
        with second.reading():
            assert (folder / "sessions/a.jsonl").read_bytes().count(b"\n") == 2
            assert not (folder / "topics/t-1.jsonl").exists()
            assert (folder / "pending.jsonl").read_bytes() == b""
            assert os.stat(folder / "sessions/b.jsonl").st_mtime_ns == untouched
        with pytest.raises(StoreError, match="already exists"):  # one that does not commit leaves nothing
            with first.transaction() as tx:
                tx.append(first.session_file("a"), b'{"id": "a3", "text": "four"}\n')  # a place, as features write
                assert (Path(first.root) / "sessions/a.jsonl").read_bytes().count(b"\n") == 3
                tx.append("sessions/c.jsonl", b'{"id": "a1", "text": "a repeated id"}\n')
        for store in (first, second):
            with store.reading():
                assert (Path(store.root) / "sessions/a.jsonl").read_bytes().count(b"\n") == 2
                assert not (Path(store.root) / "sessions/c.jsonl").exists()
    finally:
        first.close()
        second.close()


def test_a_working_folder_holds_only_the_files_asked_for_each_kept_current(postgres_url):
    """A process brings into its working folder only the files a feature asks for (a session, a
    day's log), not the whole truth (at 50k messages: ~8,100 files, 7 of an ingest's 10 s under the
    write lock), and keeps each of those as another process changes, empties or removes it; a
    folder listed is brought whole."""
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)

    def held(store):
        root = store.session_file("s1").parent.parent  # a place held already: nothing more brought
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    try:
        with first.transaction() as tx:
            for n in range(5):
                tx.append(f"sessions/s{n}.jsonl", f'{{"id": "s{n}-1", "text": "said {n}"}}\n'.encode())
            tx.append("memory/2026-11-20.md", b"# 2026-11-20\n\n")
        with second.transaction() as tx:
            tx.append(second.session_file("s1"), b'{"id": "s1-2", "text": "more"}\n')
            assert second.daily_log("2026-11-20").read_bytes() == b"# 2026-11-20\n\n"
        assert held(second) == ["memory/2026-11-20.md", "sessions/s1.jsonl"]
        with first.transaction() as tx:
            tx.append("sessions/s1.jsonl", b'{"id": "s1-3", "text": "yet more"}\n')
            tx.append("memory/2026-11-20.md", b"### an entry\n")
        with second.reading():
            assert second.session_file("s1").read_bytes().count(b"\n") == 3
            assert second.daily_log("2026-11-20").read_bytes().endswith(b"### an entry\n")
        with first.transaction() as tx:
            tx.delete("sessions/s1.jsonl")
            tx.delete("memory/2026-11-20.md")
        with second.reading():
            assert held(second) == []
            assert [p.name for p in second.listing(second.sessions_dir, "*.jsonl")] == \
                ["s0.jsonl", "s2.jsonl", "s3.jsonl", "s4.jsonl"]
            assert len(held(second)) == 4
    finally:
        first.close()
        second.close()


def test_an_ingest_on_postgresql_reads_only_the_sessions_it_writes_or_whose_ids_it_repeats(postgres_url):
    """Whether an id is taken is asked of the database, not of every session file (a folder
    reads them all): an id repeated with its text is a duplicate, with another text refused, and
    the working folder holds the sessions written and those asked about, no other."""
    from memctl import Memory
    from memctl.errors import InputError

    writer = PostgresStore(postgres_url)
    with writer.transaction() as tx:
        for n in range(6):
            tx.append(f"sessions/old-{n}.jsonl",
                      f'{{"id": "old-{n}", "role": "user", "text": "said {n}", "ts": "2026-11-01T10:00:00Z"}}\n'.encode())
    writer.close()
    memory = Memory(postgres_url)
    try:
        report = memory.ingest('{"id": "old-3", "role": "user", "text": "said 3", "ts": "2026-11-01T10:00:00Z"}\n'
                               '{"id": "new-1", "role": "user", "text": "a new thing", "ts": "2026-11-02T10:00:00Z"}\n',
                               fmt="jsonl", session="today")
        assert {o.id: o.status for o in report.outcomes} == {"old-3": "duplicate", "new-1": "stored"}
        with pytest.raises(InputError, match="duplicate id 'old-4' with different text"):
            memory.ingest('{"id": "old-4", "role": "user", "text": "not what was said"}\n', fmt="jsonl",
                          session="today")
        root = memory.store.session_file("today").parent.parent
        held = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        assert held == ["memory/2026-11-02.md", "sessions/old-3.jsonl", "sessions/old-4.jsonl", "sessions/today.jsonl"]
    finally:
        memory.close()


@pytest.mark.process
def test_a_resident_server_serves_a_postgresql_store_with_the_password_out_of_its_arguments(postgres_url, tmp_path):
    """`memctl --store URL server start`: the calls after it are answered by the server (its count of
    calls grows), what they write is in the database, and no process's arguments hold the URL's
    password (every user's `ps` shows them): the server gets the URL in its environment."""
    import shutil
    import tempfile

    runtime = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: a socket's path has at most 107 bytes
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["XDG_RUNTIME_DIR"] = runtime

    def memctl(*args, data=None):
        return subprocess.run([sys.executable, "-P", "-m", "memctl", "--store", postgres_url, *args], input=data,
                              capture_output=True, env=env, timeout=300)

    assert memctl("ingest", str(CHAT)).returncode == 0
    started = memctl("server", "start")
    assert started.returncode == 0, started.stderr.decode() + "".join(
        path.read_text() for path in Path(runtime).rglob("*.log"))
    try:
        status = json.loads(memctl("server", "status", "--json").stdout)
        with open(f"/proc/{status['pid']}/cmdline", "rb") as file:
            arguments = file.read()
        assert urlsplit(postgres_url).password.encode() not in arguments and b"server\0run" in arguments
        assert status["store"] == shown(postgres_url)
        found = memctl("search", "--json", "-k", "1", "which database does kestrel use")
        stored = memctl("ingest", "-", data=b'{"id": "r-1", "text": "the Redis cache moved to a new host"}')
        again = memctl("search", "--json", "--mode", "bm25", "Redis cache host")
        assert (found.returncode, stored.returncode, again.returncode) == (0, 0, 0), found.stderr + again.stderr
        assert json.loads(again.stdout.splitlines()[0])["id"] == "r-1"
        assert json.loads(memctl("server", "status", "--json").stdout)["calls"] >= status["calls"] + 3
    finally:
        assert memctl("server", "stop").returncode == 0
        shutil.rmtree(runtime, ignore_errors=True)
    assert b'"id":"r-1"' in PostgresStore(postgres_url).files()["sessions/default.jsonl"]


@pytest.mark.process
def test_searches_through_a_resident_server_on_postgresql_keep_its_connection_and_answer_as_in_process(
        postgres_url, tmp_path):
    """Calls handed to the server are answered on the one connection it holds (no new session in the
    database, none from the calling processes) with the output a process of its own prints, byte
    for byte, `--explain` included."""
    import shutil
    import tempfile

    import psycopg

    runtime = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: a socket's path has at most 107 bytes
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update(XDG_RUNTIME_DIR=runtime, **NOW)

    def memctl(*args, server=True):
        return subprocess.run([sys.executable, "-P", "-m", "memctl", "--store", postgres_url, *args],
                              capture_output=True, timeout=300, env=env if server else {**env, "MEMCTL_SERVER": "off"})

    def sessions() -> set:
        with psycopg.connect(postgres_url) as conn:
            return set(conn.execute(
                "SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database() AND "
                "backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchall())

    for path in (CHAT, NOTES):
        assert memctl("ingest", str(path), server=False).returncode == 0
    assert memctl("index", server=False).returncode == 0
    assert memctl("server", "start").returncode == 0
    try:
        calls = json.loads(memctl("server", "status", "--json").stdout)["calls"]
        questions = ["which database does kestrel use", "redis cache host", "which database does kestrel use"]
        for number, question in enumerate(questions):
            served = memctl("search", "--json", "--explain", question)
            assert served.returncode == 0 and served.stdout, served.stderr
            if number == 0:
                held = sessions()
                assert len(held) == 1, held  # the server's one connection
            assert sessions() == held  # the same session
            alone = memctl("search", "--json", "--explain", question, server=False)
            assert (alone.returncode, alone.stdout, alone.stderr) == (0, served.stdout, served.stderr)
        assert json.loads(memctl("server", "status", "--json").stdout)["calls"] == calls + len(questions)
    finally:
        assert memctl("server", "stop").returncode == 0
        shutil.rmtree(runtime, ignore_errors=True)


def test_an_index_built_on_postgresql_is_vacuumed_and_analyzed_before_the_first_search(postgres_url):
    """An index made anew leaves its table vacuumed and analyzed (the planner's statistics in
    pg_stats), so the searches right after it are planned and read as
    later ones are: before autovacuum came by, warm searches at 10k messages took 1.1-1.4 s at p50
    instead of 150 ms (bench/README.md "Issue 35: warm search through the resident server on
    PostgreSQL")."""
    import psycopg

    from memctl import Memory

    memory = Memory(postgres_url)
    try:
        for path in (CHAT, NOTES):
            memory.ingest(path.read_bytes(), source=str(path))
        assert memory.index().rebuilt
    finally:
        memory.close()
    with psycopg.connect(postgres_url) as conn:
        # VACUUM counted (which pages it marks all-visible depends on the other transactions of the
        # server: alone, every page; beside the other tests, none), and the statistics there
        assert conn.execute("SELECT vacuum_count, analyze_count FROM pg_stat_user_tables "
                            "WHERE relname = 'memctl_units'").fetchone() == (1, 1)
        assert conn.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'memctl_units'").fetchone()[0] > 0


def test_a_warm_search_on_postgresql_is_one_snapshot_and_one_count(postgres_url, monkeypatch):
    """A search that finds its index fresh reads the store, the index's freshness and the index in one
    snapshot, then counts what it returned in a transaction of its own: two transactions (the
    store's existence, the freshness and the search had been each their own); the settings'
    copy is one; and a resident server's look after a call, to embed ahead, asks a PostgreSQL
    store nothing (its index embeds in its update). Each transaction is a BEGIN and a COMMIT more
    for a call to wait on."""
    from memctl import Memory

    begun = []
    opened = PostgresStore._in_transaction

    def counted(self, *, write, locked=True):
        if not self._open:
            begun.append("count" if write and not locked else "write" if write else "read")
        return opened(self, write=write, locked=locked)

    memory = Memory(postgres_url)
    try:
        memory.ingest(NOTES.read_bytes(), kind="memory")
        first = memory.search("which database does kestrel use")  # indexes first: written since
        monkeypatch.setattr(PostgresStore, "_in_transaction", counted)
        again = memory.search("which database does kestrel use")
        assert [r.record_id for r in again] == [r.record_id for r in first] and begun == ["read", "count"]
        begun.clear()
        memory.store.config_file  # noqa: B018 -- read anew by each call's Memory and by the server
        assert begun == ["read"]
        begun.clear()
        assert memory.embed_ahead(None) is None and begun == []
        memory.ingest('{"text": "kestrel moves to CockroachDB"}', kind="memory", allow_conflict=True)
        begun.clear()
        assert any("CockroachDB" in r.text for r in memory.search("kestrel CockroachDB"))
        assert begun[-3:] == ["write", "read", "count"]  # written since: indexed, then searched anew
    finally:
        memory.close()


def test_a_first_search_on_postgresql_counts_its_words_units_in_two_statements(run, store_dir, postgres_url,
                                                                                monkeypatch):
    """A process's first search counts the units holding its words in two statements: the query's
    words in both fields at once (BM25), then the rare words of the first page's messages at once
    (the newer-first stage), not one statement a message: each a round trip, and a count on the
    GIN index. The results are what a search that counts them one by one finds."""
    import psycopg

    from memctl import Memory
    from memctl.search.candidates import UnitWords

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    assert run("index", store=postgres_url).returncode == 0
    counted: list[str] = []
    execute = psycopg.Connection.execute

    def counting(self, query, *args, **kwargs):
        if "@> ARRAY[t]" in str(query):
            counted.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    monkeypatch.setenv("MEMCTL_NOW", NOW["MEMCTL_NOW"])  # both searches at one time: the same scores
    found = {}
    for one_by_one in (False, True):
        if one_by_one:
            monkeypatch.setattr(UnitWords, "rare_terms_of_each", lambda self, units, most: None)
        memory = Memory(postgres_url)
        try:
            counted.clear()
            found[one_by_one] = [(r.id, r.score) for r in memory.search("what did we decide for the kestrel database",
                                                                         mode="bm25", k=10)]
        finally:
            memory.close()
        if not one_by_one:
            assert len(counted) == 2 and "context_terms" in counted[0]
    assert len(counted) > 3 and found[False] == found[True] and len(found[False]) > 3


# -- access counts, and a read-only database (a replica) ----------------------------------------------
@pytest.mark.process
def test_searches_of_processes_at_once_lose_no_access_count(postgres_url, tmp_path):
    """Six `memctl search` processes at once on one store: each memory's count in the database is
    exactly the number of searches that returned it (an upsert a search, no lost increment), and no
    search moved the store's `written` stamp (nothing to index or bring over for a count)."""
    import psycopg

    from memctl import Memory

    memory = Memory(postgres_url)
    for number in range(8):
        memory.ingest(f'{{"text": "kestrel note {number}: the queue runs on host {number}"}}', kind="memory",
                      allow_conflict=True)  # alike on purpose: each query finds several
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}

    def memctl(*args: str) -> list[str]:
        return [sys.executable, "-P", "-m", "memctl", "--store", postgres_url, *args]

    indexed = subprocess.run(memctl("index"), capture_output=True, env=env, timeout=300)  # with the process's model
    assert indexed.returncode == 0, indexed.stderr
    stamp = PostgresStore(postgres_url).written_stamp()
    queries = ["kestrel queue", "kestrel host", "queue host 3", "kestrel note", "the queue", "host 5"]
    searches = [subprocess.Popen(memctl("search", "--json", "--mode", "bm25", "-k", "5", "--min-score", "0", query),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for query in queries]
    returned: dict[str, int] = {}
    for search in searches:
        out, err = search.communicate(timeout=300)
        assert search.returncode == 0, err
        for line in out.splitlines():
            found = json.loads(line)
            returned[found["id"]] = returned.get(found["id"], 0) + 1
    with psycopg.connect(postgres_url) as conn:
        counted = dict(conn.execute("SELECT id, count FROM memctl_access").fetchall())
    assert counted == returned and sum(counted.values()) == 5 * len(queries)
    assert PostgresStore(postgres_url).written_stamp() == stamp


def test_a_store_of_the_last_format_is_upgraded_to_count_accesses(postgres_url):
    """A store an older memctl made (format 2: no memctl_access) is upgraded on connecting, and its
    searches are counted."""
    import psycopg

    from memctl import Memory

    Memory(postgres_url).ingest('{"text": "kestrel moves to postgres"}', kind="memory")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE memctl_access")
        conn.execute("UPDATE memctl_store SET format = 2")
    PostgresStore.opened(postgres_url).close()  # this thread's connection: the next is a new process's
    found = Memory(postgres_url).search("kestrel postgres", min_score=0)
    assert [result.record_id for result in found]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT format FROM memctl_store").fetchone()[0] == FORMAT
        assert conn.execute("SELECT id, count FROM memctl_access").fetchall() == [(found[0].record_id, 1)]


# -- the layered searches' count (G3: every 5th searches the query layer) ----------------------------------
PLAIN = "tell me the code style"  # no G3 trigger of its own: only every 5th turn searches


def test_a_layered_search_on_postgresql_counts_its_turn_without_moving_written(run, store_dir, tmp_path,
                                                                              postgres_url):
    """A layered search counts its turn as a search counts accesses: `written` stays (no kept state
    of the store goes stale, no writer's lock was waited for), the count carries on from the one
    a folder's copy brought (search_state.json), every 5th turn searches the query layer, and a
    copy back to a folder gives the whole count in search_state.json."""
    from memctl import Memory
    from memctl.store import counters

    demo_store(run, store_dir)
    for _ in range(2):
        assert run("search", "--layered", "--json", PLAIN, env=NOW).returncode in (0, 1)
    assert (store_dir / "search_state.json").read_bytes() == b'{"layered_turns":2}'
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    memory = Memory(postgres_url)
    try:
        stamp = memory.store.written_stamp()
        triggers = [memory.layered_search(PLAIN, workspace="project:kestrel").trigger for _ in range(4)]
        assert triggers == [None, None, "every 5th turn (turn 5)", None]
        assert memory.store.written_stamp() == stamp
        assert counters.turns(memory.store) == 6
    finally:
        memory.close()
    back = tmp_path / "back"
    assert run("store", "copy", postgres_url, str(back)).returncode == 0
    assert (back / "search_state.json").read_bytes() == b'{"layered_turns":6}'


@pytest.mark.process
def test_layered_searches_of_processes_at_once_lose_no_turn(postgres_url, tmp_path):
    """Six `memctl search --layered` processes at once: the store counts six turns (each an upsert
    of one row, not a locked rewrite), and none moved `written`."""
    from memctl import Memory
    from memctl.store import counters

    memory = Memory(postgres_url)
    memory.ingest('{"text": "the code style is black with 100 columns"}', kind="memory")
    memory.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_SERVER"] = "off"

    def memctl(*args: str) -> list[str]:
        return [sys.executable, "-P", "-m", "memctl", "--store", postgres_url, *args]

    indexed = subprocess.run(memctl("index"), capture_output=True, env=env, timeout=300)  # with the process's model
    assert indexed.returncode == 0, indexed.stderr
    store = PostgresStore(postgres_url)
    stamp = store.written_stamp()
    searches = [subprocess.Popen(memctl("search", "--layered", "--json", PLAIN), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env) for _ in range(6)]
    for search in searches:
        _, err = search.communicate(timeout=300)
        assert search.returncode in (0, 1) and not err, err  # 1: no layer holds anything (no core memory)
    assert store.written_stamp() == stamp
    assert counters.turns(store) == 6
    store.close()


def test_a_store_of_format_3_is_upgraded_to_count_layered_turns(postgres_url):
    import psycopg

    from memctl import Memory
    from memctl.store import counters

    Memory(postgres_url).ingest('{"text": "the code style is black"}', kind="memory")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE memctl_turns")
        conn.execute("UPDATE memctl_store SET format = 3")
    PostgresStore.opened(postgres_url).close()  # this thread's connection: the next is a new process's
    memory = Memory(postgres_url)
    try:
        memory.layered_search(PLAIN)
        assert counters.turns(memory.store) == 1
    finally:
        memory.close()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT format FROM memctl_store").fetchone()[0] == FORMAT


def test_the_lifecycle_on_postgresql_folds_a_copied_log_and_keeps_the_counted_rows(run, store_dir, postgres_url):
    """Counts from a folder (access.log, copied whole) and from searches on PostgreSQL (the table) add
    up; the lifecycle folds the log into access.json and leaves the rows: no count lost or doubled."""
    from memctl.store import counters

    demo_store(run, store_dir)
    for _ in range(2):
        assert run("search", "kestrel", env=NOW).returncode == 0
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    assert run("search", "which database does kestrel use", store=postgres_url, env=NOW).returncode == 0
    store = PostgresStore(postgres_url)
    before = counters.load(store)
    assert before["mem-kestrel-db"]["count"] == 3
    assert run("review", "lifecycle", store=postgres_url, env=NOW).returncode == 0
    assert counters.load(store) == before
    compacted, log, counted = store.accesses()  # the folder's two searches folded, the table's one left
    assert log is None and counters.fold(compacted, None)["mem-kestrel-db"]["count"] == 2
    assert ("mem-kestrel-db", 1, "2026-11-20T10:00:00Z") in counted
    store.close()


def read_only(url: str) -> None:
    """The database of `url` made read-only as a replica is to its clients: every new session's
    transactions read-only by default; this thread's open connection is closed, to be a new one."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{urlsplit(url).path[1:]}" SET default_transaction_read_only = on')
    PostgresStore.opened(url).close()


def test_a_search_on_a_read_only_database_reads_the_index_the_primary_left(run, store_dir, postgres_url):
    """On a read-only database (a hot standby's stand-in) a search answers from the index as it
    stands, says that the store was written since, and counts nothing; every write stops in one
    line naming the store (its password hidden), exit 2, writing nothing."""
    import psycopg

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    searched = run("search", "--json", "which database does kestrel use", store=postgres_url, env=NOW)
    assert searched.returncode == 0 and searched.stdout, searched.stderr
    later = run("ingest", "-", input='{"id": "late-1", "text": "kestrel now uses a new database: CockroachDB"}',
                store=postgres_url, env=NOW)
    assert later.returncode == 0  # on the primary; no search indexed it
    with psycopg.connect(postgres_url) as conn:
        counted = conn.execute("SELECT id, count FROM memctl_access ORDER BY id").fetchall()
    assert counted
    read_only(postgres_url)
    on_replica = run("search", "--json", "which database does kestrel use", store=postgres_url, env=NOW)
    assert on_replica.returncode == 0, on_replica.stderr
    assert on_replica.stdout == searched.stdout  # the index as it was: the late message is not in it
    assert b"read-only" in on_replica.stderr and b"memctl index" in on_replica.stderr
    password = urlsplit(postgres_url).password
    for argv, data in ((["ingest", "-"], '{"text": "refused"}'), (["index"], None),
                       (["state", "record", "--hit", "Decisions"], None), (["forget", "mem-kestrel-db"], None)):
        refused = run(*argv, input=data, store=postgres_url, env=NOW)
        assert refused.returncode == 2, (argv, refused.stderr)
        assert len(refused.stderr.splitlines()) == 1 and b"read-only" in refused.stderr, refused.stderr
        assert shown(postgres_url).encode() in refused.stderr and password.encode() not in refused.stderr
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT id, count FROM memctl_access ORDER BY id").fetchall() == counted
        assert conn.execute("SELECT count(*) FROM memctl_messages WHERE line LIKE '%refused%'").fetchone()[0] == 0


def test_a_read_only_database_never_indexed_or_of_an_older_format_says_what_to_run(run, store_dir, postgres_url):
    import psycopg

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    read_only(postgres_url)
    never_indexed = run("search", "kestrel", store=postgres_url, env=NOW)
    assert never_indexed.returncode == 2 and len(never_indexed.stderr.splitlines()) == 1
    assert b"read-only" in never_indexed.stderr and b"memctl index" in never_indexed.stderr
    with psycopg.connect(postgres_url, autocommit=True, options="-c default_transaction_read_only=off") as conn:
        conn.execute("DROP TABLE memctl_access")
        conn.execute("UPDATE memctl_store SET format = 2")
    PostgresStore.opened(postgres_url).close()
    older = run("search", "kestrel", store=postgres_url, env=NOW)
    assert older.returncode == 2 and len(older.stderr.splitlines()) == 1, older.stderr
    assert b"format 2" in older.stderr and b"primary" in older.stderr


def test_a_search_on_a_hot_standby_reads_what_the_primary_indexed(run, store_dir, postgres_server, postgres_url):
    """A real replica (pg_basebackup of the tests' server, streaming, in recovery): a search there
    gives the primary's answer, counting nothing; once the primary is written and not indexed, the
    standby still answers from the index replayed, and says so; a write there stops in one line."""
    import psycopg

    from postgres_server import Standby

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    question = ["search", "--json", "which database does kestrel use"]
    on_primary = run(*question, store=postgres_url, env=NOW)  # indexes, and counts
    assert on_primary.returncode == 0 and on_primary.stdout, on_primary.stderr
    standby = Standby(postgres_server)
    standby.start()
    replica = standby.url(urlsplit(postgres_url).path[1:])
    try:
        standby.caught_up()
        first = run(*question, store=replica, env=NOW)
        assert (first.returncode, first.stdout, first.stderr) == (0, on_primary.stdout, b"")
        assert run("ingest", "-", input='{"id": "late-1", "text": "kestrel now uses CockroachDB as its database"}',
                   store=postgres_url, env=NOW).returncode == 0
        standby.caught_up()
        behind = run(*question, store=replica, env=NOW)
        assert (behind.returncode, behind.stdout) == (0, on_primary.stdout), behind.stderr
        assert b"read-only" in behind.stderr
        refused = run("ingest", "-", input='{"text": "refused"}', store=replica, env=NOW)
        assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
        assert b"read-only" in refused.stderr and shown(replica).encode() in refused.stderr
    finally:
        PostgresStore.opened(replica).close()
        standby.stop()
    with psycopg.connect(postgres_url) as conn:  # the primary counted its one search; the standby's, none
        assert {count for (count,) in conn.execute("SELECT count FROM memctl_access")} == {1}


# -- search on PostgreSQL: Tantivy's BM25 to the bit, and a process that searches again ------------------
WORDS = ["amber", "birch", "cedar", "dune", "ember", "fjord", "grove", "heath", "inlet", "jade", "kelp", "loam"]


def test_bm25_on_postgresql_is_tantivys_to_the_bit(store_dir, postgres_url):
    """Every score of BM25 in SQL is the float32 Tantivy gives, for words held by 1 to 12 of 12 units
    (each idf of a store that size) and for queries of several words (summed in Tantivy's order):
    numpy's float32 log differed from the C library's logf, which Tantivy takes, for 4 of these 12."""
    import orjson
    import psycopg

    from memctl import Memory
    from memctl.index import lexical
    from memctl.index.filters import Filters
    from memctl.index.postgres import PgReader

    lines = [orjson.dumps({"id": f"w{n}", "role": "user", "ts": f"2026-11-0{1 + n % 9}T10:00:00Z",
                           "text": " ".join(WORDS[n:]) + f" and then note {n}"}).decode() for n in range(12)]
    folder = Memory(store_dir)
    folder.ingest("\n".join(lines), fmt="jsonl", session="grove-walk")
    folder.index()
    postgres = Memory(postgres_url)
    postgres.ingest("\n".join(lines), fmt="jsonl", session="grove-walk")
    postgres.index()
    postgres.close()
    tantivy = lexical.Reader(lexical.open_index(store_dir / ".index" / "tantivy"))
    queries = [*WORDS, "amber cedar heath loam", "loam kelp jade inlet heath", "dune birch note", "grove grove fjord"]
    with psycopg.connect(postgres_url) as conn:
        reader = PgReader(conn)
        assert reader.documents == 12 == tantivy.searcher.num_docs
        for query in queries:
            expected = lexical.search(tantivy, query, Filters(), 50, 8, 0.5)
            found = reader.bm25(query, Filters(), 50, 8, 0.5)
            assert found.scores == expected.scores, query
            assert list(found.scores) == sorted(found.scores, key=lambda unit_id: -found.scores[unit_id])


def test_a_process_searching_again_finds_what_a_folder_finds_and_what_was_written_since(store_dir, postgres_url,
                                                                                       monkeypatch):
    """A process that searches many times (a resident server, `memctl mcp`) keeps the rows and the
    words' counts of one generation of the index between searches (search/postgres.py Seen): its
    results are a folder's, search after search in any order, and after a write the next search
    reads the new generation (the new message found, its words counted anew)."""
    from memctl import Memory

    monkeypatch.setenv("MEMCTL_NOW", NOW["MEMCTL_NOW"])
    for store in (store_dir, postgres_url):
        memory = Memory(store)
        for path in (CHAT, NOTES):
            memory.ingest(path.read_bytes(), source=str(path))
        memory.close()
    folder, postgres = Memory(store_dir), Memory(postgres_url)
    queries = ["which database does kestrel use", "PostgreSQL", "kestrel stack", "recipe metadata JSONB",
               "inventory for the bakery", "redis cache host", "kestrel"]

    def same(query, **options):
        on_folder = [r.as_dict(explain=True) for r in folder.search(query, **options)]
        on_postgres = [r.as_dict(explain=True) for r in postgres.search(query, **options)]
        assert on_postgres == on_folder, query
        return on_folder

    try:
        for query in queries + queries[::-1]:
            same(query)
            same(query, mode="bm25")
        assert postgres._retriever._kept["seen"].units.count() > 0  # the rows were kept between searches
        fresh = '{"role": "user", "text": "kestrel moves its inventory to a columnar PostgreSQL extension"}'
        for memory in (folder, postgres):
            memory.ingest(fresh, session="later")
        for query in queries:
            same(query)
        assert any("columnar" in result["text"] for result in same("columnar PostgreSQL extension"))
    finally:
        postgres.close()


def test_an_update_on_postgresql_reads_only_the_files_written_since(run, store_dir, postgres_url, monkeypatch):
    """After one message, the index's update parses that session's file alone (and what the
    message may change: no daily log here), not the whole truth; after a session is forgotten and
    a note added, those; and what it leaves is what indexing the same truth from scratch makes."""
    from memctl import Memory
    from memctl.index import units

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    memory = Memory(postgres_url)
    try:
        whole = memory.index()
        assert whole.rebuilt and whole.files_read > 3
        parsed: list[str] = []
        message_units = units.message_units

        def counted(store, paths=None, **options):
            parsed.extend(store.relative(path) for path in paths) if paths is not None else parsed.append("(all)")
            return message_units(store, paths, **options)

        monkeypatch.setattr(units, "message_units", counted)
        memory.ingest('{"role": "user", "text": "the kestrel deploy moves to Thursday"}', session="2026-11-09-debugging")
        update = memory.index()
        assert parsed == ["sessions/2026-11-09-debugging.jsonl"]
        # read: that session and the daily log the message went to
        assert (update.files_read, update.added, update.removed, update.embedded) == (2, 1, 0, 1)

        parsed.clear()
        gone = [unit_id for unit_id in units_in(postgres_url) if unit_id.startswith("s1-")]
        assert memory.forget(session="2026-11-02-planning", yes=True).applied
        memory.ingest("- Kestrel's deploys go out on Thursdays", fmt="md", kind="memory")
        update = memory.index()
        assert parsed == [] and update.files_read == 1 and update.removed == 0  # forget took its rows out
        assert (update.added, update.embedded) == (1, 1)
        after = units_in(postgres_url)
        assert gone and not any(unit_id in after for unit_id in gone)
        rebuilt = memory.index(rebuild=True)
        assert rebuilt.rebuilt and rebuilt.units == len(after)
        assert {k: v[1:] for k, v in units_in(postgres_url).items()} == {k: v[1:] for k, v in after.items()}
    finally:
        memory.close()


def test_an_index_on_postgresql_of_units_made_another_way_reads_every_file_and_embeds_nothing_unchanged(
        run, store_dir, postgres_url):
    """An index whose units were made by another version of units.py (UNITS) is read whole once,
    not rebuilt: every unit compared, only a changed text embedded again (none here)."""
    import psycopg

    from memctl import Memory

    demo_store(run, store_dir)
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    memory = Memory(postgres_url)
    try:
        whole = memory.index()
        with psycopg.connect(postgres_url) as conn:
            conn.execute("UPDATE memctl_index SET built = jsonb_set(built, '{units}', '1')")
        update = memory.index()
        assert (update.rebuilt, update.files_read, update.embedded) == (False, whole.files_read, 0)
        assert memory.index().files_read == 0  # made alike again
    finally:
        memory.close()


@pytest.mark.real_model
def test_a_process_searching_again_across_scripts_ranks_as_a_folder_does(store_dir, postgres_url, monkeypatch):
    """With the bundled model (two meaning spaces, Latin and the shared one), a row in the other
    script is ranked on its own cosine, from each row's parts of its vector (Ranking.comparable),
    which a process searching again keeps and extends row by row as it reads more (Seen.parts):
    search after search, in either language, the results are a folder's."""
    from memctl import Memory

    monkeypatch.setenv("MEMCTL_NOW", "2026-11-22T12:00:00Z")
    monkeypatch.setenv("MEMCTL_RETRIEVAL_CANDIDATES", "2")  # each search reads a few rows: the next reads others
    lines = "".join(orjson.dumps({"id": i, "session": "chat", "text": text, "ts": f"2026-09-0{n + 1}T07:00:00Z"}).decode()
                    + "\n" for n, (i, text) in enumerate([
                        ("class-time", "Leo's class starts at 8:10, so we leave home by 7:40."),
                        ("teacher", "Leo 的班導是陳老師，教數學的。"),
                        ("swim", "I signed Leo up for the school's swimming club."),
                        ("peanuts", "Ana 對花生過敏"),
                        ("lunch", "今天午餐吃了牛肉麵"),
                        ("standup", "Standup moved to 10:15 starting next week.")]))
    for store in (store_dir, postgres_url):
        memory = Memory(store)
        memory.ingest(lines, fmt="jsonl")
        memory.close()
    folder, postgres = Memory(store_dir), Memory(postgres_url)
    try:
        for query in ["what is Ana allergic to", "Who teaches Leo's class?", "午餐吃了什麼", "standup time",
                      "Leo 的游泳課", "what is Ana allergic to"]:
            assert [r.as_dict(explain=True) for r in postgres.search(query, k=1)] == \
                [r.as_dict(explain=True) for r in folder.search(query, k=1)], query
        seen = postgres._retriever._kept["seen"]
        assert seen._parts is not None and len(seen._read) == 6  # kept, extended as the rows were read a few a search
    finally:
        folder.close()
        postgres.close()
