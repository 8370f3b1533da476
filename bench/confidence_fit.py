"""Fit each result's confidence (memctl/search/confidence.py) on dev data, and check it on a part held out.

    python bench/confidence_fit.py collect [--data ../shared/bench]   (builds the stores, records signals)
    python bench/confidence_fit.py fit [--features a,b,...] [--gates EITHER/BOTH] [--write]   (seconds)

`collect` builds, in-process through `Memory` with the embedding model of the environment
(MEMCTL_EMBEDDING_MODEL, else the default), the dev stores: LoCoMo dev's four conversations,
LongMemEval dev's 30 questions (a store each), MADial zh and en memories (both sides' dialogues asked
over each side's), the paraphrase set's store (bench/paraphrase/) and tiny stores (a paraphrase
fact and three of the person's other messages, as a new user's store is). Every question with its
evidence stored, and every unrelated query (gibberish, another conversation's questions, Chinese
MADial excerpts, the paraphrase set's never-mentioned questions), is searched with the minimum made to
pass everything (k=10); what the confidence stage read (confidence.Signals, each candidate) is
recorded with the candidates' ids, the results returned and the subject test's verdict. Stores and
signals are kept under $MEMCTL_FIT_CACHE (default /tmp/memctl-confidence/<model>/), one file a source.

`fit` fits a logistic regression (IRLS, numpy, a small ridge) of "this result is evidence for the
question" over the top-10 results of every query of the fit part, each data set weighted alike, and
reports on the check part (LoCoMo conv-42, every third LongMemEval question and MADial dialogue, the
paraphrase set's held-out split and its tiny stores): the Brier score and log loss against the base
rate, and the reliability by bins of confidence. With --gates it also prints what refusal rules
reading the confidence would give beside the subject test, per data set (item 2 of the task).
`--write` writes the fit to memctl/search/rules/confidence.toml with its provenance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import random
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from memctl.search import confidence  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "bench" if (REPO.parent / "shared").exists() else Path("/work/shared/bench")
MODEL = os.environ.get("MEMCTL_EMBEDDING_MODEL") or "usem3-minilm"
CACHE = Path(os.environ.get("MEMCTL_FIT_CACHE", "/tmp/memctl-confidence")) / MODEL.replace("/", "_")
K = 10
SOURCES = ("locomo", "madial", "paraphrase", "facts", "tiny", "lme")


# -- collect -------------------------------------------------------------------------------------------
class Recorder:
    """Makes the minimum pass every query, and keeps what the confidence stage read (and the subject
    test's verdict)."""

    def __init__(self):
        from memctl.search import stages
        from memctl.search.subject import Evidence, SubjectTest

        self.last = None
        recorder = self
        original = stages.Confidence.apply

        def confidence_apply(stage, found, query, run):
            original(stage, found, query, run)
            retrieval = run.retrieval
            trust = min(1.0, found.vector_weight / retrieval.vector_weight) if retrieval.vector_weight > 0 else 0.0
            evidence = Evidence(found.relevance, found.relevance_cosine, found.coverage, found.vector_weight,
                                run.bm25, found.units, run.words.terms_of, query.text, run.compared)
            recorder.last = {"ids": [u["record_id"] or u["id"] for u in found.units],
                             "relevance_cosine": np.asarray(found.relevance_cosine, dtype=np.float64),
                             "coverage": np.asarray(found.coverage, dtype=np.float64),
                             "relevance": np.asarray(found.relevance, dtype=np.float64),
                             "trust": trust, "units": run.compared,
                             "confidence": np.asarray(found.confidence, dtype=np.float64),
                             "old_gate": SubjectTest(retrieval).knows(evidence),
                             # each clause's verdict, for bench/gate_fit.py, which varies the thresholds
                             "words_known": SubjectTest(retrieval).words_known(evidence),
                             "named": SubjectTest(retrieval).named_in_its_script(evidence)}

        def minimum_apply(stage, found, query, run):
            found.kept = found.relevance >= run.retrieval.hard_min_score

        stages.Confidence.apply = confidence_apply
        stages.Minimum.apply = minimum_apply

    def take(self) -> dict:
        last, self.last = self.last, None
        return last or {"ids": [], "old_gate": False}


def store(name: str, build):
    from memctl import Memory

    path = CACHE / "stores" / name
    done = path / ".built"
    if not done.exists():
        if path.exists():
            subprocess.run(["rm", "-rf", str(path)], check=True)
        path.mkdir(parents=True)
        memory = Memory(path)
        build(memory)
        memory.index()
        done.touch()
    return Memory(path)


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)


