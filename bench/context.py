"""`memctl context` against plain retrieval at the same token budget (issues 12, 21).

    python bench/context.py [locomo | lme | both | latency] [--limit N] [--stores DIR] [--skip-unbuilt] [--shard K/N]
                            [--latency 15] [--latency-messages 6000] [--compare CHECKOUT]

locomo (../shared/bench/locomo_dev.json): each conversation goes into one
memctl session, a LoCoMo session at a time, and after each `split` runs as an
agent's loop would (context_limit set low enough that splitting happens; the
split decides by itself whether the context is over 70%). lme
(lme_dev.json, LongMemEval S): each question's ~50 sessions in date order as
one conversation (the user turns, `--lme-turns all` for the replies too),
`split` after every `--lme-split-every` (5) sessions, the clock at the
question's date. Then each question is the new message of `context
--no-record --budget B`; evidence recall is the share of the question's
evidence turns anywhere in the context. Two baselines at the same budget,
counted with the same tokenizer and message rendering (baselines()): the
search's results and the recent messages in one order by score (issue 21),
and the last 20 messages first (issue 12). lme also reports recall per
question type and, for knowledge-update questions, the share where the
newest evidence is shown with any outdated one after it.

Everything runs in-process through `memctl.Memory` (the code the command
calls; a process per question would take hours here). `--stores DIR` keeps
the built stores to measure again (building is the slow part: embedding).
`--latency N` times N cold `memctl context` processes (bytecode written, as
an install has it) on a store of `--latency-messages` LoCoMo turns repeated
under new ids, split and indexed; `--compare CHECKOUT` times that checkout's
too, interleaved, for a ratio taken in one run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
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
BENCH = Path(os.environ.get("MEMCTL_BENCH_DATA", REPO.parent / "shared" / "bench"))
DATA = BENCH / "locomo_dev.json"
LME_DATA = BENCH / "lme_dev.json"
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


def lme_sessions(question: dict) -> list[list[dict]]:
    """A LongMemEval question's haystack as one conversation: its sessions in date order, every turn
    (user and assistant), ids "<session>-<turn>", a second apart from the session's date."""
    out = []
    dated = sorted(zip(question["haystack_dates"], range(len(question["haystack_sessions"]))))
    for date, number in dated:
        start = datetime.strptime(date.split(" (")[0] + " " + date.split(") ")[1], "%Y/%m/%d %H:%M")
        out.append([{"id": f"{number}-{offset}", "session": "s", "role": turn["role"], "text": turn["content"],
                     "ts": (start + timedelta(seconds=offset)).isoformat() + "Z", "has_answer": bool(turn.get("has_answer"))}
                    for offset, turn in enumerate(question["haystack_sessions"][number])])
    return out


def lme_now(question: dict) -> str:
    date = question["question_date"]
    return datetime.strptime(date.split(" (")[0] + " " + date.split(") ")[1], "%Y/%m/%d %H:%M").isoformat() + "Z"


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


def render_message(message: dict) -> str:
    """A message on its own, as the baselines show it: its full time stamp, who, its id, its text
    (what a search result carries; the context showed messages so until it gave each day a line)."""
    who = message.get("speaker") or message.get("role") or ""
    stamp = f"[{message['ts']}] " if message.get("ts") else ""
    return f"{stamp}{who} ({message['id']}): {message.get('text', '')}"


def baselines(memory, messages: list[dict], question: str, budget: int, hits: list[str]) -> dict[str, list[str]]:
    """The two plain baselines at `budget`, each as the message ids it shows in its order.

    recent-first (the issue 12 baseline): the last 20 messages, then the search's results in rank order
    while they fit. by-score (issue 21): the new message, then one list in one order by score - the
    search's results, then the recent messages it did not find, newest first - packed while they fit."""
    from memctl.text.tokens import count_tokens

    by_id = {m["id"]: m for m in messages}
    new = {"id": "new", "role": "user", "text": question}
    recent = messages[-19:]

    def pack(first: list[dict], rest: list[str]) -> list[str]:
        used = sum(count_tokens(render_message(m)) + 1 for m in first)
        shown = [m["id"] for m in first]
        for mid in rest:
            if mid in shown or mid not in by_id:
                continue
            cost = count_tokens(render_message(by_id[mid])) + 1
            if used + cost <= budget:
                used += cost
                shown.append(mid)
        return shown

    return {"recent-first": pack(recent + [new], hits),
            "by-score": pack([new], hits + [m["id"] for m in reversed(recent)])}


def build_store(root: Path, sessions: list[list[dict]], context_limit: int, split_every: int = 1):
    """The store of one conversation, ingested a session at a time with a split after each, as an
    agent's loop would; kept in `root` (a later run with the same --stores reuses it)."""
    from memctl import Memory

    if (root / ".bench-built").exists():
        return Memory(root)
    shutil.rmtree(root, ignore_errors=True)  # a build cut short: start it over
    root.mkdir(parents=True)
    (root / "memctl.toml").write_text(f"[topics]\ncontext_limit = {context_limit}\n")
    memory = Memory(root)
    for number, turns in enumerate(sessions, 1):
        lines = [json.dumps({k: v for k, v in m.items() if k != "has_answer"}).encode() + b"\n" for m in turns]
        memory.ingest(b"".join(lines), fmt="jsonl", keep_noise=True)
        if number % split_every == 0 or number == len(sessions):
            memory.topics.split("s")
    memory.index()
    (root / ".bench-built").write_text("")
    return memory


