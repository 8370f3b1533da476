"""Version chains and conflicts on write (G6), through real `memctl` processes."""

from __future__ import annotations

import orjson

from conftest import FIXTURES, snapshot
from memctl.governance import governance
from memctl.store import status
from memctl.store import memoryfile

NOW = {"MEMCTL_NOW": "2026-11-20T08:00:00Z"}


def note(text: str, **fields) -> str:
    return orjson.dumps({"text": text, **fields}).decode() + "\n"


def entries(store_dir):
    return {e.id: e for e in memoryfile.load(store_dir / "MEMORY.md").entries}


def log(store_dir):
    path = store_dir / "governance.log.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def seed(run):
    assert run("ingest", str(FIXTURES / "demo" / "MEMORY.md"), env=NOW).returncode == 0


def test_supersedes_deprecates_the_old_version_in_the_same_write(run, store_dir):
    seed(run)
    result = run("ingest", "--kind", "memory", "--json", "--supersedes", "mem-kestrel-db", "-",
                 input=note("Kestrel moved to CockroachDB for multi-region", id="mem-kestrel-db-2"), env=NOW)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == {"id": "mem-kestrel-db-2", "kind": "memory", "status": "stored",
                                           "line": 1, "file": "MEMORY.md", "supersedes": ["mem-kestrel-db"]}
    memories = entries(store_dir)
    old, new = memories["mem-kestrel-db"], memories["mem-kestrel-db-2"]
    assert old.get("status") == "deprecated" and old.get("status_changed_at") == "2026-11-20T08:00:00Z"
    assert new.get("supersedes") == ["mem-kestrel-db"]
    assert new.get("canonical_topic") == "database:choice"     # a new version stays in its topic
    assert log(store_dir) == [{"ts": "2026-11-20T08:00:00Z", "action": "supersede", "id": "mem-kestrel-db",
                               "by": "mem-kestrel-db-2", "from": "active", "to": "deprecated"}]
    doc = memoryfile.load(store_dir / "MEMORY.md")
    assert governance.chain(doc, "mem-kestrel-db").ids == ["mem-kestrel-db", "mem-kestrel-db-2"]
    assert "mem-kestrel-db" not in status.active_tails(doc)
    assert not doc.issues                                      # status_changed_at is a known field


def test_supersedes_is_repeatable_and_works_from_a_notes_own_field(run, store_dir):
    seed(run)
    two = run("ingest", "--kind", "memory", "--supersedes", "mem-about-role", "--supersedes",
              "mem-answer-language", "-", input=note("Mei now leads the platform team", id="merged"), env=NOW)
    assert two.returncode == 0, two.stderr
    third = run("ingest", "--kind", "memory", "-", input=note("Mei leads platform and data", id="merged-2",
                                                            supersedes=["merged"]), env=NOW)
    assert third.returncode == 0, third.stderr
    memories = entries(store_dir)
    assert {memories[i].get("status") for i in ("mem-about-role", "mem-answer-language", "merged")} == {"deprecated"}
    doc = memoryfile.load(store_dir / "MEMORY.md")
    assert governance.chain(doc, "merged-2").ids[-2:] == ["merged", "merged-2"]


def test_bad_supersedes_exit_2_and_store_unchanged(run, store_dir):
    seed(run)
    before = snapshot(store_dir)
    unknown = run("ingest", "--kind", "memory", "--supersedes", "no-such-id", "-", input=note("New fact here"))
    assert unknown.returncode == 2
    assert unknown.stderr.decode() == ("memctl: error: <stdin>:1: field 'supersedes': 'no-such-id': "
                                       "no memory with that id in MEMORY.md\n")
    many = run("ingest", "--kind", "memory", "--supersedes", "mem-kestrel-db", "-",
               input=note("first new fact") + note("second new fact"))
    assert many.returncode == 2 and b"--supersedes: names what one note replaces; the input has 2" in many.stderr
    messages = run("ingest", "--kind", "message", "--supersedes", "mem-kestrel-db", "-", input=note("a message"))
    assert messages.returncode == 2 and b"applies to notes" in messages.stderr
    itself = run("ingest", "--kind", "memory", "-", input=note("a note that loops", id="loop", supersedes=["loop"]))
    assert itself.returncode == 2 and b"cannot supersede itself" in itself.stderr
    assert snapshot(store_dir) == before


def test_an_old_version_cannot_be_superseded_twice(run, store_dir):
    seed(run)
    assert run("ingest", "--kind", "memory", "--supersedes", "mem-kestrel-db", "-",
               input=note("CockroachDB now", id="v2")).returncode == 0
    before = snapshot(store_dir)
    again = run("ingest", "--kind", "memory", "--supersedes", "mem-kestrel-db", "-", input=note("MySQL now", id="v3"))
    assert again.returncode == 2
    assert b"'mem-kestrel-db' is already superseded by 'v2'; supersede the newest version instead" in again.stderr
    assert snapshot(store_dir) == before


