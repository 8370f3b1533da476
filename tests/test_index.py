"""Incremental index updates on real files: each change reads only what changed and leaves
the index as a rebuild from scratch would (P2, C3)."""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import sqlite3
import textwrap
import time

import numpy as np
import orjson
import pytest
import tantivy

from conftest import killed_after
from memctl.index import lexical
from memctl.index.index import Index
from memctl.ingest.ingest import ingest
from memctl.store.store import Store, atomic_write
from conftest import runtime_of

NOW = "2026-11-22T12:00:00Z"
TOPICS = ["the boiler in the basement", "a trip to Lisbon", "sourdough starters", "the quarterly budget",
          "the new bicycle", "learning the cello"]


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", NOW)


def chat(store: Store, session: str, start: int, count: int, day: str = "2026-11-20") -> list[str]:
    """Ingest `count` messages into one session; their ids."""
    lines = [orjson.dumps({"id": f"{session}-{n}", "session": session, "role": "user", "speaker": "Ana",
                           "ts": f"{day}T10:{n:02d}:00Z",
                           "text": f"Message {n} of {session} is about {TOPICS[n % len(TOPICS)]}."})
             for n in range(start, start + count)]
    ingest(runtime_of(store), b"\n".join(lines) + b"\n", source="chat.jsonl", fmt="jsonl", keep_noise=True)
    return [f"{session}-{n}" for n in range(start, start + count)]


def notes(store: Store, *texts: str) -> None:
    items = [orjson.dumps({"id": f"note-{n}", "text": text}) + b"\n" for n, text in enumerate(texts)]
    ingest(runtime_of(store), b"".join(items), source="<stdin>", kind="memory", fmt="jsonl", keep_noise=True)


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path / "store")
    chat(store, "alpha", 0, 4, day="2026-11-18")
    chat(store, "beta", 0, 4, day="2026-11-19")
    chat(store, "gamma", 0, 4)
    notes(store, "Ana's boiler was serviced in October.", "Ana prefers window seats on trains.")
    Index(runtime_of(store)).update()
    return store


def table(store: Store) -> dict[str, tuple]:
    conn = sqlite3.connect(store.index_dir / "units.db")
    try:
        return {row[0]: row[1:] for row in conn.execute("SELECT id, row, digest, embed_digest, source FROM units")}
    finally:
        conn.close()


def bm25_ids(store: Store) -> list[str]:
    index = lexical.open_index(store.index_dir / "tantivy")
    searcher = index.searcher()
    hits = searcher.search(tantivy.Query.all_query(), limit=10_000).hits
    return sorted(searcher.doc(address)["id"][0] for _, address in hits)


def assert_same_as_rebuilt(store: Store, tmp_path) -> None:
    """The updated index holds what an index built from scratch holds: units, text, vectors."""
    copy = Store(tmp_path / "rebuilt")
    shutil.rmtree(copy.root, ignore_errors=True)
    shutil.copytree(store.root, copy.root, ignore=shutil.ignore_patterns(".index"))
    Index(runtime_of(copy)).update()
    updated, rebuilt = table(store), table(copy)
    assert {k: v[1:] for k, v in updated.items()} == {k: v[1:] for k, v in rebuilt.items()}
    assert bm25_ids(store) == bm25_ids(copy) == sorted(updated)
    # int8 activations are quantised per batch, so a text's vector varies a little with the
    # batch it was embedded in: each must be nearest to its own text's vector in the rebuilt index.
    vectors, fresh = np.load(store.index_dir / "vectors.npy"), np.load(copy.index_dir / "vectors.npy")
    for unit_id, (row, *_) in updated.items():
        cosines = fresh @ vectors[row]
        assert int(np.argmax(cosines)) == rebuilt[unit_id][0] and cosines.max() > 0.95, unit_id


