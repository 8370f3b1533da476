"""Scopes are walls (SPEC X3, G7): nothing of one scope appears in another's topics, context or search.

A session is in one scope (user:alice, project:kestrel, global), kept on each of
its messages; a topic is in one scope (its header's `scope`). The checks here go
through the library with a tiny deterministic embedder (registered through the
embedders registry, so no model loads), and the attack that showed the problem
through real `memctl` processes.
"""

from __future__ import annotations

import json

import orjson
import pytest

from memctl.errors import InputError, StoreError
from memctl.ingest.ingest import ingest
from memctl.store.store import Store


def chat(session: str, texts: list[str], scope: str | None = None, prefix: str | None = None) -> bytes:
    """JSON lines of a conversation, user and assistant in turn; `scope` on every record if given."""
    prefix = prefix or session
    lines = []
    for n, text in enumerate(texts):
        record = {"id": f"{prefix}-{n}", "session": session, "role": ("user", "assistant")[n % 2], "text": text,
                  "ts": f"2026-11-20T10:{n // 60:02d}:{n % 60:02d}Z"}
        if scope:
            record["scope"] = scope
        lines.append(orjson.dumps(record) + b"\n")
    return b"".join(lines)


def stored(store_dir, session: str) -> list[dict]:
    return [orjson.loads(line) for line in (store_dir / "sessions" / f"{session}.jsonl").read_bytes().splitlines()]


# -- ingest: a session is in one scope -------------------------------------------------------------

def test_scope_flag_puts_a_new_session_in_it_and_later_records_follow(store_dir):
    store = Store(store_dir)
    ingest(store, chat("alice", ["I keep herons", "Herons, noted"]), scope="user:alice")
    ingest(store, chat("alice", ["and two cats"], prefix="later"))  # names no scope: the session's
    assert {m["scope"] for m in stored(store_dir, "alice")} == {"user:alice"}


def test_records_name_their_own_scope_and_global_is_written_as_no_field(store_dir):
    store = Store(store_dir)
    ingest(store, chat("bob", ["my bank is Osprey", "Osprey, noted"], scope="user:bob") + chat("open", ["shared words"], scope="global"))
    assert {m["scope"] for m in stored(store_dir, "bob")} == {"user:bob"}
    assert all("scope" not in m for m in stored(store_dir, "open"))


def test_default_scope_comes_from_memctl_toml(store_dir):
    store_dir.mkdir()
    (store_dir / "memctl.toml").write_text('[ingest]\ndefault_scope = "project:kestrel"\n')
    ingest(Store(store_dir), chat("s1", ["inventory service"]))
    assert stored(store_dir, "s1")[0]["scope"] == "project:kestrel"


@pytest.mark.parametrize("first, then, flag, said", [
    ("user:alice", "user:bob", None, "<input>:1: field 'scope': is user:bob, but session 'alice' is in scope user:alice"),
    (None, "user:bob", None, "<input>:1: field 'scope': is user:bob, but session 'alice' is in scope global"),
    ("user:alice", None, "user:bob", "<input>:1: field 'scope': is user:bob, but session 'alice' is in scope user:alice"),
])
def test_a_record_in_another_scope_than_its_stored_session_is_refused(store_dir, first, then, flag, said):
    store = Store(store_dir)
    ingest(store, chat("alice", ["my own words here"], scope=first), source="<input>")
    before = (store_dir / "sessions" / "alice.jsonl").read_bytes()
    with pytest.raises(InputError) as refused:
        ingest(store, chat("alice", ["somebody else's words"], scope=then, prefix="x"), source="<input>", scope=flag)
    assert str(refused.value) == said
    assert (store_dir / "sessions" / "alice.jsonl").read_bytes() == before


def test_one_input_cannot_put_a_new_session_in_two_scopes(store_dir):
    data = chat("s1", ["first line here"], scope="user:alice") + chat("s1", ["second line here"], scope="user:bob", prefix="y")
    with pytest.raises(InputError) as refused:
        ingest(Store(store_dir), data, source="in.jsonl")
    assert str(refused.value) == "in.jsonl:2: field 'scope': is user:bob, but line 1 put session 's1' in scope user:alice"
    assert not store_dir.exists() or not (store_dir / "sessions").exists()


@pytest.mark.parametrize("record, flag, said", [
    ({"text": "x", "scope": "team:red"}, None, "field 'scope': must be global, project:<name>, lang:<name> or user:<name>"),
    ({"text": "x", "scope": 7}, None, "field 'scope': must be global"),
    ({"text": "x", "scope": "user:carol"}, "user:dave", "field 'scope': is user:carol, but --scope is user:dave"),
])
def test_a_bad_or_contrary_scope_field_is_one_line_naming_the_line(store_dir, record, flag, said):
    with pytest.raises(InputError) as refused:
        ingest(Store(store_dir), orjson.dumps(record) + b"\n", source="in.jsonl", scope=flag)
    assert str(refused.value).startswith(f"in.jsonl:1: {said}")


def test_scope_flag_is_checked_and_scopes_notes_that_name_none(store_dir):
    store = Store(store_dir)
    with pytest.raises(InputError, match="^--scope: must be global"):
        ingest(store, b"hello there, a long enough line", scope="alice")
    ingest(store, b'{"text": "Prefers green tea"}\n', kind="memory", scope="user:alice")
    assert "scope: user:alice" in (store_dir / "MEMORY.md").read_text()
    with pytest.raises(InputError, match="field 'scope': is project:x, but --scope is user:alice"):
        ingest(store, b'{"text": "Uses Postgres", "scope": "project:x"}\n', kind="memory", scope="user:alice")


def test_a_session_file_edited_into_two_scopes_is_refused_by_name(store_dir):
    store = Store(store_dir)
    ingest(store, chat("alice", ["first line here", "second line here"], scope="user:alice"))
    path = store_dir / "sessions" / "alice.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"scope":"user:alice","role":"assistant"',
                                               b'"scope":"user:bob","role":"assistant"'))
    with pytest.raises(StoreError) as refused:
        ingest(store, chat("alice", ["third line here"], prefix="z"))
    assert str(refused.value) == ("sessions/alice.jsonl: message 'alice-1' is in scope user:bob, the session's first "
                                  "in user:alice; a session is in one scope: correct its 'scope' fields")
