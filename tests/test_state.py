"""memctl state (W1-W5): the section-hit window, the plan, the topic file.

Real stores in tmp_path, real `python -m memctl` processes for the CLI, real
processes for the concurrency test. No mocks.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_in_process
from memctl.window import state as S
from memctl.errors import InputError
from memctl.store.store import Store
from conftest import runtime_of

WORKTREE = str(Path(__file__).resolve().parents[1])
NOW = "2026-02-08T12:00:00Z"

MEMORY_MD = """\
## 重要決定

- 用 PostgreSQL 取代 MySQL

## 關於老蔡

- 老蔡住在台北

## 待辦

- 寫 state 的測試

## 關於我

- 我喜歡喝茶

## About Bob

Bob prefers tea.

## Decisions

Ship on Fridays.
"""

DESIGN_FIELDS = {"window_size", "dominant_threshold", "turns", "proportions", "current_topic",
                 "topic_summary", "last_updated", "miss_count"}


def test_runs_the_worktree_code():
    assert S.__file__.startswith(WORKTREE), "put the worktree first on PYTHONPATH"


@pytest.fixture
def store(tmp_path) -> Store:
    root = tmp_path / "store"
    root.mkdir()
    (root / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    return Store(root)


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", NOW)
    for name in list(os.environ):
        if name.startswith("MEMCTL_") and name != "MEMCTL_NOW":
            monkeypatch.delenv(name)


def memctl(store: Store, *args: str, input: bytes | str | None = None, env: dict | None = None
           ) -> subprocess.CompletedProcess:
    """Run the CLI of the worktree in this process, with the test's MEMCTL_NOW (the pinned_clock
    fixture) unless `env` says otherwise."""
    return run_in_process(store.root, *args, input=input if input is not None else b"",
                          env={"MEMCTL_NOW": os.environ["MEMCTL_NOW"], **(env or {})})


def state_json(store: Store) -> dict:
    return orjson.loads(store.state_file.read_bytes())


def lines(result: subprocess.CompletedProcess) -> list[str]:
    return result.stdout.decode().splitlines()


# -- the design's worked example (000 §五) --------------------------------------

def test_worked_example_five_turns(store):
    for hits in (["重要決定"], ["重要決定", "待辦"], ["重要決定"], ["重要決定"], ["重要決定"]):
        result = memctl(store, "state", "record", *[f"--hit={h}" for h in hits])
        assert result.returncode == 0, result.stderr

    shown = memctl(store, "state", "show", "--json")
    assert shown.returncode == 0
    data = orjson.loads(shown.stdout)
    assert data["proportions"] == {"重要決定": 0.833, "待辦": 0.167}
    assert data["dominant"] == ["重要決定"]
    assert [t["turn_id"] for t in data["turns"]] == [1, 2, 3, 4, 5]
    assert state_json(store)["proportions"] == {"重要決定": 0.833, "待辦": 0.167}  # as stored

    # The next turn's plan: only the dominant section, plus what the message names.
    plan = memctl(store, "state", "plan", "今天的天氣怎麼樣？")
    assert plan.returncode == 0 and lines(plan) == ["重要決定"]
    plan = memctl(store, "state", "plan", "老蔡上次說了什麼？")
    assert lines(plan) == ["重要決定", "關於老蔡"]
    plan = memctl(store, "state", "plan", "--json", "待辦清單還剩什麼")
    assert [orjson.loads(line) for line in lines(plan)] == [
        {"section": "重要決定", "reason": "dominant", "matched": [], "proportion": 0.833},
        {"section": "待辦", "reason": "keyword", "matched": ["待辦"], "proportion": 0.167},
    ]


def test_no_dominant_section_plans_keyword_matches_only(store):
    S.record(runtime_of(store), ["重要決定"])
    S.record(runtime_of(store), ["待辦"])            # 0.5 / 0.5: nothing reaches 0.7
    assert S.plan(runtime_of(store), "今天天氣好").names == []
    assert S.plan(runtime_of(store), "about Bob and 待辦").names == ["待辦", "About Bob"]  # MEMORY.md order
    result = memctl(store, "state", "plan", "今天天氣好")
    assert result.returncode == 1 and result.stdout == b""
    assert b"no section to search" in result.stderr


def test_plan_without_state_uses_keywords(store):
    plan = S.plan(runtime_of(store), "Remind me about Bob")
    assert not plan.has_state and plan.dominant == []
    assert [p.as_dict() for p in plan.sections] == [
        {"section": "About Bob", "reason": "keyword", "matched": ["about bob", "bob"], "proportion": None}]
    assert not store.state_file.exists()


def test_plan_reads_the_message_from_stdin(store):
    result = memctl(store, "state", "plan", "-", input="問問 Bob 吧\n")
    assert result.returncode == 0 and lines(result) == ["About Bob"]


def test_dominant_section_gone_from_memory_md_is_not_planned(store):
    for _ in range(3):
        S.record(runtime_of(store), ["Old section"])
    plan = S.plan(runtime_of(store), "hello")
    assert plan.dominant == ["Old section"] and plan.names == []


# -- the window -----------------------------------------------------------------

@pytest.mark.parametrize("window", [3, 5, 10])
def test_window_keeps_the_last_n_turns(store, window):
    S.configure(runtime_of(store), window=window)
    for i in range(1, 13):
        result = S.record(runtime_of(store), [f"s{i % 4}"])
        assert result.turn.turn_id == i
        assert len(result.state.turns) == min(i, window)
    data = state_json(store)
    assert data["window_size"] == window
    assert [t["turn_id"] for t in data["turns"]] == list(range(13 - window, 13))
    counts: dict[str, int] = {}
    for turn in data["turns"]:
        for s in turn["sections_hit"]:
            counts[s] = counts.get(s, 0) + 1
    assert data["proportions"] == {s: round(n / window, 3) for s, n in counts.items()}


def test_new_state_takes_window_and_threshold_from_memctl_toml(store):
    (store.root / "memctl.toml").write_text("[state]\nwindow_size = 3\ndominant_threshold = 0.8\n")
    for _ in range(4):
        S.record(runtime_of(store), ["待辦"])
    data = state_json(store)
    assert (data["window_size"], data["dominant_threshold"]) == (3, 0.8)
    assert [t["turn_id"] for t in data["turns"]] == [2, 3, 4]


def test_config_sets_and_validates(store):
    for i in range(10):
        S.record(runtime_of(store), ["重要決定" if i < 7 else "待辦"])
    assert memctl(store, "state", "config", "--window", "10").returncode == 0
    before = store.state_file.read_bytes()
    for args, message in ((["--window", "4"], b"--window: must be 3, 5 or 10"),
                          (["--threshold", "0"], b"--threshold: must be a number in (0, 1]"),
                          (["--threshold", "1.5"], b"--threshold: must be a number in (0, 1]"),
                          (["--threshold", "-0.2"], b"--threshold: must be a number in (0, 1]")):
        result = memctl(store, "state", "config", *args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(b"memctl: error: " + message), result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert store.state_file.read_bytes() == before

    result = memctl(store, "state", "config", "--window", "3", "--threshold", "1", "--json")
    assert result.returncode == 0
    assert orjson.loads(result.stdout) == {"window_size": 3, "dominant_threshold": 1.0}
    data = state_json(store)
    assert [t["turn_id"] for t in data["turns"]] == [8, 9, 10]   # shrunk at once
    assert data["proportions"] == {"待辦": 1.0}

    dry = memctl(store, "state", "config", "--window", "5", "--dry-run")
    assert dry.returncode == 0 and state_json(store)["window_size"] == 3
    assert lines(memctl(store, "state", "config")) == ["window_size 3", "dominant_threshold 1.0"]


def test_bad_state_settings_in_memctl_toml_name_the_file_and_line(store):
    (store.root / "memctl.toml").write_text("[state]\nwindow_size = 4\n")
    result = memctl(store, "state", "record", "--hit", "待辦")
    assert result.returncode == 2
    assert b"memctl.toml:2: state.window_size must be 3, 5 or 10" in result.stderr
    assert not store.state_file.exists()


# -- miss counts and suggestions ----------------------------------------------

def test_miss_count_and_suggestions(store):
    sections = S.memory_sections(store)
    assert sections == ["重要決定", "關於老蔡", "待辦", "關於我", "About Bob", "Decisions"]
    S.record(runtime_of(store), ["重要決定", "待辦"])
    S.record(runtime_of(store), ["重要決定"])
    third = S.record(runtime_of(store), ["重要決定"])
    assert third.state.miss_count == {"重要決定": 0, "關於老蔡": 3, "待辦": 2, "關於我": 3,
                                      "About Bob": 3, "Decisions": 3}
    assert [s.section for s in third.suggestions] == ["關於老蔡", "關於我", "About Bob", "Decisions"]

    # Through the CLI: suggestions are the data on stdout, one a line.
    result = memctl(store, "state", "record", "--hit", "關於老蔡")
    assert result.returncode == 0
    assert lines(result) == [
        f"{s}: not used in the last {n} turns; consider removing it from MEMORY.md or merging it "
        "into another section" for s, n in (("待辦", 3), ("關於我", 4), ("About Bob", 4), ("Decisions", 4))]
    assert state_json(store)["miss_count"]["關於老蔡"] == 0
    assert state_json(store)["miss_count"]["重要決定"] == 1


def test_miss_threshold_from_toml_and_removed_sections(store):
    (store.root / "memctl.toml").write_text("[state]\nmiss_threshold = 1\n")
    first = S.record(runtime_of(store), ["Decisions"])
    assert first.suggestions[0].text.startswith("重要決定: not used in the last turn; consider removing")
    assert {s.section for s in first.suggestions} == {"重要決定", "關於老蔡", "待辦", "關於我", "About Bob"}
    store.memory_md.write_text("## Decisions\n\nShip on Fridays.\n\n## New\n\nx\n", encoding="utf-8")
    second = S.record(runtime_of(store), ["Decisions"])
    assert second.state.miss_count == {"Decisions": 0, "New": 1}  # gone sections are dropped


def test_unknown_sections_are_recorded_and_reported(store):
    result = memctl(store, "state", "record", "--hit", "待辦", "--hit", "Nonexistent", "--json")
    assert result.returncode == 0
    out = orjson.loads(result.stdout)
    assert out["sections_hit"] == ["待辦", "Nonexistent"]
    assert out["unknown_sections"] == ["Nonexistent"]
    assert b"warning: not a heading of MEMORY.md: Nonexistent" in result.stderr


def test_a_turn_with_no_hits_counts_as_a_miss_for_all(store):
    S.record(runtime_of(store), ["待辦"])
    result = S.record(runtime_of(store), [])
    assert result.turn.sections_hit == []
    assert result.state.proportions == {"待辦": 1.0}
    assert result.state.miss_count["待辦"] == 1 and result.state.miss_count["重要決定"] == 2


# -- search output piped in (W5) -----------------------------------------------

def _result(section, n=1):
    return {"id": f"mem-{n}", "kind": "memory", "text": "t", "score": 0.9, "source": "MEMORY.md",
            "section": section, "session": None, "ts": NOW}


@pytest.mark.process
def test_piped_search_output_is_recorded(store):
    producer_lines = [_result("待辦", 1), _result(None, 2), _result("重要決定", 3), _result("待辦", 4),
                      {"query_id": "q2", "results": [_result("", 5), _result("About Bob", 6)]},
                      {"query_id": "q3", "results": []}]
    script = ("import sys, json\n"
              f"for obj in {producer_lines!r}:\n"
              "    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + '\\n')\n")
    env = {**os.environ, "PYTHONPATH": WORKTREE}
    producer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    consumer = subprocess.run([sys.executable, "-m", "memctl", "--store", str(store.root),
                               "state", "record", "-", "--hit", "Decisions", "--json"],
                              stdin=producer.stdout, capture_output=True, env=env, timeout=60)
    producer.stdout.close()
    assert producer.wait() == 0
    assert consumer.returncode == 0, consumer.stderr
    assert orjson.loads(consumer.stdout)["sections_hit"] == ["Decisions", "待辦", "重要決定", "About Bob"]
    assert state_json(store)["turns"][0]["sections_hit"] == ["Decisions", "待辦", "重要決定", "About Bob"]


def test_empty_search_output_records_an_empty_turn(store):
    result = memctl(store, "state", "record", "-", input="")
    assert result.returncode == 0
    assert state_json(store)["turns"][0]["sections_hit"] == []


@pytest.mark.parametrize("bad_line, message", [
    ("not json at all", b"<stdin>:2: not valid JSON"),
    ('["a list"]', b"<stdin>:2: expected a JSON object"),
    ('{"id": "x", "text": "no section field"}', b"<stdin>:2: field 'section': missing"),
    ('{"id": "x", "section": 7}', b"<stdin>:2: field 'section': must be text or null"),
    ('{"query_id": 1, "results": {"section": "x"}}', b"<stdin>:2: field 'results': must be a list"),
    ('{"query_id": 1, "results": [{"section": "x"}, 3]}', b"<stdin>:2: field 'results[1]'"),
])
def test_malformed_search_output_is_rejected(store, bad_line, message):
    S.record(runtime_of(store), ["待辦"])
    before = store.state_file.read_bytes()
    data = orjson.dumps(_result("重要決定")).decode() + "\n" + bad_line + "\n"
    result = memctl(store, "state", "record", "-", input=data)
    assert result.returncode == 2
    assert result.stderr.startswith(b"memctl: error: " + message), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert store.state_file.read_bytes() == before


def test_hits_from_search_output_library():
    data = b'{"section": "A"}\n\n{"query_id": 1, "results": [{"section": "B"}, {"section": "A"}]}\n'
    assert S.hits_from_search_output(data) == ["A", "B"]
    with pytest.raises(InputError) as info:
        S.hits_from_search_output(b'{"section": "A"}\n{', source="results.jsonl")
    assert str(info.value).startswith("results.jsonl:2:")


# -- concurrency: no lost turn --------------------------------------------------

def _record_many(args):
    root, worker, count = args
    store = Store(root)
    return [S.record(runtime_of(store), [f"w{worker}"]).turn.turn_id for _ in range(count)]


@pytest.mark.process
def test_concurrent_records_lose_no_turn(store):
    S.configure(runtime_of(store), window=10)
    env = {**os.environ, "PYTHONPATH": WORKTREE}
    cli_runs = [subprocess.Popen([sys.executable, "-m", "memctl", "--store", str(store.root), "state",
                                  "record", "--hit", "cli", "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                for _ in range(3)]
    with multiprocessing.get_context("fork").Pool(6) as pool:
        per_worker = pool.map(_record_many, [(str(store.root), w, 10) for w in range(6)])
    cli_ids = []
    for proc in cli_runs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        cli_ids.append(orjson.loads(out)["turn_id"])

    library_ids = [i for ids in per_worker for i in ids]
    assert all(ids == sorted(ids) for ids in per_worker)   # each process sees its own turns in order
    all_ids = library_ids + cli_ids
    assert sorted(all_ids) == list(range(1, 64))           # distinct and consecutive: none lost
    data = state_json(store)
    assert [t["turn_id"] for t in data["turns"]] == list(range(54, 64))
    assert abs(sum(data["proportions"].values()) - 1) < 0.01
    assert not (store.root / ".journal").exists()


# -- corrupt state ----------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b'{"window_size": 5,\n  "turns": [\n', b"index_state.json:3: not valid JSON"),
    (b"", b"index_state.json:1: not valid JSON"),
    (b"[1, 2]", b"index_state.json: expected a JSON object"),
    (b'{"window_size": 4}', b"index_state.json: field 'window_size': must be 3, 5 or 10"),
    (b'{"dominant_threshold": 0}', b"field 'dominant_threshold': must be a number in (0, 1]"),
    (b'{"turns": {}}', b"field 'turns': must be a list"),
    (b'{"turns": [{"turn_id": 2, "ts": "x", "sections_hit": []}, {"turn_id": 2, "ts": "x", '
     b'"sections_hit": []}]}', b"field 'turns[1].turn_id': must be a whole number above"),
    (b'{"turns": [{"turn_id": 1, "ts": "x", "sections_hit": "A"}]}',
     b"field 'turns[0].sections_hit': must be a list of section names"),
    (b'{"miss_count": {"A": -1}}', b"field 'miss_count'"),
    (b'{"current_topic": 3}', b"field 'current_topic': must be text"),
    (b'{"surprise": 1}', b"unknown field 'surprise'"),
])
def test_corrupt_state_is_an_error_never_reset(store, content, message):
    store.state_file.write_bytes(content)
    for args in (["record", "--hit", "待辦"], ["show"], ["plan", "待辦"], ["config", "--window", "3"]):
        result = memctl(store, "state", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(b"memctl: error: " + str(store.state_file).encode()), result.stderr
        assert message in result.stderr, result.stderr
        assert b"memctl state reset" in result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert store.state_file.read_bytes() == content
    with pytest.raises(InputError):
        S.load_state(store)


def test_reset_repairs_a_corrupt_state(store):
    store.state_file.write_bytes(b"{oops")
    result = memctl(store, "state", "reset", "--yes")
    assert result.returncode == 0, result.stderr
    assert b"unreadable" in result.stderr
    assert memctl(store, "state", "record", "--hit", "待辦").returncode == 0
    assert state_json(store)["turns"][0]["turn_id"] == 1


def test_missing_state_means_no_state_yet(store):
    assert S.load_state(store) is None
    assert memctl(store, "state", "reset", "--yes").returncode == 0
    assert not store.state_file.exists()      # nothing to reset, nothing created
    result = memctl(store, "state", "show")
    assert result.returncode == 1 and result.stdout == b""
    assert b"no state yet" in result.stderr
    assert memctl(store, "state", "show", "--json").returncode == 1


# -- the state file ------------------------------------------------------------

def test_state_file_has_exactly_the_design_fields(store):
    S.record(runtime_of(store), ["待辦"])
    data = state_json(store)
    assert set(data) == DESIGN_FIELDS
    assert data["turns"] == [{"turn_id": 1, "ts": NOW, "sections_hit": ["待辦"]}]
    assert data["last_updated"] == NOW and data["current_topic"] == "" and data["topic_summary"] == ""
    # Written by a transaction: no journal or temp file left behind.
    assert sorted(p.name for p in store.root.iterdir()) == [".lock", "MEMORY.md", "index_state.json"]


def test_record_dry_run_writes_nothing(store):
    result = memctl(store, "state", "record", "--hit", "待辦", "--dry-run", "--json")
    assert result.returncode == 0
    out = orjson.loads(result.stdout)
    assert out["dry_run"] is True and out["turn_id"] == 1 and out["proportions"] == {"待辦": 1.0}
    assert not store.state_file.exists()
    assert b"dry run" in result.stderr


def test_hand_edited_proportions_do_not_change_decisions(store):
    for _ in range(3):
        S.record(runtime_of(store), ["待辦"])
    data = state_json(store)
    data["proportions"] = {"重要決定": 1.0}
    store.state_file.write_bytes(orjson.dumps(data))
    shown = S.show(runtime_of(store))
    assert shown["proportions"] == {"待辦": 1.0} and shown["dominant"] == ["待辦"]


# -- MEMORY_TOPIC.md (W4) ----------------------------------------------------------

def test_topic_written_after_three_dominant_turns(store):
    topic = store.root / "MEMORY_TOPIC.md"
    first, second = S.record(runtime_of(store), ["重要決定"]), S.record(runtime_of(store), ["重要決定"])
    assert not first.topic_written and not second.topic_written and not topic.exists()
    third = S.record(runtime_of(store), ["重要決定"])
    assert third.topic_written
    text = topic.read_text(encoding="utf-8")
    assert text.startswith("# Current topic: 重要決定\n\n")
    data = state_json(store)
    assert data["current_topic"] == "重要決定"
    assert data["topic_summary"] in text and "\n" not in data["topic_summary"]

    # Still dominant: not rewritten, unless a summary is given.
    assert not S.record(runtime_of(store), ["重要決定"]).topic_written
    result = memctl(store, "state", "record", "--hit", "重要決定", "--summary", "選資料庫：PostgreSQL")
    assert result.returncode == 0
    assert "選資料庫：PostgreSQL" in topic.read_text(encoding="utf-8")
    assert state_json(store)["topic_summary"] == "選資料庫：PostgreSQL"


def test_topic_needs_consecutive_dominant_turns(store):
    (store.root / "memctl.toml").write_text("[state]\ntopic_after_turns = 3\n")
    S.record(runtime_of(store), ["待辦"])
    S.record(runtime_of(store), ["待辦", "重要決定"])   # 待辦 0.67: not dominant here
    assert not S.record(runtime_of(store), ["待辦"]).topic_written   # 0.75 but only 1 dominant turn in a row
    assert not S.record(runtime_of(store), ["待辦"]).topic_written   # 2 in a row
    assert S.record(runtime_of(store), ["待辦"]).topic_written       # 3 in a row
    # A new dominant section takes over once it has led long enough.
    (store.root / "memctl.toml").write_text("[state]\ntopic_after_turns = 1\nwindow_size = 3\n")
    S.configure(runtime_of(store), window=3)
    for _ in range(2):
        S.record(runtime_of(store), ["Decisions"])
    assert state_json(store)["current_topic"] == "待辦"   # 待辦 1/3, Decisions 2/3 < 0.7
    assert S.record(runtime_of(store), ["Decisions"]).topic_written
    assert state_json(store)["current_topic"] == "Decisions"


def test_topic_dry_run_writes_nothing(store):
    S.record(runtime_of(store), ["待辦"])
    S.record(runtime_of(store), ["待辦"])
    result = S.record(runtime_of(store), ["待辦"], dry_run=True)
    assert result.topic_written and not (store.root / "MEMORY_TOPIC.md").exists()
    assert state_json(store)["current_topic"] == ""


# -- reset ---------------------------------------------------------------------------

def test_reset_needs_yes_off_a_terminal(store):
    for _ in range(3):
        S.record(runtime_of(store), ["待辦"])
    S.configure(runtime_of(store), window=10, threshold=0.8)
    before = store.state_file.read_bytes()
    refused = memctl(store, "state", "reset")
    assert refused.returncode == 2 and b"--yes" in refused.stderr
    dry = memctl(store, "state", "reset", "--dry-run")
    assert dry.returncode == 0 and b"would reset" in dry.stderr
    assert store.state_file.read_bytes() == before
    assert (store.root / "MEMORY_TOPIC.md").exists()

    done = memctl(store, "state", "reset", "--yes")
    assert done.returncode == 0
    data = state_json(store)
    assert data["turns"] == [] and data["proportions"] == {} and data["miss_count"] == {}
    assert data["current_topic"] == "" and (data["window_size"], data["dominant_threshold"]) == (10, 0.8)
    assert not (store.root / "MEMORY_TOPIC.md").exists()
    assert S.record(runtime_of(store), ["待辦"]).turn.turn_id == 1


# -- keywords ------------------------------------------------------------------------

def test_heading_keywords():
    assert S.heading_keywords("About Bob") == ["about bob", "bob"]
    assert S.heading_keywords("關於老蔡") == ["關於老蔡", "老蔡"]
    assert S.heading_keywords("關於我") == ["關於我"]          # never the lone 我
    assert S.heading_keywords("時間／近期") == ["時間/近期", "時間", "近期"]
    assert S.heading_keywords("Decisions") == ["decisions", "decision"]
    assert S.heading_keywords("The") == []
    assert S.heading_keywords("Ollama備援") == ["ollama備援", "ollama", "備援"]


@pytest.mark.parametrize("message, expected", [
    ("Tell me about BOB", ["bob"]),
    ("問問bob吧", ["bob"]),                      # CJK next to a Latin word is a boundary
    ("ＢＯＢ 在哪", ["bob"]),                    # full-width letters
    ("Bobby is here", []),                       # not inside another word
    ("bobs", ["bob"]),                           # plural
    ("a decision was made", ["decision"]),
])
def test_latin_matching(message, expected):
    assert S.match_keywords(message, ["bob", "decision"]) == expected


def test_about_words_do_not_match_every_about_section(store):
    assert S.plan(runtime_of(store), "What about the weather today?").names == []
    assert S.plan(runtime_of(store), "我今天很累").names == []                 # 關於我 is not 我
    assert S.plan(runtime_of(store), "關於我的資料").names == ["關於我"]


def test_configured_keywords(store):
    (store.root / "memctl.toml").write_text(
        '[state.keywords]\n"重要決定" = ["決策", "decision"]\n"待辦" = "TODO"\n', encoding="utf-8")
    assert S.plan(runtime_of(store), "上次的決策是什麼").names == ["重要決定"]
    assert S.plan(runtime_of(store), "What Decision did we take?").names == ["重要決定", "Decisions"]
    assert [p.matched for p in S.plan(runtime_of(store), "anything on my todo list?").sections] == [["todo"]]


def test_bad_keywords_table_names_the_file(store):
    (store.root / "memctl.toml").write_text('[state.keywords]\n"待辦" = [1, 2]\n')
    result = memctl(store, "state", "plan", "待辦")
    assert result.returncode == 2
    assert b"memctl.toml: state.keywords.\xe5\xbe\x85\xe8\xbe\xa6 must be a list of non-empty words" \
        in result.stderr


# -- properties ---------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(window=st.sampled_from([3, 5, 10]),
       turns=st.lists(st.lists(st.sampled_from(["A", "B", "C", "重要決定"]), max_size=4), max_size=25))
def test_window_and_proportions_properties(window, turns):
    state = S.State(window_size=window)
    for i, hits in enumerate(turns, 1):
        state.turns.append(S.Turn(state.next_turn_id(), NOW, list(dict.fromkeys(hits))))
        state.recompute()
        assert state.turns[-1].turn_id == i
    assert len(state.turns) == min(len(turns), window)
    kept = [list(dict.fromkeys(h)) for h in turns[-window:]] if turns else []
    total = sum(len(h) for h in kept)
    for section in {s for h in kept for s in h}:
        exact = sum(section in h for h in kept) / total
        assert state.proportions[section] == round(exact, 3)
        assert (section in state.dominant()) == (exact >= state.dominant_threshold)
    if total:
        assert abs(sum(state.proportions.values()) - 1) <= 0.001 * len(state.proportions)
    # What is written reads back the same.
    again = S.parse_state(state.dumps(), "index_state.json")
    assert again.as_dict() == state.as_dict()


# -- help and speed --------------------------------------------------------------------

@pytest.mark.parametrize("command", ["record", "plan", "show", "reset", "config"])
def test_every_command_has_help_with_examples(tmp_path, command):
    result = run_in_process(tmp_path, "state", command, "--help")
    assert result.returncode == 0
    assert b"Examples:" in result.stdout and b"memctl state " + command.encode() in result.stdout


@pytest.mark.process
def test_state_commands_do_not_import_heavy_modules(store):
    S.record(runtime_of(store), ["待辦"])
    code = ("import sys\nsys.argv = ['memctl', '--store', sys.argv[1], 'state', 'plan', '待辦']\n"
            "from memctl.cli import cli\n"
            "try:\n    cli(prog_name='memctl')\nexcept SystemExit:\n    pass\n"
            "heavy = {'numpy', 'tiktoken', 'sqlite_utils', 'torch', 'tantivy', 'sentence_transformers'}\n"
            "print(sorted(heavy & set(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code, str(store.root)], capture_output=True,
                            env={**os.environ, "PYTHONPATH": WORKTREE}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines()[-1] == "[]"
