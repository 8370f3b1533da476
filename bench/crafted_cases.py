"""Crafted and corrupt store files: what an attacker, a crash or a careless hand leaves in a store.

Each case changes a copy of a base store (bench/torture.py makes it: the demo
chat split into topics, an archived topic, a cache entry, links and a time
index) and names the files it touched. bench/torture.py runs every case
against every command of COMMANDS as a real process; tests/test_fuzz.py runs
a sample in process. What must hold for each (case, command):

- no traceback and no hang: exit 0, 1 or 2; an exit 2 is one line on stderr
  naming the file (and line where there is one);
- nothing outside the store read or written (cases with `victim` point at a
  file outside the store and check it is untouched and unprinted);
- `memctl health check` reports the case (exit 1, a problem naming its file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

SECRET = "zqsecret outside the store"
SESSION = "2026-11-02-planning"  # a session of fixtures/demo/chat.jsonl


@dataclass
class Case:
    name: str
    apply: Callable[[Path, Path], None]       # (store, victim) -> None
    file: str                                 # the file health must name (a prefix of its path)
    victim: bool = False                      # the case aims at the file outside the store
    health: bool = True                       # health must report it
    tags: set[str] = field(default_factory=set)


def _first_topic(store: Path) -> Path:
    return sorted((store / "topics").glob("t-*.jsonl"))[0]


def _archived(store: Path) -> Path:
    return sorted((store / "topics" / "archived").glob("*/t-*.jsonl"))[0]


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _write_lines(path: Path, records: list) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def _edit_header(which: Callable[[Path], Path], change: Callable[[dict], object]):
    """Every header line of a topic file rewritten by `change` (which returns the new line)."""
    def apply(store: Path, victim: Path) -> None:
        path = which(store)
        records = _lines(path)
        _write_lines(path, [change(dict(r)) if r.get("type") == "topic" else r for r in records])
    return apply


def _set(key: str, value) -> Callable[[dict], dict]:
    def change(record: dict) -> dict:
        record[key] = value
        return record
    return change


def _drop(key: str) -> Callable[[dict], dict]:
    def change(record: dict) -> dict:
        record.pop(key, None)
        return record
    return change


def _append_bytes(rel: str, data: bytes):
    def apply(store: Path, victim: Path) -> None:
        path = store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(data)
    return apply


def _write(rel: str, data: bytes):
    def apply(store: Path, victim: Path) -> None:
        path = store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return apply


def _link(rel: str, to_victim_dir: bool = True):
    """Replace a folder of the store by a link to a folder outside it holding a copy."""
    def apply(store: Path, victim: Path) -> None:
        import shutil

        path = store / rel
        outside = victim.parent / ("linked-" + rel.replace("/", "-"))
        if path.exists():
            shutil.copytree(path, outside, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(path)
        else:
            outside.mkdir(parents=True, exist_ok=True)
        os.symlink(outside, path)
    return apply


def _link_file(rel: str):
    def apply(store: Path, victim: Path) -> None:
        path = store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.symlink(victim, path)
    return apply


def _first(store: Path, pattern: str) -> Path:
    """The first file of the store matching `pattern` (a glob), the place a case plants at."""
    return sorted(store.glob(pattern))[0] if "*" in pattern else store / pattern


def _fifo(pattern: str):
    """A FIFO where a store file is (or would be): every command waited forever at its opening (#31)."""
    def apply(store: Path, victim: Path) -> None:
        path = _first(store, pattern)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.mkfifo(path, 0o600)
    return apply


def _hard_link(pattern: str):
    """A store file replaced by a hard link to the file outside (holding the store file's bytes, so
    that what is read through it is the store's own): an append through it wrote outside (#31)."""
    def apply(store: Path, victim: Path) -> None:
        path = _first(store, pattern)
        victim.write_bytes(path.read_bytes() if path.exists() else b"")
        path.unlink(missing_ok=True)
        os.link(victim, path)
    return apply


def _cache_entry(change: Callable[[dict], object]):
    def apply(store: Path, victim: Path) -> None:
        path = sorted((store / "cache").glob("*/entries/*.json"))[0]
        path.write_bytes(orjson.dumps(change(orjson.loads(path.read_bytes()))))
    return apply


def _session_ts(value):
    def apply(store: Path, victim: Path) -> None:
        path = sorted((store / "sessions").glob("*.jsonl"))[0]
        records = _lines(path)
        records[-1]["ts"] = value
        _write_lines(path, records)
    return apply


def _links(record) -> Callable[[Path, Path], None]:
    return _append_bytes("topics/links.jsonl", orjson.dumps(record) + b"\n")


def _time_index(record) -> Callable[[Path, Path], None]:
    return _append_bytes("topics/time_index.jsonl", orjson.dumps(record) + b"\n")


def _other_topic_id(store: Path, victim: Path) -> None:
    """A topic file whose header names another topic's id: its messages must not be split again."""
    first, second = sorted((store / "topics").glob("t-*.jsonl"))[:2]
    other = next(r["id"] for r in _lines(second) if r.get("type") == "topic")
    _edit_header(lambda s: first, _set("id", other))(store, victim)


def _topics_is_a_file(store: Path, victim: Path) -> None:
    import shutil

    shutil.rmtree(store / "topics")
    (store / "topics").write_text("not a folder\n")


def _torn_topic(store: Path, victim: Path) -> None:
    path = _first_topic(store)
    with open(path, "ab") as fh:
        fh.write(b'{"type": "message", "id": "m-torn", "text": "half a wri')


CASES: list[Case] = [
    # -- names that lead outside the store ------------------------------------
    Case("topic-id-dotdot-session", _edit_header(_first_topic, _set("id", "../sessions/s1")), "topics/",
         tags={"path"}),
    Case("topic-id-absolute", _edit_header(_first_topic, lambda r: {**r, "id": "/tmp/zq-victim"}), "topics/",
         tags={"path"}),
    Case("archived-id-dotdot", _edit_header(_archived, _set("id", "../../sessions/" + SESSION)), "topics/archived/",
         tags={"path"}),
    Case("archived-updated-dotdot", _edit_header(_archived, _set("updated", "../../../x")), "topics/archived/",
         tags={"path"}),
    Case("cache-entry-id-dotdot", _cache_entry(lambda e: {**e, "id": "../../../../victim.txt"}), "cache/",
         tags={"path", "cache"}),
    Case("topics-symlink", _link("topics"), "topics", victim=True, tags={"link"}),
    Case("archived-symlink", _link("topics/archived"), "topics/archived", victim=True, tags={"link"}),
    Case("sessions-symlink", _link("sessions"), "sessions", victim=True, tags={"link"}),
    Case("cache-symlink", _link("cache"), "cache", victim=True, tags={"link", "cache"}),
    Case("index-symlink", _link(".index"), ".index", victim=True, tags={"link"}),
    Case("session-file-symlink", _link_file("sessions/zz-leak.jsonl"), "sessions/zz-leak.jsonl", victim=True,
         tags={"link"}),
    Case("topic-file-symlink", _link_file("topics/t-000000leak.jsonl"), "topics/t-000000leak.jsonl",
         victim=True, tags={"link"}),
    Case("memory-md-symlink", _link_file("MEMORY.md"), "MEMORY.md", victim=True, tags={"link"}),
    Case("lock-symlink", _link_file(".lock"), ".lock", victim=True, tags={"link"}),
    Case("index-file-symlink", _link_file(".index/units.db"), ".index/units.db", victim=True, tags={"link"}),
    # -- what is no regular file, or a file of two names (#31) ---------------------
    *[Case(f"fifo-{name}", _fifo(pattern), file, tags={"fifo"}) for name, pattern, file in (
        ("new-session", "sessions/zz.jsonl", "sessions/zz.jsonl"), ("session", "sessions/*.jsonl", "sessions/"),
        ("lock", ".lock", ".lock"), ("memory-md", "MEMORY.md", "MEMORY.md"), ("config", "memctl.toml", "memctl.toml"),
        ("pending", "pending.jsonl", "pending.jsonl"), ("daily-log", "memory/*.md", "memory/"),
        ("topic", "topics/t-*.jsonl", "topics/"), ("access-log", "access.log", "access.log"),
        ("state", "index_state.json", "index_state.json"), ("manifest", ".index/manifest.json", ".index/manifest.json"),
        ("vectors", ".index/vectors.npy", ".index/vectors.npy"), ("cache-events", "cache/run1/events", "cache/"))],
    *[Case(f"hard-link-{name}", _hard_link(pattern), file, victim=True, tags={"hard-link"}) for name, pattern, file in (
        ("session", "sessions/*.jsonl", "sessions/"), ("daily-log", "memory/*.md", "memory/"),
        ("access-log", "access.log", "access.log"), ("pending", "pending.jsonl", "pending.jsonl"),
        ("topic-log", "topics/activation_log.jsonl", "topics/"), ("cache-events", "cache/run1/events", "cache/"))],
    # -- topic files ------------------------------------------------------------
    Case("topic-header-id-number", _edit_header(_first_topic, _set("id", 7)), "topics/"),
    Case("topic-header-no-id", _edit_header(_first_topic, _drop("id")), "topics/"),
    Case("topic-header-id-list", _edit_header(_first_topic, _set("id", ["t-a"])), "topics/"),
    Case("topic-header-name-list", _edit_header(_first_topic, _set("name", ["x"])), "topics/"),
    Case("topic-header-summary-number", _edit_header(_first_topic, _set("summary", 3)), "topics/"),
    Case("topic-header-state-bogus", _edit_header(_first_topic, _set("state", "zombie")), "topics/"),
    Case("topic-header-state-list", _edit_header(_first_topic, _set("state", ["active"])), "topics/"),
    Case("topic-header-children-text", _edit_header(_first_topic, _set("children", "t-x")), "topics/"),
    Case("topic-header-updated-garbage", _edit_header(_first_topic, _set("updated", "yesterday-ish")), "topics/"),
    Case("topic-header-created-number", _edit_header(_first_topic, _set("created", 12)), "topics/"),
    Case("topic-header-tokens-text", _edit_header(_first_topic, _set("tokens", "many")), "topics/"),
    Case("topic-header-scope-bogus", _edit_header(_first_topic, _set("scope", "everyone")), "topics/"),
    Case("topic-header-is-list", _append_bytes("topics/t-zzzzzzzzzzzz.jsonl", b'[1, 2]\n'), "topics/"),
    Case("topic-other-id", _other_topic_id, "topics/"),
    Case("topic-torn-last-line", _torn_topic, "topics/"),
    Case("topic-message-text-number", _append_bytes("topics/t-zzzzzzzzzzzz.jsonl",
         b'{"type":"topic","id":"t-zzzzzzzzzzzz","name":"z","state":"active"}\n'
         b'{"type":"message","id":"m-z1","session":"kestrel","text":5}\n'), "topics/"),
    Case("topic-invalid-utf8", _append_bytes("topics/t-zzzzzzzzzzzz.jsonl",
         b'{"type":"topic","id":"t-zzzzzzzzzzzz","name":"\xff\xfe","state":"active"}\n'), "topics/"),
    Case("topics-is-a-file", _topics_is_a_file, "topics"),
    # -- links, time index, archive, auto summaries -----------------------------
    Case("links-from-list", _links({"from": ["t-a"], "to": "t-b", "kind": "related"}), "topics/links.jsonl"),
    Case("links-to-dict", _links({"from": "t-a", "to": {"x": 1}, "kind": "parent"}), "topics/links.jsonl"),
    Case("links-kind-number", _links({"from": "t-a", "to": "t-b", "kind": 3}), "topics/links.jsonl"),
    Case("links-not-json", _append_bytes("topics/links.jsonl", b"{oops\n"), "topics/links.jsonl"),
    Case("time-index-topics-text", _time_index({"from": "m-1", "to": "m-2", "topics": "t-a", "at": "x"}),
         "topics/time_index.jsonl"),
    Case("time-index-topics-ids-numbers", _time_index({"from": "m-1", "to": "m-2", "topics": [1, 2]}),
         "topics/time_index.jsonl"),
    Case("archived-header-no-id", _edit_header(_archived, _drop("id")), "topics/archived/"),
    Case("archived-message-ids-text", _edit_header(_archived, _set("message_ids", "m-1")), "topics/archived/"),
    Case("archived-sessions-number", _edit_header(_archived, _set("sessions", 5)), "topics/archived/"),
    Case("auto-summaries-bad-types", _append_bytes("auto_summaries.jsonl",
         b'{"session": 5, "until": ["m"], "keywords": "x", "summary": 3}\n'), "auto_summaries.jsonl"),
    Case("auto-summaries-not-json", _append_bytes("auto_summaries.jsonl", b"nope\n"), "auto_summaries.jsonl"),
    # -- sessions ---------------------------------------------------------------
    Case("session-ts-garbage", _session_ts("the day after tomorrow"), "sessions/"),
    Case("session-ts-number", _session_ts(1700000000), "sessions/"),
    Case("session-id-list", _append_bytes("sessions/kestrel.jsonl",
         b'{"id": ["m"], "session": "kestrel", "role": "user", "text": "x", "ts": "2026-11-20T10:00:00Z"}\n'),
         "sessions/"),
    Case("session-role-number", _append_bytes("sessions/kestrel.jsonl",
         b'{"id": "m-r", "session": "kestrel", "role": 3, "text": "x", "ts": "2026-11-20T10:00:00Z"}\n'),
         "sessions/"),
    # -- the cache ---------------------------------------------------------------
    Case("cache-expires-text", _cache_entry(lambda e: {**e, "expires_at": "tomorrow"}), "cache/", tags={"cache"}),
    Case("cache-entry-id-number", _cache_entry(lambda e: {**e, "id": 5}), "cache/", tags={"cache"}),
    Case("cache-entry-not-object", _cache_entry(lambda e: [e]), "cache/", tags={"cache"}),
    Case("cache-output-number", _cache_entry(lambda e: {**e, "output": 7}), "cache/", tags={"cache"}),
    Case("cache-events-utf8", _append_bytes("cache/run1/events", b"h\t\xff\xfetool\n"), "cache/", tags={"cache"}),
    Case("cache-events-garbage", _append_bytes("cache/run1/events", b"\x00\x01garbage no tab\n"), "cache/",
         tags={"cache"}),
]


# Every command a user or a cron line runs on a store, with a session and a cache scope of the base store.
COMMANDS: list[list[str]] = [
    ["index"],
    ["search", "--mode", "bm25", "kestrel database"],
    ["search", "kestrel database"],
    ["context", "--session", SESSION, "--message", "which database?", "--no-record"],
    ["context", "--session", SESSION, "--message", "which database?"],
    ["split", "--session", SESSION, "--force"],
    ["topics", "list"],
    ["topics", "activate", "database"],
    ["topics", "activate", "--include-archived", "database"],
    ["review", "daily", "--dry-run"],
    ["review", "daily"],
    ["cache", "get", "--scope", "run1", "--tool", "grep", "--", "grep", "-r", "kestrel"],
    ["cache", "stats", "--scope", "run1"],
    ["cache", "consolidate", "--scope", "run1", "--all"],
]