def test_new_messages_read_one_session_and_one_daily_log(store, tmp_path):
    before = table(store)
    chat(store, "beta", 4, 3, day="2026-11-19")
    report = Index(runtime_of(store)).update()
    assert (report.added, report.changed, report.removed, report.embedded) == (3, 0, 0, 3)
    assert report.files_read == 2  # sessions/beta.jsonl and memory/2026-11-19.md, of 5 files
    after = table(store)
    assert {k: after[k] for k in before} == before  # every other unit kept its row
    assert_same_as_rebuilt(store, tmp_path)


def test_files_made_and_removed_are_seen_after_a_kept_listing(store):
    """Store.source_names() keeps its listing while the folders stay as they were (a resident
    server lists before every search): a file made, removed or renamed in any folder is seen."""
    time.sleep(0.2)  # the folders last changed long enough ago for a listing to be kept
    names = store.source_names()
    assert Index(runtime_of(store)).is_fresh() and store.source_names() == names
    for made in ("sessions/delta.jsonl", "memory/2026-11-21.md", "topics/t-1.jsonl", "MEMORY2.md"):
        (store.root / made).parent.mkdir(exist_ok=True)
        (store.root / made).write_text("")
        assert (made in store.source_names()) == (made != "MEMORY2.md"), made
        assert not Index(runtime_of(store)).is_fresh() or made == "MEMORY2.md"
        time.sleep(0.2)
        assert store.source_names() == store.source_names()  # kept again, and the same
    os.rename(store.root / "sessions/delta.jsonl", store.root / "sessions/epsilon.jsonl")
    assert "sessions/epsilon.jsonl" in store.source_names() and "sessions/delta.jsonl" not in store.source_names()
    (store.root / "MEMORY.md").unlink()
    assert "MEMORY.md" not in store.source_names()


def test_a_session_file_made_by_hand_under_a_name_memctl_would_not_give_is_indexed(store):
    """A listing shows a file made by hand as it is, a space in its name say, which no session name
    could hold: an update finds it again by that name (Store.located) and indexes its messages."""
    (store.root / "sessions" / "my notes.jsonl").write_text(
        '{"id": "hand-made-1", "role": "user", "text": "The spare key hangs behind the boiler.", '
        '"ts": "2026-11-20T08:00:00Z"}\n')
    report = Index(runtime_of(store)).update()
    assert report.added == 1 and not report.rebuilt
    assert "hand-made-1" in table(store)


def test_a_manifest_changed_after_it_was_kept_is_read_again(store):
    """The freshness check keeps the manifest it parsed while manifest.json stays the same file:
    an update's new manifest, and one edited in place by hand (the same size), are each seen."""
    manifest = store.index_dir / "manifest.json"
    time.sleep(0.2)  # written long enough ago for it to be kept
    assert Index(runtime_of(store)).is_fresh() and Index(runtime_of(store)).is_fresh()
    chat(store, "beta", 4, 1, day="2026-11-19")
    assert not Index(runtime_of(store)).is_fresh()
    Index(runtime_of(store)).update()  # a new manifest
    assert Index(runtime_of(store)).is_fresh()
    time.sleep(0.2)
    assert Index(runtime_of(store)).is_fresh()  # kept
    data = manifest.read_bytes()
    manifest.write_bytes(data.replace(b'"format":', b'"formax":'))  # in place, the same size
    assert not Index(runtime_of(store)).is_fresh()
    manifest.write_bytes(data)
    assert Index(runtime_of(store)).is_fresh()


def test_an_update_reads_only_the_changed_files_each_once(store, monkeypatch):
    chat(store, "beta", 4, 3, day="2026-11-19")
    from memctl.store import store as store_module

    read = []
    real = store_module.open_file

    def reading(path, flags=os.O_RDONLY, *args):  # every store file is read through open_file (read_file)
        if flags == os.O_RDONLY:
            read.append(store.relative(pathlib.Path(path)))
        return real(path, flags, *args)

    monkeypatch.setattr(store_module, "open_file", reading)
    Index(runtime_of(store)).update()
    sources = ("sessions/", "memory/", "topics/", "MEMORY.md")  # not the lock, the settings, the index
    assert sorted(name for name in read if name.startswith(sources)) == [
        "memory/2026-11-19.md", "sessions/beta.jsonl"]


