"""Topic split quality on every dev set at once, and split speed (issues 11, 22).

For each conversation of ../shared/bench/topics/*_dev.jsonl: the message -> topic
mapping of the built-in split, scored against `gold` (bench/topic_scores.py):
ARI (the main score), Pk, WindowDiff and how often a returning subject went back
to its first topic, on the even and the odd conversations apart (tune on one,
check on the other) and together, beside the trivial rows (one topic; every
message its own) and plain TextTiling over the same sentence vectors. Every set
is run every time, so a rule that helps one set and hurts another shows.

The split runs in process, as `memctl split` runs it on a fresh session (the
chooser of memctl/topics/split.py: the store's default model, no earlier topics),
with the vectors kept in a cache file between runs; `--cli` instead ingests each
conversation into a fresh store and runs `memctl split --force --keep-recent 0`.

Two sets are built here from the assistant chats, "announced": at every gold
boundary the user's message begins with a phrase announcing a switch (first time
the subject comes up) or a return (it came up before), drawn in turn from
SWITCHES / RETURNS below, which the segmenter's rules do not copy.

    python bench/topics.py [--data assistant_en,tiage_en] [--limit 40] [--set stay_bonus=1.0]
    python bench/topics.py --speed 5000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's memctl, also from a worktree
from topic_scores import ari, pk, returns, window_diff  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("MEMCTL_BENCH_DATA", REPO.parent / "shared" / "bench")) / "topics"  # $MEMCTL_BENCH_DATA from a worktree
SETS = "dialseg711,interleaved,zys,ubuntu_irc,assistant_en,assistant_en_announced,assistant_en_reworded," \
       "assistant_zh,assistant_zh_announced,assistant_zh_reworded,tiage_en,kdconv_zh"
# How people announce a switch or a return, written for this bench (not from the data, and not the
# segmenter's lists: rules/segment.toml must generalise to them).
SWITCHES = {
    "en": ["Let's switch to something different.", "Ok, next thing:", "Thanks! Now something else.",
           "Different question:", "Moving on to another topic.", "Great, thanks. New question:",
           "Unrelated, but", "Alright, let's change the subject."],
    "zh": ["好的，换个话题。", "谢谢！另外，我想问一下：", "接下来是另一个问题：", "我們換個話題吧。",
           "好，下一個問題：", "另外一件事，"],
}
RETURNS = {
    "en": ["Going back to the earlier question:", "Back to what we were discussing before:",
           "Returning to my previous question,", "Ok, about the earlier topic again:",
           "Coming back to that first thing:", "To get back to the other question,"],
    "zh": ["回到刚才那个问题：", "回到剛才那個問題，", "再说回之前的话题：", "继续刚才的问题，",
           "我們再回到前面那個話題：", "说回刚才的事，"],
}


# A second wording, written after the segmenter's lists were settled and never tuned on: how far the
# lists carry to phrases they were not written beside.
SWITCHES_REWORDED = {
    "en": ["Changing gears a bit.", "Completely different topic now:", "OK so, another thing I wanted to ask.",
           "Shifting topics:", "Here's something new:", "Also, separate question:"],
    "zh": ["我们聊点别的吧。", "问你另一件事：", "换一个问题。", "好，再來一個問題：", "另外想请教一下，"],
}
RETURNS_REWORDED = {
    "en": ["Picking up where we left off earlier,", "Regarding what I asked before:", "About that first question,",
           "Let me go back to the earlier point.", "Circling back:", "Re the earlier topic:"],
    "zh": ["我们回到之前的话题：", "說回剛剛的問題，", "回到前面说的那个，", "再回到剛才的事情："],
}


def load(name: str, limit: int) -> list[dict]:
    source = name.removesuffix("_announced").removesuffix("_reworded")
    conversations = [json.loads(line) for line in (DATA / f"{source}_dev.jsonl").open()][:limit or None]
    language = "zh" if source.endswith("_zh") else "en"
    if name.endswith("_announced"):
        return [announced(c, SWITCHES[language], RETURNS[language], language) for c in conversations]
    if name.endswith("_reworded"):
        return [announced(c, SWITCHES_REWORDED[language], RETURNS_REWORDED[language], language)
                for c in conversations]
    return conversations


def announced(conversation: dict, switches: list[str], returns: list[str], language: str) -> dict:
    """The conversation with a switch or return phrase before the message at each gold boundary."""
    messages, seen, turn = [], set(), 0
    for n, message in enumerate(conversation["messages"]):
        message = dict(message)
        if n and message["gold"] != conversation["messages"][n - 1]["gold"]:
            phrases = returns if message["gold"] in seen else switches
            joiner = "" if language == "zh" else " "
            message["text"] = phrases[turn % len(phrases)] + joiner + message["text"]
            turn += 1
        seen.add(message["gold"])
        messages.append(message)
    return {**conversation, "messages": messages}


class CachedModel:
    """The split's sentence model with its vectors kept on disk between runs (keyed by model and text)."""

    def __init__(self, name: str = ""):
        from memctl import config
        from memctl.topics.split import embedder

        self.model = embedder(config.Embedding(model=name))  # what `memctl split` reads messages with
        self.path = Path(tempfile.gettempdir()) / f"memctl-bench-topics-{hashlib.md5(str(getattr(self.model, 'model_key', None) or self.model.key).encode()).hexdigest()}.pickle"
        self.vectors = pickle.loads(self.path.read_bytes()) if self.path.exists() else {}
        self.added = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.blake2b(t.encode(), digest_size=12).digest() for t in texts]
        missing = list({k: t for k, t in zip(keys, texts) if k not in self.vectors}.items())
        if missing:
            for (key, _), vector in zip(missing, self.model.embed([t for _, t in missing])):
                self.vectors[key] = vector
            self.added += len(missing)
        return np.array([self.vectors[k] for k in keys]).reshape(len(texts), -1)

    def save(self) -> None:
        if self.added:
            self.path.write_bytes(pickle.dumps(self.vectors))


