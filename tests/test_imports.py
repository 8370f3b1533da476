"""Imports that can be repeated: the same export twice stores nothing new, with or without
times; and the chat exports people have (ChatGPT, Claude) through `ingest --format`."""

from __future__ import annotations

import orjson
import pytest

LINE = '{"role":"user","content":"a plain chat line without a time, long enough"}\n'


def session_lines(store_dir, session: str) -> list[dict]:
    path = store_dir / "sessions" / f"{session}.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_the_same_export_without_times_twice_stores_nothing_new(run, store_dir, tmp_path):
    export = tmp_path / "n.jsonl"
    export.write_text(LINE)
    first = run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-20T10:00:00Z"})
    assert first.returncode == 0 and len(first.stdout.split()) == 1
    again = run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-21T18:30:00Z"})  # a day later
    assert (again.returncode, again.stdout) == (0, b"")
    assert b"1 already stored, skipped" in again.stderr
    assert len(session_lines(store_dir, "n")) == 1
    daily = list((store_dir / "memory").glob("*.md"))
    assert len(daily) == 1  # nothing logged on the second day either


def test_equal_messages_stay_apart_a_grown_export_adds_only_the_new_and_a_changed_one_is_new(run, store_dir,
                                                                                              tmp_path):
    export = tmp_path / "chat.jsonl"
    said = ['{"role": "user", "content": "did the build pass on main"}',
            '{"role": "assistant", "content": "yes, all green this morning"}',
            '{"role": "user", "content": "did the build pass on main"}']  # asked again: a second message
    export.write_text("\n".join(said) + "\n")
    first = run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-20T10:00:00Z"})
    assert len(set(first.stdout.split())) == 3
    export.write_text("\n".join(said + ['{"role": "assistant", "content": "it did, twice now"}']) + "\n")
    grown = run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-20T11:00:00Z"})
    assert len(grown.stdout.split()) == 1
    assert [m["text"] for m in session_lines(store_dir, "chat")][-1] == "it did, twice now"
    said[1] = '{"role": "assistant", "content": "yes, all green this afternoon"}'
    export.write_text("\n".join(said) + "\n")
    changed = run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-20T12:00:00Z"})
    assert [m["text"] for m in session_lines(store_dir, "chat") if m["id"] == changed.stdout.decode().strip()] \
        == ["yes, all green this afternoon"]
    assert len(session_lines(store_dir, "chat")) == 5


def test_the_same_text_in_two_sessions_or_from_two_roles_is_two_messages(run, store_dir):
    text = "see you at the standup tomorrow"
    lines = "".join(orjson.dumps(m).decode() + "\n" for m in [
        {"session": "a", "role": "user", "text": text}, {"session": "b", "role": "user", "text": text},
        {"session": "a", "role": "assistant", "text": text}])
    assert len(set(run("ingest", "-", input=lines).stdout.split())) == 3
    assert run("ingest", "-", input=lines).stdout == b""


@pytest.mark.parametrize("with_time", [True, False])
def test_plain_text_and_json_exports_repeat_without_growing(run, store_dir, tmp_path, with_time):
    messages = [{"role": "user", "content": "the office moves to Hsinchu in March"},
                {"role": "assistant", "content": "I will remember the March move"}]
    if with_time:
        for i, m in enumerate(messages):
            m["ts"] = f"2026-11-0{i + 1}T09:00:00Z"
    export = tmp_path / "office.json"
    export.write_bytes(orjson.dumps(messages))
    assert len(run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-20T10:00:00Z"}).stdout.split()) == 2
    assert run("ingest", str(export), env={"MEMCTL_NOW": "2026-11-22T10:00:00Z"}).stdout == b""
    text = tmp_path / "notes.txt"
    text.write_text("lunch with the Kestrel team on Friday\nlunch with the Kestrel team on Friday\n")
    assert len(set(run("ingest", str(text)).stdout.split())) == 2
    assert run("ingest", str(text)).stdout == b""
