"""`memctl forget`: the text leaves every file of the store, .index/ included, and every search."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from conftest import snapshot

SECRET = "zanzibarite"  # a word no other text of these stores holds: found anywhere, it was not forgotten
PHRASE = f"my locker code is 4417 at the {SECRET} gym"


def chat(session: str, texts: list[str], day: str = "2026-11-10", scope: str | None = None) -> str:
    lines = []
    for i, text in enumerate(texts):
        record = {"session": session, "role": "user" if i % 2 == 0 else "assistant",
                  "ts": f"{day}T10:{i:02d}:00Z", "text": text}
        if scope:
            record["scope"] = scope
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under root whose bytes hold `needle` (binaries included: SQLite, Tantivy, vectors)."""
    data = needle.encode()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and data in p.read_bytes())


def ids_of(run, *args: str) -> list[str]:
    done = run("search", *args, "--json")
    return [json.loads(line)["id"] for line in done.stdout.splitlines()]


@pytest.fixture
def full_store(run, store_dir):
    """A store where the secret message sits in a session, a daily log, a topic and its summary, an
    archived topic's summary, an idle session's auto summary and the index; its id is returned."""
    texts = [f"message {i} about sourdough starters and rye flour hydration" for i in range(12)]
    texts[4] = PHRASE  # a user message: the daily log holds what users said
    assert run("ingest", "-", input=chat("s1", texts)).returncode == 0
    messages = [json.loads(line) for line in (store_dir / "sessions" / "s1.jsonl").read_text().splitlines()]
    secret_id = messages[4]["id"]
    assert run("split", "--session", "s1", "--force", "--keep-recent", "2").returncode == 0
    assert run("review", "daily", env={"MEMCTL_NOW": "2026-12-01T00:00:00Z"}).returncode == 0
    archive = store_dir / "topics" / "archived" / "2026-11"
    archive.parent.mkdir(mode=0o700)
    archive.mkdir(mode=0o700)
    (archive / "t-0123456789ab.jsonl").write_text(orjson.dumps({
        "type": "topic", "id": "t-0123456789ab", "name": f"{SECRET} gym", "summary": f"user: {PHRASE}",
        "state": "archived", "scope": "global", "created": "2026-11-10T10:00:00Z", "updated": "2026-11-10T10:05:00Z",
        "archived_at": "2026-11-20T00:00:00Z", "message_ids": [messages[3]["id"], secret_id],
        "sessions": ["s1"]}).decode() + "\n")
    (archive / "t-0123456789ab.jsonl").chmod(0o600)
    assert run("search", "locker code gym").returncode in (0, 1)  # builds the index
    holding = files_holding(store_dir, SECRET)
    # the test can fail: before, the secret is everywhere it is looked for after
    for part in ("sessions/s1.jsonl", "memory/2026-11-10.md", "auto_summaries.jsonl", ".index/units.db",
                 "topics/archived/2026-11/t-0123456789ab.jsonl"):
        assert part in holding, (part, holding)
    assert any(p.startswith("topics/t-") for p in holding)
    return secret_id


def segments(store_dir: Path) -> set[str]:
    """Tantivy's segment files. Its term dictionary (an FST) and document store (compressed) hold no
    word as plain bytes to look for: a segment written before the forget must be gone instead (a
    deleted document stays in its segment until a merge)."""
    return {p.name for p in (store_dir / ".index" / "tantivy").iterdir() if not p.name.startswith(".")
            and p.name != "meta.json"}