def test_a_rewritten_session_file_updates_exactly_its_changed_message(store, tmp_path):
    before = table(store)
    path = store.session_file("gamma")
    path.write_text(path.read_text().replace("Message 2 of gamma", "Message two of gamma"))
    report = Index(runtime_of(store)).update()
    # The message, and the next one, which is embedded with the turn before it.
    assert (report.added, report.changed, report.removed, report.embedded, report.files_read) == (0, 2, 0, 2, 1)
    after = table(store)
    assert {k for k in before if after[k] != before[k]} == {"gamma-2", "gamma-3"}
    assert_same_as_rebuilt(store, tmp_path)


def test_a_deleted_session_uncovers_its_daily_log_entries(store, tmp_path):
    store.session_file("alpha").unlink()
    report = Index(runtime_of(store)).update()
    # The messages go; their copies in the daily log, no longer hidden by them, take their ids.
    assert (report.added, report.changed, report.removed) == (0, 4, 0)
    assert {v[3] for k, v in table(store).items() if k.startswith("alpha-")} == {"memory/2026-11-18.md"}
    assert_same_as_rebuilt(store, tmp_path)


def test_a_renamed_session_moves_its_units_without_embedding(store, tmp_path):
    store.session_file("beta").rename(store.session_file("delta"))
    report = Index(runtime_of(store)).update()
    assert (report.added, report.changed, report.removed, report.embedded) == (0, 4, 0, 0)
    assert {v[3] for k, v in table(store).items() if k.startswith("beta-")} == {"sessions/delta.jsonl"}
    assert_same_as_rebuilt(store, tmp_path)


def test_memory_md_hand_edits(store, tmp_path):
    text = store.memory_md.read_text()
    assert "Ana prefers window seats on trains." in text
    store.memory_md.write_text(text.replace("serviced in October", "serviced in November")
                               .replace("Ana prefers window seats on trains.", ""))
    report = Index(runtime_of(store)).update()
    assert (report.changed, report.removed, report.embedded, report.files_read) == (1, 1, 1, 1)
    assert_same_as_rebuilt(store, tmp_path)