def shown_order(built) -> list[str]:
    return [m["id"] for s in built.sections for m in s["messages"]]


def newest_first(order: list[str], newest: str, older: list[str]) -> bool:
    """The knowledge-update check: the newest evidence is shown, and each older one shown comes after it."""
    if newest not in order:
        return False
    return all(order.index(o) > order.index(newest) for o in older if o in order)


def measure(memory, messages, question: str, evidence: set[str], newest: str | None, older: list[str],
            rows: dict, kind: str) -> None:
    """Evidence recall of the context and both baselines at every budget, into rows[budget][name][kind]."""
    hits = [r.record_id for r in memory.search(question, k=50, kinds=["message"], min_score=0.0)]
    for budget in BUDGETS:
        built = memory.context("s", question, budget=budget, no_record=True)
        shown = {"context": shown_order(built), **baselines(memory, messages, question, budget, hits)}
        for name, order in shown.items():
            cell = rows[budget].setdefault(name, {}).setdefault(kind, {"recall": [], "newest": []})
            cell["recall"].append(len(evidence & set(order)) / len(evidence))
            if newest is not None:
                cell["newest"].append(newest_first(order, newest, older))


def report(rows: dict, title: str) -> None:
    from statistics import mean

    print(f"\n{title}")
    kinds = sorted({k for b in rows.values() for n in b.values() for k in n})
    names = ("context", "by-score", "recent-first")
    print("| B (tokens) | " + " | ".join(names) + " | context - by-score | questions |")
    print("| --- " * (len(names) + 3) + "|")
    for budget, by_name in rows.items():
        overall = {n: mean(r for k in kinds for r in by_name[n][k]["recall"]) for n in names}
        count = sum(len(by_name["context"][k]["recall"]) for k in kinds)
        print(f"| {budget:,} | " + " | ".join(f"{overall[n]:.3f}" for n in names)
              + f" | {overall['context'] - overall['by-score']:+.3f} | {count} |")
    if len(kinds) > 1:
        print("\nper question type, context / by-score:")
        print("| type | " + " | ".join(f"{b:,}" for b in rows) + " | questions |")
        print("| --- " * (len(rows) + 2) + "|")
        for kind in kinds:
            cells = [f"{mean(rows[b]['context'][kind]['recall']):.3f} / {mean(rows[b]['by-score'][kind]['recall']):.3f}"
                     for b in rows]
            print(f"| {kind} | " + " | ".join(cells) + f" | {len(rows[BUDGETS[0]]['context'][kind]['recall'])} |")
    newest = {b: {n: [x for k in kinds for x in rows[b][n][k]["newest"]] for n in names} for b in rows}
    if any(newest[b]["context"] for b in rows):
        print("\nknowledge-update: newest evidence shown, any outdated one after it (context / by-score / recent-first):")
        for budget in rows:
            print(f"- {budget:,}: " + " / ".join(f"{mean(newest[budget][n]):.3f}" for n in names)
                  + f" (n={len(newest[budget]['context'])})")


