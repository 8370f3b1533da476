"""`memctl health`: scores and the store check (git fsck for memory), through real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from conftest import FIXTURES, snapshot
from memctl.cli import cli


@pytest.fixture
def demo(run, store_dir):
    env = {"MEMCTL_NOW": "2026-11-20T00:00:00Z"}
    assert run("ingest", str(FIXTURES / "demo" / "chat.jsonl"), env=env).returncode == 0
    assert run("ingest", str(FIXTURES / "demo" / "MEMORY.md"), env=env).returncode == 0
    return store_dir


def problems(run, *args):
    result = run("health", "check", "--json", *args)
    return result.returncode, [orjson.loads(line) for line in result.stdout.splitlines()]


def edit(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_demo_store_is_healthy_and_bare_health_runs_the_check(run, demo):
    for args in (("health",), ("health", "check")):
        result = run(*args)
        assert result.returncode == 0 and result.stdout == b"" and result.stderr == b"memctl: health: ok\n"


def test_each_problem_is_one_line_with_file_and_line(run, demo):
    edit(demo / "MEMORY.md", "memory_class: episodic\nscope: project:kestrel", "memory_class: rumour\nscope: project:kestrel")
    with open(demo / "sessions" / "2026-11-02-planning.jsonl", "ab") as fh:
        fh.write(b'{"id": "s1-01", "text": "same id again"}\n{not json}\n')
    result = run("health", "check")
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    bad_line = (demo / "MEMORY.md").read_text().splitlines().index("memory_class: rumour") + 1
    assert f"MEMORY.md:{bad_line}: field 'memory_class': must be one of policy, episodic, mixed" in lines
    assert any(line.startswith("sessions/2026-11-02-planning.jsonl:") and "id 's1-01' is not unique: also at "
               "sessions/2026-11-02-planning.jsonl:1" in line for line in lines)
    assert any(line.startswith("sessions/2026-11-02-planning.jsonl:") and "not valid JSON" in line for line in lines)
    assert result.stderr == b"memctl: health: 3 error(s), 0 warning(s)\n"


def test_json_schema(run, demo):
    (demo / "index_state.json").write_bytes(b"[1, 2")
    (demo / "index_state.json").chmod(0o600)
    code, found = problems(run)
    assert code == 1
    assert found == [{"file": "index_state.json", "line": 1, "severity": "error", "code": "parse",
                      "message": found[0]["message"], "fixable": False}]
    assert found[0]["message"].startswith("not valid JSON")


def test_chain_damage_made_by_hand(run, demo):
    path = demo / "MEMORY.md"
    with open(path, "a") as fh:
        fh.write("\n## Loops\n\n<!-- memory\nid: a\nsummary: A\nmemory_class: episodic\nscope: global\n"
                 "supersedes: [\"b\"]\n-->\nA\n\n<!-- memory\nid: b\nsummary: B\nmemory_class: episodic\n"
                 "scope: global\nsupersedes: [\"a\", \"gone\"]\n-->\nB\n")
    code, found = problems(run)
    assert code == 1
    by_code = {p["code"]: p for p in found}
    assert by_code["cycle"]["message"] in ("supersedes cycle: a -> b -> a", "supersedes cycle: b -> a -> b")
    assert by_code["dangling-link"]["message"] == "'b' supersedes 'gone', which is in no memory file (deleted by hand?)"
    assert by_code["superseded-current"]["severity"] == "warning"


def test_topic_conflicts_are_warnings_unless_strict(run, demo):
    note = '{"text": "Kestrel also keeps SQLite for tests", "canonical_topic": "database:choice"}\n'
    assert run("ingest", "--kind", "memory", "--add", "-", input=note).returncode == 0
    result = run("health", "check")
    assert result.returncode == 0
    assert "warning: canonical_topic 'database:choice' has 2 current memories: 'mem-kestrel-db', " \
           in result.stdout.decode()
    assert run("health", "check", "--strict").returncode == 1


@pytest.mark.process
def test_fix_repairs_what_is_safe_and_dry_run_does_not(run, demo):
    (demo / "MEMORY.md").chmod(0o644)
    (demo / "sessions").chmod(0o755)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (demo / f".MEMORY.md.{dead.pid}.tmp").write_bytes(b"half a write")
    (demo / f".MEMORY.md.{dead.pid}.tmp").chmod(0o600)
    held = run("ingest", "--pending", "--ttl", "1", "-", input="Waiting for a yes", env={"MEMCTL_NOW": "2026-01-01T00:00:00Z"})
    assert held.returncode == 0
    (demo / ".journal").mkdir(mode=0o700)   # after the ingest: any writer would roll it back first
    (demo / ".journal" / "journal.json").write_bytes(b'{"ops": []}')
    (demo / ".journal" / "journal.json").chmod(0o600)

    code, found = problems(run)
    assert code == 1
    assert {p["code"] for p in found} == {"permissions", "temp-file", "journal", "pending-expired"}
    assert all(p["fixable"] for p in found)

    before = snapshot(demo)
    dry = run("health", "check", "--fix", "--dry-run")
    assert dry.returncode == 1 and dry.stderr.count(b"memctl: would fix: ") == 5
    assert snapshot(demo) == before and (demo / "MEMORY.md").stat().st_mode & 0o777 == 0o644

    fixed = run("health", "check", "--fix")
    assert fixed.returncode == 0 and fixed.stdout == b"", fixed.stdout
    assert b"fixed: MEMORY.md: mode set to 0600" in fixed.stderr
    assert b"fixed: sessions: mode set to 0700" in fixed.stderr
    assert b"fixed: .journal: rolled back the unfinished transaction" in fixed.stderr
    assert b"dropped '" in fixed.stderr
    assert not (demo / ".journal").exists() and not list(demo.glob(".*.tmp"))
    assert (demo / "pending.jsonl").read_bytes() == b""
    assert run("health").returncode == 0


def test_pending_and_config_problems(run, demo):
    with open(demo / "pending.jsonl", "ab") as fh:
        fh.write(b'{"id": "p1", "text": "x", "expires_at": "soon"}\n{"id": "p2", "text": "cut')
    (demo / "pending.jsonl").chmod(0o600)
    (demo / "memctl.toml").write_text("[ingest]\nfilter_noise = true\n[governance]\nconflict_top_k = \n")
    (demo / "memctl.toml").chmod(0o600)
    code, found = problems(run)
    assert code == 1
    where = {(p["file"], p["line"]): p["message"] for p in found}
    assert where[("pending.jsonl", 1)] == "'p1': field 'expires_at' must be an ISO 8601 time"
    assert where[("pending.jsonl", 2)].startswith("last line has no newline")
    assert ("memctl.toml", 4) in where and "not valid TOML" in where[("memctl.toml", 4)]


def test_no_store_and_usage_errors_exit_2(run, tmp_path):
    missing = run("health", "check", store=tmp_path / "nowhere")
    assert missing.returncode == 2 and b"no store at" in missing.stderr
    assert not (tmp_path / "nowhere").exists()
    assert run("health", "check", "--dry-run").returncode == 2
    assert run("health", "scores", "--sort", "size").returncode == 2


def test_check_changes_nothing(run, demo):
    before = snapshot(demo)
    assert run("health", "check").returncode == 0
    assert snapshot(demo) == before


def test_scores_sorted_with_parts(run, demo):
    env = {"MEMCTL_NOW": "2026-12-04T00:00:00Z"}
    result = run("health", "scores", "--json", env=env)
    assert result.returncode == 0
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [r["health"] for r in rows] == sorted(r["health"] for r in rows)
    role = next(r for r in rows if r["id"] == "mem-about-role")
    assert set(role) == {"id", "line", "section", "status", "core", "health", "recency_decay", "access_frequency",
                         "user_weight", "access_count", "age_days", "summary"}
    assert role["user_weight"] == 8 and role["status"] == "active" and not role["core"]
    assert next(r for r in rows if r["id"] == "mem-answer-language")["core"] is True
    by_age = [orjson.loads(line)["id"] for line in run("health", "scores", "--json", "--sort", "age", env=env).stdout.splitlines()]
    assert by_age[:2] == ["mem-about-role", "mem-answer-language"]
    text = run("health", "scores", "--sort", "id", env=env).stdout.decode().splitlines()
    by_id = [line.split("\t")[5].rstrip("*") for line in text]  # a core memory's id ends in *
    assert by_id == sorted(by_id) and len(by_id) == len(rows)
    assert any(line.split("\t")[5] == "mem-answer-language*" for line in text)


def test_scores_of_an_empty_store_exit_1(run, store_dir):
    store_dir.mkdir(mode=0o700)
    result = run("health", "scores")
    assert result.returncode == 1 and result.stdout == b""


def test_every_review_and_health_subcommand_has_help_with_examples(run):
    for group in ("review", "health"):
        for name in cli.get_command(None, group).commands:
            result = run(group, name, "--help")
            assert result.returncode == 0
            text = result.stdout.decode()
            assert text.startswith(f"Usage: memctl {group} {name}")
            assert "Examples:" in text and f"memctl {group} {name}" in text.split("Examples:")[1]


@pytest.mark.process
def test_governance_commands_start_without_heavy_imports():
    # The click group, not main(): main() ends the process once the command is done.
    code = ("import sys\nfrom memctl.cli import cli\n"
            "try:\n    cli.main(['--help'], prog_name='memctl')\nexcept SystemExit:\n    pass\n"
            "import memctl.governance.governance, memctl.governance.lifecycle, memctl.governance.health, memctl.governance.review, memctl.check\n"
            "heavy = {'numpy', 'torch', 'tiktoken', 'tantivy', 'sqlite_utils', 'sentence_transformers'}\n"
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.stdout.strip().endswith("[]"), out.stdout + out.stderr


def test_an_ordinary_ingest_is_no_warning_but_a_rebuild_to_come_is(run, demo):
    assert run("index").returncode == 0
    assert problems(run) == (0, [])
    assert run("ingest", "-", input='{"text": "a message after the index was built"}').returncode == 0
    assert problems(run) == (0, [])  # the next search updates the index by itself, re-reading two files
    (demo / "memctl.toml").write_text("[embedding]\nwith_previous_turn = false\n")
    (demo / "memctl.toml").chmod(0o600)
    code, found = problems(run)
    assert code == 0
    assert [(p["file"], p["code"], p["severity"], p["fixable"]) for p in found] == [
        (".index", "index", "warning", True)]
    assert "the next search rebuilds it" in found[0]["message"]
    fixed = run("health", "check", "--fix")
    assert b".index: brought up to date with the files" in fixed.stderr
    assert problems(run) == (0, [])


@pytest.mark.parametrize("file, content, rejected_by, expected", [
    ("index_state.json", b'{\n  "turns": [],\n  "proportions": {"a": "b"}\n}\n', ("state", "show"),
     "index_state.json:3: field 'proportions': must be an object of section: number"),
    ("memctl.toml", b'[ingest]\nfilter_noise = true\ndefault_scope = "nonsense"\n', ("search", "kestrel"),
     "memctl.toml:3: ingest.default_scope must be global, project:<name>, lang:<name> or user:<name>, got 'nonsense'"),
    ("memctl.toml", b'[retrieval]\nhard_min_score = nan\n', ("search", "kestrel"),
     "memctl.toml:2: retrieval.hard_min_score must be a finite number, got nan"),
    ("pending.jsonl", b'{"id": "p1", "section": "S", "text": "a note", "fields": {"scope": "team:x"}, '
                      b'"pending_since": "2026-11-19T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}\n',
     ("review", "confirm", "p1"), "pending.jsonl:1: 'p1': field 'scope': must be global, project:<name>, lang:<name> or user:<name>"),
])
def test_health_reports_what_other_commands_reject(run, demo, file, content, rejected_by, expected):
    (demo / file).write_bytes(content)
    (demo / file).chmod(0o600)
    refused = run(*rejected_by)
    assert refused.returncode == 2 and refused.stderr.count(b"\n") == 1, refused.stderr
    result = run("health", "check")
    assert result.returncode == 1
    assert any(line.startswith(expected) for line in result.stdout.decode().splitlines()), result.stdout


def test_a_topic_link_to_no_topic_is_a_warning_a_merged_topics_link_is_not(run, store_dir):
    from test_topics import HOTEL, WEATHER, session_lines

    run("ingest", "-", input=session_lines(WEATHER + HOTEL))
    assert run("split", "--session", "s1", "--force", "--keep-recent", "0").returncode == 0
    first, second = sorted(p.stem for p in (store_dir / "topics").glob("t-*.jsonl"))[:2]
    # As review daily leaves them: a related pair, and the link of a topic merged into another (its file gone).
    links = [{"from": first, "to": second, "kind": "related", "at": "2026-11-20T00:00:00Z"},
             {"from": "t-merged0001", "to": first, "kind": "merged-into", "at": "2026-11-20T00:00:00Z"}]
    (store_dir / "topics" / "links.jsonl").write_bytes(b"".join(orjson.dumps(link) + b"\n" for link in links))
    (store_dir / "topics" / "links.jsonl").chmod(0o600)  # as memctl writes it
    assert problems(run) == (0, [])
    (store_dir / "topics" / f"{second}.jsonl").unlink()  # deleted by hand
    code, found = problems(run)
    assert code == 0
    assert [(p["file"], p["line"], p["code"], p["severity"], p["message"]) for p in found] == [
        ("topics/links.jsonl", 1, "dangling-link", "warning", f"field 'to': no topic {second} (its file is gone)")]


# -- small things a user hit (#31 item 9) ------------------------------------------------------------

def test_a_memctl_toml_a_person_wrote_with_umask_022_is_a_warning_naming_the_fix(run, demo):
    """Every night in cron `memctl health` failed (exit 1) on it."""
    (demo / "memctl.toml").write_text("[ingest]\ndefault_section = \"Notes\"\n")
    (demo / "memctl.toml").chmod(0o644)
    result = run("health")
    assert result.returncode == 0, result.stdout
    assert result.stdout.decode() == (f"memctl.toml: warning: readable by others (mode 0644); to keep the store "
                                       f"private: chmod 600 {demo / 'memctl.toml'}, or memctl health check --fix\n")
    assert run("health", "check", "--strict").returncode == 1
    assert run("health", "check", "--fix").returncode == 0
    assert (demo / "memctl.toml").stat().st_mode & 0o777 == 0o600
    (demo / "memctl.toml").chmod(0o666)  # others may change the store's settings: an error still
    assert run("health").returncode == 1


@pytest.mark.parametrize("tail, kept", [
    (b'{"id": "p9", "text": "whole but for its newline", "expires_at": "2999-01-01T00:00:00Z"}', True),
    (b'{"id": "p9", "text": "cut sho', False),
])
def test_fix_ends_a_torn_last_line(run, demo, tail, kept):
    path = demo / "pending.jsonl"
    with open(path, "ab") as fh:
        fh.write(tail)
    path.chmod(0o600)
    code, found = problems(run)
    (torn,) = [p for p in found if p["file"] == "pending.jsonl"]
    assert (code, torn["code"], torn["fixable"]) == (1, "unterminated", True)
    dry = run("health", "check", "--fix", "--dry-run")
    assert path.read_bytes().endswith(tail) and b"would fix: pending.jsonl:" in dry.stderr
    fixed = run("health", "check", "--fix")
    assert fixed.returncode == 0, fixed.stdout
    said = "ended the last line" if kept else f"cut the torn last line ({len(tail)} bytes)"
    assert f"fixed: pending.jsonl:{torn['line']}: {said}".encode() in fixed.stderr
    assert path.read_bytes().endswith(tail + b"\n") if kept else tail not in path.read_bytes()
    assert run("health").returncode == 0


def test_a_symlink_is_reported_once(run, demo, tmp_path):
    """Named by the link check and again by each check that stopped at it."""
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"")
    (demo / "sessions" / "zz.jsonl").symlink_to(outside)
    (demo / "topics").symlink_to(tmp_path)
    put = run("cache", "put", "--scope", "s1", "--tool", "t", "--args", "{}", "--input", "-", input="out")
    assert put.returncode == 0
    (demo / "cache" / "s1" / "events").unlink(missing_ok=True)  # a put counts nothing; a get writes it
    (demo / "cache" / "s1" / "events").symlink_to(outside)
    result = run("health", "check")
    assert result.returncode == 1
    assert result.stdout.decode().splitlines() == [
        f"cache/s1/events: a symbolic link (to {outside}); memctl follows none: replace it with the real "
        "folder or file",
        f"sessions/zz.jsonl: a symbolic link (to {outside}); memctl follows none: replace it with the real "
        "folder or file",
        f"topics: a symbolic link (to {tmp_path}); memctl follows none: replace it with the real folder or file"]
