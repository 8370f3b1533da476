"""Each search result's confidence (memctl/search/confidence.py): a probability fitted on dev data,
read from rules/confidence.toml with its provenance; shown in --json and --explain; it orders nothing."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import orjson
import pytest

from memctl.search import confidence

REPO = Path(__file__).resolve().parents[1]
NOTES = b"".join(orjson.dumps(n) + b"\n" for n in (
    {"id": "kestrel-db", "text": "Kestrel stores its recipes in PostgreSQL 16."},
    {"id": "offsite", "text": "The team offsite is in Hualien in December."},
    {"id": "tea", "text": "I prefer tea over coffee in the mornings."}))
ANSWERED = "which database stores Kestrel's recipes"
UNRELATED = "how long is the warranty on my bicycle"


@pytest.fixture
def notes_store(run):
    assert run("ingest", "--kind", "memory", "-f", "jsonl", "-", input=NOTES).returncode == 0
    assert run("index").returncode == 0


def results(run, *args: str) -> list[dict]:
    done = run("search", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def test_each_result_carries_its_confidence_in_json_and_explain(run, notes_store):
    found = results(run, "--explain", ANSWERED)
    assert found and found[0]["id"] == "kestrel-db"
    for result in found:
        assert 0 < result["confidence"] < 1
        assert result["explain"]["confidence"] == result["confidence"]
    shown = run("search", "--explain", ANSWERED).stdout.decode()
    assert f"confidence {found[0]['confidence']:.4f} that it is relevant" in shown


def test_an_answer_is_more_confident_than_an_unrelated_querys_best_result(run, notes_store):
    answer = results(run, ANSWERED)[0]
    # the gate off, so the unrelated query shows what it found at all; its confidence is the same either way
    unrelated = results(run, "--min-score", "0", UNRELATED)
    assert unrelated, "the fake model finds something for any query with the gate off"
    assert answer["confidence"] > max(r["confidence"] for r in unrelated)
    # within the answered query, the answer is the most confident result
    everything = results(run, "--min-score", "0", ANSWERED)
    assert max(everything, key=lambda r: r["confidence"])["id"] == "kestrel-db"
    assert everything[0]["confidence"] == answer["confidence"]


def test_the_confidence_orders_nothing(run, notes_store, tmp_path, monkeypatch):
    before = results(run, "--min-score", "0", ANSWERED)
    # another fit: the coverage alone, the other way round
    rules = tmp_path / "confidence.toml"
    rules.write_text('default = "only"\n[models.only]\nmodel = "only"\nfeatures = ["coverage"]\n'
                     'coefficients = [-3.0]\nintercept = 1.0\n')
    monkeypatch.setattr(confidence, "RULES", rules)
    confidence.model_for.cache_clear()
    try:
        after = results(run, "--min-score", "0", ANSWERED)
    finally:
        confidence.model_for.cache_clear()
    assert [(r["id"], r["score"]) for r in after] == [(r["id"], r["score"]) for r in before]
    assert [r["confidence"] for r in after] != [r["confidence"] for r in before]


def test_the_fit_says_where_it_came_from():
    rules = tomllib.loads((REPO / "memctl" / "search" / "rules" / "confidence.toml").read_text())
    assert rules["default"] in rules["models"]
    for name, fit in rules["models"].items():
        assert fit["model"] == name
        assert set(fit["features"]) <= set(confidence.FEATURES)
        assert len(fit["coefficients"]) == len(fit["features"])
        for key in ("fitted_on", "checked_on", "command"):
            assert fit[key].strip(), f"{name}: {key} is empty"
        assert re.fullmatch(r"[0-9a-f]{7,40}", fit["commit"]), fit["commit"]
        assert re.fullmatch(r"[0-9a-f]{12}", fit["signals_sha256"]), fit["signals_sha256"]
        script = re.search(r"bench/\S+\.py", fit["command"])
        assert script and (REPO / script.group()).is_file()


def test_a_postgresql_store_gives_each_result_the_folders_confidence(run, notes_store, store_dir, postgres_url):
    # Both count the units the filters allow (the store's size is a feature), with vectors or without.
    assert run("store", "copy", str(store_dir), postgres_url).returncode == 0
    for mode in ("hybrid", "bm25"):
        folder = results(run, "--mode", mode, "--min-score", "0", ANSWERED)
        done = run("search", "--json", "--mode", mode, "--min-score", "0", ANSWERED, store=postgres_url)
        assert done.returncode == 0, done.stderr
        found = [orjson.loads(line) for line in done.stdout.splitlines()]
        assert [(r["id"], r["confidence"]) for r in found] == [(r["id"], r["confidence"]) for r in folder]
