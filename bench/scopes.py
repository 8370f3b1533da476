"""Scopes are walls: two people's conversations in one store, counted for what crosses between them.

Two LoCoMo dev conversations (../shared/bench/locomo_dev.json) are two people:
alice and bob, each one session. Their sessions arrive in turns, alice's then
bob's, each followed by a `split` of that person's session (context_limit set
low so that splits happen by themselves) and a `context` call with one of that
conversation's own questions; once the sessions are in, the questions go on in
turns until there were `--calls` split and context calls in all. Everything
runs in-process through `memctl.Memory`, the code the command line calls.

It runs twice on fresh stores: `unscoped`, as before scopes (both sessions
global, as every session without --scope is), and `scoped` (ingest --scope
user:alice / user:bob). Counted:

- context lines: lines of one person's context output that carry the other's
  message: its id, or its text (whole, or its first 40 characters, as a
  summary quotes it), for texts of 20 characters or more that the person
  never said themselves ("What gave you the idea?" is said by both);
- mixed topic files: topic files holding both people's messages;
- foreign messages: messages in a topic file that the topic's scope (or, in
  the unscoped run, its majority) does not own.

Target in the scoped run: 0, 0, 0.

    python bench/scopes.py [--calls 200] [--pair 0 1] [--context-limit 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from itertools import cycle
from pathlib import Path

from context import DATA, locomo_sessions

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PEOPLE = ("alice", "bob")
QUOTED_CHARS = 40   # a summary quotes a message's start: so many characters of it count as the message
SHORTEST = 20       # shorter texts ("Thanks!") are said by everyone and prove nothing


def conversations(pair: tuple[int, int]) -> dict[str, list[list[dict]]]:
    """Each person's sessions (LoCoMo's), their messages renamed into that person's session and ids."""
    data = json.loads(DATA.read_text())
    out = {}
    for person, index in zip(PEOPLE, pair):
        out[person] = [[{**m, "id": f"{person}-{m['id']}", "session": person} for m in turns]
                       for turns in locomo_sessions(data[index])]
    return out


def questions(pair: tuple[int, int]) -> dict[str, list[str]]:
    data = json.loads(DATA.read_text())
    return {person: [q["question"] for q in data[index]["qa"]] for person, index in zip(PEOPLE, pair)}


def foreign_lines(text: str, other: list[dict], own: list[dict]) -> int:
    """Lines of `text` that carry one of the `other` person's messages, and not words the person said too."""
    ids = {m["id"] for m in other}
    texts = [m["text"].strip() for m in other if len(m["text"].strip()) >= SHORTEST]
    quotes = set(texts) | {t[:QUOTED_CHARS] for t in texts}
    said = "\n".join(m["text"] for m in own)
    return sum(1 for line in text.splitlines()
               if any(mark in line for mark in ids)
               or any(quote in line and quote not in said for quote in quotes))


def topic_counts(store: Path) -> tuple[int, int]:
    """(topic files holding both people's messages, messages in a topic their person does not own)."""
    mixed = foreign = 0
    for path in (store / "topics").glob("t-*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        header = [r for r in records if r["type"] == "topic"][-1]
        owners = Counter(r["session"] for r in records if r["type"] == "message")
        if len(owners) > 1:
            mixed += 1
        owner = header.get("scope", "global").removeprefix("user:")
        if owner not in PEOPLE:  # unscoped: the topic is the person's who has most messages in it
            owner = owners.most_common(1)[0][0] if owners else None
        foreign += sum(n for person, n in owners.items() if person != owner)
    return mixed, foreign


def run(mode: str, root: Path, pair: tuple[int, int], calls: int, context_limit: int) -> dict:
    from memctl import Memory

    store = root / mode
    store.mkdir(parents=True)
    (store / "memctl.toml").write_text(f"[topics]\ncontext_limit = {context_limit}\n")
    memory = Memory(store)
    said = conversations(pair)
    asked = {person: cycle(q) for person, q in questions(pair).items()}
    stored: dict[str, list[dict]] = {person: [] for person in PEOPLE}
    leaked, made = Counter(), Counter()
    started = time.perf_counter()

    def context(person: str) -> None:
        built = memory.context(person, next(asked[person]))
        other = stored[PEOPLE[1 - PEOPLE.index(person)]]
        leaked[person] += foreign_lines(built.text, other, stored[person])
        made["context"] += 1

    rounds = max(len(s) for s in said.values())
    for number in range(rounds):
        for person in PEOPLE:
            if number >= len(said[person]) or sum(made.values()) >= calls:
                continue
            turns = said[person][number]
            memory.ingest(b"".join(json.dumps(m).encode() + b"\n" for m in turns), fmt="jsonl", keep_noise=True,
                          scope=f"user:{person}" if mode == "scoped" else None)
            stored[person] += turns
            memory.topics.split(person)
            made["split"] += 1
            if sum(made.values()) < calls:
                context(person)
    for person in cycle(PEOPLE):
        if sum(made.values()) >= calls:
            break
        context(person)
    mixed, foreign = topic_counts(store)
    return {"mode": mode, "calls": sum(made.values()), "splits": made["split"], "contexts": made["context"],
            "topics": len(list((store / "topics").glob("t-*.jsonl"))), "context_lines": sum(leaked.values()),
            "by_person": dict(leaked), "mixed_topic_files": mixed, "foreign_messages": foreign,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="split and context calls in all, per run")
    parser.add_argument("--pair", type=int, nargs=2, default=(0, 1), help="the LoCoMo conversations (0-3)")
    parser.add_argument("--context-limit", type=int, default=2000, help="[topics] context_limit")
    parser.add_argument("--only", choices=["unscoped", "scoped"])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-scopes-"))
    results = [run(mode, root, tuple(args.pair), args.calls, args.context_limit)
               for mode in ("unscoped", "scoped") if args.only in (None, mode)]
    for result in results:
        print(json.dumps(result))
    scoped = [r for r in results if r["mode"] == "scoped"]
    sys.exit(1 if any(r["context_lines"] or r["mixed_topic_files"] or r["foreign_messages"] for r in scoped) else 0)


if __name__ == "__main__":
    main()
