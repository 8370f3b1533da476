"""`memctl review`: pending memories (P5) and the lifecycle (G5), through real processes."""

from __future__ import annotations

import orjson
import pytest

from conftest import snapshot
from memctl.store import memoryfile

T0 = "2026-11-01T00:00:00Z"


def at(when: str) -> dict:
    return {"MEMCTL_NOW": when}


def note(text: str, **fields) -> str:
    return orjson.dumps({"text": text, **fields}).decode() + "\n"


def memories(store_dir):
    return {e.id: e for e in memoryfile.load(store_dir / "MEMORY.md").entries}


def log(store_dir):
    return [orjson.loads(line) for line in (store_dir / "governance.log.jsonl").read_bytes().splitlines()]


# -- pending (P5) ----------------------------------------------------------------
@pytest.fixture
def pending_store(run, store_dir):
    held = run("ingest", "--pending", "-", env=at(T0),
               input=note("Mei's demo is on December 12th", id="p-demo", section="Kestrel")
               + note("Jonas reviews the demo for operations", id="p-jonas"))
    assert held.returncode == 0, held.stderr
    short = run("ingest", "--pending", "--ttl", "2", "-", env=at(T0), input=note("Laptop repair is booked", id="p-laptop"))
    assert short.returncode == 0
    return store_dir


def test_pending_lists_age_and_time_left(run, pending_store):
    listed = run("review", "pending", env=at("2026-11-01T01:00:00Z"))
    assert listed.returncode == 0
    lines = listed.stdout.decode().splitlines()
    assert lines[0] == "p-demo\tage 1.0h\tleft 23.0h\t[Kestrel] Mei's demo is on December 12th"
    assert [line.split("\t")[0] for line in lines] == ["p-demo", "p-jonas", "p-laptop"]
    rows = [orjson.loads(line) for line in run("review", "pending", "--json", env=at("2026-11-01T01:00:00Z")).stdout.splitlines()]
    assert rows[2] == {"id": "p-laptop", "line": 3, "section": "General", "summary": "Laptop repair is booked",
                       "text": "Laptop repair is booked", "pending_since": T0, "expires_at": "2026-11-01T02:00:00Z",
                       "age_hours": 1.0, "left_hours": 1.0}


def test_confirm_moves_to_memory_md_and_off_the_list_in_one_write(run, pending_store):
    path = pending_store / "pending.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'{"id"', b'{ "id"')  # a hand edit on a line that stays
    path.write_bytes(b"".join(lines))
    result = run("review", "confirm", "--json", "p-demo", "p-laptop", env=at("2026-11-01T01:00:00Z"))
    assert result.returncode == 0, result.stderr
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == [
        {"id": "p-demo", "status": "confirmed", "file": "MEMORY.md"},
        {"id": "p-laptop", "status": "confirmed", "file": "MEMORY.md"}]
    stored = memories(pending_store)
    assert stored["p-demo"].section == "Kestrel" and stored["p-demo"].get("created_at") == T0
    assert path.read_bytes() == lines[1]                # the other line, byte for byte
    assert [r["action"] for r in log(pending_store)] == ["confirm", "confirm"]
    assert run("review", "confirm", "p-demo").returncode == 2  # no longer pending


def test_reject_drops_without_writing_memory(run, pending_store):
    result = run("review", "reject", "p-jonas", env=at("2026-11-01T01:00:00Z"))
    assert result.returncode == 0 and result.stdout == b"p-jonas\n"
    assert not (pending_store / "MEMORY.md").exists()
    ids = [orjson.loads(line)["id"] for line in (pending_store / "pending.jsonl").read_bytes().splitlines()]
    assert ids == ["p-demo", "p-laptop"]


@pytest.mark.parametrize("command", ["confirm", "reject"])
def test_unknown_id_is_exit_2_and_nothing_changes(run, pending_store, command):
    before = snapshot(pending_store)
    result = run("review", command, "p-demo", "nope", env=at("2026-11-01T01:00:00Z"))
    assert result.returncode == 2
    assert result.stderr.decode() == ("memctl: error: pending.jsonl: no pending memory with id 'nope' "
                                      "(see: memctl review pending)\n")
    assert snapshot(pending_store) == before


def test_dry_run_confirm_and_reject_write_nothing(run, pending_store):
    before = snapshot(pending_store)
    for command in ("confirm", "reject"):
        result = run("review", command, "--dry-run", "p-demo", env=at("2026-11-01T01:00:00Z"))
        assert result.returncode == 0 and result.stdout == b"p-demo\n" and b"dry run" in result.stderr
    assert snapshot(pending_store) == before


