"""Index throughput and cold-process search latency and memory, at a given store size.

    python bench/latency.py --messages 6000 [--queries 20] [--update 5] [--store DIR] [--data ../shared/bench]

Builds a store of N messages from the LoCoMo turns (repeated under new
session names to reach N), then measures through the command line:
  - `memctl index` on the fresh store (messages/s, model export excluded),
  - `memctl index` again with nothing changed,
  - `--update` rounds of 20 new messages, each `memctl ingest` then a timed
    `memctl index` (p50 and slowest round, files read), beside a process that
    only loads the embedding model and embeds the same 20 texts: the floor
    under any update that embeds something, and the same rounds in one
    long-lived process (the MCP server's case),
  - `memctl search` as a fresh process per query, hybrid and --mode bm25:
    p50 / p90 wall time and peak RSS.

With --store DIR the store is built there once and kept: a later run reuses
it and its index (the fresh-index step is then skipped), so that two builds
of memctl can be compared on the same store without re-embedding it.

The package is compiled first (bench/installed.py): without bytecode a
hybrid search took 458 ms against 297 ms with it.

Peak RSS is the measured process's own: each runs under GNU time
(/usr/bin/time), which forks it from a small process. Spawned straight from
this script (posix_spawn shares the parent's memory until exec), Linux
counts the parent's high-water mark in the child's ru_maxrss, and what was
measured was this script's own memory (the turns of a 50k store: 229 MB).
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
from typing import NamedTuple

import orjson
from installed import compile_package

MEMCTL = str(Path(sys.executable).parent / "memctl")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench"
NEW_MESSAGES = 20


class Run(NamedTuple):
    seconds: float   # wall
    cpu: float       # user + system seconds: what the process cost, whatever else shares the cores
    peak_mb: int     # peak RSS of the process itself
    stdout: bytes


def measure(argv: list[str]) -> Run:
    """One process under GNU time (exit 1, nothing found, is fine)."""
    with tempfile.NamedTemporaryFile("r") as usage:
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", usage.name, *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        if done.returncode > 1:
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}")
        user, system, peak = usage.read().split()[-3:]
        return Run(seconds, float(user) + float(system), int(peak) // 1024, done.stdout)


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
    """Ingest `messages` LoCoMo turns into `store` and index it; returns the LoCoMo questions,
    also written beside the store (STORE.questions, a line each: what bench/server.py asks)."""
    base, questions = turns(data)
    Path(store + ".questions").write_text("".join(f"{question}\n" for question in questions))
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


def new_messages() -> bytes:
    """NEW_MESSAGES JSON lines never stored before: a stamp in the text too, since a text embedded
    before would be copied, not embedded."""
    stamp = int(time.time() * 1000)  # 13 digits, as the model-only texts have: the same token count
    return b"\n".join(orjson.dumps({"id": f"new{stamp}-{n}", "text": f"a brand new message {stamp}-{n} "
                                    "about sourdough starters"}) for n in range(NEW_MESSAGES))


def updates(common: list[str], rounds: int) -> list[tuple[Run, int]]:
    """The `memctl index` run after each round of new messages, and the files it read."""
    out = []
    for _ in range(rounds):
        subprocess.run([*common, "ingest", "-f", "jsonl", "-"], input=new_messages(), check=True,
                       capture_output=True)
        run = measure([*common, "index", "--json"])
        out.append((run, orjson.loads(run.stdout).get("files_read", -1)))
    return out


# Only the embedding model, in a fresh process: import, tokenizer, ONNX session (as an update of
# a few texts opens it) and the 20 texts an update embeds (each with the turn before it).
_MODEL_ONLY = """
import os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the CLI sets it before numpy loads
from dataclasses import replace
from memctl import config
from memctl.index.embedders import open_embedder
settings = config.Embedding()
texts = [f"a brand new message 1763800000000-{n} about sourdough starters" for n in range(21)]
open_embedder(replace(settings, threads=settings.query_threads)).embed(
    [f"{before}\\n{text}" for before, text in zip(texts, texts[1:])])
"""


# The same rounds in one long-lived process, as the MCP server or a program using Memory runs them;
# the first round loads the model and is left out.
_LONG_LIVED = """
import sys, time, orjson
from latency import NEW_MESSAGES, new_messages
from memctl import Memory
memory, took = Memory(sys.argv[1]), []
for round in range(int(sys.argv[2]) + 1):
    memory.ingest(new_messages(), fmt="jsonl")
    start = time.perf_counter()
    assert memory.index().embedded == NEW_MESSAGES
    took.append(time.perf_counter() - start)
