"""Index throughput and cold-process search latency and memory, at a given store size.

    python bench/latency.py --messages 6000 [--queries 20] [--data ../shared/bench]

Builds a store of N messages from the LoCoMo turns (repeated under new
session names to reach N), then measures through the command line:
  - `memctl index` on the fresh store (messages/s, model export excluded),
  - `memctl index` again with nothing changed, and after 20 new messages,
  - `memctl search` as a fresh process per query, hybrid and --mode bm25:
    p50 / p90 wall time and peak RSS (the process's own maximum resident set).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

MEMCTL = str(Path(sys.executable).parent / "memctl")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench"


def peak_rss_mb(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS of one process, measured by wait4 on that process alone."""
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                       (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, _, usage = os.wait4(pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss // 1024


def turns(data: Path) -> tuple[list[dict], list[str]]:
    conversations = json.loads((data / "locomo_dev.json").read_text())
    messages, questions = [], []
    for conversation in conversations:
        convo = conversation["conversation"]
        for key, value in convo.items():
            if key.startswith("session_") and isinstance(value, list):
                for turn in value:
                    messages.append({"speaker": turn["speaker"], "text": turn["text"], "session": key})
        questions += [q["question"] for q in conversation["qa"]]
    return messages, questions


def build_store(store: str, messages: int, data: Path) -> list[str]:
    """Ingest `messages` LoCoMo turns into `store` and index it; returns the LoCoMo questions."""
    base, questions = turns(data)
    lines = []
    for n in range(messages):
        turn = base[n % len(base)]
        lines.append(orjson.dumps({"id": f"m{n}", "session": f"{turn['session']}-r{n // len(base)}",
                                   "speaker": turn["speaker"], "role": "user", "text": turn["text"],
                                   "ts": f"2026-{1 + n * 11 // messages:02d}-15T10:00:00Z"}))
    common = [MEMCTL, "--store", store]
    subprocess.run([*common, "ingest", "--keep-noise", "-f", "jsonl", "-"], input=b"\n".join(lines),
                   check=True, capture_output=True)
    subprocess.run([*common, "index"], check=True, capture_output=True, cwd=Path(store).parent)  # warms the model export
    return questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=6000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        common = [MEMCTL, "--store", store]
        questions = build_store(store, args.messages, args.data)
        subprocess.run(["rm", "-rf", str(Path(store) / ".index")], check=True)
        fresh, fresh_rss = peak_rss_mb([*common, "index"])
        unchanged, _ = peak_rss_mb([*common, "index"])
        extra = b"\n".join(orjson.dumps({"id": f"new{n}", "text": f"a brand new message number {n} about "
                                                                   "sourdough starters"}) for n in range(20))
        subprocess.run([*common, "ingest", "-f", "jsonl", "-"], input=extra, check=True, capture_output=True)
        incremental, _ = peak_rss_mb([*common, "index"])
        rows = []
        for mode in ("hybrid", "bm25"):
            times, rss = [], []
            for question in questions[:args.queries]:
                seconds, peak = peak_rss_mb([*common, "search", "--json", "--mode", mode, question])
                times.append(seconds * 1000)
                rss.append(peak)
            times.sort()
            rows.append((mode, statistics.median(times), times[int(len(times) * 0.9) - 1], max(rss)))
    print(f"\nstore of {args.messages} messages ({os.cpu_count()} cores)\n")
    print("| step | result |\n| --- | --- |")
    print(f"| index, fresh | {fresh:.1f} s = {args.messages / fresh:.0f} messages/s, peak RSS {fresh_rss} MB |")
    print(f"| index, nothing changed | {unchanged * 1000:.0f} ms |")
    print(f"| index, 20 messages added | {incremental * 1000:.0f} ms |")
    for mode, p50, p90, rss in rows:
        print(f"| search --mode {mode}, cold process | p50 {p50:.0f} ms, p90 {p90:.0f} ms, peak RSS {rss} MB |")


if __name__ == "__main__":
    main()