def test_expired_ones_are_dropped_by_any_review_command(run, pending_store):
    later = at("2026-11-01T03:00:00Z")   # p-laptop (2 h) has expired, the others (24 h) not
    confirm = run("review", "confirm", "p-laptop", env=later)
    assert confirm.returncode == 2
    assert b"dropped expired pending memory 'p-laptop' (expired 2026-11-01T02:00:00Z)" in confirm.stderr
    assert b"no pending memory with id 'p-laptop'" in confirm.stderr
    listed = run("review", "pending", env=later)
    assert [line.split(b"\t")[0] for line in listed.stdout.splitlines()] == [b"p-demo", b"p-jonas"]
    assert {"ts": "2026-11-01T03:00:00Z", "action": "expire", "id": "p-laptop",
            "expires_at": "2026-11-01T02:00:00Z"} in log(pending_store)
    gone = run("review", "lifecycle", env=at("2026-11-03T00:00:00Z"))
    assert gone.stderr.count(b"dropped expired pending memory") == 2
    nothing = run("review", "pending", env=at("2026-11-03T00:00:00Z"))
    assert nothing.returncode == 1 and nothing.stdout == b""


def test_a_broken_pending_field_is_exit_2_naming_the_line(run, pending_store):
    path = pending_store / "pending.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    item = orjson.loads(lines[1])
    item["fields"]["memory_class"] = "rumour"
    lines[1] = orjson.dumps(item) + b"\n"
    path.write_bytes(b"".join(lines))
    before = snapshot(pending_store)
    result = run("review", "confirm", "p-jonas", env=at("2026-11-01T01:00:00Z"))
    assert result.returncode == 2
    assert result.stderr.decode() == ("memctl: error: pending.jsonl:2: field 'memory_class': must be one of "
                                      "policy, episodic, mixed\n")
    assert snapshot(pending_store) == before


# -- lifecycle (G5) --------------------------------------------------------------
@pytest.fixture
def aged_store(run, store_dir):
    """Memories created 2026-11-01 with different weights; hand-written text around them."""
    notes = "".join([
        note("Fresh-ish default weight", id="plain", created_at=T0),
        note("Low weight memory", id="light", created_at=T0, user_weight=0),
        note("Heavy weight memory", id="heavy", created_at=T0, user_weight=8),
        note("Core by flag", id="core-flag", created_at=T0, is_core=True, user_weight=0),
        note("Core by weight", id="core-weight", created_at=T0, user_weight=9),
        note("An old version", id="old-version", created_at=T0, status="deprecated", user_weight=0),
    ])
    assert run("ingest", "--kind", "memory", "-", input=notes, env=at(T0)).returncode == 0
    with open(store_dir / "MEMORY.md", "a") as fh:
        fh.write("\n## Hand written\n\nA note typed by hand, with no block and no date.\n")
    return store_dir


def lifecycle(run, when, *args):
    result = run("review", "lifecycle", "--json", *args, env=at(when))
    assert result.returncode == 0, result.stderr
    return {r["id"]: r for r in map(orjson.loads, result.stdout.splitlines())}


def test_dry_run_prints_changes_and_writes_nothing(run, aged_store):
    before = snapshot(aged_store)
    text = run("review", "lifecycle", "--dry-run", env=at("2026-11-21T00:00:00Z"))
    assert text.returncode == 0
    assert text.stdout.decode().startswith("plain: active -> low_priority (health 0.274)\n")
    assert b"would change, nothing written" in text.stderr
    assert snapshot(aged_store) == before


def test_demotion_by_health_and_core_memories_never_demoted(run, aged_store):
    # After 20 days: recency 0.371. light: 0.4*0.371 = 0.149 -> archived (< 0.15);
    # plain: 0.149 + 0.125 = 0.273 -> low_priority; heavy: 0.149 + 0.2 = 0.349 stays.
    changes = lifecycle(run, "2026-11-21T00:00:00Z")
    assert {i: (c["from"], c["to"]) for i, c in changes.items()} == {
        "plain": ("active", "low_priority"), "light": ("active", "archived")}
    assert changes["light"]["health"] == pytest.approx(0.4 * 2 ** (-20 / 14), abs=1e-6)
    stored = memories(aged_store)
    assert stored["plain"].get("status") == "low_priority"
    assert stored["plain"].get("status_changed_at") == "2026-11-21T00:00:00Z"
    assert stored["core-flag"].get("status") is None and stored["core-weight"].get("status") is None
    assert stored["old-version"].get("status") == "deprecated"          # history is left alone
    assert [(r["action"], r["change"], r["id"]) for r in log(aged_store)] == [
        ("lifecycle", "status", "plain"), ("lifecycle", "status", "light")]
    assert "A note typed by hand, with no block and no date.\n" in (aged_store / "MEMORY.md").read_text()
    assert lifecycle(run, "2026-11-21T00:00:00Z") == {}                  # a second run changes nothing


