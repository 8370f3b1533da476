"""`ingest`: every input format, ids, noise, pending, and all-or-nothing bad input."""

from __future__ import annotations

import json
import stat

import orjson
import pytest

from conftest import FIXTURES, snapshot
from memctl.store import memoryfile
from memctl.errors import InputError
from memctl.ingest.ingest import ingest
from memctl.store.sessions import iter_messages
from memctl.store.store import Store
from conftest import runtime_of


def lines_of(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_fixture_chat_lands_in_sessions_and_daily_logs(store_dir):
    store = Store(store_dir)
    result = ingest(runtime_of(store), (FIXTURES / "demo" / "chat.jsonl").read_bytes(), source="chat.jsonl")
    stored = [o.id for o in result.stored]
    assert stored[0] == "s1-01" and len(stored) == 21
    assert {o.reason for o in result.outcomes if o.status == "noise"} == {"greeting", "refusal", "too short"}
    planning = lines_of(store_dir / "sessions" / "2026-11-02-planning.jsonl")
    assert [m["id"] for m in planning] == ["s1-01", "s1-02", "s1-03", "s1-04", "s1-05", "s1-06", "s1-07"]
    assert planning[0] == {"id": "s1-01", "session": "2026-11-02-planning", "role": "user", "speaker": "Mei",
                           "ts": "2026-11-02T09:14:05+08:00",
                           "text": "Morning! I'm starting the Kestrel project today, the inventory service "
                                   "for the bakery chain."}
    log = (store_dir / "memory" / "2026-11-09.md").read_text()
    assert log.startswith("# 2026-11-09\n\n### 14:02:45 Mei · 2026-11-09-debugging · s2-01 · global\n")
    assert "淡水分店的店長是陳小姐" in log
    assert "A timeout at exactly 30 seconds" not in log  # the assistant's words are not the user's log


def test_memory_notes_from_markdown_keep_sections_and_fields(store_dir):
    store = Store(store_dir)
    source = FIXTURES / "demo" / "MEMORY.md"
    ingest(runtime_of(store), source.read_bytes(), source=str(source))
    doc = memoryfile.load(store.memory_md)
    assert doc.sections() == ["About Mei", "重要決定", "待辦"]
    assert doc.find("mem-kestrel-db").get("canonical_topic") == "database:choice"
    todo = [e for e in doc.entries if e.section == "待辦"]
    assert [e.text for e in todo] == ["Book the laptop screen repair before the December 12th Kestrel demo.",
                                      "每天早上七點寄 CSV 庫存報表給淡水分店陳小姐。"]
    assert all(e.annotated and e.get("scope") == "global" and e.get("summary") for e in todo)
    # Ingesting the same notes again stores nothing new.
    again = ingest(runtime_of(store), source.read_bytes(), source=str(source))
    assert again.stored == [] and {o.status for o in again.outcomes} == {"duplicate"}


@pytest.mark.parametrize("payload, fmt", [
    ('[{"role": "user", "content": "I prefer window seats"}, {"role": "assistant", "content": "Noted, window seats."}]',
     "auto"),
    ('{"ID": "telegram_42", "LastUpdate": "2026-11-20T08:00:00Z", "Messages": [\n'
     ' {"Role": "user", "Content": "I prefer window seats"},\n {"role": "assistant", "content": "Noted, window seats."}]}',
     "json"),
    ('{"role": "user", "text": "I prefer window seats"}\n{"role": "assistant", "text": "Noted, window seats."}\n',
     "jsonl"),
    ("I prefer window seats\nNoted, window seats.\n", "text"),
])
def test_every_message_format(store_dir, payload, fmt):
    store = Store(store_dir)
    result = ingest(runtime_of(store), payload.encode(), source="<stdin>", fmt=fmt, session="trip")
    assert len(result.stored) == 2
    texts = [m["text"] for _, _, m in iter_messages(store)]
    assert texts == ["I prefer window seats", "Noted, window seats."]


def test_pcai_session_uses_its_id_and_last_update(store_dir):
    store = Store(store_dir)
    payload = ('{"ID": "telegram_42", "LastUpdate": "2026-11-20T08:00:00Z",\n "Messages": '
               '[{"role": "user", "content": "Remind me about the dentist"}]}')
    ingest(runtime_of(store), payload.encode(), source="history.json")
    (message,) = lines_of(store_dir / "sessions" / "telegram_42.jsonl")
    assert message["session"] == "telegram_42" and message["ts"] == "2026-11-20T08:00:00Z"
    assert (store_dir / "memory" / "2026-11-20.md").exists()


def test_unknown_fields_are_kept_and_openai_parts_joined(store_dir):
    store = Store(store_dir)
    payload = {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}],
               "channel": "tg", "meta": {"lang": "en"}}
    ingest(runtime_of(store), orjson.dumps(payload), source="<stdin>", fmt="jsonl")
    (message,) = [m for _, _, m in iter_messages(store)]
    assert message["text"] == "part one\ntwo" and message["channel"] == "tg" and message["meta"] == {"lang": "en"}