def ask(recorder: Recorder, memory, rows: list[dict], out: list[dict]) -> None:
    for row in rows:
        found = memory.search(row["query"], k=K, **({"scope": row["scope"]} if row.get("scope") else {}),
                              **({"kinds": ["memory"]} if row.get("memory") else {}))
        record = recorder.take()
        record.update({key: value for key, value in row.items() if key not in ("scope", "memory")})
        record["ranked"] = [r.record_id or r.id for r in found.results]
        out.append(record)


def person_rows(source: str, questions: list[dict]) -> list[dict]:
    """The paraphrase set's questions (bench/paraphrase.py questions_of) as rows to ask."""
    return [{"source": source, "split": q["split"], "kind": "positive" if q["expected"] else "never-mentioned",
             "query": q["query"], "evidence": {q["expected"]} if q["expected"] else None, "id": q["id"],
             "direction": f"{q['fact_lang']}->{q['question_lang']}" if q["expected"] else q["question_lang"]}
            for q in questions]


def gibberish(pick: random.Random, n: int) -> list[str]:
    return [" ".join("".join(pick.choice(string.ascii_lowercase) for _ in range(pick.randint(3, 9)))
                     for _ in range(pick.randint(3, 8))) + "?" for _ in range(n)]


def negatives(pick, n: int, kinds: dict[str, list[str]], split: str, source: str) -> list[dict]:
    rows = []
    for kind, pool in kinds.items():
        for number, text in enumerate(pick.sample(pool, min(n, len(pool)))):
            rows.append({"source": source, "split": split, "kind": kind, "query": text, "evidence": None,
                         "id": f"{kind}-{number}"})
    return rows


