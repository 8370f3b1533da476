"""Bad inputs for memctl, one generator a category, each drawing from a `random.Random`.

Every case is something memctl must refuse with exit 2 and one line on
stderr (`memctl: error: ...`), leaving the store's bytes as they were:
numbers out of range, deep nesting, wrong types, bad bytes, malformed notes,
usage errors and corrupt store files. `bench/torture.py --fuzz N` runs many;
tests/test_fuzz.py runs a bounded number through hypothesis.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Case:
    category: str
    args: list[str]
    stdin: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # store files planted (corrupted) before the run
    input_file: bytes | None = None  # written to a file outside the store; "{input}" in args names it
    input_suffix: str = ".json"

    def describe(self) -> str:
        planted = f" with {', '.join(self.files)} planted" if self.files else ""
        data = self.stdin if self.stdin is not None else self.input_file
        shown = "" if data is None else f" <- {data[:60]!r}{'...' if len(data) > 60 else ''}"
        return f"[{self.category}] memctl {' '.join(self.args)}{planted}{shown}"


# Values each flag must refuse (values it accepts are not here: "1e308" is a fine --min-score).
_BAD_NUMBERS = {
    ("search", "-k"): ["99999999999999999999", "100001", "0", "-1", "inf", "nan", "1.5", "abc", "1e3", ""],
    ("search", "--min-score"): ["inf", "-inf", "nan", "-1", "abc", "1e400", ""],
    ("search", "--budget"): ["0", "-5", "abc", "inf", "1.5"],
    ("ingest", "--ttl"): ["inf", "nan", "1e308", "-1", "0", "abc", "87601", "-inf", "1e400"],
    ("state", "--window"): ["4", "0", "-3", "abc", "99999999999999999999", "nan", "5.5"],
    ("state", "--threshold"): ["0", "1.5", "nan", "inf", "-1", "abc", "1e400"],
}
_WRONG_VALUES = [b"5", b"-1.5", b"true", b"null", b"[]", b'["x", 1]', b"{}", b'{"a": 1}', b"1e400"]
_FIELD_NAMES = ["text", "role", "speaker", "id", "session", "ts"]
_NOTE_FIELDS = {  # schema field -> values it must refuse
    "scope": [b'"team:x"', b'"nonsense"', b"5", b'""'],
    "memory_class": [b'"opinion"', b"1", b"null"],
    "user_weight": [b"11", b"-1", b'"high"', b"1e400"],
    "importance": [b"2", b"-0.5", b'"very"'],
    "summary": [b'"' + b"x" * 51 + b'"', b"42"],
    "created_at": [b'"yesterday"', b'"2026-13-45"', b"[1]"],
    "status": [b'"gone"', b"0"],
    "supersedes": [b'"mem-x"', b"[1, 2]"],
}


def number_case(rng: random.Random) -> Case:
    (command, flag), values = rng.choice(list(_BAD_NUMBERS.items()))
    value = rng.choice(values)
    if command == "search":
        extra = ["--layered"] if flag == "--budget" else []
        return Case("number", ["search", *extra, flag, value, "kestrel database"])
    if command == "ingest":
        return Case("number", ["ingest", "--pending", flag, value, "-"], stdin=b"a note worth keeping")
    return Case("number", ["state", "config", flag, value])


def deep_case(rng: random.Random) -> Case:
    depth = rng.choice([101, 255, 1000, 5000, 100_000])
    open_, close = (b"[", b"]") if rng.random() < 0.7 else (b'{"a":', b"}")
    nested = open_ * depth + (b"1" if open_ == b'{"a":' else b"") + close * depth
    where = rng.choice(["stdin-json", "file-json", "jsonl-value", "batch-value"])
    if where == "stdin-json":
        return Case("deep", ["ingest", "-"], stdin=nested)
    if where == "file-json":
        return Case("deep", ["ingest", "{input}"], input_file=nested)
    if where == "jsonl-value":
        return Case("deep", ["ingest", "-f", "jsonl", "-"], stdin=b'{"text": "deep value here", "x": ' + nested + b"}\n")
    return Case("deep", ["search", "--batch", "-"], stdin=b'{"id": 1, "query": "x", "k": ' + nested + b"}\n")


def type_case(rng: random.Random) -> Case:
    kind = rng.choice(["message", "note", "batch", "state-record"])
    if kind == "message":
        name = rng.choice(_FIELD_NAMES)
        # A number is a time in Unix seconds (true reads as 1, null as "now"): not wrong for ts.
        value = rng.choice([v for v in _WRONG_VALUES if not (name == "ts" and v in (b"5", b"-1.5", b"true", b"null"))])
        record = b'{"text": "a fine message", "' + name.encode() + b'": ' + value + b"}\n"
        if name == "text" and value == b"null":
            record = b'{"text": null}\n'
        return Case("type", ["ingest", "-f", "jsonl", "-"], stdin=record)
    if kind == "note":
        name, values = rng.choice(list(_NOTE_FIELDS.items()))
        record = b'{"text": "a fine note", "' + name.encode() + b'": ' + rng.choice(values) + b"}\n"
        return Case("type", ["ingest", "--kind", "memory", "-f", "jsonl", "-"], stdin=record)
    if kind == "batch":
        line = rng.choice([b'{"id": 1, "query": "x", "k": 0}', b'{"id": 1, "query": "x", "k": "5"}',
                           b'{"id": 1, "query": "x", "mode": "fast"}', b'{"id": 1, "query": 5}',
                           b'{"id": 1, "query": "x", "min_score": "high"}', b'{"id": 1, "query": "x", "nope": 1}',
                           b'{"id": 1, "query": "x", "k": 1e400}', b'{"id": 1, "query": "x", "k": 100000000000}',
                           b'{"id": 1, "query": "x", "scope": "team:x"}', b'{"id": 1, "query": "x", "since": "later"}'])
        return Case("type", ["search", "--batch", "-"], stdin=line + b"\n")
    stdin = rng.choice([b"not json at all\n", b"[1, 2, 3]\n", b'{"id": "x"}\n{"broken\n', b"\xff\xfe\x00\x01"])
    return Case("type", ["state", "record", "-"], stdin=stdin)


def bytes_case(rng: random.Random) -> Case:
    data = rng.choice([b"\x00\x01binary\x02", b"caf\xe9 latin-1 text\n", b'{"text": "cut sho',
                       b'[{"text": "a"}, 42]', b'{"text": ""}\n', b'{"content": [{"type": "image"}]}\n',
                       b"[1]\n", b'{"text": "ok message"} trailing\n'])
    fmt = rng.choice(["auto", "jsonl", "json"])
    if data.startswith(b"\x00") or data.startswith(b"caf"):
        fmt = rng.choice(["auto", "jsonl", "json", "text"])
    return Case("bytes", ["ingest", "-f", fmt, "-"], stdin=data)


def markdown_case(rng: random.Random) -> Case:
    field_lines = [b"id: n1", b"summary: a note", b"memory_class: episodic", b"scope: global"]
    problem = rng.choice(["duplicate", "unclosed", "bad-value", "not-key-value", "no-text"])
    if problem == "duplicate":
        key = rng.choice(field_lines)
        field_lines.insert(rng.randrange(len(field_lines) + 1), key.split(b":")[0] + b": again")
    elif problem == "unclosed":
        return Case("markdown", ["ingest", "-f", "md", "-"],
                    stdin=b"## S\n\n<!-- memory\n" + b"\n".join(field_lines) + b"\nbody without a close\n")
    elif problem == "bad-value":
        name, values = rng.choice([(k, v) for k, v in _NOTE_FIELDS.items() if k != "summary"])
        field_lines.append(name.encode() + b": " + rng.choice(values))
    elif problem == "not-key-value":
        field_lines.append(b"this line has no colon")
    body = b"" if problem == "no-text" else b"The note's text.\n"
    return Case("markdown", ["ingest", "-f", "md", "-"],
                stdin=b"## S\n\n<!-- memory\n" + b"\n".join(field_lines) + b"\n-->\n" + body)


def usage_case(rng: random.Random) -> Case:
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz-") for _ in range(rng.randint(1, 12)))
    return Case("usage", rng.choice([
        ["search", f"--{word}x", "q"], ["ingest", f"--{word}x", "-"], [f"nosuch{word}"],
        ["search", "--mode", f"fast{word}", "q"], ["search", "--kind", f"k{word}", "q"],
        ["ingest", "-f", f"xml{word}", "-"], ["review", "confirm"], ["review", "reject"], ["search"],
        ["search", "--batch", "-", "also a query"], ["health", "check", "--dry-run"],
        ["search", "--history"], ["state", "record", "a", "b"], ["search", "-k"],
        ["ingest", "--supersedes", "mem-kestrel-db", "-"],
    ]), stdin=b'{"text": "one message"}\n{"text": "and another"}\n')


def store_file_case(rng: random.Random) -> Case:
    target = rng.choice(["state", "toml", "pending", "journal"])
    if target == "state":
        junk = rng.choice([b'{"proportions": {"a": "b"}}', b"[1, 2", b'{"turns": 5}', b'{"window_size": 4}',
                           b'{"surprise": 1}', b"[" * 5000 + b"]" * 5000, b'{"miss_count": {"a": -1}}'])
        return Case("store-file", ["state", "show"], files={"index_state.json": junk})
    if target == "toml":
        junk = rng.choice([b'[ingest]\ndefault_scope = "nonsense"\n', b"[retrieval]\nvector_weight = nan\n",
                           b"[nosuch]\nx = 1\n", b"not toml ===\n", b"[retrieval]\ncandidates = 0\n",
                           b'[ingest]\ndefault_memory_class = "rumour"\n', b"[retrieval]\nhard_min_score = inf\n",
                           b"[ingest]\npending_ttl_hours = 1e308\n", b'[embedding]\nprecision = "int4"\n'])
        return Case("store-file", ["search", "kestrel"], files={"memctl.toml": junk})
    if target == "pending":
        fields = rng.choice([b'{"scope": "team:x"}', b'{"user_weight": 11}', b"[1]", b'{"1x": 2}'])
        line = (b'{"id": "p1", "section": "S", "text": "a held note", "fields": ' + fields
                + b', "pending_since": "2026-11-19T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}\n')
        return Case("store-file", ["review", "confirm", "p1"], files={"pending.jsonl": line})
    op = rng.choice([b'{"op": "append", "path": "/etc/passwd", "size": 0}',
                     b'{"op": "append", "path": "../outside", "size": 0}',
                     b'{"op": "append", "path": "sessions/../../x", "size": 0}',
                     b'{"op": "append", "size": 0}', b'{"op": "append", "path": "MEMORY.md", "size": "0"}',
                     b'{"op": "replace", "path": "MEMORY.md", "backup": "../../etc/passwd"}',
                     b'{"op": "explode", "path": "MEMORY.md"}', b"7"])
    # a writer refuses a journal it cannot trust; a reader reads on with a warning (README: The store)
    return Case("store-file", ["ingest", "-"],
                files={".journal/journal.json": b'{"store": "/elsewhere", "ops": [' + op + b"]}"},
                stdin=b"a message")


GENERATORS = {"number": number_case, "deep": deep_case, "type": type_case, "bytes": bytes_case,
              "markdown": markdown_case, "usage": usage_case, "store-file": store_file_case}


def case(rng: random.Random) -> Case:
    """One bad input, of a category chosen evenly."""
    return GENERATORS[rng.choice(sorted(GENERATORS))](rng)