def test_a_forgotten_message_is_in_no_file_of_the_store_and_found_by_no_search(run, store_dir, full_store):
    secret_id = full_store
    assert secret_id in ids_of(run, SECRET, "--mode", "bm25")
    segments_before = segments(store_dir)

    done = run("forget", secret_id)

    assert done.returncode == 0, done.stderr
    assert f"forgot  message  {secret_id}" in done.stdout.decode()
    assert files_holding(store_dir, SECRET) == []
    assert files_holding(store_dir, "locker code is 4417") == []
    assert segments_before and not segments_before & segments(store_dir)
    for mode in ("bm25", "vector", "hybrid"):
        found = run("search", f"{SECRET} locker code 4417", "--mode", mode, "--min-score", "0", "--json")
        assert SECRET not in found.stdout.decode()
        assert secret_id not in found.stdout.decode()
    # the rest stays, and the store is sound
    assert len((store_dir / "sessions" / "s1.jsonl").read_text().splitlines()) == 11
    archived = json.loads((store_dir / "topics/archived/2026-11/t-0123456789ab.jsonl").read_text())
    assert secret_id not in archived["message_ids"] and len(archived["message_ids"]) == 1
    assert run("health").returncode == 0
    # the governance log says what and when, never the text
    log = [json.loads(line) for line in (store_dir / "governance.log.jsonl").read_text().splitlines()]
    assert {"action": "forget", "id": secret_id, "kind": "message"}.items() <= log[-1].items()


def test_a_dry_run_and_a_match_without_yes_write_nothing(run, store_dir, full_store):
    before = snapshot(store_dir)

    dry = run("forget", full_store, "-n")
    listed = run("forget", "--match", "LOCKER CODE")
    quiet = run("forget", "--match", "LOCKER CODE", "-q")

    assert dry.returncode == 0 and listed.returncode == 0
    assert snapshot(store_dir) == before
    assert "would forget" in listed.stdout.decode() and PHRASE in listed.stdout.decode()
    assert "--yes" in listed.stderr.decode()
    assert "dry run" in dry.stderr.decode()
    # under --quiet (cron) the one line saying nothing was forgotten still shows
    assert quiet.stdout == b"" and "--yes" in quiet.stderr.decode()


def test_a_match_with_yes_forgets_messages_memories_and_pending_notes(run, store_dir):
    run("ingest", "-", input=chat("s1", [f"call me on 555-0199, {SECRET} line", "noted, thanks for that"]))
    run("ingest", "--kind", "memory", "-", input=json.dumps({"text": f"Phone: 555-0199 ({SECRET})"}))
    run("ingest", "--kind", "memory", "--pending", "-", input=json.dumps({"text": f"pending {SECRET} 555-0199"}))
    run("search", "phone")

    done = run("forget", "--match", "555-0199", "--yes", "--json")

    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["applied"]
    assert sorted(r["kind"] for r in report["forgotten"]) == ["memory", "message", "pending"]
    assert "preview" not in report["forgotten"][0]  # what is gone is not echoed back
    assert files_holding(store_dir, SECRET) == []
    assert run("forget", "--match", "555-0199", "--yes").returncode == 1  # nothing left to match


def test_forgetting_a_middle_version_keeps_its_chain_linked(run, store_dir):
    def note(text: str, supersedes: str | None = None) -> str:
        args = ["ingest", "--kind", "memory", "-"] + (["--supersedes", supersedes] if supersedes else [])
        done = run(*args, input=json.dumps({"text": text, "canonical_topic": "home"}))
        assert done.returncode == 0, done.stderr
        return done.stdout.decode().split()[0]

    first = note("Lives in Tokyo")
    middle = note(f"Lives in Osaka near the {SECRET} tower", first)
    last = note("Lives in Taipei", middle)

    done = run("forget", middle, "--json")

    assert json.loads(done.stdout)["repointed"] == [{"id": last, "supersedes": [first]}]
    text = (store_dir / "MEMORY.md").read_text()
    assert SECRET not in text and middle not in text
    chain = json.loads(run("show", last, "--json").stdout)["chain"]
    assert [(link["id"], link["status"]) for link in chain] == [(first, "deprecated"), (last, "active")]
    assert run("health").returncode == 0
    assert run("forget", first, "--json").returncode == 0
    assert "supersedes" not in (store_dir / "MEMORY.md").read_text()  # nothing left to point at


def test_scopes_are_walls(run, store_dir):
    run("ingest", "-", input=chat("alice", [f"alice's {SECRET} code is 1111"], scope="user:alice"))
    run("ingest", "-", input=chat("bob", [f"bob's {SECRET} code is 2222"], scope="user:bob"))
    bob_id = json.loads((store_dir / "sessions" / "bob.jsonl").read_text())["id"]
    before = snapshot(store_dir)

    unknown = run("forget", bob_id, "--scope", "user:alice")
    assert unknown.returncode == 1 and "user:alice" in unknown.stderr.decode()
    assert snapshot(store_dir) == before

    done = run("forget", "--match", SECRET, "--scope", "user:alice", "--yes")
    assert done.returncode == 0
    assert files_holding(store_dir, "1111") == []
    assert "sessions/bob.jsonl" in files_holding(store_dir, "2222")


