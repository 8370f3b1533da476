"""Retrieval quality on third-party data, through memctl's command line, as users run it.

    python bench/retrieval.py locomo [--data ../shared/bench] [-- extra search flags]
    python bench/retrieval.py madial [--data ../shared/bench] [-- extra search flags]
    python bench/retrieval.py madial_en [--data ../shared/bench] [-- extra search flags]
    python bench/retrieval.py madial_cross [--data ../shared/bench] [-- extra search flags]
    python bench/retrieval.py lme [--data ../shared/bench] [-- extra search flags]
    python bench/retrieval.py all   (all five, one after the other)

Every table comes first with memctl's default settings (no environment
overrides, no flags, the real clock), then once relevance-only, labelled so:
the minimum off and the two time stages neutralised, as papers rank.

LoCoMo (English, Maharana et al. 2024), the paper's protocol: one store per
conversation, one message per turn (an image's caption is part of its
turn) with its real timestamp (the session's date, a second a turn), the
question as the query; recall@k is the share of a question's evidence turns
in the top k, averaged over questions with evidence, all five categories.
The same stores then answer queries about things they never mention (the
negative check of the minimum): gibberish, Chinese MADial dialogue excerpts,
and questions about the other LoCoMo conversations; the figure is the share
of those queries that return any result (exit 0 instead of 1).

MADial-Bench (Chinese): each user's memories are notes in their own scope
(project:user-N); the query is the dialogue up to the test turn, searched in
that user's scope; recall@k = |top k ∩ relevant| / |relevant|.
Then the same queries written in Traditional characters (zhconv's zh-tw
conversion) over the memories as they are (Simplified), default settings:
what a user writing the other script finds.

MADial-Bench (English side, `madial_en`): the same protocol over the English
memories and dialogues (the same ids). `madial_cross`: recall across
languages, the Chinese dialogues over the English memories, then the English
dialogues over the Chinese memories.

The data stays in shared/bench; nothing is copied into the repository.
Extra flags after `--` go to every `memctl search` (e.g. -- --mode bm25).

`--store-url postgresql://USER@HOST:PORT/DB` searches each store on PostgreSQL (#35): a store is
ingested into a folder as always, then copied (`memctl store copy`) into a database of its own
made on that server (its user may create databases; dropped after), indexed and searched there.
`--conversations N`: the first N LoCoMo conversations only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import string
import subprocess
import sys
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import orjson

# This checkout's memctl: the venv's `memctl` script imports the package of the editable install
# (another worktree's code), and `-P` keeps the working directory's memctl/ off the path. The
# server is off: each store lives only for its run, and a server would outlive it by its idle time.
MEMCTL = [sys.executable, "-P", "-m", "memctl"]
CHECKOUT_ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "MEMCTL_SERVER": "off"}
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench"
KS = (5, 10, 25, 50)
VARIANTS = (  # (label, extra search flags, environment)
    ("default settings", [], {}),
    ("minimum off (the plain baseline: default settings, --min-score 0)", ["--min-score", "0"], {}),
    ("relevance-only (--min-score 0, no recency, no decay)", ["--min-score", "0"],
     {"MEMCTL_RETRIEVAL_RECENCY_WEIGHT": "0", "MEMCTL_RETRIEVAL_TIME_DECAY_DAYS": "1e12"}),
)
NEGATIVES_PER_KIND = 40
CONVERSATIONS: int | None = None  # --conversations: the first N of LoCoMo's
STORE_URL: str | None = None  # --store-url: search each store on this PostgreSQL server
_DATABASES = iter(range(1_000_000))


@contextmanager
def searched(folder: Path):
    """The store to index and search: the folder, or with --store-url a copy of it in a database of
    its own on that server (dropped after)."""
    if STORE_URL is None:
        yield folder
        return
    import psycopg

    name = f"memctl_bench_{os.getpid()}_{next(_DATABASES)}"
    with psycopg.connect(STORE_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    target = apart(STORE_URL)[0].rsplit("/", 1)[0] + "/" + name
    try:
        memctl(folder, "store", "copy", str(folder), target)
        yield target
    finally:
        with psycopg.connect(STORE_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def apart(url: str) -> tuple[str, dict]:
    """The URL without its password, and the environment that gives the password to libpq
    (PGPASSWORD): a process's arguments are any user's to read (`ps`), its environment its owner's."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url, {}
    user, host = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}@{host}")), \
        {"PGPASSWORD": unquote(parts.password)}