def test_same_topic_without_a_choice_is_refused(run, store_dir):
    seed(run)
    before = snapshot(store_dir)
    result = run("ingest", "--kind", "memory", "-",
                 input=note("Kestrel uses MySQL after all", canonical_topic="database:choice"))
    assert result.returncode == 2 and result.stdout == b""
    message = result.stderr.decode()
    assert message.count("\n") == 1 and message.startswith("memctl: error: <stdin>:1: field 'canonical_topic': ")
    assert "'mem-kestrel-db'" in message and "--add" in message and "--supersedes mem-kestrel-db" in message
    assert snapshot(store_dir) == before


def test_add_writes_anyway_and_keeps_the_warning(run, store_dir):
    seed(run)
    result = run("ingest", "--kind", "memory", "--add", "--json", "-", env=NOW,
                 input=note("Kestrel uses PostgreSQL with one schema per tenant bakery, read replicas too",
                            id="pg-2", canonical_topic="database:choice"))
    assert result.returncode == 0, result.stderr
    row = orjson.loads(result.stdout)
    assert row["conflicts"] == ["mem-kestrel-db"]
    assert row["similar"][0]["id"] == "mem-kestrel-db" and 0 < row["similar"][0]["score"] <= 1
    assert b"memctl: warning: 'pg-2': canonical_topic 'database:choice' already has current memory " \
           b"'mem-kestrel-db'" in result.stderr
    assert entries(store_dir)["mem-kestrel-db"].get("status") is None   # both stay current
    assert log(store_dir)[-1] == {"ts": "2026-11-20T08:00:00Z", "action": "add-conflict", "id": "pg-2",
                                  "topic": "database:choice", "conflicts": ["mem-kestrel-db"]}


def test_two_notes_of_one_input_in_one_topic_conflict_too(run, store_dir):
    result = run("ingest", "--kind", "memory", "-",
                 input=note("Use tabs", canonical_topic="style:indent") + note("Use spaces", canonical_topic="style:indent"))
    assert result.returncode == 2 and b"<stdin>:2: field 'canonical_topic'" in result.stderr
    assert not (store_dir / "MEMORY.md").exists()


def test_a_hand_deprecated_entry_is_no_conflict_and_dry_run_reports(run, store_dir):
    seed(run)
    path = store_dir / "MEMORY.md"
    path.write_text(path.read_text().replace("canonical_topic: database:choice\n",
                                             "canonical_topic: database:choice\nstatus: deprecated\n"))
    before = snapshot(store_dir)
    dry = run("ingest", "--kind", "memory", "--dry-run", "--json", "-",
              input=note("Kestrel uses MySQL", canonical_topic="database:choice"))
    assert dry.returncode == 0 and "conflicts" not in orjson.loads(dry.stdout)
    assert snapshot(store_dir) == before


def test_pending_notes_report_conflicts_and_confirm_decides(run, store_dir):
    seed(run)
    held = run("ingest", "--pending", "--json", "-", env=NOW,
               input=note("Kestrel uses MySQL", id="p-mysql", canonical_topic="database:choice"))
    assert held.returncode == 0 and orjson.loads(held.stdout)["conflicts"] == ["mem-kestrel-db"]
    assert b"confirm with --add, or --supersedes mem-kestrel-db" in held.stderr
    refused = run("review", "confirm", "p-mysql", env=NOW)
    assert refused.returncode == 2 and b"pending.jsonl:1: field 'canonical_topic'" in refused.stderr
    assert "p-mysql" not in entries(store_dir)
    chosen = run("review", "confirm", "p-mysql", "--supersedes", "mem-kestrel-db", env=NOW)
    assert chosen.returncode == 0, chosen.stderr
    assert entries(store_dir)["mem-kestrel-db"].get("status") == "deprecated"
    assert entries(store_dir)["p-mysql"].get("supersedes") == ["mem-kestrel-db"]


def test_pending_supersedes_is_checked_now_and_applied_on_confirm(run, store_dir):
    seed(run)
    bad = run("ingest", "--pending", "--supersedes", "ghost", "-", input=note("new thing"))
    assert bad.returncode == 2 and b"'ghost': no memory with that id" in bad.stderr
    held = run("ingest", "--pending", "--supersedes", "mem-about-role", "-", input=note("Mei moved to Tainan", id="p1"),
               env=NOW)
    assert held.returncode == 0
    assert entries(store_dir)["mem-about-role"].get("status") is None   # not yet: it is only pending
    assert run("review", "confirm", "p1", env=NOW).returncode == 0
    assert entries(store_dir)["mem-about-role"].get("status") == "deprecated"


def test_hand_edits_between_commands_are_reported_by_health_not_fatal(run, store_dir):
    seed(run)
    assert run("ingest", "--kind", "memory", "--supersedes", "mem-kestrel-db", "-",
               input=note("CockroachDB now", id="v2")).returncode == 0
    path = store_dir / "MEMORY.md"
    doc = memoryfile.load(path)
    text = doc.render()
    old = doc.find("mem-kestrel-db")
    path.write_text(text.replace(old.raw, ""))                  # a person deletes the old version
    check = run("health", "check")
    assert check.returncode == 1
    assert "'v2' supersedes 'mem-kestrel-db', which is in no memory file" in check.stdout.decode()
    doc = memoryfile.load(path)
    assert governance.chain(doc, "v2").ids == ["mem-kestrel-db", "v2"]
    # ... and a new note may still be written next to the damage
    assert run("ingest", "--kind", "memory", "-", input=note("An unrelated fact")).returncode == 0