def run_locomo(args, tmp: Path) -> None:
    rows = {b: {} for b in BUDGETS}
    for conversation in json.loads(DATA.read_text()):
        sessions = locomo_sessions(conversation)
        last = datetime.fromisoformat(sessions[-1][-1]["ts"].rstrip("Z"))
        os.environ["MEMCTL_NOW"] = (last + timedelta(days=1)).isoformat() + "Z"
        started = time.perf_counter()
        if args.skip_unbuilt and not (tmp / "locomo" / conversation["sample_id"] / ".bench-built").exists():
            continue
        memory = build_store(tmp / "locomo" / conversation["sample_id"], sessions, args.context_limit)
        topics = memory.topics.list()
        print(f"{conversation['sample_id']}: {sum(map(len, sessions))} messages, {len(topics)} topics, "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
        messages = [m for turns in sessions for m in turns]
        questions = [q for q in conversation["qa"] if q.get("evidence")]
        if args.limit:
            questions = questions[::max(1, len(questions) // args.limit)][:args.limit]
        for question in questions if not args.build_only else []:
            measure(memory, messages, question["question"], evidence_of(question), None, [], rows, "all")
    if not args.build_only:
        report(rows, f"LoCoMo dev ({DATA.name})")


def run_lme(args, tmp: Path) -> None:
    rows = {b: {} for b in BUDGETS}
    # The file lists the questions type by type: taken a type at a time in turn, any first N (a run cut
    # short, --limit) hold every type.
    by_type: dict[str, list] = {}
    for question in json.loads(LME_DATA.read_text()):
        by_type.setdefault(question["question_type"], []).append(question)
    questions = [q for rank in itertools.zip_longest(*by_type.values()) for q in rank if q is not None]
    if args.limit:
        questions = questions[::max(1, len(questions) // args.limit)][:args.limit]
    shard, shards = map(int, args.shard.split("/"))
    for question in questions[shard::shards]:
        sessions = [[m for m in turns if args.lme_turns == "all" or m["role"] == "user"]
                    for turns in lme_sessions(question)]
        os.environ["MEMCTL_NOW"] = lme_now(question)
        started = time.perf_counter()
        if args.skip_unbuilt and not (tmp / f"lme-{args.lme_turns}" / question["question_id"] / ".bench-built").exists():
            continue
        memory = build_store(tmp / f"lme-{args.lme_turns}" / question["question_id"], sessions, args.context_limit,
                             args.lme_split_every)
        messages = [m for turns in sessions for m in turns]
        evidence = [m["id"] for m in messages if m["has_answer"]]   # conversation order: the newest last
        kind = question["question_type"]
        newest, older = (evidence[-1], evidence[:-1]) if kind == "knowledge-update" else (None, [])
        if not args.build_only:
            measure(memory, messages, question["question"], set(evidence), newest, older, rows, kind)
        print(f"{question['question_id']} {kind}: {len(messages)} messages, {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
    if not args.build_only:
        report(rows, f"LongMemEval dev ({LME_DATA.name})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="locomo", choices=("locomo", "lme", "both", "latency"),
                        help="the data set(s) to measure recall on; latency: only the cold timings")
    parser.add_argument("--limit", type=int, default=60, help="locomo: questions per conversation; "
                        "lme: questions (0: all)")
    parser.add_argument("--context-limit", type=int, default=4000, help="[topics] context_limit for the splits")
    parser.add_argument("--lme-turns", default="user", choices=("user", "all"),
                        help="lme: ingest the user turns (where 52 of the 53 evidence turns are) or all")
    parser.add_argument("--lme-split-every", type=int, default=5, metavar="N",
                        help="lme: split after every N-th session (an agent's loop calling split now and then)")
    parser.add_argument("--build-only", action="store_true", help="build the stores (with --stores), measure nothing")
    parser.add_argument("--skip-unbuilt", action="store_true", help="with --stores: measure only the stores "
                        "built already (while another run builds the rest)")
    parser.add_argument("--shard", default="0/1", metavar="K/N", help="lme: only every N-th question from the "
                        "K-th (N builds at once with --build-only, then measure all with --skip-unbuilt)")
    parser.add_argument("--stores", metavar="DIR", help="keep the built stores here and reuse them")
    parser.add_argument("--latency", type=int, default=15, help="cold `memctl context` runs to time")
    parser.add_argument("--latency-messages", type=int, default=6000, help="messages in the store they run on")
    parser.add_argument("--compare", metavar="CHECKOUT", help="time this checkout's `memctl context` too, "
                        "interleaved with this one's on the same store (a ratio taken in one run)")
    args = parser.parse_args()
    compile_package()
    tmp = Path(args.stores) if args.stores else Path(tempfile.mkdtemp(prefix="bench-context-"))
    if args.mode in ("locomo", "both"):
        run_locomo(args, tmp)
    if args.mode in ("lme", "both"):
        run_lme(args, tmp)
    if args.latency:
        latency(args, tmp)


def latency(args, tmp: Path) -> None:
    root = tmp / f"latency-{args.latency_messages}"
    store = root if (root / ".bench-built").exists() else latency_store(root, args.latency_messages,
                                                                        args.context_limit)
    (store / ".bench-built").write_text("")
    checkouts = {"this": REPO, **({"compared": Path(args.compare).resolve()} if args.compare else {})}
    # Each checkout its own copy of the store: one whose index differs (format, default model) would
    # otherwise rebuild it on every other call. One untimed call each brings its index up to date.
    stores = {"this": store}
    if args.compare:
        stores["compared"] = root.with_name(root.name + "-compared")
        if not stores["compared"].exists():
            shutil.copytree(store, stores["compared"], symlinks=True)
    times = {name: [] for name in checkouts}
    for run in range(args.latency + 1):
        for name, checkout in checkouts.items():   # interleaved: the load moves both alike
            # Cold: in the process, no resident server (one started by the first call answers warm)
            env = {**os.environ, "PYTHONPATH": str(checkout), "MEMCTL_SERVER": "off"}
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "memctl", "--store", str(stores[name]), "context", "--session",
                                   "s", "--message", "What did Caroline research for her adoption?", "--budget", "4000",
                                   "--no-record"], capture_output=True, env=env, cwd=checkout)
            if run:
                times[name].append(time.perf_counter() - start)
            if done.returncode:
                sys.exit(done.stderr.decode())
    for name, taken in times.items():
        print(f"\n`memctl context` cold ({name}: {checkouts[name]}), built-in, {args.latency_messages} messages: p50 "
              f"{statistics.median(taken) * 1000:.0f} ms (min {min(taken) * 1000:.0f}, max {max(taken) * 1000:.0f}, "
              f"n={len(taken)})")
    if len(times) > 1:
        print(f"ratio this / compared (p50): {statistics.median(times['this']) / statistics.median(times['compared']):.2f}")


if __name__ == "__main__":
    main()