def split_in_process(conversation: dict, model: CachedModel, tuning) -> list:
    from memctl.topics import segment
    from memctl.topics.split import readable_by

    messages = [{"id": str(n), "role": m["role"], "speaker": m.get("speaker") or m["role"], "text": m["text"]}
                for n, m in enumerate(conversation["messages"])]
    vectors = model.embed([m["text"] for m in messages])
    return segment.partition(messages, vectors, [], tuning, embed=model.embed, reads=readable_by(model.model))


def texttiling(vectors: np.ndarray, window: int = 2) -> list[int]:
    """Plain TextTiling (Hearst 1997) over sentence vectors: the cosine of the `window` messages before
    and after each gap, its depth below the peaks either side, a cut where the depth passes
    mean - sd / 2 of the conversation's depths."""
    n = len(vectors)
    if n < 3:
        return [0] * n
    gaps = []
    for g in range(1, n):
        left, right = vectors[max(0, g - window):g].mean(0), vectors[g:g + window].mean(0)
        gaps.append(float(left @ right / (np.linalg.norm(left) * np.linalg.norm(right) + 1e-9)))
    depths = []
    for i, s in enumerate(gaps):
        lp = max(gaps[:i + 1])
        rp = max(gaps[i:])
        depths.append(lp - s + rp - s)
    cutoff = np.mean(depths) - np.std(depths) / 2
    labels, topic = [0], 0
    for i, depth in enumerate(depths):
        valley = (i == 0 or gaps[i] <= gaps[i - 1]) and (i == len(gaps) - 1 or gaps[i] <= gaps[i + 1])
        topic += bool(valley and depth > cutoff)
        labels.append(topic)
    return labels


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


def split_through_cli(conversation: dict, workdir: Path) -> list:
    store = workdir / f"store-{conversation['dataset']}-{conversation['conv_id']}".replace("/", "_")
    done = memctl(store, "ingest", "--format", "jsonl", "--keep-noise", "-", input=as_session(conversation, "s"))
    if done.returncode:
        raise SystemExit(f"ingest failed: {done.stderr.decode()}")
    done = memctl(store, "split", "--session", "s", "--force", "--keep-recent", "0", "--json")
    if done.returncode:
        raise SystemExit(f"split failed ({done.returncode}): {done.stderr.decode()}")
    topic_of = {row["message_id"]: row["topic_id"] for row in map(json.loads, done.stdout.splitlines())}
    return [topic_of[f"s-{n}"] for n in range(len(conversation["messages"]))]


