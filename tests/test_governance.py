"""Governance as a library (G4, G6): scores, similarity, version chains on hand-written files."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, strategies as st

from conftest import runtime_of
from memctl import config
from memctl.store import counters as access
from memctl import clock
from memctl.governance import governance
from memctl.search import scores
from memctl.store import status
from memctl.store import memoryfile
from memctl.errors import InputError
from memctl.store.store import Store

NOW = clock.parse_ts("2026-12-01T00:00:00Z")


def block(memory_id: str, text: str, **fields) -> str:
    """An annotated MEMORY.md entry as a person would type it."""
    meta = {"id": memory_id, "summary": text[:40], "memory_class": "episodic", "scope": "global", **fields}
    lines = ["<!-- memory"] + [f"{k}: {memoryfile._render_value(v)}" for k, v in meta.items()] + ["-->", text, ""]
    return "\n".join(lines) + "\n"


def doc_of(*blocks: str) -> memoryfile.Document:
    return memoryfile.parse("## Notes\n\n" + "".join(blocks))


def days_ago(days: float) -> str:
    return clock.format_ts(NOW - timedelta(days=days))


# -- scores (G4) ---------------------------------------------------------------
def test_health_score_of_a_fresh_memory_with_the_default_weight():
    entry = doc_of(block("a", "fresh", created_at=days_ago(0))).entries[0]
    score = scores.health_score(entry, NOW)
    assert score.recency_decay == 1.0 and score.access_frequency == 0 and score.user_weight == 5
    assert score.total == pytest.approx(0.4 + 0.25 * 0.5)


def test_recency_halves_every_14_days_and_access_saturates_at_20():
    entry = doc_of(block("a", "old", created_at=days_ago(28), user_weight=8, access_count=4)).entries[0]
    score = scores.health_score(entry, NOW, accesses=6)   # 4 written in MEMORY.md + 6 counted
    assert score.recency_decay == pytest.approx(0.25)
    assert score.access_count == 10 and score.access_frequency == pytest.approx(0.5)
    assert score.total == pytest.approx(0.4 * 0.25 + 0.35 * 0.5 + 0.25 * 0.8)
    assert scores.health_score(entry, NOW, accesses=500).access_frequency == 1.0


def test_retrieval_score_formula_and_parts():
    fields = {"id": "u1", "created_at": days_ago(14), "user_weight": 10}   # a unit's field dict works too
    score = scores.retrieval_score(0.8, fields, NOW, accesses=20)
    assert score.total == pytest.approx(0.4 * 0.8 + 0.25 * 0.5 + 0.2 * 1.0 + 0.15 * 1.0)
    assert score.as_dict() == {"score": pytest.approx(score.total, abs=1e-6), "recency_decay": 0.5,
                               "access_frequency": 1.0, "user_weight": 10, "access_count": 20,
                               "age_days": 14.0, "relevance": 0.8}
    assert scores.retrieval_score(7.5, fields, NOW).relevance == 1.0   # relevance is clamped to [0, 1]


def test_hand_broken_fields_never_break_a_score():
    entry = doc_of(block("a", "broken", created_at="last tuesday", user_weight="high",
                         access_count=-3)).entries[0]
    score = scores.health_score(entry, NOW)
    assert score.age_days is None and score.recency_decay == 1.0     # unknown age: not decayed
    assert score.user_weight == 5 and score.access_count == 0


def test_scorer_adds_access_json_counts_and_reads_settings(tmp_path):
    store = Store(tmp_path / "s")
    store.root.mkdir(mode=0o700)
    (store.root / "memctl.toml").write_text("[governance]\nhealth_weight_user = 0.5\ndefault_user_weight = 10\n")
    access.record(store, ["a", "a"], NOW)   # one search returning it twice counts once
    access.record(store, ["a"], NOW)
    entry = doc_of(block("a", "counted", created_at=days_ago(0), access_count=1)).entries[0]
    score = scores.Scorer(store, NOW, runtime_of(store).settings.governance).health(entry)
    assert score.access_count == 3      # 1 written in MEMORY.md + 2 searches
    assert score.total == pytest.approx(0.4 + 0.35 * 3 / 20 + 0.5 * 1.0)


def test_settings_out_of_range_are_an_input_error_naming_the_file(tmp_path):
    store = Store(tmp_path / "s")
    store.root.mkdir()
    (store.root / "memctl.toml").write_text("[governance]\narchive_below = 0.5\n")
    with pytest.raises(InputError, match="archive_below must not exceed"):
        config.load(store.config_file)
    (store.root / "memctl.toml").write_text("[governance]\nrecency_half_life_days = 0\n")
    with pytest.raises(InputError, match="memctl.toml.*recency_half_life_days"):
        config.load(store.config_file)


@given(age=st.floats(0, 3650), later=st.floats(0, 3650), weight=st.floats(0, 10), base=st.integers(0, 100),
       counted=st.integers(0, 100), relevance=st.floats(-1, 2))
def test_scores_stay_in_0_1_and_never_rise_with_age(age, later, weight, base, counted, relevance):
    fields = {"created_at": days_ago(age), "user_weight": weight, "access_count": base}
    older = {**fields, "created_at": days_ago(age + later)}
    health = scores.health_score(fields, NOW, accesses=counted).total
    assert 0 <= health <= 1 + 1e-9
    assert scores.health_score(older, NOW, accesses=counted).total <= health + 1e-12
    assert 0 <= scores.retrieval_score(relevance, fields, NOW, accesses=counted).total <= 1 + 1e-9


def test_core_is_is_core_or_user_weight_at_least_9():
    gov = scores.governance_settings()
    assert scores.is_core({"is_core": True}, gov)
    assert scores.is_core({"user_weight": 9}, gov)
    assert not scores.is_core({"user_weight": 8.9, "is_core": "yes"}, gov)


# -- similarity (G6 top-K) -------------------------------------------------------
def test_lexical_similarity_words_and_cjk_bigrams():
    assert governance.lexical_similarity("Kestrel uses PostgreSQL", "kestrel USES postgresql!") == 1.0
    assert governance.lexical_similarity("tea", "coffee") == 0.0
    assert governance.lexical_tokens("淡水分店") == {"淡水", "水分", "分店"}
    assert governance.lexical_similarity("每天寄報表給淡水分店", "淡水分店每天要報表") > 0.3


def test_similar_returns_current_entries_best_first_with_a_pluggable_measure():
    doc = doc_of(block("pg", "Kestrel uses PostgreSQL with one schema per tenant"),
                 block("old", "Kestrel uses PostgreSQL", status="deprecated"),
                 block("tea", "Mei prefers green tea"),
                 block("pg2", "Kestrel PostgreSQL backups run nightly", status="low_priority"))
    found = governance.similar(doc.entries, "Kestrel moves PostgreSQL to one schema per bakery", k=5)
    assert [i for i, _ in found] == ["pg", "pg2"]            # deprecated and unrelated ones are out
    assert governance.similar(doc.entries, "anything", k=1, similarity=lambda a, b: 0.5) == [("pg", 0.5)]


# -- chains (G6) ---------------------------------------------------------------
def test_chain_is_oldest_first_from_any_version():
    doc = doc_of(block("v3", "third", supersedes=["v2"], created_at=days_ago(1)),
                 block("v1", "first", status="deprecated", created_at=days_ago(30)),
                 block("v2", "second", status="deprecated", supersedes=["v1"], created_at=days_ago(10)),
                 block("other", "unrelated"))
    for start in ("v1", "v2", "v3"):
        found = governance.chain(doc, start)
        assert found.ids == ["v1", "v2", "v3"] and found.problems == [] and found.tails == ["v3"]
    links = {line.id: line for line in governance.chain(doc, "v2").links}
    assert links["v2"].supersedes == ["v1"] and links["v2"].superseded_by == ["v3"]
    assert links["v1"].as_dict()["status"] == "deprecated"


def test_chain_survives_a_version_deleted_by_hand():
    doc = doc_of(block("v3", "third", supersedes=["v2"]),
                 block("v1", "first", status="deprecated"))   # v2 (which superseded v1) was deleted by hand
    found = governance.chain(doc, "v3")
    assert found.ids == ["v2", "v3"]
    assert found.links[0].entry is None and found.links[0].status == "missing"
    assert "'v2' is superseded by 'v3' but is not in MEMORY.md" in found.problems[0]
    assert governance.chain(doc, "v2").ids == ["v2", "v3"]    # a named-but-missing id still has a chain
    with pytest.raises(InputError, match="no memory with id 'nope'"):
        governance.chain(doc, "nope")


def test_cycles_and_forks_are_reported_never_a_crash():
    doc = doc_of(block("a", "A", supersedes=["b"]), block("b", "B", supersedes=["a"]),
                 block("self", "S", supersedes=["self"]),
                 block("x", "X", status="deprecated"), block("y", "Y", supersedes=["x"]),
                 block("z", "Z", supersedes=["x"]))
    found = governance.chain(doc, "a")
    assert sorted(found.ids) == ["a", "b"]
    assert any(p.startswith("supersedes cycle: ") for p in found.problems)
    assert governance.chain(doc, "self").problems == ["supersedes cycle: self -> self"]
    fork = governance.chain(doc, "y")
    assert fork.ids[0] == "x" and set(fork.ids) == {"x", "y", "z"}
    assert "'x' is superseded by more than one memory: y, z" in fork.problems
    assert sorted(map(sorted, governance.Graph(doc.entries).cycles())) == [["a", "b"], ["self"]]


def test_chain_follows_links_into_soft_deleted_entries():
    doc = doc_of(block("v2", "second", supersedes=["v1"]))
    gone = memoryfile.parse(block("v1", "first", status="archived", deleted_at=days_ago(1))).entries
    found = governance.chain(doc, "v2", deleted=gone)
    assert found.ids == ["v1", "v2"] and found.links[0].status == "deleted" and not found.problems


def test_active_tails_are_what_search_may_return():
    doc = doc_of(block("old", "old", status="deprecated"),
                 block("new", "new", supersedes=["old"]),
                 block("stale", "stale", status="active"),             # a hand edit forgot to deprecate it
                 block("newer", "newer", supersedes=["stale"], status="low_priority"),
                 block("kept", "kept"),
                 block("arch", "arch", status="archived", supersedes=["kept"]),  # superseded only by an archived one
                 block("typo", "typo", status="actve"))
    doc.blocks.append(memoryfile.parse("Hand-written note without a block.\n").blocks[0])
    tails = status.active_tails(doc)
    assert tails[:4] == ["new", "newer", "kept", "typo"]       # an unreadable status counts as active
    assert len(tails) == 5 and tails[4].startswith("md-")


def test_topic_conflicts_count_only_current_tails():
    doc = doc_of(block("a", "A", canonical_topic="db"), block("b", "B", canonical_topic="db", supersedes=["a"]),
                 block("c", "C", canonical_topic="lang"), block("d", "D", canonical_topic="lang"),
                 block("e", "E", canonical_topic="lang", status="archived"))
    assert governance.topic_conflicts(doc) == {"lang": ["c", "d"]}


def test_recency_matches_the_design_examples():
    # 002 section 4.3: today 1.0, 14 days 0.5, 28 days 0.25, 60 days ~0.05
    for days, expected in ((0, 1.0), (14, 0.5), (28, 0.25), (60, 0.05)):
        decay = scores.health_score({"created_at": days_ago(days)}, NOW).recency_decay
        assert decay == pytest.approx(expected, abs=0.005)
    assert math.isclose(scores.governance_settings().recency_half_life_days, 14)


def test_accesses_are_logged_and_folded_by_the_lifecycle(tmp_path):
    from memctl.governance import lifecycle
    from memctl.store import counters

    store = Store(tmp_path / "store")
    store.memory_md.parent.mkdir(parents=True)
    store.memory_md.write_text("## General\n\nA plain note.\n")
    counters.record(store, ["a", "b", "a"], NOW)
    counters.record(store, ["a"], NOW)
    assert {k: v["count"] for k, v in counters.load(store).items()} == {"a": 2, "b": 1}
    assert store.path(counters.LOG_NAME).exists() and not store.path(counters.FILE_NAME).exists()
    lifecycle.run(runtime_of(store))
    assert not store.path(counters.LOG_NAME).exists()
    counters.record(store, ["b"], NOW)
    assert {k: v["count"] for k, v in counters.load(store).items()} == {"a": 2, "b": 2}