def test_ids_are_stable_and_reingest_is_a_no_op(store_dir):
    store = Store(store_dir)
    data = (FIXTURES / "demo" / "chat.jsonl").read_bytes().replace(b'"id":', b'"x_id":')
    first = [o.id for o in ingest(runtime_of(store), data, source="chat.jsonl").stored]
    before = snapshot(store_dir)
    second = ingest(runtime_of(store), data, source="chat.jsonl")
    assert second.stored == []
    assert sorted(o.id for o in second.outcomes if o.status == "duplicate") == sorted(first)
    assert snapshot(store_dir) == before


def test_same_text_twice_without_time_is_two_messages(store_dir):
    store = Store(store_dir)
    result = ingest(runtime_of(store), b"same words here\nsame words here\n", source="<stdin>", fmt="text",
                    keep_noise=True)
    assert len({o.id for o in result.stored}) == 2


def test_pending_notes_wait_with_a_ttl(store_dir, monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", "2026-11-20T10:00:00Z")
    store = Store(store_dir)
    ingest(runtime_of(store), b'{"text": "Likes oolong tea", "section": "About me"}\n', source="<stdin>",
           kind="memory", pending=True, ttl_hours=48)
    (item,) = lines_of(store_dir / "pending.jsonl")
    assert item["pending_since"] == "2026-11-20T10:00:00Z" and item["expires_at"] == "2026-11-22T10:00:00Z"
    assert item["section"] == "About me" and item["fields"]["summary"] == "Likes oolong tea"
    assert not (store_dir / "MEMORY.md").exists()


def test_ttl_default_comes_from_memctl_toml_and_environment(store_dir, monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", "2026-11-20T10:00:00Z")
    store_dir.mkdir()
    (store_dir / "memctl.toml").write_text("[ingest]\npending_ttl_hours = 2\n")
    store = Store(store_dir)
    ingest(runtime_of(store), b"note one is here", source="<stdin>", kind="memory", pending=True)
    monkeypatch.setenv("MEMCTL_INGEST_PENDING_TTL_HOURS", "3")
    ingest(runtime_of(store), b"note two is here", source="<stdin>", kind="memory", pending=True)
    assert [i["expires_at"] for i in lines_of(store_dir / "pending.jsonl")] == [
        "2026-11-20T12:00:00Z", "2026-11-20T13:00:00Z"]


def test_noise_is_dropped_unless_kept(store_dir):
    store = Store(store_dir)
    payload = "\n".join(json.dumps(m) for m in [
        {"role": "user", "text": "hello"}, {"role": "user", "text": "你好"}, {"role": "user", "text": "HEARTBEAT"},
        {"role": "user", "text": "do you remember?"}, {"role": "user", "text": "你記得嗎"},
        {"role": "assistant", "text": "I don't have any information about that."},
        {"role": "assistant", "text": "我沒有相關的資料"}, {"role": "user", "text": "ok"},
        {"role": "user", "text": "Hi! I just moved to Taipei."},
        {"role": "user", "text": "I don't have any data on that old laptop"},
    ]).encode()
    result = ingest(runtime_of(store), payload, source="<stdin>")
    assert [o.reason for o in result.outcomes if o.status == "noise"] == [
        "greeting", "greeting", "greeting", "meta-question", "meta-question", "refusal", "refusal", "too short"]
    assert [m["text"] for _, _, m in iter_messages(store)] == [
        "Hi! I just moved to Taipei.", "I don't have any data on that old laptop"]
    kept = ingest(runtime_of(Store(store_dir.parent / "other")), payload, source="<stdin>", keep_noise=True)
    assert len(kept.stored) == 10


def test_dry_run_writes_nothing(store_dir):
    result = ingest(runtime_of(Store(store_dir)), (FIXTURES / "demo" / "chat.jsonl").read_bytes(), source="chat.jsonl",
                    dry_run=True)
    assert len(result.stored) == 21
    assert not store_dir.exists()


def test_files_and_folders_are_private(store_dir):
    store = Store(store_dir)
    ingest(runtime_of(store), (FIXTURES / "demo" / "chat.jsonl").read_bytes(), source="chat.jsonl")
    ingest(runtime_of(store), (FIXTURES / "demo" / "MEMORY.md").read_bytes(), source="MEMORY.md")
    for path in [store_dir, *store_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path


BAD_INPUTS = [
    # (payload, format, kind, expected message fragment)
    (b'{"text": "fine message one"}\n{"text": "broken\n', "jsonl", "auto", "<stdin>:2: not valid JSON"),
    (b'{"text": "fine message one"}\n["a list"]\n', "jsonl", "auto", "<stdin>:2: expected a JSON object"),
    (b'{"role": "user"}\n', "jsonl", "auto", "<stdin>:1: field 'text': missing"),
    (b'{"text": ""}\n', "jsonl", "auto", "<stdin>:1: field 'text': is empty"),
    (b'{"text": ["x"]}\n', "jsonl", "auto", "<stdin>:1: field 'text': content parts"),
    (b'{"text": "fine message", "role": 7}\n', "jsonl", "auto", "<stdin>:1: field 'role': must be text"),
    (b'{"text": "fine message", "ts": "yesterday"}\n', "jsonl", "auto", "<stdin>:1: field 'ts': not a time"),
    (b'{"text": "fine message", "id": "has space"}\n', "jsonl", "auto", "<stdin>:1: field 'id'"),
    (b'{"text": "fine message", "session": "../etc"}\n', "jsonl", "auto", "<stdin>:1: field 'session'"),
    (b'[\n {"text": "fine message"},\n 42\n]', "json", "auto", "<stdin>:3: item 2: expected a JSON object"),
    (b'{"text": "a note here", "scope": "team:x"}\n', "jsonl", "memory", "<stdin>:1: field 'scope'"),
    (b'{"text": "a note here", "memory_class": "opinion"}\n', "jsonl", "memory", "field 'memory_class'"),
    (b'{"text": "a note here", "summary": "' + b"x" * 51 + b'"}\n', "jsonl", "memory", "field 'summary'"),
    (b'{"text": "a note here", "user_weight": 12}\n', "jsonl", "memory", "field 'user_weight'"),
    (b'{"text": "a note here", "1 colour": "blue"}\n', "jsonl", "memory", "field '1 colour': not a field name"),
    (b"<!-- memory\nid: a\nsummary: s\nid: b\n-->\ntext\n", "md", "auto",
     "<stdin>:4: field 'id' given twice: lines 2 and 4"),
    (b'[' * 100_000 + b']' * 100_000, "json", "auto", "<stdin>:1: nested more than 100 levels deep"),
    (b'{"text": "fine message", "x": ' + b'[' * 1000 + b']' * 1000 + b'}\n', "jsonl", "auto",
     "<stdin>:1: nested more than 100 levels deep"),
    (b'{"text": "a note here", "enforcement_level": "hard"}\n', "jsonl", "memory", "policy memories only"),
    (b"## S\n\n<!-- memory\nid: a\nscope: nowhere\n-->\ntext\n", "md", "auto", "<stdin>:5: field 'scope'"),
    (b"\x00\x01binary", "auto", "auto", "binary input"),
    (b"caf\xe9 latin-1 text", "auto", "auto", "<stdin>:1: not valid UTF-8"),
]


@pytest.mark.parametrize("payload, fmt, kind, message", BAD_INPUTS)
def test_bad_input_changes_nothing(store_dir, payload, fmt, kind, message):
    store = Store(store_dir)
    ingest(runtime_of(store), (FIXTURES / "demo" / "chat.jsonl").read_bytes(), source="chat.jsonl")
    ingest(runtime_of(store), (FIXTURES / "demo" / "MEMORY.md").read_bytes(), source="MEMORY.md")
    before = snapshot(store_dir)
    with pytest.raises(InputError) as caught:
        ingest(runtime_of(store), payload, source="<stdin>", fmt=fmt, kind=kind)
    assert message in str(caught.value)
    assert snapshot(store_dir) == before


def test_unknown_note_fields_are_kept_and_reported(store_dir):
    store = Store(store_dir)
    jsonl = ingest(runtime_of(store), b'{"text": "prefers green tea", "colour": "blue"}\n', source="<stdin>", kind="memory")
    markdown = ingest(runtime_of(store), b"<!-- memory\nmood: calm\n-->\nwalks at dawn\n", source="n.md")
    assert jsonl.warnings == ["<stdin>:1: field 'colour': unknown field (kept as written)"]
    assert markdown.warnings == ["n.md:2: field 'mood': unknown field (kept as written)"]
    doc = memoryfile.load(store.memory_md)
    assert doc.find(jsonl.stored[0].id).get("colour") == "blue"
    assert doc.find(markdown.stored[0].id).get("mood") == "calm"  # the block had no id: it was given one
    assert [i.severity for i in doc.issues] == ["warning", "warning"]


def test_markdown_notes_keep_heading_levels_and_list_items(store_dir):
    store = Store(store_dir)
    notes = (b"# Travel\n\n## Japan\n\n- Book the ryokan in Kyoto\n1. Rail pass: 7 days\n\n### Food\n\n"
             b"Okonomiyaki near the station.\n\n# Work\n\nThe demo is on December 12th.\n")
    ingest(runtime_of(store), notes, source="notes.md")
    doc = memoryfile.load(store.memory_md)
    outline = [(b.level, b.title) for b in doc.blocks if isinstance(b, memoryfile.Heading)]
    assert outline == [(1, "Travel"), (2, "Japan"), (3, "Food"), (1, "Work")]
    written = store.memory_md.read_text()
    assert "\n- Book the ryokan in Kyoto\n" in written and "\n1. Rail pass: 7 days\n" in written
    assert [e.text for e in doc.entries][:2] == ["Book the ryokan in Kyoto", "Rail pass: 7 days"]
    again = ingest(runtime_of(store), store.memory_md.read_bytes(), source="MEMORY.md")  # the round trip: all known
    assert {o.status for o in again.outcomes} == {"duplicate"}


def test_duplicate_id_with_other_text_is_refused_whole(store_dir):
    store = Store(store_dir)
    ingest(runtime_of(store), b'{"id": "k1", "text": "the original words"}\n', source="<stdin>")
    before = snapshot(store_dir)
    payload = b'{"id": "k2", "text": "a new message"}\n{"id": "k1", "text": "other words"}\n'
    with pytest.raises(InputError, match=r"<stdin>:2: field 'id': duplicate id 'k1'"):
        ingest(runtime_of(store), payload, source="<stdin>")
    assert snapshot(store_dir) == before
    dup = ingest(runtime_of(store), b'{"id": "k1", "text": "the original words"}\n', source="<stdin>")
    assert [o.status for o in dup.outcomes] == ["duplicate"]


def test_duplicate_inside_one_input(store_dir):
    store = Store(store_dir)
    with pytest.raises(InputError, match=":2: field 'id': duplicate"):
        ingest(runtime_of(store), b'{"id": "k1", "text": "first words"}\n{"id": "k1", "text": "second words"}\n',
               source="<stdin>")
    result = ingest(runtime_of(store), b'{"id": "k1", "text": "first words"}\n{"id": "k1", "text": "first words"}\n',
                    source="<stdin>")
    assert [o.status for o in result.outcomes] == ["stored", "duplicate"]


def test_bad_memctl_toml_is_named(store_dir):
    store_dir.mkdir()
    (store_dir / "memctl.toml").write_text("[ingest]\npending_ttl_hours = 'soon'\n")
    with pytest.raises(InputError, match="memctl.toml:2: ingest.pending_ttl_hours must be float"):
        ingest(runtime_of(Store(store_dir)), b"text to store", source="<stdin>")