def test_a_used_memory_comes_back_and_a_hand_made_core_one_too(run, aged_store):
    lifecycle(run, "2026-11-21T00:00:00Z")
    path = aged_store / "MEMORY.md"
    text = path.read_text()
    # searches used 'plain' (access count), and a person raised 'light' to core
    text = text.replace("id: plain\n", "id: plain\naccess_count: 20\n")
    text = text.replace("id: light\nsummary: Low weight memory\nmemory_class: episodic\nscope: global\n"
                        "status: archived\n", "id: light\nsummary: Low weight memory\nmemory_class: episodic\n"
                        "scope: global\nstatus: low_priority\nis_core: true\n")
    path.write_text(text)
    changes = lifecycle(run, "2026-11-22T00:00:00Z")
    assert {i: (c["from"], c["to"]) for i, c in changes.items()} == {
        "plain": ("low_priority", "active"), "light": ("low_priority", "active")}


def test_archived_over_60_days_is_soft_deleted_into_deleted_month_file(run, aged_store):
    lifecycle(run, "2026-11-21T00:00:00Z")                       # light archived on 11-21
    assert lifecycle(run, "2027-01-19T00:00:00Z").get("light") is None   # 59 days: still kept
    changes = lifecycle(run, "2027-01-21T00:00:00Z")             # 61 days
    assert changes["light"] | {"health": None} == {"id": "light", "action": "delete", "from": "archived",
                                                   "to": "deleted", "health": None, "line": changes["light"]["line"],
                                                   "mode": "soft", "file": "deleted/2027-01.md"}
    assert "light" not in memories(aged_store)
    kept = memoryfile.load(aged_store / "deleted" / "2027-01.md")
    assert not kept.issues
    gone = kept.find("light")
    assert gone.text == "Low weight memory" and gone.get("deleted_at") == "2027-01-21T00:00:00Z"
    assert gone.get("status") == "archived" and gone.section == "General"
    assert (aged_store / "deleted").stat().st_mode & 0o777 == 0o700
    assert run("health", "check").returncode == 0


def test_hard_delete_only_when_asked(run, aged_store):
    lifecycle(run, "2026-11-21T00:00:00Z")
    changes = lifecycle(run, "2027-01-21T00:00:00Z", "--hard")
    assert changes["light"]["mode"] == "hard" and "file" not in changes["light"]
    assert "light" not in memories(aged_store)
    assert not (aged_store / "deleted").exists()
    record = [r for r in log(aged_store) if r["change"] == "delete"]
    assert record == [{"ts": "2027-01-21T00:00:00Z", "action": "lifecycle", "change": "delete", "id": "light",
                       "from": "archived", "to": "deleted", "health": record[0]["health"], "mode": "hard",
                       "summary": "Low weight memory"}]


def test_archived_by_hand_without_a_date_starts_the_clock(run, aged_store):
    path = aged_store / "MEMORY.md"
    path.write_text(path.read_text().replace("id: heavy\n", "id: heavy\nstatus: archived\n"))
    changes = lifecycle(run, "2027-06-01T00:00:00Z")
    assert changes["heavy"]["action"] == "stamp"
    assert memories(aged_store)["heavy"].get("status_changed_at") == "2027-06-01T00:00:00Z"
    assert lifecycle(run, "2027-08-01T00:00:00Z")["heavy"]["action"] == "delete"


def test_unreadable_status_is_left_for_a_person(run, aged_store):
    path = aged_store / "MEMORY.md"
    path.write_text(path.read_text().replace("id: light\n", "id: light\nstatus: forgotten\n"))
    assert "light" not in lifecycle(run, "2027-06-01T00:00:00Z")
    assert memories(aged_store)["light"].get("status") == "forgotten"


def test_thresholds_come_from_memctl_toml(run, aged_store):
    (aged_store / "memctl.toml").write_text("[governance]\nlow_priority_below = 0.55\narchive_below = 0.0\n")
    (aged_store / "memctl.toml").chmod(0o600)
    changes = lifecycle(run, "2026-11-01T00:00:00Z")  # day 0: plain 0.525 < 0.55, heavy 0.6 is not
    assert changes["plain"]["to"] == "low_priority" and changes["light"]["to"] == "low_priority"
    assert "heavy" not in changes and "core-flag" not in changes
    # the hand-written note (0.525 too) gains a complete block to hold its status
    hand = [m for i, m in memories(aged_store).items() if i.startswith("md-")][0]
    assert hand.get("status") == "low_priority" and hand.text == "A note typed by hand, with no block and no date."
    assert {"summary", "memory_class", "scope", "status_changed_at"} <= set(hand.fields)
    check = run("health", "check")
    assert check.returncode == 0 and check.stdout == b"", check.stdout


def test_review_on_a_missing_store_creates_nothing(run, tmp_path):
    nowhere = tmp_path / "nowhere"
    assert run("review", "lifecycle", store=nowhere).returncode == 2  # a cron line naming the wrong store fails
    assert run("review", "pending", store=nowhere).returncode == 2  # a read of no store: an error, not "none"
    assert run("review", "confirm", "x", store=nowhere).returncode == 2
    assert run("review", "reject", "x", store=nowhere).returncode == 2
    assert not nowhere.exists()