def memctl(store: Path | str, *args: str, stdin: bytes = b"", env: dict | None = None) -> bytes:
    password = apart(STORE_URL)[1] if STORE_URL else {}  # a store URL in the arguments holds none
    done = subprocess.run([*MEMCTL, "--store", str(store), *args], input=stdin, capture_output=True,
                          env={**os.environ, **CHECKOUT_ENV, **password, **(env or {})})
    if done.returncode not in (0, 1):
        sys.exit(f"memctl {' '.join(args)} failed:\n{done.stderr.decode()}")
    return done.stdout


def batch_search(store: Path | str, queries: list[dict], extra: list[str], env: dict) -> dict:
    data = b"".join(orjson.dumps(q) + b"\n" for q in queries)
    out = memctl(store, "search", "--batch", "-", "-k", str(max(KS)), *extra, stdin=data, env=env)
    return {row["query_id"]: [r["id"] for r in row["results"]] for row in map(orjson.loads, out.splitlines())}


def locomo_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def run_locomo(data: Path, extra: list[str]) -> None:
    conversations = json.loads((data / "locomo_dev.json").read_text())[:CONVERSATIONS]
    hits = {label: defaultdict(list) for label, _, _ in VARIANTS}
    returned: dict[str, list[bool]] = defaultdict(list)
    for conversation in conversations:
        messages = locomo_messages(conversation["conversation"])
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "store"
            memctl(store, "ingest", "--keep-noise", "-f", "jsonl", "-",
                   stdin=b"".join(orjson.dumps(m) + b"\n" for m in messages))
            with searched(store) as store:
                locomo_store(data, conversations, conversation, store, extra, hits, returned)
    labels = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
    for label, _, _ in VARIANTS:
        report(f"LoCoMo, {label}", hits[label], labels)
    print("\nLoCoMo stores, unrelated queries (default settings): share that returned any result\n")
    print("| queries | n | returned any |\n| --- | --- | --- |")
    everything = [r for values in returned.values() for r in values]
    for kind, values in [*returned.items(), ("all", everything)]:
        print(f"| {kind} | {len(values)} | {sum(values) / len(values):.3f} |")


def locomo_store(data: Path, conversations: list[dict], conversation: dict, store: Path | str, extra: list[str],
                 hits: dict, returned: dict) -> None:
    """One conversation's store indexed, its questions and the unrelated queries searched."""
    memctl(store, "index")
    questions = [q for q in conversation["qa"] if q.get("evidence")]
    for label, flags, env in VARIANTS:
        answers = batch_search(store, [{"id": i, "query": q["question"]} for i, q in enumerate(questions)],
                               [*flags, *extra], env)
        for i, question in enumerate(questions):
            evidence = {e.replace(":", "-") for item in question["evidence"] for e in item.split()}
            evidence = {e.rstrip(";,") for e in evidence}
            ranked = answers.get(i, [])
            hits[label][question["category"]].append([len(evidence & set(ranked[:k])) / len(evidence) for k in KS])
    negatives = unrelated_queries(data, conversations, conversation["sample_id"])
    answers = batch_search(store, [{"id": i, "query": q} for i, (_, q) in enumerate(negatives)], extra, {})
    for i, (kind, _) in enumerate(negatives):
        returned[kind].append(bool(answers.get(i)))