METHODS = ("one topic", "each message its own", "TextTiling (same vectors)", "memctl split")


def score(conversations: list[dict], model: CachedModel, tuning, cli: Path | None) -> dict:
    """Per method, per half ("even", "odd", "all"): mean ARI, Pk, WindowDiff, (returns back, returns)."""
    scores = {method: {half: [] for half in ("even", "odd")} for method in METHODS}
    back = {method: {half: [0, 0] for half in ("even", "odd")} for method in METHODS}
    for number, conversation in enumerate(conversations):
        half = ("even", "odd")[number % 2]
        gold = [m["gold"] for m in conversation["messages"]]
        vectors = model.embed([m["text"] for m in conversation["messages"]])
        predicted = split_through_cli(conversation, cli) if cli else split_in_process(conversation, model, tuning)
        for method, labels in zip(METHODS, (["t"] * len(gold), list(range(len(gold))), texttiling(vectors),
                                            predicted)):
            scores[method][half].append((ari(gold, labels), pk(gold, labels), window_diff(gold, labels)))
            b, t = returns(gold, labels)
            back[method][half][0] += b
            back[method][half][1] += t
    out = {}
    for method in METHODS:
        out[method] = {}
        for half in ("even", "odd", "all"):
            values = scores[method]["even"] + scores[method]["odd"] if half == "all" else scores[method][half]
            b = back[method]["even"][0] + back[method]["odd"][0] if half == "all" else back[method][half][0]
            t = back[method]["even"][1] + back[method]["odd"][1] if half == "all" else back[method][half][1]
            means = [sum(v[i] for v in values) / len(values) for i in range(3)] if values else [0, 0, 0]
            out[method][half] = (*means, f"{b / t:.0%}" if t else "—")
    return out


def speed(count: int, workdir: Path) -> None:
    """Split of one indexed session of `count` messages (assistant, DialSeg711 and ZYS dev turns in turn)."""
    texts = [m for name in ("assistant_en", "dialseg711", "assistant_zh")
             for line in (DATA / f"{name}_dev.jsonl").open() for m in json.loads(line)["messages"]]
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
    from dataclasses import replace

    from memctl.topics.segment import Tuning

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=SETS)
    parser.add_argument("--limit", type=int, default=0, help="conversations per data set (0: all)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a segment.Tuning value for this run")
    parser.add_argument("--model", default="", help="an [embedding] model for the split (default: memctl's)")
    parser.add_argument("--cli", action="store_true", help="split through `memctl split` in fresh stores")
    parser.add_argument("--speed", type=int, default=0, metavar="N", help="time the split of N messages instead")
    args = parser.parse_args()
    tuning = Tuning()
    for name, value in (assignment.split("=", 1) for assignment in args.set):
        if "." in name:  # new_thresholds.plain=1.25
            table, key = name.split(".", 1)
            tuning = replace(tuning, **{table: {**getattr(tuning, table), key: float(value)}})
        else:
            tuning = replace(tuning, **{name: type(getattr(tuning, name))(float(value))})
    with tempfile.TemporaryDirectory() as tmp:
        if args.speed:
            speed(args.speed, Path(tmp))
            return
        model = CachedModel(args.model)
        print("| data | method | ARI | Pk | WindowDiff | returns | ARI even / odd | returns even / odd |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in args.data.split(","):
            result = score(load(name, args.limit), model, tuning, Path(tmp) if args.cli else None)
            for method, halves in result.items():
                a, p, w, share = halves["all"]
                print(f"| {name} | {method} | {a:.3f} | {p:.3f} | {w:.3f} | {share} | "
                      f"{halves['even'][0]:.3f} / {halves['odd'][0]:.3f} | {halves['even'][3]} / {halves['odd'][3]} |",
                      flush=True)
        model.save()


if __name__ == "__main__":
    main()
