"""Ingest throughput: N messages in one `memctl ingest` process.

    python bench/ingest_throughput.py [--messages 10000] [--index]

With --index, the import a new user makes: the same messages ingested into a
fresh store, then `memctl index` (cold process, the model's export already
cached), each timed.

Messages are generated (several sessions and days, English and Chinese)
and go through the real command line, into a fresh store.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

MEMCTL = str(Path(sys.executable).parent / "memctl")
WORDS = ("deploy", "database", "schema", "tenant", "invoice", "bakery", "timeout", "retry", "cache",
         "report", "庫存", "報表", "分店", "部署", "資料庫", "排程", "客戶", "會議")


def messages(count: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    lines = []
    for n in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
        lines.append(orjson.dumps({
            "session": f"s{n // 200}", "role": "user" if n % 2 == 0 else "assistant",
            "ts": f"2026-{1 + n // 3000 % 12:02d}-{1 + n // 100 % 28:02d}T{n % 24:02d}:00:00Z",
            "text": f"message {n}: {text}"}))
    return b"\n".join(lines) + b"\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--index", action="store_true", help="time ingest + memctl index into a fresh store")
    args = parser.parse_args()
    data = messages(args.messages)
    if args.index:
        with tempfile.TemporaryDirectory() as store:
            start = time.perf_counter()
            subprocess.run([MEMCTL, "--store", store, "ingest", "-f", "jsonl", "-"], input=data,
                           capture_output=True, check=True)
            ingested = time.perf_counter() - start
            indexed = subprocess.run([MEMCTL, "--store", store, "index"], capture_output=True, check=True)
            total = time.perf_counter() - start
        print("| messages | ingest s | ingest + index s | messages/s | index says |\n| --- | --- | --- | --- | --- |")
        print(f"| {args.messages} | {ingested:.1f} | {total:.1f} | {args.messages / total:.0f} | "
              f"{indexed.stdout.decode().strip()} |")
        return
    with tempfile.TemporaryDirectory() as store:
        start = time.perf_counter()
        done = subprocess.run([MEMCTL, "--store", store, "ingest", "-f", "jsonl", "-"], input=data,
                              capture_output=True, check=True)
        seconds = time.perf_counter() - start
        stored = len(done.stdout.splitlines())
        start = time.perf_counter()
        subprocess.run([MEMCTL, "--store", store, "ingest", "-f", "jsonl", "-"], input=data,
                       capture_output=True, check=True)
        again = time.perf_counter() - start
    print("| messages | stored | seconds | messages/s | re-ingest (all duplicates) s |\n| --- | --- | --- | --- | --- |")
    print(f"| {args.messages} | {stored} | {seconds:.2f} | {stored / seconds:.0f} | {again:.2f} |")


if __name__ == "__main__":
    main()