def test_a_rewrite_of_the_same_size_and_time_is_seen_by_its_inode(store, tmp_path):
    """Governance rewrites MEMORY.md through a new file; size and time alone can miss that."""
    path = store.memory_md
    stat = path.stat()
    atomic_write(path, path.read_bytes().replace(b"October", b"Octobre"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    report = Index(runtime_of(store)).update()
    assert (report.changed, report.files_read) == (1, 1)
    assert_same_as_rebuilt(store, tmp_path)


def test_an_id_in_two_files_is_counted_once_whatever_changes(store, tmp_path):
    copied = store.session_file("alpha").read_text().splitlines()[0]
    store.session_file("zeta").write_text(copied + "\n")
    report = Index(runtime_of(store)).update()
    assert report.files_read == len(Index(runtime_of(store)).stamps())  # read whole while an id sits in two files
    assert_same_as_rebuilt(store, tmp_path)
    store.session_file("alpha").unlink()  # now the copy in zeta is the one that counts
    Index(runtime_of(store)).update()
    assert table(store)["alpha-0"][3] == "sessions/zeta.jsonl"
    assert_same_as_rebuilt(store, tmp_path)


@pytest.mark.real_model
def test_a_changed_embedding_model_embeds_everything_again(store):
    index = Index(runtime_of(store))
    units = len(table(store))
    int8 = np.load(store.index_dir / "vectors.npy").copy()
    store.config_file.write_text('[embedding]\nprecision = "float32"\n')
    report = Index(runtime_of(store)).update()
    assert report.rebuilt and report.reason.startswith("model changed")
    assert report.embedded == report.units == units
    assert index.manifest()["model"]["precision"] == "float32"
    float32 = np.load(store.index_dir / "vectors.npy")
    assert not np.array_equal(int8, float32)  # other weights, other vectors: none of the old ones kept
    assert Index(runtime_of(store)).update().embedded == 0  # and then it is fresh again


def test_a_compaction_cut_short_is_rebuilt(store):
    """A compaction replaces vectors.npy, then units.db: cut between the two, the table's rows
    would point into another layout of vectors, so the index is rebuilt."""
    store.memory_md.unlink()
    store.session_file("alpha").unlink()  # 6 of 14 rows become holes: over a fifth
    chat(store, "omega", 0, 10)  # and the new vectors file is longer than the old table's rows
    real_replace = os.replace

    def cut_after_vectors(source, target):
        real_replace(source, target)
        if str(target).endswith("vectors.npy"):
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", cut_after_vectors)
        with pytest.raises(KeyboardInterrupt):
            Index(runtime_of(store)).update()
    report = Index(runtime_of(store)).update()
    assert report.rebuilt and report.reason == "corrupt (a compaction was cut short)"
    assert sorted(table(store)) == sorted([f"{s}-{n}" for s in ("alpha", "beta", "gamma") for n in range(4)]
                                          + [f"omega-{n}" for n in range(10)])


def test_a_copied_store_is_read_again_but_not_embedded_again(store, tmp_path):
    copy = Store(tmp_path / "copy")
    shutil.copytree(store.root, copy.root)  # new inodes everywhere
    report = Index(runtime_of(copy)).update()
    assert not report.rebuilt and report.files_read == len(Index(runtime_of(copy)).stamps()) and report.embedded == 0


def test_the_default_filter_reads_the_status_index_which_an_old_table_gets_at_its_next_update(store):
    from memctl.index.filters import Filters

    where, params = Filters().sql_where()
    plan = f"EXPLAIN QUERY PLAN SELECT row FROM units WHERE {' AND '.join(where)}"
    conn = sqlite3.connect(store.index_dir / "units.db")
    try:
        assert "COVERING INDEX units_status" in str(conn.execute(plan, params).fetchall())
        conn.execute("DROP INDEX units_status")  # as a table written before the index was
        conn.commit()
    finally:
        conn.close()
    chat(store, "gamma", 4, 1)
    assert Index(runtime_of(store)).update().added == 1
    conn = sqlite3.connect(store.index_dir / "units.db")
    try:
        assert "COVERING INDEX units_status" in str(conn.execute(plan, params).fetchall())
    finally:
        conn.close()


def test_a_message_after_a_long_reply_is_read_with_only_the_replys_end(tmp_path):
    from memctl.index.units import CONTEXT_TOKENS, message_units
    from memctl.text.tokens import count_tokens

    store = Store(tmp_path / "store")
    reply = "Here is a long answer about sourdough starters. " * 60 + "Shall I list the flours too?"
    lines = [orjson.dumps({"id": "m1", "session": "s", "role": "user", "text": "How do I keep a starter alive?"}),
             orjson.dumps({"id": "m2", "session": "s", "role": "assistant", "text": reply}),
             orjson.dumps({"id": "m3", "session": "s", "role": "user", "text": "Yes please, I bake rye on Sundays."})]
    ingest(runtime_of(store), b"\n".join(lines) + b"\n", source="chat.jsonl", fmt="jsonl", keep_noise=True)
    units = {u.id: u for u in message_units(store)}
    # The model reads 256 word pieces of "turn before + message": the whole reply before the user's
    # words left none of them to read.
    assert count_tokens(units["m3"].context) <= CONTEXT_TOKENS < count_tokens(reply)
    assert units["m3"].context.endswith("Shall I list the flours too?")
    assert units["m2"].context == "user: How do I keep a starter alive?"  # a short turn is kept whole
    Index(runtime_of(store)).update()
    assert "m3" in table(store)


def test_a_message_is_read_with_the_turn_before_only_when_it_was_said_within_the_hour(tmp_path):
    from memctl.index.units import message_units

    store = Store(tmp_path / "store")
    said = [("n1", "2026-07-07T08:00:00+08:00", "Our cat Mochi needs her thyroid pill every morning."),
            ("n2", "2026-07-07T14:30:00+08:00", "I swim laps three mornings a week."),  # hours later: its own thought
            ("q1", "2026-07-07T14:31:10+08:00", "Which pool?"),
            ("a1", "2026-07-07T15:31:10+08:00", "The one on Keelung Road.")]  # an hour to the second: a reply
    lines = [orjson.dumps({"id": i, "session": "s", "speaker": "Mei", "text": text, "ts": ts}) for i, ts, text in said]
    ingest(runtime_of(store), b"\n".join(lines) + b"\n", source="chat.jsonl", fmt="jsonl", keep_noise=True)
    units = {u.id: u for u in message_units(store)}
    assert (units["n1"].context, units["n2"].context, units["n2"].context_id) == (None, None, None)
    assert (units["q1"].context, units["q1"].context_id) == ("Mei: I swim laps three mornings a week.", "n2")
    assert units["a1"].context_id == "q1"


def test_an_index_made_when_every_message_was_read_with_the_one_before_embeds_again_only_those_that_change(
        tmp_path, monkeypatch):
    from memctl.index import units as units_module

    store = Store(tmp_path / "store")
    said = [("n1", "2026-07-07T08:00:00Z"), ("n2", "2026-07-07T14:30:00Z"), ("n3", "2026-07-07T14:31:00Z"),
            ("n4", "2026-07-08T09:00:00Z")]
    lines = [orjson.dumps({"id": i, "session": "s", "speaker": "Mei", "text": f"note {i} of the day", "ts": ts})
             for i, ts in said]
    monkeypatch.setattr(units_module, "TURN_GAP_SECONDS", float("inf"))  # as the version before read them
    ingest(runtime_of(store), b"\n".join(lines) + b"\n", source="chat.jsonl", fmt="jsonl", keep_noise=True)
    Index(runtime_of(store)).update()
    manifest = store.index_dir / "manifest.json"
    manifest.write_bytes(orjson.dumps({**orjson.loads(manifest.read_bytes()), "lexical": 3}))
    monkeypatch.undo()
    report = Index(runtime_of(store)).update()
    # n2 and n4 lose the note before them, said hours earlier; n3 keeps n2, said a minute before
    assert (report.embedded, report.rebuilt) == (2, False)
    assert_same_as_rebuilt(store, tmp_path)


def log_entry(store: Store, day: str, entry_id: str, *lines: str) -> None:
    """Append an entry to a daily log by hand (a unit of its own: no stored message has its id)."""
    with open(store.daily_log(day), "a") as log:
        log.write(f"\n### 10:00:00 Ana · notes · {entry_id}\n" + "".join(f"{line}\n" for line in lines))


def first_lines_read(monkeypatch) -> list[int]:
    """The line each daily log is parsed from, as updates read them."""
    from memctl.index import units

    read: list[int] = []
    real = units._log_entries

    def parse(data: bytes, first_line: int = 1):
        read.append(first_line)
        return real(data, first_line)

    monkeypatch.setattr(units, "_log_entries", parse)
    return read


def test_a_daily_log_that_grew_is_read_from_its_last_entry_on(store, tmp_path, monkeypatch):
    read = first_lines_read(monkeypatch)
    log_entry(store, "2026-11-20", "hand-1", "The boiler pressure was 1.5 bar.")
    assert Index(runtime_of(store)).update().added == 1
    assert read == [1]  # read whole once: the build before kept no place in it
    log_entry(store, "2026-11-20", "hand-2", "The cello lesson moved to Thursday.")
    report = Index(runtime_of(store)).update()
    assert (report.added, report.changed, report.removed, report.embedded) == (1, 0, 0, 1)
    assert read[1] > 1  # from hand-1's heading: an append may go on with the last entry
    # and on with the last entry it does: its text changes, nothing else
    with open(store.daily_log("2026-11-20"), "a") as log:
        log.write("Then it was 1.2 bar.\n")
    before = table(store)
    report = Index(runtime_of(store)).update()
    assert (report.added, report.changed, report.removed) == (0, 1, 0)
    assert read[2] > read[1]
    after = table(store)
    assert {k for k in after if after[k] != before.get(k)} == {"hand-2"}
    assert_same_as_rebuilt(store, tmp_path)
    # a kept place that is no place (a manifest edited by hand): the log is read whole
    path = store.index_dir / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    manifest["log_tails"]["memory/2026-11-20.md"][0] = "x"
    path.write_bytes(orjson.dumps(manifest))
    log_entry(store, "2026-11-20", "hand-3", "The bicycle needs a new chain.")
    assert Index(runtime_of(store)).update().added == 1 and read[-1] == 1


def test_a_hand_edit_before_a_daily_logs_end_is_seen(store, tmp_path, monkeypatch):
    read = first_lines_read(monkeypatch)
    log_entry(store, "2026-11-20", "hand-1", "The boiler pressure was 1.5 bar.")
    log_entry(store, "2026-11-20", "hand-2", "The cello lesson moved to Thursday.")
    Index(runtime_of(store)).update()
    path = store.daily_log("2026-11-20")
    # an edit of the same length in an earlier entry, and an entry appended after it
    path.write_bytes(path.read_bytes().replace(b"1.5 bar", b"2.5 bar"))
    log_entry(store, "2026-11-20", "hand-3", "Ana booked the train to Lisbon.")
    report = Index(runtime_of(store)).update()
    assert (report.added, report.changed, report.removed) == (1, 1, 0)
    assert read[-1] == 1  # read whole: its bytes before the last entry are not those read last time
    units = sqlite3.connect(store.index_dir / "units.db").execute("SELECT text FROM units WHERE id = 'hand-1'")
    assert units.fetchone()[0] == "The boiler pressure was 2.5 bar."
    assert_same_as_rebuilt(store, tmp_path)
    # a message stored with the id of an entry before the log's end hides that entry (and its
    # ingest appends to the log): the log is read whole
    message = {"id": "hand-1", "session": "gamma", "role": "user", "ts": "2026-11-20T11:00:00Z",
               "text": "The boiler pressure was 2.5 bar."}
    ingest(runtime_of(store), orjson.dumps(message) + b"\n", source="chat.jsonl", fmt="jsonl", keep_noise=True)
    Index(runtime_of(store)).update()
    assert read[-1] == 1
    assert table(store)["hand-1"][3] == "sessions/gamma.jsonl"
    assert_same_as_rebuilt(store, tmp_path)


INDEXER = textwrap.dedent("""
    import sys, orjson
    sys.path.insert(0, sys.argv[3])
    import fake_embedder  # the fake model, as the tests' own process has it (conftest.py)
    from memctl import config
    config.DEFAULTS["embedding"]["model"] = fake_embedder.NAME
    from memctl.index.index import Index
    from memctl.ingest.ingest import ingest
    from memctl.store.store import Store
    from memctl.runtime import Runtime
    store, run = Store(sys.argv[1]), sys.argv[2]
    rt = Runtime(store)  # the settings and clock a Memory of the store holds
    print("ready", flush=True)
    for n in range(10_000):
        ids = [f"{run}-{n}-{k}" for k in range(20)]
        ingest(rt, b"".join(orjson.dumps({"id": i, "session": f"s{n % 3}", "role": "user",
                                             "ts": "2026-11-20T10:00:00Z", "text": f"message {i} about {n % 7}"})
                               + b"\\n" for i in ids), source="chat.jsonl", fmt="jsonl", keep_noise=True)
        with open(store.daily_log("2026-11-20"), "a") as log:  # and one by hand: a unit of the log
            log.write(f"### 10:00:00 Ana · notes · {run}-{n}-note\\nnote {n} of run {run}\\n")
        Index(rt).update()
        print(" ".join(ids), flush=True)  # acknowledged: indexed
""")


@pytest.mark.process
def test_an_update_killed_at_any_point_is_repaired_by_the_next(store, tmp_path):
    """Vectors appended while Tantivy commits, the table after both, the manifest last, daily
    logs read from their tails: wherever a kill lands, the next update leaves the index a
    rebuild would build."""
    rng = random.Random(20261124)
    acknowledged: set[str] = set()
    for run in range(30):  # six kills at least, more while a loaded machine acknowledged too few writes
        if run >= 6 and len(acknowledged) > 100:
            break
        acknowledged |= set(killed_after(rng.uniform(0.3, 1.2), INDEXER, str(store.root), f"r{run}",
                                         str(pathlib.Path(__file__).parent)).split())
        Index(runtime_of(store)).update()
        assert acknowledged <= set(table(store))
        assert_same_as_rebuilt(store, tmp_path)
    assert len(acknowledged) > 100


def test_a_manifest_that_counted_no_vector_rows_is_judged_by_its_units(store, tmp_path):
    """The first update after an upgrade: a table with more units than the old manifest counted
    was left by an update cut short, whose Tantivy may lack them, so the index is written anew."""
    path = store.index_dir / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    del manifest["vector_rows"]
    path.write_bytes(orjson.dumps(manifest))
    chat(store, "beta", 4, 1, day="2026-11-19")
    assert Index(runtime_of(store)).update().files_read == 2  # as many units as counted: only what changed
    manifest = orjson.loads(path.read_bytes())
    del manifest["vector_rows"]
    manifest["units"] -= 1
    path.write_bytes(orjson.dumps(manifest))
    chat(store, "beta", 5, 1, day="2026-11-19")
    assert Index(runtime_of(store)).update().files_read == len(Index(runtime_of(store)).stamps())
    assert_same_as_rebuilt(store, tmp_path)


def embedding_calls(monkeypatch) -> list[tuple[str, int]]:
    """Each embedding call of the fake model: the thread that made it, and how many texts."""
    import fake_embedder
    import threading

    calls: list[tuple[str, int]] = []
    embed = fake_embedder.FakeEmbedder.embed

    def counted(self, texts, progress=None):
        calls.append((threading.current_thread().name, len(texts)))
        return embed(self, texts, progress)

    monkeypatch.setattr(fake_embedder.FakeEmbedder, "embed", counted)
    return calls


def test_an_update_takes_the_messages_embedded_ahead_and_nothing_else(store, tmp_path, monkeypatch):
    """What a resident server does after an ingest: the new messages are embedded in a thread,
    and the update that follows takes those vectors, reporting and writing all it does as ever."""
    calls = embedding_calls(monkeypatch)
    twin = Store(tmp_path / "twin")
    shutil.copytree(store.root, twin.root)
    Index(runtime_of(twin)).update()  # a copy's files are new to its index (inodes): read once
    calls.clear()
    for each in (store, twin):
        chat(each, "beta", 4, 3, day="2026-11-19")
    Index(runtime_of(store)).embed_ahead()
    report = Index(runtime_of(store)).update()
    assert (report.added, report.embedded) == (3, 3)
    assert calls == [("memctl-index", 3)]  # the thread's; the update embedded nothing itself
    assert Index(runtime_of(twin)).update().as_dict() == report.as_dict()
    assert table(store) == table(twin)
    assert np.array_equal(np.load(store.index_dir / "vectors.npy"), np.load(twin.index_dir / "vectors.npy"))
    # taken once: the next change is embedded by its update
    chat(store, "beta", 7, 1, day="2026-11-19")
    assert Index(runtime_of(store)).update().embedded == 1 and calls[-1] == ("MainThread", 1)


def test_texts_embedded_ahead_are_not_taken_once_the_files_changed_again(store, tmp_path, monkeypatch):
    """Embedded ahead, then another message came: the update embeds all it needs in its own
    batch (an int8 vector depends on the texts batched with it), the same as without."""
    calls = embedding_calls(monkeypatch)
    twin = Store(tmp_path / "twin")
    shutil.copytree(store.root, twin.root)
    Index(runtime_of(twin)).update()  # a copy's files are new to its index (inodes): read once
    calls.clear()
    from memctl.index import index as index_module

    chat(store, "beta", 4, 2, day="2026-11-19")
    Index(runtime_of(store)).embed_ahead()
    index_module._AHEAD[os.path.realpath(store.index_dir)]._job.wait()  # read and embedded before the next write
    assert calls == [("memctl-index", 2)]
    chat(store, "beta", 6, 1, day="2026-11-19")
    chat(twin, "beta", 4, 3, day="2026-11-19")
    report = Index(runtime_of(store)).update()
    assert report.embedded == 3 and calls[-1] == ("MainThread", 3)
    assert Index(runtime_of(twin)).update().as_dict() == report.as_dict()
    assert np.array_equal(np.load(store.index_dir / "vectors.npy"), np.load(twin.index_dir / "vectors.npy"))


def test_embedding_ahead_that_fails_leaves_the_update_to_embed(store, monkeypatch):
    import fake_embedder

    chat(store, "beta", 4, 2, day="2026-11-19")
    embed = fake_embedder.FakeEmbedder.embed

    def failing_in_threads(self, texts, progress=None):
        import threading

        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the model failed")
        return embed(self, texts, progress)

    monkeypatch.setattr(fake_embedder.FakeEmbedder, "embed", failing_in_threads)
    Index(runtime_of(store)).embed_ahead()
    assert Index(runtime_of(store)).update().embedded == 2
    assert Index(runtime_of(store)).is_fresh()


def test_an_update_under_the_stores_lock_never_waits_forever_for_the_embedding_ahead(store):
    """`memctl forget` writes the index anew inside its transaction (the store's exclusive lock),
    and an update holds the index's lock while it takes the vectors made ahead: the thread that
    makes them must not wait for either lock (it did, and both waited on each other)."""
    import threading

    chat(store, "beta", 4, 2, day="2026-11-19")
    done = []

    def scrub_under_the_lock():
        with store.lock():
            Index(runtime_of(store)).embed_ahead()
            done.append(Index(runtime_of(store)).scrub().embedded)

    worker = threading.Thread(target=scrub_under_the_lock, daemon=True)
    worker.start()
    worker.join(60)
    assert done == [2]


def test_a_text_said_many_times_is_embedded_once(tmp_path):
    store = Store(tmp_path / "store")
    said = ["The Kestrel demo is on December 12th.", "Standup moves to 10:15 from November.",
            "The Kestrel demo is on December 12th."]
    lines = [orjson.dumps({"id": f"{session}-{n}", "session": session, "speaker": "Mei", "text": text,
                           "ts": f"2026-07-{day:02d}T{8 + 3 * n:02d}:00:00Z"})
             for day, session in ((7, "first"), (8, "copied")) for n, text in enumerate(said)]
    ingest(runtime_of(store), b"\n".join(lines) + b"\n", source="chat.jsonl", fmt="jsonl", keep_noise=True)
    report = Index(runtime_of(store)).update()
    # six messages, each read alone (hours apart), two texts: each embedded once
    assert (report.added, report.embedded) == (6, 2)
    rows, vectors = table(store), np.load(store.index_dir / "vectors.npy")
    demo = {vectors[rows[unit_id][0]].tobytes() for unit_id in ("first-0", "first-2", "copied-0", "copied-2")}
    standup = {vectors[rows[unit_id][0]].tobytes() for unit_id in ("first-1", "copied-1")}
    assert len(demo) == len(standup) == 1 and demo != standup
