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


# -- chat exports -------------------------------------------------------------------------------
def chatgpt_node(node_id, parent, children, role=None, text=None, at=None, **extra):
    message = None
    if role is not None:
        message = {"id": node_id, "author": {"role": role, "name": None, "metadata": {}}, "create_time": at,
                   "update_time": None, "content": {"content_type": extra.pop("content_type", "text"),
                                                    "parts": [text] if isinstance(text, str) else text},
                   "status": "finished_successfully", "weight": 1.0, "metadata": extra.pop("metadata", {}),
                   "recipient": "web" if node_id.startswith("c-") else "all"}  # c-: a call to a tool
    return node_id, {"id": node_id, "message": message, "parent": parent, "children": children}


def chatgpt_export(extra_turn: bool = False) -> list[dict]:
    """Two conversations as ChatGPT's conversations.json holds them: trees of nodes, one with an
    edited prompt (the first wording stays in the tree, off the branch the user saw last)."""
    trip = dict([
        chatgpt_node("root-1", None, ["sys-1"]),
        chatgpt_node("sys-1", "root-1", ["u-1"], "system", "", 1731916800.0,
                     metadata={"is_visually_hidden_from_conversation": True}),
        chatgpt_node("u-1", "sys-1", ["a-1"], "user", "Plan a two-day trip to Tainan for the first weekend of December",
                     1731916801.2),
        chatgpt_node("a-1", "u-1", ["u-2", "u-2b"], "assistant",
                     "Day one: Anping Old Fort and the canal; day two: Chihkan Tower and the night market.",
                     1731916805.9),
        chatgpt_node("u-2", "a-1", ["a-2"], "user", "Make it cheaper please", 1731917000.0),
        chatgpt_node("a-2", "u-2", [], "assistant", "Take the local train instead of the high-speed rail.",
                     1731917004.0),
        chatgpt_node("u-2b", "a-1", ["c-2b"], "user", "Can we add a beach day near Tainan instead?", 1731917100.0),
        chatgpt_node("c-2b", "u-2b", ["t-2b"], "assistant", 'search("beaches near Tainan")', 1731917100.5),
        chatgpt_node("t-2b", "c-2b", ["a-2b"], "tool", "search results: Yuguang Island beach", 1731917101.0),
        chatgpt_node("a-2b", "t-2b", ["img-1"], "assistant",
                     "Yuguang Island has a quiet beach twenty minutes from the old town.", 1731917106.0),
        # a photo sent without words: nothing to read
        chatgpt_node("img-1", "a-2b", [], "user", [{"content_type": "image_asset_pointer", "asset_pointer": "file-x"}],
                     1731917200.0, content_type="multimodal_text"),
    ])
    current = "img-1"
    if extra_turn:
        trip["img-1"]["children"] = ["u-3"]
        trip.update(dict([chatgpt_node("u-3", "img-1", [], "user", "Book the Saturday train at nine", 1731920000.0)]))
        current = "u-3"
    return [
        {"title": "Tainan weekend", "create_time": 1731916800.0, "update_time": 1731917106.0, "mapping": trip,
         "moderation_results": [], "current_node": current, "conversation_id": "6740c0de-trip", "id": "6740c0de-trip"},
        {"title": "Sourdough", "create_time": 1732000000.0, "update_time": 1732000030.0, "mapping": dict([
            chatgpt_node("root-2", None, ["u-9"]),
            chatgpt_node("u-9", "root-2", ["a-9"], "user", "Why did my sourdough come out flat?", 1732000000.0),
            chatgpt_node("a-9", "u-9", [], "assistant", "The starter was probably past its peak; feed it 4 hours "
                         "before mixing.", 1732000030.0)]),
         "current_node": "a-9", "conversation_id": "6741aaaa-bread", "id": "6741aaaa-bread"},
    ]


def test_a_chatgpt_export_stores_the_branch_the_user_saw_and_again_only_what_is_new(run, store_dir, tmp_path):
    export = tmp_path / "conversations.json"
    export.write_bytes(orjson.dumps(chatgpt_export()))  # auto: the file's first conversation says which export
    first = run("ingest", str(export))
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().split() == ["u-1", "a-1", "u-2b", "a-2b", "u-9", "a-9"]
    trip = session_lines(store_dir, "chatgpt-6740c0de-trip")
    assert [(m["id"], m["role"]) for m in trip] == [("u-1", "user"), ("a-1", "assistant"), ("u-2b", "user"),
                                                   ("a-2b", "assistant")]
    assert trip[0]["ts"] == "2024-11-18T08:00:01.200000Z"
    assert trip[2]["text"] == "Can we add a beach day near Tainan instead?"
    assert len(session_lines(store_dir, "chatgpt-6741aaaa-bread")) == 2
    assert run("ingest", str(export)).stdout == b""
    export.write_bytes(orjson.dumps(chatgpt_export(extra_turn=True)))
    later = run("ingest", "--format", "chatgpt", str(export))
    assert later.stdout.decode().split() == ["u-3"]
    found = run("search", "--mode", "bm25", "beach near Tainan")
    assert b"chatgpt-6740c0de-trip" in found.stdout


