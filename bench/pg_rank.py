"""How close PostgreSQL's own ts_rank gets to BM25 on memctl's tokens (#35 item 2), and what a
PostgreSQL search's reads cost.

    python bench/pg_rank.py --store-url postgresql://USER@HOST:PORT/DB [--data ../shared/bench]

Each LoCoMo dev conversation is a store (one message a turn, as retrieval.py makes it), copied
into a database of its own on that server (its user may create databases; dropped after) and
indexed there (`memctl index`). Then, for every question with evidence, the keyword candidates
of the index (units holding a word of the question, within the default filters) are ranked by
keywords alone, no ranking stage: memctl's BM25 (index/postgres.py, Tantivy's to the bit; with
the turn before a message at 0.5, as a search reads it, and on the text alone), ts_rank over a
tsvector of the same tokens with their positions (normalisation 0, and 1: divided by 1 + the
log of the length), and ts_rank_cd. Printed: each one's evidence recall@10
and @50, and the share of memctl's BM25's top 10 it keeps; then the time of each read a search makes
(BM25's words' document frequencies on the GIN index, BM25, the HNSW query, the slice).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retrieval  # noqa: E402  (the bench beside this one: its stores and its memctl)

RANKS = {"ts_rank": "ts_rank(tsv, query)", "ts_rank, normalised by length (1)": "ts_rank(tsv, query, 1)",
         "ts_rank_cd": "ts_rank_cd(tsv, query)"}


def tsvector_text(tokens: list[str]) -> str:
    """A tsvector's input text of these lexemes at their positions (1-based; at most 16383)."""
    at: dict[str, list[int]] = defaultdict(list)
    for position, token in enumerate(tokens[:16383], 1):
        at[token].append(position)
    return " ".join(f"'{_quoted(token)}':{','.join(map(str, places[:256]))}" for token, places in at.items())


def _quoted(lexeme: str) -> str:
    return lexeme.replace("\\", "\\\\").replace("'", "''")


def main() -> None:
    import numpy as np
    import psycopg

    from memctl.index import lexical
    from memctl.index.filters import Filters
    from memctl.index.postgres import PgReader
    from memctl.text.cjk import simplified

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--data", type=Path, default=retrieval.DEFAULT_DATA)
    args = parser.parse_args()
    retrieval.STORE_URL = args.store_url
    conversations = json.loads((args.data / "locomo_dev.json").read_text())
    recall: dict[str, list[list[float]]] = defaultdict(list)
    kept: dict[str, list[float]] = defaultdict(list)
    took: dict[str, list[float]] = defaultdict(list)
    units = 0
    for conversation in conversations:
        messages = retrieval.locomo_messages(conversation["conversation"])
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "store"
            retrieval.memctl(folder, "ingest", "--keep-noise", "-f", "jsonl", "-",
                             stdin=b"".join(orjson.dumps(m) + b"\n" for m in messages))
            with retrieval.searched(folder) as url:
                retrieval.memctl(url, "index")
                with psycopg.connect(url) as conn:
                    conn.execute("ALTER TABLE memctl_units ADD COLUMN tsv tsvector")
                    for row, tokens in conn.execute("SELECT row, body_terms FROM memctl_units").fetchall():
                        conn.execute("UPDATE memctl_units SET tsv = %s::tsvector WHERE row = %s",
                                     (tsvector_text(tokens), row))
                    conn.commit()
                    units += conn.execute("SELECT count(*) FROM memctl_units").fetchone()[0]
                    reader = PgReader(conn)
                    vector = conn.execute("SELECT embedding::float4[] FROM memctl_units LIMIT 1").fetchone()[0]
                    for question in (q for q in conversation["qa"] if q.get("evidence")):
                        evidence = {e.replace(":", "-").rstrip(";,") for item in question["evidence"]
                                    for e in item.split()}
                        text = question["question"]
                        terms, pairs = lexical._query_terms(simplified(text))
                        started = time.perf_counter()
                        reader._frequencies.clear()
                        reader.doc_freqs({*terms, *(c for p in pairs for c in p)})
                        reader.doc_freqs({*terms, *(c for p in pairs for c in p)}, "context")
                        took["document frequencies (GIN)"].append(time.perf_counter() - started)
                        started = time.perf_counter()
                        bm25 = list(reader.bm25(text, Filters(), 50, 8, 0.5).scores)
                        took["BM25 scoring (the frequencies known)"].append(time.perf_counter() - started)
                        started = time.perf_counter()
                        nearest = reader.nearest(np.array([vector], dtype=np.float32), Filters(), 200)
                        took["HNSW, 200 nearest"].append(time.perf_counter() - started)
                        started = time.perf_counter()
                        reader.slice(list(dict.fromkeys([*bm25, *nearest])), len(vector))
                        took["the slice (units and vectors)"].append(time.perf_counter() - started)
                        conn.rollback()
                        ranked = {"BM25 (memctl's: Tantivy's, the turn before at 0.5)": bm25,
                                  "BM25, the text alone": list(reader.bm25(text, Filters(), 50, 8, 0.0).scores)}
                        words = [*terms, *{c for p in pairs for c in p}]
                        query = " | ".join(f"'{_quoted(t)}'" for t in words)
                        for name, rank in RANKS.items():
                            ranked[name] = [unit_id for (unit_id,) in conn.execute(
                                f"SELECT id FROM memctl_units, CAST(%s AS tsquery) AS query "
                                "WHERE body_terms && %s::text[] AND status NOT IN ('deprecated', 'superseded', "
                                f"'archived') ORDER BY {rank} DESC, row LIMIT 50", (query, words))] if words else []
                        conn.rollback()
                        for name, ids in ranked.items():
                            recall[name].append([len(evidence & set(ids[:k])) / len(evidence) for k in (10, 50)])
                            kept[name].append(len(set(ids[:10]) & set(bm25[:10])) / max(1, len(bm25[:10])))
    print(f"\nLoCoMo dev, {len(recall['ts_rank'])} questions, {units} units in {len(conversations)} stores: "
          "keywords alone\n")
    print("| ranking | recall@10 | recall@50 | share of BM25's top 10 kept |\n| --- | --- | --- | --- |")
    for name, values in recall.items():
        at10, at50 = (sum(v[i] for v in values) / len(values) for i in (0, 1))
        print(f"| {name} | {at10:.3f} | {at50:.3f} | {sum(kept[name]) / len(kept[name]):.3f} |")
    print("\n| a search's read | median ms | p95 ms |\n| --- | --- | --- |")
    for name, values in took.items():
        values = sorted(values)
        print(f"| {name} | {values[len(values) // 2] * 1000:.2f} | {values[int(len(values) * 0.95)] * 1000:.2f} |")


if __name__ == "__main__":
    main()