def collect(data: Path, only: list[str]) -> None:
    import paraphrase
    from retrieval import lme_messages, locomo_messages, madial_notes

    recorder = Recorder()
    conversations = json.loads((data / "locomo_dev.json").read_text())
    locomo_questions = {c["sample_id"]: [q["question"] for q in c["qa"] if q.get("evidence")] for c in conversations}
    every_question = [text for texts in locomo_questions.values() for text in texts]
    zh_dialogues = [json.loads(line) for line in (data / "madial_zh_dialogues_dev.jsonl").read_text().splitlines()]
    zh_excerpts = ["".join(d["dialogue"][:d["test-turn"][0]]) for d in zh_dialogues]
    facts, never, distractors = paraphrase.load(HERE / "paraphrase")
    never_of = {split: [n["question"] for n in never if paraphrase.split_of(n["id"]) == split]
                for split in ("dev", "heldout")}

    def never_for(split):  # the held-out part asks the held-out never-mentioned questions
        return never_of["heldout" if split in ("check", "heldout") else "dev"]

    def save(source, out):
        (CACHE / f"signals-{source}.pkl").write_bytes(pickle.dumps(out))
        print(f"{source}: {len(out)} queries recorded", file=sys.stderr, flush=True)

    if "locomo" in only:
        out = []
        for conversation in conversations:  # conv-42 checked, the others fitted on
            sample = conversation["sample_id"]
            split = "check" if sample == "conv-42" else "fit"
            memory = store(f"locomo-{sample}", lambda m, conversation=conversation: m.ingest(jsonl(locomo_messages(conversation["conversation"])),
                                                                  fmt="jsonl", keep_noise=True))
            rows = []
            for number, q in enumerate(conversation["qa"]):
                if q.get("evidence"):
                    evidence = {e.replace(":", "-").rstrip(";,") for item in q["evidence"] for e in item.split()}
                    rows.append({"source": "locomo", "split": split, "kind": "positive", "query": q["question"],
                                 "evidence": evidence, "category": q["category"], "id": f"{sample}-{number}"})
            others = [text for other, texts in locomo_questions.items() if other != sample for text in texts]
            pick = random.Random(sample)
            rows += negatives(pick, 40, {"gibberish": gibberish(pick, 40), "Chinese excerpt": zh_excerpts,
                                         "another conversation's question": others,
                                         "never-mentioned": never_for(split)}, split, "locomo")
            ask(recorder, memory, rows, out)
            print(f"locomo {sample}: {len(rows)} queries", file=sys.stderr, flush=True)
        save("locomo", out)

    if "madial" in only:
        out = []
        dialogues_of = {lang: [json.loads(line) for line in
                               (data / f"madial_{lang}_dialogues_dev.jsonl").read_text().splitlines()]
                        for lang in ("zh", "en")}
        for lang in ("zh", "en"):  # MADial: each side's memories, asked by both sides' dialogues (the same ids)
            notes = madial_notes(data, lang)
            stored = {n["id"] for n in notes}
            memory = store(f"madial-{lang}", lambda m, notes=notes: m.ingest(jsonl(notes), kind="memory", fmt="jsonl",
                                                                 keep_noise=True))
            rows = []
            for asked, dialogues in dialogues_of.items():
                for d in dialogues:
                    relevant = {f"madial-{r}" for r in d["relevant-id"]} & stored
                    if relevant:
                        rows.append({"source": "madial", "split": "check" if d["id"] % 3 == 0 else "fit",
                                     "kind": "positive", "query": "".join(d["dialogue"][:d["test-turn"][0]]),
                                     "evidence": relevant, "id": f"{asked}-{lang}-{d['id']}",
                                     "direction": f"{lang}->{asked}", "scope": f"project:user-{d['user-id']}",
                                     "memory": True})
            # No Chinese excerpts here: they are the other side's dialogues, asked of their own memories.
            pick = random.Random(f"madial-{lang}")
            users = sorted({d["user-id"] for d in dialogues_of[lang]})
            for split in ("fit", "check"):
                kinds = {"gibberish": gibberish(pick, 15), "another conversation's question": every_question,
                         "never-mentioned": never_for(split)}
                for row in negatives(pick, 15, kinds, split, "madial"):
                    rows.append({**row, "scope": f"project:user-{pick.choice(users)}", "memory": True})
            ask(recorder, memory, rows, out)
            print(f"madial {lang}: {len(rows)} queries", file=sys.stderr, flush=True)
        save("madial", out)

    if "paraphrase" in only:
        out = []
        questions = paraphrase.questions_of(facts, never)

        def build_paraphrase(m):
            messages, notes = paraphrase.records(facts, distractors)
            m.ingest(jsonl(messages), fmt="jsonl")
            m.ingest(jsonl(notes), kind="memory", fmt="jsonl")

        memory = store("paraphrase", build_paraphrase)
        rows = person_rows("paraphrase", questions)
        pick = random.Random("paraphrase")
        for split in ("dev", "heldout"):
            rows += negatives(pick, 15, {"gibberish": gibberish(pick, 15), "another conversation's question":
                                         every_question, "Chinese excerpt": zh_excerpts}, split, "paraphrase")
        ask(recorder, memory, rows, out)
        save("paraphrase", out)

    if "facts" in only:  # the person's facts alone (notes and messages, no chat around them), as the
        out = []         # issue's held-out store of one person's 24 facts is
        def build_facts(m):
            messages, notes = paraphrase.records(facts, [])
            m.ingest(jsonl(messages), fmt="jsonl", keep_noise=True)
            m.ingest(jsonl(notes), kind="memory", fmt="jsonl")

        memory = store("facts", build_facts)
        rows = person_rows("facts", paraphrase.questions_of(facts, never))
        ask(recorder, memory, rows, out)
        save("facts", out)

    if "tiny" in only:
        out = []
        plain = [f for f in facts if "older" not in f]
        for fact in plain:  # tiny stores: the fact and three other messages of the person's
            split = paraphrase.split_of(fact["id"])
            pick = random.Random(f"tiny-{fact['id']}")
            others = pick.sample(distractors, 3)
            chat = sorted([{"id": f"fact-{fact['id']}", "text": fact["text"], "ts": fact["ts"]},
                           *({"id": f"chat-{d['id']}", "text": d["text"], "ts": d["ts"]} for d in others)],
                          key=lambda m: m["ts"])
            memory = store(f"tiny-{fact['id']}", lambda m, chat=chat: m.ingest(jsonl([{**c, "session": "chat"} for c in chat]),
                                                                     fmt="jsonl", keep_noise=True))
            rows = [{"source": "tiny", "split": split, "kind": "positive", "query": fact[f"question_{lang}"],
                     "evidence": {f"fact-{fact['id']}"}, "id": f"tiny-{fact['id']}-{lang}",
                     "direction": f"{fact['lang']}->{lang}"} for lang in ("en", "zh")]
            other = pick.choice([f for f in plain if f["id"] != fact["id"]])
            rows.append({"source": "tiny", "split": split, "kind": "another fact's question", "evidence": None,
                         "query": other[f"question_{pick.choice(['en', 'zh'])}"], "id": f"tiny-{fact['id']}-other"})
            rows += [{"source": "tiny", "split": split, "kind": "never-mentioned", "evidence": None, "query": text,
                      "id": f"tiny-{fact['id']}-never-{i}"} for i, text in enumerate(pick.sample(never_of[split], 2))]
            ask(recorder, memory, rows, out)
        save("tiny", out)

    if "lme" in only:
        out = []
        for number, question in enumerate(json.loads((data / "lme_dev.json").read_text())):
            split = "check" if number % 3 == 0 else "fit"
            messages, evidence = lme_messages(question)
            memory = store(f"lme-{question['question_id']}", lambda m, messages=messages: m.ingest(jsonl(messages), fmt="jsonl",
                                                                                keep_noise=True))
            rows = [{"source": "lme", "split": split, "kind": "positive", "query": question["question"],
                     "evidence": evidence, "category": question["question_type"], "id": question["question_id"]}]
            pick = random.Random(question["question_id"])
            rows += negatives(pick, 3, {"gibberish": gibberish(pick, 3), "Chinese excerpt": zh_excerpts,
                                        "another conversation's question": every_question,
                                        "never-mentioned": never_for(split)}, split, "lme")
            ask(recorder, memory, rows, out)
            print(f"lme {number + 1}/30", file=sys.stderr, flush=True)
        save("lme", out)