def test_an_exported_chain_ingests_in_any_order(run, store_dir, tmp_path):
    export = tmp_path / "export.md"
    export.write_text("## Decisions\n\n"
                      "<!-- memory\nid: v2\nsummary: CockroachDB now\nmemory_class: episodic\nscope: global\n"
                      "canonical_topic: db\nsupersedes: [\"v1\"]\n-->\nCockroachDB now.\n\n"
                      "<!-- memory\nid: v1\nsummary: PostgreSQL\nmemory_class: episodic\nscope: global\n"
                      "canonical_topic: db\n-->\nPostgreSQL first.\n")
    result = run("ingest", str(export), env=NOW)
    assert result.returncode == 0, result.stderr           # v1 comes after v2 and is no conflict: v2 replaces it
    assert entries(store_dir)["v1"].get("status") == "deprecated"
    assert run("health").returncode == 0


# -- the newer fact wins on write (issue 21) ----------------------------------------------------

STAGING = "The staging database password rotates every 30 days"


def test_a_note_nearly_repeating_a_current_memory_is_a_conflict_naming_it(run, store_dir):
    assert run("ingest", "--kind", "memory", "-", input=note(STAGING, id="rotate-30"), env=NOW).returncode == 0
    before = snapshot(store_dir)
    contradicting = note("The staging database password rotates every 90 days", id="rotate-90")
    refused = run("ingest", "--kind", "memory", "-", input=contradicting, env=NOW)
    assert refused.returncode == 2 and refused.stdout == b""
    message = refused.stderr.decode()
    assert message.count("\n") == 1 and message.startswith("memctl: error: <stdin>:1: field 'text': ")
    assert "current memory 'rotate-30'" in message and "--add" in message and "--supersedes rotate-30" in message
    assert snapshot(store_dir) == before
    # Another scope's memory is no conflict: scopes are walls.
    other = run("ingest", "--kind", "memory", "--scope", "project:other", "-", input=contradicting, env=NOW)
    assert other.returncode == 0, other.stderr
    replaced = run("ingest", "--kind", "memory", "--supersedes", "rotate-30", "-",
                   input=note("The staging database password rotates every 90 days", id="rotate-90b"), env=NOW)
    assert replaced.returncode == 0, replaced.stderr
    assert entries(store_dir)["rotate-30"].get("status") == "deprecated"


def test_add_writes_a_near_duplicate_and_says_which_memory_it_contradicts(run, store_dir):
    assert run("ingest", "--kind", "memory", "-", input=note(STAGING, id="rotate-30"), env=NOW).returncode == 0
    added = run("ingest", "--kind", "memory", "--add", "--json", "-", env=NOW,
                input=note("The staging database password rotates every 90 days", id="rotate-90"))
    assert added.returncode == 0, added.stderr
    assert orjson.loads(added.stdout)["conflicts"] == ["rotate-30"]
    assert (b"memctl: warning: 'rotate-90': its subject (a near-duplicate) already has current memory "
            b"'rotate-30'") in added.stderr


def test_an_exact_duplicate_is_not_written_again(run, store_dir):
    seed(run)
    before = snapshot(store_dir)
    again = run("ingest", "--kind", "memory", "--json", "--section", "Elsewhere", "--scope", "project:kestrel", "-",
                env=NOW,
                input=note("Kestrel (the bakery inventory service) uses PostgreSQL for JSONB recipe\n"
                           "metadata, with one schema per tenant bakery (14 tenants)."))
    assert again.returncode == 0, again.stderr
    row = orjson.loads(again.stdout)
    assert row["status"] == "duplicate" and row["duplicate_of"] == "mem-kestrel-db"
    assert b"current memory 'mem-kestrel-db' says the same; nothing stored" in again.stderr
    assert snapshot(store_dir) == before


def test_a_superseded_memory_is_never_returned_as_current(run, store_dir):
    seed(run)
    assert run("ingest", "--kind", "memory", "--supersedes", "mem-kestrel-db", "-", env=NOW,
               input=note("Kestrel moved from PostgreSQL to CockroachDB for multi-region tenants",
                          id="mem-kestrel-db-2")).returncode == 0
    for flags in ([], ["--min-score", "0"], ["--mode", "bm25", "--min-score", "0"], ["-k", "50"]):
        found = run("search", "--json", *flags, "which database does Kestrel use PostgreSQL")
        assert found.returncode == 0, (flags, found.stderr)
        rows = [orjson.loads(line) for line in found.stdout.splitlines()]
        assert "mem-kestrel-db-2" in [r["id"] for r in rows], flags
        assert "mem-kestrel-db" not in [r["id"] for r in rows], flags
