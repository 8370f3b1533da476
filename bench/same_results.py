"""Whether two checkouts of memctl search alike: a guard for changes meant to be speed only.

    python bench/same_results.py --store DIR --checkout OLD --save before.json
    python bench/same_results.py --store DIR --against before.json

OLD is the other checkout's directory (`git worktree add /tmp/old main`); without --checkout
the memctl beside this script is searched.

DIR is a store of LoCoMo turns (bench/latency.py --store DIR; the 6k one holds all 5,882).
Searches, in one process through `Memory` with the default settings and the clock pinned
(MEMCTL_NOW, default 2026-11-24: recency and time decay move scores by ~1e-7 a second):
  - QUESTIONS LoCoMo dev questions spread over all conversations, hybrid, k=10,
  - the same questions' first 100 with --mode vector k=3 and --mode bm25 k=10,
  - their first 50 with k=50, with --rank mera, with --min-score 0.3, and with [retrieval]
    fusion = "rrf",
  - up to 20 user lines of MADial's Chinese dialogues (the other embedding route), hybrid k=10,
  - with --madial DIR, MADial's dev dialogues against its memories (notes with scopes, built in
    DIR once, as bench/retrieval.py builds them): the scope and kind filters, memories' fields,
    queries of many lines,
and saves or compares each result's id, score and every --explain number (to 1e-6), in
order. Exits 1 with the first differences when the two disagree. With --learn-ahead each store's
index is opened and learned whole first (Memory.learn_ahead), as the resident server learns it
between calls: compare such a run with one without (or with a save of main's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "bench"
TOLERANCE = 1e-6


def questions(data: Path, count: int) -> list[str]:
    every = [qa["question"] for conversation in json.loads((data / "locomo_dev.json").read_text())
             for qa in conversation["qa"]]
    step = max(1, len(every) // count)
    return every[::step][:count]


def chinese(data: Path, count: int) -> list[str]:
    """Lines of MADial's Chinese dialogues (their user turns), as queries of the USE route."""
    path = data / "madial_zh_dialogues_dev.jsonl"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        for turn in json.loads(line)["dialogue"][1:]:
            if not turn.startswith("<Assistant>") and len(found) < count:
                found.append(turn.split(":", 1)[-1].strip().strip('"'))
    return found


def madial(memory_class, store: Path, data: Path) -> list[tuple[str, dict]]:
    """The MADial memory store (built in `store` the first time) and its dev dialogues as
    (query, filters) pairs, as bench/retrieval.py asks them."""
    if not store.exists():
        notes = [{"id": f"madial-{m['id']}", "text": m["event"], "section": m["scene"],
                  "scope": f"project:user-{m['user-id']}", "created_at": m["time"] + "T12:00:00Z",
                  "memory_class": "episodic"}
                 for line in (data / "madial_zh_memory.jsonl").read_text().splitlines()
                 for m in json.loads(line).values()]
        made = memory_class(str(store))
        made.ingest(b"".join(orjson.dumps(n) + b"\n" for n in notes), kind="memory", keep_noise=True, fmt="jsonl")
        made.index()
    dialogues = [json.loads(line) for line in (data / "madial_zh_dialogues_dev.jsonl").read_text().splitlines()]
    return [("".join(d["dialogue"][:d["test-turn"][0]]), {"scope": f"project:user-{d['user-id']}", "kinds": ("memory",)})
            for d in dialogues]