def locomo_messages(convo: dict) -> list[dict]:
    """One message a turn, stamped with its session's real date (a second a turn, to keep order)."""
    messages = []
    sessions = sorted((int(m.group(1)), key) for key in convo if (m := re.fullmatch(r"session_(\d+)", key)))
    for number, key in sessions:
        start = locomo_time(convo[f"{key}_date_time"])
        for offset, turn in enumerate(convo[key]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            messages.append({"id": turn["dia_id"].replace(":", "-"), "session": f"session-{number}",
                             "speaker": turn["speaker"], "text": text,
                             "ts": (start + timedelta(seconds=offset)).isoformat()})
    return messages


def unrelated_queries(data: Path, conversations: list[dict], sample_id: str) -> list[tuple[str, str]]:
    """Queries a store of conversation `sample_id` never speaks of, NEGATIVES_PER_KIND of each kind."""
    pick = random.Random(sample_id)
    gibberish = [" ".join("".join(pick.choice(string.ascii_lowercase) for _ in range(pick.randint(3, 9)))
                          for _ in range(pick.randint(3, 8))) + "?" for _ in range(NEGATIVES_PER_KIND)]
    dialogues = [json.loads(line) for line in (data / "madial_zh_dialogues_dev.jsonl").read_text().splitlines()]
    chinese = ["".join(d["dialogue"][:d["test-turn"][0]]) for d in dialogues]
    others = [q["question"] for c in conversations if c["sample_id"] != sample_id for q in c["qa"]
              if q.get("evidence")]
    return ([("gibberish", q) for q in gibberish]
            + [("MADial Chinese excerpt", q) for q in pick.sample(chinese, min(NEGATIVES_PER_KIND, len(chinese)))]
            + [("another conversation's question", q) for q in pick.sample(others, NEGATIVES_PER_KIND)])


def run_madial(data: Path, extra: list[str]) -> None:
    hits = madial_recall(data, "zh", "zh", extra, traditional=True)
    for label, _, _ in VARIANTS:
        report(f"MADial-Bench zh, {label}", hits[label], {0: "all"})
    report("MADial-Bench zh, queries in Traditional characters, default settings", hits["traditional"], {0: "all"})


def run_madial_en(data: Path, extra: list[str]) -> None:
    hits = madial_recall(data, "en", "en", extra)
    for label, _, _ in VARIANTS:
        report(f"MADial-Bench en, {label}", hits[label], {0: "all"})


def run_madial_cross(data: Path, extra: list[str]) -> None:
    """Recall across languages: each side's dialogues over the other side's memories (the same ids)."""
    for dialogues, memories in (("zh", "en"), ("en", "zh")):
        hits = madial_recall(data, memories, dialogues, extra)
        for label, _, _ in VARIANTS:
            report(f"MADial-Bench, {dialogues} dialogues over {memories} memories, {label}", hits[label], {0: "all"})


def madial_notes(data: Path, lang: str) -> list[dict]:
    """MADial's memories of one side as notes, each in its user's scope."""
    return [{"id": f"madial-{memory['id']}", "text": memory["event"], "section": memory["scene"],
             "scope": f"project:user-{memory['user-id']}", "created_at": memory["time"] + "T12:00:00Z",
             "memory_class": "episodic"}
            for line in (data / f"madial_{lang}_memory.jsonl").read_text().splitlines()
            for memory in json.loads(line).values()]


def madial_recall(data: Path, memory_lang: str, dialogue_lang: str, extra: list[str],
                  traditional: bool = False) -> dict:
    """recall@k of the `dialogue_lang` dev dialogues over the `memory_lang` memories, per variant (and,
    with `traditional`, the queries written in Traditional characters, default settings). A relevant
    memory the archive lacks (the English side has 160 of the 171) is left out of its dialogue's
    gold; a dialogue left with none is not counted."""
    notes = madial_notes(data, memory_lang)
    stored = {note["id"] for note in notes}
    dialogues = []
    for line in (data / f"madial_{dialogue_lang}_dialogues_dev.jsonl").read_text().splitlines():
        dialogue = json.loads(line)
        dialogue["relevant"] = {f"madial-{r}" for r in dialogue["relevant-id"]} & stored
        if dialogue["relevant"]:
            dialogues.append(dialogue)
    hits = {label: defaultdict(list) for label in [*(label for label, _, _ in VARIANTS), "traditional"]}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        memctl(store, "ingest", "--kind", "memory", "--keep-noise", "-f", "jsonl", "-",
               stdin=b"".join(orjson.dumps(n) + b"\n" for n in notes))
        with searched(store) as store:
            madial_store(store, dialogues, extra, hits, traditional)
    return hits


def madial_store(store: Path | str, dialogues: list[dict], extra: list[str], hits: dict, traditional: bool) -> None:
    """The store of MADial's memories indexed, and each dialogue searched in its user's scope."""
    memctl(store, "index")
    queries = [{"id": d["id"], "query": "".join(d["dialogue"][:d["test-turn"][0]]),
                "scope": f"project:user-{d['user-id']}", "kind": "memory"} for d in dialogues]
    runs = [(label, queries, [*flags, *extra], env) for label, flags, env in VARIANTS]
    if traditional:
        import zhconv

        runs.append(("traditional", [{**q, "query": zhconv.convert(q["query"], "zh-tw")} for q in queries],
                     extra, {}))
    for label, asked, flags, env in runs:
        answers = batch_search(store, asked, flags, env)
        for dialogue in dialogues:
            ranked = answers.get(dialogue["id"], [])
            hits[label][0].append([len(dialogue["relevant"] & set(ranked[:k])) / len(dialogue["relevant"])
                                   for k in KS])


def run_lme(data: Path, extra: list[str]) -> None:
    """LongMemEval S (Wu et al. 2024), as issue 21 measures it: each question its own store of
    the user's turns of its ~50 sessions (a message a turn, stamped with its session's date, a
    second a turn), the question as the query; a question counts when all its evidence turns
    (`has_answer`) are in the top k ("all@k"); "frac@10" is the share of its evidence there."""
    questions = json.loads((data / "lme_dev.json").read_text())
    hits = {label: defaultdict(list) for label, _, _ in VARIANTS}
    for question in questions:
        messages, evidence = lme_messages(question)
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "store"
            memctl(store, "ingest", "--keep-noise", "-f", "jsonl", "-",
                   stdin=b"".join(orjson.dumps(m) + b"\n" for m in messages))
            with searched(store) as store:
                memctl(store, "index")
                for label, flags, env in VARIANTS:
                    ranked = batch_search(store, [{"id": 0, "query": question["question"]}], [*flags, *extra],
                                          env).get(0, [])
                    found = [len(evidence & set(ranked[:k])) / len(evidence) for k in KS]
                    hits[label][question["question_type"]].append([float(f == 1.0) for f in found] + [found[1]])
    for label, _, _ in VARIANTS:
        report(f"LongMemEval S dev, user turns, {label}: all evidence in the top k", hits[label],
               {t: t for t in sorted(hits[label])}, [f"all@{k}" for k in KS] + ["frac@10"])


def lme_messages(question: dict) -> tuple[list[dict], set[str]]:
    """The user's turns of a LongMemEval question's sessions, and the ids of its evidence turns."""
    messages, evidence = [], set()
    for session_id, date, turns in zip(question["haystack_session_ids"], question["haystack_dates"],
                                       question["haystack_sessions"]):
        start = datetime.strptime(re.sub(r" \(\w+\)", "", date), "%Y/%m/%d %H:%M")
        for offset, turn in enumerate(turns):
            if turn["role"] != "user":
                continue
            message_id = f"{session_id}-{offset}"
            if turn.get("has_answer"):
                evidence.add(message_id)
            messages.append({"id": message_id, "session": session_id, "speaker": "user", "role": "user",
                             "text": turn["content"], "ts": (start + timedelta(seconds=offset)).isoformat()})
    return messages, evidence


def report(name: str, hits: dict, labels: dict, columns: list[str] | None = None) -> None:
    columns = columns or [f"@{k}" for k in KS]
    rows = [(labels[c], hits[c]) for c in sorted(hits)]
    if len(rows) > 1:
        rows.insert(0, ("all", [h for c in sorted(hits) for h in hits[c]]))
    print(f"\n{name}: recall@k\n")
    print("| questions | n | " + " | ".join(columns) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in columns) + " |")
    for label, values in rows:
        means = [sum(v[i] for v in values) / len(values) for i in range(len(columns))]
        print(f"| {label} | {len(values)} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


RUNS = {"locomo": run_locomo, "lme": run_lme, "madial": run_madial, "madial_en": run_madial_en,
        "madial_cross": run_madial_cross}


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=[*RUNS, "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--store-url", help="search each store on this PostgreSQL server (module doc)")
    parser.add_argument("--conversations", type=int, help="the first N LoCoMo conversations only")
    args = parser.parse_args(argv)
    global STORE_URL, CONVERSATIONS
    STORE_URL, CONVERSATIONS = args.store_url, args.conversations
    for name in RUNS if args.dataset == "all" else [args.dataset]:
        RUNS[name](args.data, extra)


if __name__ == "__main__":
    main()