print(orjson.dumps(took[1:]).decode())
"""


def long_lived(store: str, rounds: int) -> list[float]:
    """Seconds of each update in a process that stays up."""
    done = subprocess.run([sys.executable, "-c", _LONG_LIVED, store, str(rounds)], check=True, capture_output=True,
                          cwd=Path(__file__).parent)
    return orjson.loads(done.stdout)


def model_only(rounds: int) -> list[Run]:
    """What the embedding alone costs a fresh process: the floor under an update of a few messages."""
    return [measure([sys.executable, "-c", _MODEL_ONLY]) for _ in range(rounds)]


def searches(common: list[str], questions: list[str]) -> list[tuple[str, float, float, float, int]]:
    """(mode, wall p50, wall p90, CPU p50 in ms, peak RSS) of a fresh `memctl search` a question."""
    rows = []
    for mode in ("hybrid", "bm25"):
        runs = [measure([*common, "search", "--json", "--mode", mode, question]) for question in questions]
        times = sorted(run.seconds * 1000 for run in runs)
        rows.append((mode, statistics.median(times), times[max(int(len(times) * 0.9) - 1, 0)],
                     statistics.median(run.cpu * 1000 for run in runs), max(run.peak_mb for run in runs)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=6000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--update", type=int, default=5, help="rounds of 20 new messages, each indexed")
    parser.add_argument("--store", type=Path, help="build the store here once and reuse it")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(args.store or Path(tmp) / "store")
        common = [MEMCTL, "--store", store]
        fresh = None
        if Path(store).exists():
            _, questions = turns(args.data)
        else:
            questions = build_store(store, args.messages, args.data)  # its index warms the model export
            subprocess.run(["rm", "-rf", str(Path(store) / ".index")], check=True)
            fresh = measure([*common, "index"])
        subprocess.run([*common, "index"], check=True, capture_output=True)  # a reused store: up to date first
        unchanged = measure([*common, "index"])
        rounds = updates(common, args.update)
        floor = model_only(args.update)
        warm = long_lived(store, args.update)
        rows = searches(common, questions[:args.queries])
    print(f"\nstore of {args.messages} messages ({os.cpu_count()} cores, load average at the end "
          f"{os.getloadavg()[0]:.1f}; CPU is user + system time)\n")
    print("| step | result |\n| --- | --- |")
    if fresh:
        print(f"| index, fresh | {fresh.seconds:.1f} s = {args.messages / fresh.seconds:.0f} messages/s, "
              f"CPU {fresh.cpu:.1f} s, peak RSS {fresh.peak_mb} MB |")
    print(f"| index, nothing changed | {unchanged.seconds * 1000:.0f} ms, CPU {unchanged.cpu * 1000:.0f} ms |")
    if rounds:
        seconds = sorted(run.seconds for run, _ in rounds)
        print(f"| index, {NEW_MESSAGES} messages added ({len(rounds)} rounds) | p50 "
              f"{statistics.median(seconds) * 1000:.0f} ms, slowest {seconds[-1] * 1000:.0f} ms, CPU p50 "
              f"{statistics.median(run.cpu for run, _ in rounds) * 1000:.0f} ms, "
              f"files read {sorted({f for _, f in rounds})} |")
        floor_seconds = statistics.median(run.seconds for run in floor)
        print(f"| the same {NEW_MESSAGES} texts embedded by a process that does nothing else (model load "
              f"and embedding, no store) | p50 {floor_seconds * 1000:.0f} ms, CPU p50 "
              f"{statistics.median(run.cpu for run in floor) * 1000:.0f} ms |")
        print(f"| index, {NEW_MESSAGES} messages added, in a long-lived process (memctl mcp, Memory) | p50 "
              f"{statistics.median(warm) * 1000:.0f} ms, slowest {max(warm) * 1000:.0f} ms |")
    for mode, p50, p90, cpu, rss in rows:
        print(f"| search --mode {mode}, cold process | p50 {p50:.0f} ms, p90 {p90:.0f} ms, CPU p50 {cpu:.0f} ms, "
              f"peak RSS {rss} MB |")


if __name__ == "__main__":
    main()
