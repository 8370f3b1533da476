"""Retrieval quality on third-party data, through memctl's command line.

    python bench/retrieval.py locomo [--data ../shared/bench] [-- extra search flags]
    python bench/retrieval.py madial [--data ../shared/bench] [-- extra search flags]

LoCoMo (English, Maharana et al. 2024), the paper's protocol: one store per
conversation, one message per turn (an image's caption is part of its
turn), the question as the query; recall@k is the share of a question's
evidence turns in the top k, averaged over questions with evidence, all five
categories. "Now" is pinned to the day after the conversation's last session,
so recency and decay see the conversation as it was.

MADial-Bench (Chinese): each user's memories are notes in their own scope
(project:user-N); the query is the dialogue up to the test turn, searched in
that user's scope; recall@k = |top k ∩ relevant| / |relevant|.

The data stays in shared/bench; nothing is copied into the repository.
Extra flags after `--` go to every `memctl search` (e.g. -- --mode bm25).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import orjson

MEMCTL = str(Path(sys.executable).parent / "memctl")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench"
KS = (5, 10, 25, 50)


def memctl(store: Path, *args: str, stdin: bytes = b"", env: dict | None = None) -> bytes:
    done = subprocess.run([MEMCTL, "--store", str(store), *args], input=stdin, capture_output=True,
                          env={**os.environ, **(env or {})})
    if done.returncode not in (0, 1):
        sys.exit(f"memctl {' '.join(args)} failed:\n{done.stderr.decode()}")
    return done.stdout


def batch_search(store: Path, queries: list[dict], extra: list[str], env: dict) -> dict:
    data = b"".join(orjson.dumps(q) + b"\n" for q in queries)
    out = memctl(store, "search", "--batch", "-", "-k", str(max(KS)), *extra, stdin=data, env=env)
    return {row["query_id"]: [r["id"] for r in row["results"]] for row in map(orjson.loads, out.splitlines())}


def locomo_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def run_locomo(data: Path, extra: list[str]) -> None:
    conversations = json.loads((data / "locomo_dev.json").read_text())
    hits: dict[int, list[list[float]]] = defaultdict(list)
    for conversation in conversations:
        convo = conversation["conversation"]
        messages, last = [], None
        sessions = sorted((int(m.group(1)), key) for key in convo if (m := re.fullmatch(r"session_(\d+)", key)))
        for number, key in sessions:
            start = locomo_time(convo[f"{key}_date_time"])
            last = start
            for offset, turn in enumerate(convo[key]):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                messages.append({"id": turn["dia_id"].replace(":", "-"), "session": f"session-{number}",
                                 "speaker": turn["speaker"], "text": text,
                                 "ts": (start + timedelta(seconds=offset)).isoformat()})
        env = {"MEMCTL_NOW": (last + timedelta(days=1)).isoformat()}
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "store"
            memctl(store, "ingest", "--keep-noise", "-f", "jsonl", "-",
                   stdin=b"".join(orjson.dumps(m) + b"\n" for m in messages), env=env)
            memctl(store, "index", env=env)
            questions = [q for q in conversation["qa"] if q.get("evidence")]
            answers = batch_search(store, [{"id": i, "query": q["question"]} for i, q in enumerate(questions)],
                                   extra, env)
        for i, question in enumerate(questions):
            evidence = {e.replace(":", "-") for item in question["evidence"] for e in item.split()}
            evidence = {e.rstrip(";,") for e in evidence}
            ranked = answers.get(i, [])
            hits[question["category"]].append([len(evidence & set(ranked[:k])) / len(evidence) for k in KS])
    report("LoCoMo", hits, {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"})


def run_madial(data: Path, extra: list[str]) -> None:
    notes = []
    for line in (data / "madial_zh_memory.jsonl").read_text().splitlines():
        for memory in json.loads(line).values():
            notes.append({"id": f"madial-{memory['id']}", "text": memory["event"],
                          "section": memory["scene"], "scope": f"project:user-{memory['user-id']}",
                          "created_at": memory["time"] + "T12:00:00Z", "memory_class": "episodic"})
    dialogues = [json.loads(line) for line in (data / "madial_zh_dialogues_dev.jsonl").read_text().splitlines()]
    env = {"MEMCTL_NOW": "2024-01-01T00:00:00Z"}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        memctl(store, "ingest", "--kind", "memory", "--keep-noise", "-f", "jsonl", "-",
               stdin=b"".join(orjson.dumps(n) + b"\n" for n in notes), env=env)
        memctl(store, "index", env=env)
        queries = [{"id": d["id"], "query": "".join(d["dialogue"][:d["test-turn"][0]]),
                    "scope": f"project:user-{d['user-id']}", "kind": "memory"} for d in dialogues]
        answers = batch_search(store, queries, extra, env)
    hits: dict[int, list[list[float]]] = defaultdict(list)
    for dialogue in dialogues:
        relevant = {f"madial-{r}" for r in dialogue["relevant-id"]}
        ranked = answers.get(dialogue["id"], [])
        hits[0].append([len(relevant & set(ranked[:k])) / len(relevant) for k in KS])
    report("MADial-Bench zh", hits, {0: "all"})


def report(name: str, hits: dict[int, list[list[float]]], labels: dict[int, str]) -> None:
    rows = [(labels[c], hits[c]) for c in sorted(hits)]
    if len(rows) > 1:
        rows.insert(0, ("all", [h for c in sorted(hits) for h in hits[c]]))
    print(f"\n{name}: recall@k\n")
    print("| questions | n | " + " | ".join(f"@{k}" for k in KS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in KS) + " |")
    for label, values in rows:
        means = [sum(v[i] for v in values) / len(values) for i in range(len(KS))]
        print(f"| {label} | {len(values)} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=["locomo", "madial"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    (run_locomo if args.dataset == "locomo" else run_madial)(args.data, extra)


if __name__ == "__main__":
    main()