def claude_export() -> list[dict]:
    account = {"uuid": "acc-7f3e"}
    return [
        {"uuid": "conv-41b2", "name": "Kestrel migration", "created_at": "2026-10-02T09:14:03.511204Z",
         "updated_at": "2026-10-02T09:20:44.100000Z", "account": account, "chat_messages": [
             {"uuid": "msg-41b2-1", "text": "Should Kestrel move from MySQL to PostgreSQL?",
              "content": [{"type": "text", "text": "Should Kestrel move from MySQL to PostgreSQL?"}],
              "sender": "human", "created_at": "2026-10-02T09:14:03.511204Z",
              "updated_at": "2026-10-02T09:14:03.511204Z", "attachments": [], "files": []},
             {"uuid": "msg-41b2-2", "text": "",
              "content": [{"type": "text", "text": "Yes: JSONB covers the recipe metadata you keep as blobs."},
                          {"type": "tool_use", "name": "web_search", "input": {"query": "jsonb"}}],
              "sender": "assistant", "created_at": "2026-10-02T09:14:19.002000Z",
              "updated_at": "2026-10-02T09:14:19.002000Z", "attachments": [], "files": []},
             {"uuid": "msg-41b2-3", "text": "", "content": [], "sender": "human",
              "created_at": "2026-10-02T09:15:00.000000Z", "updated_at": "2026-10-02T09:15:00.000000Z",
              "attachments": [], "files": [{"file_name": "schema.png"}]},
         ]},
        {"uuid": "conv-52c3", "name": "", "created_at": "2026-10-05T18:00:00.000000Z",
         "updated_at": "2026-10-05T18:00:00.000000Z", "account": account, "chat_messages": []},
    ]


def test_a_claude_export_stores_each_conversation_as_a_session_once(run, store_dir, tmp_path):
    export = tmp_path / "conversations.json"
    export.write_bytes(orjson.dumps(claude_export(), option=orjson.OPT_INDENT_2))
    first = run("ingest", "--format", "claude", str(export))
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().split() == ["msg-41b2-1", "msg-41b2-2"]
    stored = session_lines(store_dir, "claude-conv-41b2")
    assert [(m["role"], m["ts"]) for m in stored] == [("user", "2026-10-02T09:14:03.511204Z"),
                                                     ("assistant", "2026-10-02T09:14:19.002000Z")]
    assert stored[1]["text"] == "Yes: JSONB covers the recipe metadata you keep as blobs."
    again = run("ingest", str(export))  # auto-detected
    assert (again.returncode, again.stdout) == (0, b"") and b"2 already stored" in again.stderr


def test_an_export_that_is_not_one_is_refused_with_the_line(run, store_dir, tmp_path):
    export = tmp_path / "conversations.json"
    broken = claude_export()
    del broken[1]["chat_messages"]
    export.write_bytes(orjson.dumps(broken, option=orjson.OPT_INDENT_2))
    refused = run("ingest", "--format", "claude", str(export))
    assert refused.returncode == 2 and not store_dir.exists()
    line = refused.stderr.decode().strip()
    assert line.startswith(f"memctl: error: {export}:") and "chat_messages" in line
    notes = run("ingest", "--format", "chatgpt", "--kind", "memory", str(export))
    assert notes.returncode == 2 and b"holds messages" in notes.stderr
    plain = run("ingest", "--format", "chatgpt", "-", input='[{"role": "user", "content": "hello there, friend"}]')
    assert plain.returncode == 2 and b"mapping" in plain.stderr


def test_a_claude_message_whose_text_is_not_text_is_refused_by_name(run, store_dir, tmp_path):
    """It was dropped without a word, as an attachment is (#31 item 9)."""
    export = tmp_path / "conversations.json"
    broken = claude_export()
    broken[0]["chat_messages"][0]["text"] = 42
    export.write_bytes(orjson.dumps(broken))
    refused = run("ingest", "--format", "claude", str(export))
    assert (refused.returncode, refused.stdout) == (2, b"") and not store_dir.exists()
    assert refused.stderr.decode() == (f"memctl: error: {export}:1: field 'chat_messages[0].text': "
                                       "must be text, got a number\n")
