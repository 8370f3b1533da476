"""`memctl show`, `memctl status` and `memctl config` on real stores."""

from __future__ import annotations

import json

import pytest


def chat(session: str, texts: list[str], scope: str | None = None) -> str:
    return "".join(json.dumps({"session": session, "role": "user", "ts": f"2026-11-10T10:{i:02d}:00Z", "text": t,
                               **({"scope": scope} if scope else {})}) + "\n" for i, t in enumerate(texts))


def test_show_a_message_a_memory_with_its_chain_and_a_topic(run, store_dir):
    run("ingest", "-", input=chat("s1", [f"we talked about sourdough hydration, take {i}" for i in range(6)]))
    message = json.loads((store_dir / "sessions" / "s1.jsonl").read_text().splitlines()[1])
    old = run("ingest", "--kind", "memory", "-", input=json.dumps({"text": "Lives in Tokyo"})).stdout.split()[0]
    new = run("ingest", "--kind", "memory", "--supersedes", old.decode(), "-",
              input=json.dumps({"text": "Lives in Taipei"})).stdout.split()[0].decode()
    run("split", "--session", "s1", "--force", "--keep-recent", "0")

    shown = json.loads(run("show", message["id"], "--json").stdout)
    assert (shown["kind"], shown["file"], shown["line"], shown["text"]) == (
        "message", "sessions/s1.jsonl", 2, message["text"])
    assert shown["topics"] and shown["topics"][0]["id"].startswith("t-")
    topic = json.loads(run("show", shown["topics"][0]["id"], "--json").stdout)
    assert topic["kind"] == "topic" and message["id"] in topic["fields"]["message_ids"]

    memory = json.loads(run("show", new, "--json").stdout)
    assert memory["kind"] == "memory" and memory["text"] == "Lives in Taipei"
    assert [link["id"] for link in memory["chain"]] == [old.decode(), new]
    text = run("show", new).stdout.decode()
    assert f"> {new}  active" in text and "MEMORY.md:" in text


def test_show_exit_status(run, store_dir):
    run("ingest", "-", input=chat("s1", ["something worth keeping here"]))
    missing = run("show", "m-0000000000000000")
    assert missing.returncode == 1 and "m-0000000000000000" in missing.stderr.decode()
    assert run("show", "../../etc/passwd").returncode == 2


def test_show_with_a_scope_sees_what_search_sees_and_nothing_of_another_scope(run, store_dir):
    run("ingest", "-", input=chat("a", ["alice talks about her garden roses"], scope="user:alice"))
    message = json.loads((store_dir / "sessions" / "a.jsonl").read_text().splitlines()[0])["id"]
    shared = run("ingest", "--kind", "memory", "-", input=json.dumps({"text": "Lives in Tokyo"})).stdout.split()[0]
    alices = run("ingest", "--kind", "memory", "--scope", "user:alice", "--supersedes", shared.decode(), "-",
                 input=json.dumps({"text": "Alice lives in Taipei"})).stdout.split()[0].decode()
    for record in (alices, message):
        refused = run("show", record, "--scope", "user:bob", "--json")
        assert refused.returncode == 1 and refused.stdout == b""
        assert "in scope user:bob" in refused.stderr.decode() and "Taipei" not in refused.stderr.decode()
    seen = json.loads(run("show", alices, "--scope", "user:alice", "--json").stdout)
    assert [link["id"] for link in seen["chain"]] == [shared.decode(), alices]  # global is shared
    assert [link["id"] for link in json.loads(run("show", shared.decode(), "--json").stdout)["chain"]] == [
        shared.decode(), alices]
    from_bob = json.loads(run("show", shared.decode(), "--scope", "user:bob", "--json").stdout)
    assert [link["id"] for link in from_bob["chain"]] == [shared.decode()]  # nothing of alice's
    assert "Taipei" not in json.dumps(from_bob)
    assert run("show", alices, "--scope", "alice").returncode == 2


def test_status_counts_by_kind_and_scope(run, store_dir):
    run("ingest", "-", input=chat("a", ["alice talks about her garden roses", "and the tulips too"],
                                  scope="user:alice"))
    run("ingest", "-", input=chat("b", ["bob talks about his bicycle repair"], scope="user:bob"))
    old = run("ingest", "--kind", "memory", "-", input=json.dumps({"text": "Works at Acme"})).stdout.split()[0]
    run("ingest", "--kind", "memory", "--supersedes", old.decode(), "-", input=json.dumps({"text": "Works at Initech"}))
    run("ingest", "--kind", "memory", "--pending", "-", input=json.dumps({"text": "Likes green tea a lot"}))

    before = json.loads(run("status", "--json").stdout)
    assert before["index"]["built"] is False
    run("search", "roses")
    data = json.loads(run("status", "--json").stdout)

    counts = data["counts"]
    assert (counts["messages"], counts["sessions"]) == (3, 2)
    assert counts["memories"] == {"current": 1, "superseded": 1, "archived": 0, "deleted": 0}
    assert counts["pending"] == {"waiting": 1, "expired": 0}
    assert data["scopes"]["user:alice"]["messages"] == 2 and data["scopes"]["user:bob"]["messages"] == 1
    assert data["index"]["built"] and data["index"]["fresh"] and data["index"]["units"] >= 5
    assert data["sizes"]["total_bytes"] > data["sizes"]["index_bytes"] > 0
    assert "3 in 2 session(s)" in run("status").stdout.decode()


@pytest.mark.real_model
def test_status_names_the_model_the_index_is_built_with(run, store_dir):
    """With no [embedding] model set, status named "minilm" while the index said "minilm-usem3"."""
    run("ingest", "-", input=chat("a", ["alice talks about her garden roses"]))
    run("index")
    data = json.loads(run("status", "--json").stdout)
    assert data["model"] == data["index"]["model"] == "usem3-minilm"


def test_config_says_where_each_value_came_from(run, store_dir, tmp_path):
    store_dir.mkdir()
    (store_dir / "memctl.toml").write_text('[retrieval]\ncandidates = 150\n[topics]\nllm_command = "rm -rf ~"\n')
    user = tmp_path / "xdg"
    (user / "memctl").mkdir(parents=True)
    (user / "memctl" / "config.toml").write_text("[ingest]\npending_ttl_hours = 48\n")

    done = run("config", "--json", env={"XDG_CONFIG_HOME": str(user), "MEMCTL_TOPICS_KEEP_RECENT": "7"})

    rows = {(r["table"], r["key"], "ignored" in r): r for r in map(json.loads, done.stdout.splitlines())}
    assert rows["retrieval", "candidates", False]["value"] == 150
    assert rows["retrieval", "candidates", False]["source"].startswith("store ")
    assert rows["ingest", "pending_ttl_hours", False]["source"].startswith("user config ")
    assert rows["topics", "keep_recent", False] == {"table": "topics", "key": "keep_recent", "value": 7,
                                                   "source": "env $MEMCTL_TOPICS_KEEP_RECENT"}
    assert rows["topics", "llm_command", False]["value"] == "" and rows["topics", "llm_command", False][
        "source"] == "default"
    assert "a store may not name a program" in rows["topics", "llm_command", True]["ignored"]
    assert rows["governance", "archive_below", False]["source"] == "default"
    text = run("config").stdout.decode()
    assert "IGNORED" in text and "retrieval.candidates" in text