# -- fit -------------------------------------------------------------------------------------------------
def signals_of(record: dict) -> confidence.Signals:
    return confidence.Signals(record["relevance_cosine"], record["coverage"], record["relevance"], record["trust"],
                              record["units"])


def results_of(record: dict):
    """The positions (among the candidates) of the top-K results returned, and whether each is evidence."""
    position = {}
    for at, cid in enumerate(record["ids"]):
        position.setdefault(cid, at)
    at = [position[cid] for cid in record["ranked"] if cid in position]
    evidence = record["evidence"] or set()
    return at, np.array([record["ids"][i] in evidence for i in at], dtype=float)


def design(records: list[dict], names: tuple[str, ...]):
    """Every returned result of every query: its features, its label, its data set and its query."""
    xs, ys, groups, queries = [], [], [], []
    for number, record in enumerate(records):
        if not record["ids"]:
            continue
        at, labels = results_of(record)
        if not at:
            continue
        xs.append(confidence.features(signals_of(record), names)[at])
        ys.append(labels)
        groups += [record["source"]] * len(at)
        queries += [number] * len(at)
    return np.vstack(xs), np.concatenate(ys), np.array(groups), np.array(queries)


def irls(x, y, w, ridge=1e-2, steps=50):
    """Weighted logistic regression by iteratively reweighted least squares; x has no intercept column."""
    x1 = np.column_stack([np.ones(len(x)), x])
    beta = np.zeros(x1.shape[1])
    penalty = ridge * np.eye(x1.shape[1])
    penalty[0, 0] = 0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(x1 @ beta, -30, 30)))
        h = x1.T @ (x1 * (w * p * (1 - p))[:, None]) + penalty
        g = x1.T @ (w * (y - p)) - penalty @ beta
        step = np.linalg.solve(h, g)
        beta += step
        if np.abs(step).max() < 1e-9:
            break
    return beta


def source_weights(groups):
    """Each data set weighs alike in the fit (LoCoMo's 2,000 questions would otherwise decide it)."""
    counts = {g: (groups == g).sum() for g in set(groups)}
    w = np.array([1 / counts[g] for g in groups])
    return w * len(groups) / w.sum()


def predict(x, beta):
    return 1 / (1 + np.exp(-(beta[0] + x @ beta[1:])))


