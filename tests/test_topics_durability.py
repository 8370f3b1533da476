"""Splits at once and splits killed mid-write: every message unsplit or in exactly one topic."""

from __future__ import annotations

import json
import random
import subprocess
import textwrap
from collections import Counter

import pytest

import orjson

from conftest import killed_after, memctl_command
from memctl.store.store import Store
from memctl.store.topicfile import load_topics


def placed(root) -> Counter:
    """Message ids in topic files; every line of every topic file must parse."""
    counts: Counter = Counter()
    for path in (root / "topics").glob("t-*.jsonl"):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        assert records[0]["type"] == "topic"
        counts.update(r["id"] for r in records if r["type"] == "message")
    return counts


@pytest.mark.process
def test_concurrent_splits_of_one_session_never_duplicate_a_message(run, store_dir):
    data = "".join(json.dumps({"id": f"m{n}", "session": "s1", "role": ("user", "assistant")[n % 2],
                               "text": f"question {n // 8} about subject {n // 8}: detail {n}",
                               "ts": "2026-11-20T10:00:00Z"}) + "\n" for n in range(48))
    run("ingest", "-", input=data)
    splits = [subprocess.Popen([*memctl_command(), "--store", str(store_dir), "split", "--session", "s1",
                                "--force", "--keep-recent", "0", "--json"], stdout=subprocess.PIPE)
              for _ in range(4)]
    outcomes = sorted(p.wait(120) for p in splits)
    assert outcomes == [0, 1, 1, 1]  # one split did the work; the others found nothing left
    assert placed(store_dir) == Counter(f"m{n}" for n in range(48))


SPLITTER = textwrap.dedent("""
    import sys, orjson
    from memctl.ingest.ingest import ingest
    from memctl.store.store import Store
    from memctl.topics.split import split
    from memctl.runtime import Runtime
    store, run = Store(sys.argv[1]), sys.argv[2]
    rt = Runtime(store)  # the settings and clock a Memory of the store holds
    print("ready", flush=True)

    def choose(messages, topics):  # quick and deterministic: the store's files are what is tested
        old = sorted(topics)
        return [(old[k % len(old)] if old and k % 3 else f"new-{k // 7}", None, None)
                for k in range(len(messages))]

    for n in range(10_000):
        batch = b"".join(orjson.dumps({"id": f"{run}-{n}-{k}", "session": "s", "role": "user",
                                       "text": f"run {run} batch {n} message {k} " + "x" * 200,
                                       "ts": "2026-11-20T10:00:00Z"}) + b"\\n" for k in range(30))
        ingest(rt, batch, source="<stdin>", fmt="jsonl")
        report = split(rt, "s", force=True, keep_recent=0, choose=choose)
        print(" ".join(a.message_id for a in report.assignments), flush=True)  # acknowledged: committed
""")


@pytest.mark.process
def test_split_killed_at_random_points_leaves_every_message_in_one_place(tmp_path):
    root = tmp_path / "store"
    rng = random.Random(20261122)
    acknowledged: set[str] = set()
    interrupted = 0
    # Runs in a row that acknowledged nothing new: each run's split also takes the messages the
    # killed ones ingested, so on a loaded machine (load ~10, the suite on two workers beside other
    # work) splits grew slower than the kills came and 60 runs acknowledged one batch. The window
    # doubles after each such run (to 16 times), so some split commits before its kill.
    dry = 0
    for run in range(60):  # more kills while a loaded machine acknowledged too few splits
        if run >= 6 and interrupted >= 3 and len(acknowledged) > 30:
            break
        # Every other kill waits for a split's transaction in flight, as in test_durability.py.
        in_transaction = (lambda: (root / ".journal").exists()) if run % 2 else None
        printed = set(killed_after(rng.uniform(0.5, 1.5) * 2 ** min(dry, 4), SPLITTER, str(root), f"r{run}",
                                   once=in_transaction).split())
        dry = 0 if printed - acknowledged else dry + 1
        acknowledged |= printed
        interrupted += (root / ".journal").exists()
        with Store(root).lock():  # the next writer rolls back what the killed one left half done
            pass
        counts = placed(root)
        assert set(counts.values()) <= {1}, [m for m, c in counts.items() if c > 1][:5]
        assert acknowledged <= set(counts)
        assert len(load_topics(Store(root))) == len(list((root / "topics").glob("t-*.jsonl")))
    assert len(acknowledged) > 30
    assert interrupted >= 3, interrupted
