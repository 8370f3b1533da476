"""`memctl forget` on a PostgreSQL store (#35 item 4): the forgotten text is in no row of any of
memctl's tables (the truth, the index's units and their token arrays), its vector is in no row,
and a `pg_dump` of the database does not hold it, as text or as the hex of a bytea. What stays on
the server's disk is PostgreSQL's, and the test shows it as docs/design.md says it: the dead
tuples stay in the table's files until VACUUM (memctl runs none), `VACUUM FULL` writes the files
anew without them, and the WAL keeps what was written."""

from __future__ import annotations

import json
import subprocess

import orjson
import pytest

from postgres_server import binaries

SECRET = "zanzibarite"  # a word no other text of the store holds: found anywhere, it was not forgotten
STEM = "zanzibar"        # what any analyzer or stemmer leaves of it
PHRASE = f"my locker code is 4417 at the {SECRET} gym"


def chat(session: str, texts: list[str]) -> str:
    return "".join(json.dumps({"session": session, "role": ("user", "assistant")[i % 2],
                               "ts": f"2026-11-10T10:{i:02d}:00Z", "text": text}) + "\n"
                   for i, text in enumerate(texts))


def stored_ids(done) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [r["id"] for r in map(orjson.loads, done.stdout.splitlines()) if r["status"] == "stored"]


def rows_holding(url: str, needle: str) -> dict[str, int]:
    """table -> rows of memctl's tables holding `needle` in any column: text, arrays and JSON as
    text (case folded), bytea as bytes."""
    import psycopg

    found = {}
    with psycopg.connect(url) as conn:
        columns: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'public' AND table_name LIKE 'memctl%' ORDER BY table_name, ordinal_position"):
            columns.setdefault(table, []).append((column, kind))
        assert {"memctl_messages", "memctl_notes", "memctl_files", "memctl_units"} <= set(columns)
        for table, named in columns.items():
            tests = [f"position(%(bytes)s in {column}) > 0" if kind == "bytea" else f"{column}::text ILIKE %(text)s"
                     for column, kind in named]
            count = conn.execute(f"SELECT count(*) FROM {table} WHERE " + " OR ".join(tests),
                                 {"bytes": needle.encode(), "text": f"%{needle}%"}).fetchone()[0]
            if count:
                found[table] = count
    return found


def dump(url: str) -> bytes:
    """`pg_dump` of the database (plain SQL, data included), with the server's own pg_dump."""
    done = subprocess.run([str(binaries() / "pg_dump"), "--no-owner", "-d", url], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def in_dump(url: str, needle: str) -> bool:
    """Whether the dump shows `needle`: as text, or as a bytea's hex."""
    data = dump(url).lower()
    return needle.encode() in data or needle.encode().hex().encode() in data


@pytest.fixture
def forgotten(run, postgres_url):
    """A PostgreSQL store with a message and a note holding SECRET, indexed, then both forgotten by id."""
    messages = stored_ids(run("ingest", "--json", "-", store=postgres_url, input=chat("gym", [
        "remind me where I left my things after training",
        PHRASE,
        "thanks, I will keep that in mind for tomorrow",
        "the kestrel deploy is on friday at noon"])))
    note = stored_ids(run("ingest", "--kind", "memory", "--json", "-", store=postgres_url, input=orjson.dumps(
        {"id": "mem-locker", "text": f"The {SECRET} gym locker code is 4417", "section": "Personal"})))
    assert note == ["mem-locker"]
    assert run("index", store=postgres_url).returncode == 0
    assert set(rows_holding(postgres_url, STEM)) >= {"memctl_messages", "memctl_notes", "memctl_units"}
    assert in_dump(postgres_url, STEM)  # what the test looks for is there before forget
    import psycopg

    with psycopg.connect(postgres_url) as conn:  # the vectors of the texts about to be forgotten
        vectors = {row[0] for row in conn.execute(
            "SELECT embedding::text FROM memctl_units WHERE text ILIKE %s", (f"%{SECRET}%",))}
    assert len(vectors) == 2
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE")  # as autovacuum would have by now on a real server
    assert in_statistics(postgres_url, SECRET)
    done = run("forget", messages[1], "mem-locker", store=postgres_url)
    assert done.returncode == 0, done.stderr
    return postgres_url, vectors


def test_forget_on_postgresql_leaves_no_row_no_vector_and_nothing_in_a_dump(run, forgotten):
    url, vectors = forgotten
    assert rows_holding(url, STEM) == {}  # no row: messages, notes, files (daily log), units and their tokens
    import psycopg

    with psycopg.connect(url) as conn:
        left = {row[0] for row in conn.execute("SELECT embedding::text FROM memctl_units")}
        assert left and not left & vectors  # no vector of a forgotten text
        assert conn.execute("SELECT count(*) FROM memctl_messages").fetchone()[0] == 3
    assert not in_dump(url, STEM)
    assert not in_statistics(url, SECRET)  # the planner's samples of column values: taken anew after forget
    assert run("search", SECRET, store=url).returncode == 1
    assert run("search", "--mode", "bm25", "locker code gym", "--json", store=url).stdout.count(b"4417") == 0


def test_what_vacuum_does_and_does_not_promise(postgres_server, forgotten):
    """docs/design.md, "Forget on PostgreSQL": memctl's forget is a committed DELETE/UPDATE, so the
    old tuples stay in the table's files as dead tuples until VACUUM reclaims them (memctl runs no
    VACUUM); `VACUUM FULL` writes every table and index anew, leaving none of the text in the
    database's files; the WAL still holds what was once written (as backups and replicas do)."""
    url, _ = forgotten
    data = postgres_server.folder / "data"
    with postgres_server.connect(url.rsplit("/", 1)[1]) as conn:
        oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
        conn.execute("CHECKPOINT")  # every page written out
        assert files_holding(data / "base" / str(oid), SECRET)  # dead tuples: forgotten, not yet overwritten
        conn.execute("VACUUM FULL")
        conn.execute("CHECKPOINT")  # the old files, truncated at commit, are unlinked
    assert files_holding(data / "base" / str(oid), SECRET) == []
    assert files_holding(data / "pg_wal", SECRET)  # the log of what was written keeps it


def in_statistics(url: str, needle: str) -> bool:
    """Whether the statistics ANALYZE keeps of memctl's tables (pg_statistic: sampled values) hold `needle`."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM pg_stats WHERE tablename LIKE 'memctl%%' AND concat("
                            "most_common_vals::text, histogram_bounds::text, most_common_elems::text) ILIKE %s",
                            (f"%{needle}%",)).fetchone()[0] > 0


def files_holding(folder, needle: str) -> list[str]:
    data = needle.encode()
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and data in p.read_bytes())
