"""Topic context vs plain retrieval at the same token budget (issue 12), on ../shared/bench/locomo_dev.json.

For each conversation: its sessions go into one memctl session, a LoCoMo
session at a time, and after each `split` runs as an agent's loop would
(context_limit set low enough that splitting happens; the split decides by
itself whether the context is over 70%). Then each question is the new
message of `context --no-record --budget B`; evidence recall is the share of
the question's evidence turns present anywhere in the assembled context.
The baseline at the same budget, counted with the same tokenizer and the same
message rendering: the last 20 messages, then `search` results (hybrid, k=50)
packed in rank order while they fit. Both run in-process through
`memctl.Memory` (the same code the command line calls; a process per
question would take hours here); `--latency N` times N cold `memctl context`
processes (each a fresh Python, bytecode written as an install has it) on a
store of `--latency-messages` messages: the dev conversations' turns,
repeated under new ids until there are that many, in one session, split
into topics and indexed.

    python bench/context.py [--limit 60] [--context-limit 4000] [--latency 15] [--latency-messages 6000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from installed import compile_package

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("MEMCTL_BENCH_DATA", REPO.parent / "shared" / "bench")) / "locomo_dev.json"
BUDGETS = (1000, 2000, 4000, 8000)


def locomo_sessions(conversation: dict) -> list[list[dict]]:
    convo = conversation["conversation"]
    numbers = sorted(int(m.group(1)) for key in convo if (m := re.fullmatch(r"session_(\d+)", key)))
    out = []
    for number in numbers:
        start = datetime.strptime(convo[f"session_{number}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
        turns = []
        for offset, turn in enumerate(convo[f"session_{number}"]):
            text = turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
            turns.append({"id": turn["dia_id"].replace(":", "-"), "session": "s", "speaker": turn["speaker"],
                          "role": "user", "text": text, "ts": (start + timedelta(seconds=offset)).isoformat() + "Z"})
        out.append(turns)
    return out


def evidence_of(question: dict) -> set[str]:
    return {e.replace(":", "-").rstrip(";,") for item in question["evidence"] for e in item.split()}


def latency_store(root: Path, messages: int, context_limit: int) -> Path:
    """A store of one session of `messages` LoCoMo turns (copies get new ids), split and indexed."""
    from memctl import Memory

    root.mkdir(parents=True)
    (root / "memctl.toml").write_text(f"[topics]\ncontext_limit = {context_limit}\n")
    conversations = json.loads(DATA.read_text())
    lines = []
    for copy in range(1 + messages // sum(len(t) for c in conversations for t in locomo_sessions(c))):
        for conversation in conversations:
            for turns in locomo_sessions(conversation):
                lines += [json.dumps({**t, "id": f"{conversation['sample_id']}-{copy}-{t['id']}"}) for t in turns]
    memory = Memory(root)
    memory.ingest(("\n".join(lines[:messages]) + "\n").encode(), fmt="jsonl", keep_noise=True)
    memory.topics.split("s")
    memory.index()
    return root


def baseline(memory, messages: list[dict], question: str, budget: int) -> set[str]:
    from memctl.text.tokens import count_tokens
    from memctl.topics.context import render_message

    recent = messages[-19:] + [{"id": "new", "role": "user", "text": question}]
    used = sum(count_tokens(render_message(m)) + 1 for m in recent)
    shown = {m["id"] for m in recent}
    by_id = {m["id"]: m for m in messages}
    for result in memory.search(question, k=50, kinds=["message"], min_score=0.0):
        message = by_id.get(result.record_id)
        if message is None or message["id"] in shown:
            continue
        cost = count_tokens(render_message(message)) + 1
        if used + cost <= budget:
            used += cost
            shown.add(message["id"])
    return shown


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=60, help="questions per conversation (0: all)")
    parser.add_argument("--context-limit", type=int, default=4000, help="[topics] context_limit for the splits")
    parser.add_argument("--latency", type=int, default=15, help="cold `memctl context` runs to time")
    parser.add_argument("--latency-messages", type=int, default=6000, help="messages in the store they run on")
    args = parser.parse_args()
    compile_package()
    from memctl import Memory

    recall = {b: {"topic": [], "baseline": []} for b in BUDGETS}
    store = None
    tmp = tempfile.mkdtemp(prefix="bench-context-")
    for conversation in json.loads(DATA.read_text()):
        store = Path(tmp) / conversation["sample_id"]
        store.mkdir(parents=True)
        (store / "memctl.toml").write_text(f"[topics]\ncontext_limit = {args.context_limit}\n")
        memory = Memory(store)
        sessions = locomo_sessions(conversation)
        last = datetime.fromisoformat(sessions[-1][-1]["ts"].rstrip("Z"))
        os.environ["MEMCTL_NOW"] = (last + timedelta(days=1)).isoformat() + "Z"
        started = time.perf_counter()
        for turns in sessions:
            memory.ingest(b"".join(json.dumps(m).encode() + b"\n" for m in turns), fmt="jsonl", keep_noise=True)
            memory.topics.split("s")
        memory.index()
        topics = memory.topics.list()
        print(f"{conversation['sample_id']}: {sum(map(len, sessions))} messages, {len(topics)} topics, "
              f"{sum(t.header.get('messages', 0) for t in topics)} split, {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
        messages = [m for turns in sessions for m in turns]
        questions = [q for q in conversation["qa"] if q.get("evidence")]
        if args.limit:
            questions = questions[::max(1, len(questions) // args.limit)][:args.limit]
        for question in questions:
            evidence = evidence_of(question)
            for budget in BUDGETS:
                built = memory.context("s", question["question"], budget=budget, record=False)
                shown = {m["id"] for s in built.sections for m in s["messages"]}
                recall[budget]["topic"].append(len(evidence & shown) / len(evidence))
                base = baseline(memory, messages, question["question"], budget)
                recall[budget]["baseline"].append(len(evidence & base) / len(evidence))
    print("| B (tokens) | topic context | retrieval baseline | difference | questions |")
    print("| --- | --- | --- | --- | --- |")
    for budget in BUDGETS:
        topic, base = (statistics.mean(recall[budget][k]) for k in ("topic", "baseline"))
        print(f"| {budget:,} | {topic:.3f} | {base:.3f} | {topic - base:+.3f} | {len(recall[budget]['topic'])} |")
    if args.latency:
        store = latency_store(Path(tmp) / "latency", args.latency_messages, args.context_limit)
        times = []
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for _ in range(args.latency):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "memctl", "--store", str(store), "context", "--session", "s",
                                   "--message", "What did Caroline research for her adoption?", "--budget", "4000",
                                   "--no-record"], capture_output=True, env=env)
            times.append(time.perf_counter() - start)
            if done.returncode:
                sys.exit(done.stderr.decode())
        print(f"\n`memctl context` cold, built-in, {args.latency_messages} messages: p50 "
              f"{statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, "
              f"n={len(times)})")

if __name__ == "__main__":
    main()