def calibration(p, y, groups, title):
    print(f"\n### {title}\n")
    base = y.mean()
    print(f"results {len(y)}, relevant {base:.3f}; Brier {np.mean((p - y) ** 2):.4f} (base rate alone "
          f"{np.mean((base - y) ** 2):.4f}); log loss {-np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12)):.4f}\n")
    print("| confidence | results | mean confidence | relevant |\n| --- | --- | --- | --- |")
    edges = [0, .05, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1.0001]
    for low, high in zip(edges, edges[1:]):
        at = (p >= low) & (p < high)
        if at.any():
            print(f"| {low:.2f}-{min(high, 1):.2f} | {at.sum()} | {p[at].mean():.3f} | {y[at].mean():.3f} |")
    print("\n| data set | results | mean confidence | relevant | Brier | base-rate Brier |\n| --- | --- | --- | --- | --- | --- |")
    for g in sorted(set(groups)):
        at = groups == g
        print(f"| {g} | {at.sum()} | {p[at].mean():.3f} | {y[at].mean():.3f} | {np.mean((p[at] - y[at]) ** 2):.4f} | "
              f"{np.mean((y[at].mean() - y[at]) ** 2):.4f} |")


def load_records() -> list[dict]:
    records = []
    for source in SOURCES:
        path = CACHE / f"signals-{source}.pkl"
        if path.exists():
            records += pickle.loads(path.read_bytes())
    return records


def fit(write: bool, names: tuple[str, ...], gates: tuple | None) -> None:
    records = load_records()
    fitting = [r for r in records if r["split"] in ("fit", "dev")]
    checking = [r for r in records if r["split"] in ("check", "heldout")]
    x, y, groups, _ = design(fitting, names)
    beta = irls(x, y, source_weights(groups))
    print(f"model {MODEL}; sources {sorted(set(groups))}; features {names}")
    print("coefficients: " + ", ".join(f"{n} {b:+.4f}" for n, b in zip(("intercept", *names), beta)))
    calibration(predict(x, beta), y, groups, "fit part")
    xc, yc, gc, _ = design(checking, names)
    calibration(predict(xc, beta), yc, gc, "check part (held out)")
    ordered(checking, names, beta)
    if gates:
        refusals(fitting, checking, names, beta, *gates)
    if write:
        write_rules(names, beta, records)


def ordered(records, names, beta):
    """Whether an answer's evidence is more confident than an unrelated query's best result."""
    answer, unrelated = [], []
    for r in records:
        if not r["ids"] or not r["ranked"]:
            continue
        at, labels = results_of(r)
        p = predict(confidence.features(signals_of(r), names)[at], beta)
        if r["kind"] == "positive" and labels.any():
            answer.append(p[labels == 1].max())
        elif r["kind"] != "positive":
            unrelated.append(p.max())
    answer, unrelated = np.array(answer), np.array(unrelated)
    wins = np.mean([(a > unrelated).mean() for a in answer]) if len(answer) and len(unrelated) else float("nan")
    print(f"\ncheck part: an answer's evidence over an unrelated query's best result (AUC) {wins:.3f} "
          f"({len(answer)} answers, {len(unrelated)} unrelated)")


# -- refusals (item 2): the subject test, and rules reading the confidence ------------------------------
def metric(record: dict, ranked: list[str]) -> float:
    ev = record["evidence"]
    source = record["source"]
    if source == "lme":
        return float(ev <= set(ranked[:10]))
    if source == "madial":
        return len(ev & set(ranked[:5])) / len(ev)
    if source == "locomo":
        return len(ev & set(ranked[:10])) / len(ev)
    return float(bool(ev & set(ranked[:3])))


def key_of(r):
    if r["kind"] != "positive":
        return f"{r['source']}: unrelated"
    if r["source"] in ("paraphrase", "facts", "tiny", "madial"):
        cross = r["direction"][:2] != r["direction"][-2:]
        return f"{r['source']} {'across' if cross else 'same'}" + (f" {r['direction']}" if r["source"] == "madial" else "")
    return r["source"]


def best_confidence(records, names, beta):
    out = []
    for r in records:
        if not r["ids"] or not r["ranked"]:
            out.append(0.0)
            continue
        at, _ = results_of(r)
        out.append(float(predict(confidence.features(signals_of(r), names)[at], beta).max()))
    return np.array(out)