def run(store: str, data: Path, count: int, checkout: Path, madial_store: Path | None = None,
        learn: bool = False) -> dict[str, list]:
    sys.path.insert(0, str(checkout))
    from memctl import Memory

    if not Path(sys.modules["memctl"].__file__).is_relative_to(checkout):
        raise SystemExit(f"memctl came from {sys.modules['memctl'].__file__}, not {checkout}")

    def opened(path: str):
        memory = Memory(path)
        if learn:
            memory.search("anything", k=1)  # opens the index
            while not memory.learn_ahead(4096):
                pass
        return memory

    memory = opened(store)
    asked = questions(data, count)
    plans = [("hybrid", 10, asked, {}), ("vector", 3, asked[:100], {}), ("bm25", 10, asked[:100], {}),
             ("hybrid", 10, chinese(data, 20), {}), ("hybrid", 50, asked[:50], {}),
             ("hybrid", 10, asked[:50], {"rank": "mera"}), ("hybrid", 10, asked[:50], {"min_score": 0.3})]
    out: dict[str, list] = {}
    for mode, k, texts, options in plans:
        for text in texts:
            found = memory.search(text, k=k, mode=mode, **options)
            out[f"{mode} k={k}{''.join(f' {name}={value}' for name, value in options.items())}: {text}"] = [result.as_dict(explain=True) for result in found]
    os.environ["MEMCTL_RETRIEVAL_FUSION"] = "rrf"  # read by a Memory made now
    try:
        fused_by_rank = opened(store)
        for text in asked[:50]:
            out[f"rrf: {text}"] = [result.as_dict(explain=True) for result in fused_by_rank.search(text)]
    finally:
        del os.environ["MEMCTL_RETRIEVAL_FUSION"]
    if madial_store is not None:
        asked_madial = madial(Memory, madial_store, data)
        notes = opened(str(madial_store))
        for text, filters in asked_madial:
            found = notes.search(text, k=10, **filters)
            out[f"madial {filters['scope']}: {text}"] = [result.as_dict(explain=True) for result in found]
    return out


def differences(before: dict[str, list], after: dict[str, list]) -> list[str]:
    out = []
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old is None or new is None:
            out.append(f"{key}: only {'after' if old is None else 'before'}")
            continue
        if [r["id"] for r in old] != [r["id"] for r in new]:
            out.append(f"{key}: ids {[r['id'] for r in old]} -> {[r['id'] for r in new]}")
            continue
        for one, other in zip(old, new):
            for name, value in _numbers(one):
                moved = dict(_numbers(other)).get(name)
                if moved is None or abs(moved - value) > TOLERANCE:
                    out.append(f"{key}: {one['id']} {name} {value} -> {moved}")
            if {**one, "score": 0, "explain": 0} != {**other, "score": 0, "explain": 0} or \
                    {n for n, _ in _numbers(one)} != {n for n, _ in _numbers(other)} or \
                    _words(one["explain"]) != _words(other["explain"]):
                out.append(f"{key}: {one['id']} differs beyond its numbers")
    return sorted(out)


def _numbers(result: dict) -> list[tuple[str, float]]:
    found = [("score", result["score"])]
    found += [(f"explain.{name}", value) for name, value in result["explain"].items()
              if isinstance(value, (int, float)) and not isinstance(value, bool)]
    return found


def _words(explain: dict) -> dict:
    return {name: value for name, value in explain.items() if not isinstance(value, (int, float))
            or isinstance(value, bool)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--checkout", type=Path, default=REPO, help="the memctl checkout to search with")
    parser.add_argument("--madial", type=Path, help="also MADial's memories, a store built here once")
    parser.add_argument("--learn-ahead", action="store_true", help="learn each index whole before its searches")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--save", type=Path)
    what.add_argument("--against", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("MEMCTL_NOW", "2026-11-24T00:00:00Z")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    found = run(args.store, args.data, args.questions, args.checkout, args.madial, args.learn_ahead)
    searches, results = len(found), sum(map(len, found.values()))
    if args.save:
        args.save.write_bytes(orjson.dumps(found))
        print(f"saved {searches} searches, {results} results to {args.save}")
        return
    problems = differences(orjson.loads(args.against.read_bytes()), found)
    for line in problems[:20]:
        print(line)
    print(f"{searches} searches, {results} results: "
          f"{'identical' if not problems else f'{len(problems)} differences'} (ids in order; score and "
          f"every --explain number to {TOLERANCE:g})")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