def test_forgetting_a_session_needs_yes_and_takes_all_of_it(run, store_dir):
    run("ingest", "-", input=chat("s1", [f"{SECRET} one", f"{SECRET} two, a longer line"]))
    run("ingest", "-", input=chat("s2", ["an unrelated session about knitting"]))
    assert run("forget", "--session", "s1").returncode == 0
    assert (store_dir / "sessions" / "s1.jsonl").exists()

    assert run("forget", "--session", "s1", "--yes").returncode == 0

    assert not (store_dir / "sessions" / "s1.jsonl").exists()
    assert files_holding(store_dir, SECRET) == []
    assert "knitting" in (store_dir / "memory" / "2026-11-10.md").read_text()


def test_bad_and_unknown_ids(run, store_dir):
    run("ingest", "-", input=chat("s1", ["something worth keeping here"]))
    assert run("forget", "m-0000000000000000").returncode == 1
    assert run("forget", "../etc").returncode == 2
    assert run("forget").returncode == 2
    assert run("forget", "--match", "x").returncode == 2
    assert run("forget", "m-1", "--match", "something").returncode == 2


def test_the_api_and_the_mcp_tool(store_dir):
    from memctl import Memory
    from memctl.errors import NotFound
    from memctl.mcp.tools import TOOLS

    memory = Memory(store_dir)
    memory.ingest(chat("s1", [f"the {SECRET} password is hunter2", "ok, noted that for later"]))
    listed = TOOLS["forget"].run(memory, match=SECRET)
    assert not listed["applied"] and listed["needs_yes"] and listed["forgotten"][0]["preview"]

    done = TOOLS["forget"].run(memory, match=SECRET, yes=True)

    assert done["applied"] and [r["kind"] for r in done["forgotten"]] == ["message"]
    assert files_holding(store_dir, SECRET) == []
    with pytest.raises(NotFound):
        memory.forget([done["forgotten"][0]["id"]], dry_run=True)


def test_a_soft_deleted_memory_and_the_lifecycle_log_copy_of_its_summary(run, store_dir):
    run("ingest", "-", input=chat("s1", ["a message to keep in the store"]))
    (store_dir / "deleted").mkdir(mode=0o700)
    (store_dir / "deleted" / "2026-11.md").write_text(
        "# Deleted memories, 2026-11 (memctl review lifecycle)\n\n<!-- memory\nid: mem-gone\n"
        f"summary: {SECRET} summary\nmemory_class: episodic\nscope: global\ncreated_at: 2026-09-01T00:00:00Z\n"
        f"deleted_at: 2026-11-01T00:00:00Z\n-->\nThe {SECRET} text itself\n")
    (store_dir / "governance.log.jsonl").write_text(json.dumps(
        {"ts": "2026-11-01T00:00:00Z", "action": "lifecycle", "change": "delete", "id": "mem-gone",
         "summary": f"{SECRET} summary"}) + "\n")

    done = run("forget", "mem-gone")

    assert done.returncode == 0, done.stderr
    assert files_holding(store_dir, SECRET) == []
    log = [json.loads(line) for line in (store_dir / "governance.log.jsonl").read_text().splitlines()]
    assert log[0]["id"] == "mem-gone" and "summary" not in log[0]
    assert run("show", "mem-gone").returncode == 1


def test_a_fifo_in_the_store_does_not_hang_the_look_for_what_is_left(run, store_dir):
    """After forgetting, the store's other files are read for the text; a named pipe a handed-over
    store holds is not a file to read (reading it would wait for a writer for ever)."""
    import os

    assert run("ingest", "-", input=chat("s1", [PHRASE, "noted"])).returncode == 0
    os.mkfifo(store_dir / "sessions" / "pipe.txt")
    done = run("forget", "--match", SECRET, "--yes")
    assert done.returncode == 0, done.stderr
    assert files_holding(store_dir, SECRET) == []