def refusals(fitting, checking, names, beta, either=(0.3, 0.5, 0.7), both=(0.02, 0.05, 0.1)):
    """The subject test beside it with a result of confidence `either` or more let through, and beside
    it with a refusal when no result reaches `both`."""
    for title, part in (("fit part", fitting), ("check part", checking)):
        best = best_confidence(part, names, beta)
        old = np.array([r["old_gate"] for r in part])
        rules = {"subject test (main)": old, "none": np.ones(len(part), dtype=bool)}
        for t in either:
            rules[f"test or p≥{t}"] = old | (best >= t)
        for t in both:
            rules[f"test and p≥{t}"] = old & (best >= t)
        print(f"\n### refusal rules, {title} (positives: the set's recall; unrelated: share returning any)\n")
        print("| set | n | " + " | ".join(rules) + " |\n| --- | --- | " + " | ".join("---" for _ in rules) + " |")
        for key in sorted({key_of(r) for r in part}):
            at = [i for i, r in enumerate(part) if key_of(r) == key]
            cells = []
            for passed in rules.values():
                if key.endswith("unrelated"):
                    cells.append(np.mean([bool(passed[i] and part[i]["ranked"]) for i in at]))
                else:
                    cells.append(np.mean([metric(part[i], part[i]["ranked"] if passed[i] else []) for i in at]))
            print(f"| {key} | {len(at)} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


def write_rules(names, beta, records) -> None:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    digest = hashlib.sha256()
    for source in SOURCES:
        path = CACHE / f"signals-{source}.pkl"
        if path.exists():
            digest.update(path.read_bytes())
    import tomllib

    path = REPO / "memctl" / "search" / "rules" / "confidence.toml"
    text = path.read_text()
    header = text[:text.index("[models.")] if "[models." in text else text
    fits = tomllib.loads(text).get("models", {})
    sources = sorted({r["source"] for r in records if r["split"] in ("fit", "dev")})
    fits[MODEL] = {"model": MODEL, "features": list(names),
                   "coefficients": [round(float(b), 5) for b in beta[1:]], "intercept": round(float(beta[0]), 5),
                   "fitted_on": "the fit part of bench/confidence_fit.py: " + ", ".join(sources)
                                + " (LoCoMo dev conv-26/30/41; 2/3 of LongMemEval dev and of MADial dev, each side's "
                                "dialogues over both sides' memories; the paraphrase set's dev split and its tiny "
                                "stores), with their unrelated queries",
                   "checked_on": "LoCoMo conv-42, the other 1/3 of LongMemEval and MADial dev, the paraphrase "
                                 "set's heldout split and its tiny stores (bench/README.md)",
                   "command": "python bench/confidence_fit.py collect && python bench/confidence_fit.py fit "
                              f"--features {','.join(names)} --write",
                   "commit": commit, "signals_sha256": digest.hexdigest()[:12]}
    lines = [header.rstrip() + "\n"]
    for model, fitted in fits.items():
        lines.append(f'\n[models."{model}"]')
        for key, value in fitted.items():
            lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
    path.write_text("\n".join(lines) + "\n")
    confidence.model_for.cache_clear()
    print(f"written: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("collect", "fit"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", default=",".join(SOURCES), help="collect: these sources only")
    parser.add_argument("--features", help="comma-separated, of confidence.FEATURES (default: the rules file's "
                        f"choice; all: {','.join(confidence.FEATURES)})")
    parser.add_argument("--gates", metavar="EITHER/BOTH", help="fit: also the refusal rules reading the confidence, "
                        "the subject test or a result of p >= each of EITHER, and the test and one of p >= each of "
                        "BOTH: comma-separated levels, e.g. 0.3,0.5/0.02,0.05")
    parser.add_argument("--write", action="store_true", help="write the fit to memctl/search/rules/confidence.toml")
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    if args.step == "collect":
        collect(args.data, args.only.split(","))
    else:
        gates = None
        if args.gates:
            either, both = args.gates.split("/")
            gates = tuple(tuple(float(t) for t in levels.split(",") if t) for levels in (either, both))
        features = args.features.split(",") if args.features else confidence.model_for(MODEL).features
        fit(args.write, tuple(features), gates)


if __name__ == "__main__":
    main()
