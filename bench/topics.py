"""Topic split quality and speed through the `memctl` command line (issue 11).

For each conversation of ../shared/bench/topics/*_dev.jsonl (or --split test
files, if present): ingest it as one session into a fresh store, run
`memctl split --session S --force --keep-recent 0 --json`, and score the
message -> topic mapping against `gold` (bench/topic_scores.py): ARI (the main
score), Pk, WindowDiff and how often a returning subject went back to its
first topic, beside the trivial rows (one topic; every message its own).
`--speed N` instead times the split of one indexed N-message session.

    python bench/topics.py [--limit 40] [--data dialseg711,zys,interleaved,ubuntu_irc]
    python bench/topics.py --speed 5000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from topic_scores import ari, pk, returns, window_diff  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("MEMCTL_BENCH_DATA", REPO.parent / "shared" / "bench")) / "topics"  # $MEMCTL_BENCH_DATA from a worktree


def memctl(store: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "memctl", "--store", str(store), *args], input=input,
                          capture_output=True, env=env)


def as_session(conversation: dict, session: str) -> bytes:
    lines = []
    for n, message in enumerate(conversation["messages"]):
        lines.append(json.dumps({"id": f"{session}-{n}", "session": session, "role": message["role"],
                                 "speaker": message.get("speaker") or message["role"], "text": message["text"],
                                 "ts": f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"}))
    return ("\n".join(lines) + "\n").encode()


def split_one(conversation: dict, workdir: Path) -> tuple[list[str], float]:
    store = workdir / f"store-{conversation['dataset']}-{conversation['conv_id']}".replace("/", "_")
    done = memctl(store, "ingest", "--format", "jsonl", "--keep-noise", "-", input=as_session(conversation, "s"))
    if done.returncode:
        raise SystemExit(f"ingest failed: {done.stderr.decode()}")
    start = time.perf_counter()
    done = memctl(store, "split", "--session", "s", "--force", "--keep-recent", "0", "--json")
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"split failed ({done.returncode}): {done.stderr.decode()}")
    topic_of = {row["message_id"]: row["topic_id"] for row in map(json.loads, done.stdout.splitlines())}
    return [topic_of[f"s-{n}"] for n in range(len(conversation["messages"]))], took


def score(name: str, limit: int, workdir: Path) -> list[tuple[str, float, float, float, str, float]]:
    path = DATA / f"{name}_dev.jsonl"
    conversations = [json.loads(line) for line in path.open()][:limit or None]
    rows = {"one topic": [], "each message its own": [], "memctl split": []}
    back = {key: [0, 0] for key in rows}
    seconds = 0.0
    for conversation in conversations:
        gold = [m["gold"] for m in conversation["messages"]]
        predicted, took = split_one(conversation, workdir)
        seconds += took
        for key, labels in (("one topic", ["t"] * len(gold)), ("each message its own", list(range(len(gold)))),
                            ("memctl split", predicted)):
            rows[key].append((ari(gold, labels), pk(gold, labels), window_diff(gold, labels)))
            b, t = returns(gold, labels)
            back[key][0] += b
            back[key][1] += t
    out = []
    for key, values in rows.items():
        mean = [sum(v[i] for v in values) / len(values) for i in range(3)]
        share = f"{back[key][0] / back[key][1]:.0%}" if back[key][1] else "—"
        out.append((key, *mean, share, seconds if key == "memctl split" else 0.0))
    return out


def speed(count: int, workdir: Path) -> None:
    """Split of one indexed session of `count` messages (DialSeg711 dev turns, repeated)."""
    texts = [m for line in (DATA / "dialseg711_dev.jsonl").open() for m in json.loads(line)["messages"]]
    conversation = {"dataset": "speed", "conv_id": "speed", "messages": [texts[n % len(texts)] for n in range(count)]}
    store = workdir / "speed"
    memctl(store, "ingest", "--format", "jsonl", "--keep-noise", "-", input=as_session(conversation, "s"))
    memctl(store, "index")
    start = time.perf_counter()
    done = memctl(store, "split", "--session", "s", "--force", "--json")
    took = time.perf_counter() - start
    split = len(done.stdout.splitlines())
    print(f"split of a {count}-message indexed session: {took:.1f} s ({split} messages split, exit {done.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="dialseg711,zys,interleaved,ubuntu_irc")
    parser.add_argument("--limit", type=int, default=0, help="conversations per data set (0: all)")
    parser.add_argument("--speed", type=int, default=0, metavar="N", help="time the split of N messages instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.speed:
            speed(args.speed, Path(tmp))
            return
        print("| data | method | ARI | Pk | WindowDiff | returns to first topic | split time (s) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name in args.data.split(","):
            for key, a, p, w, share, seconds in score(name, args.limit, Path(tmp)):
                shown = f"{seconds:.1f}" if key == "memctl split" else ""
                print(f"| {name} | {key} | {a:.3f} | {p:.3f} | {w:.3f} | {share} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
