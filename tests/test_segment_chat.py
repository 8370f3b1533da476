"""The built-in split on open chat where both people open subjects and nobody announces a change
(issue 22): a closed question that leans on nothing ("do you like cooking?") offers a new subject;
a Chinese message that brings in a new subject by way of the old one ("而且它边上就是…") stays with
the old one. Through `memctl split` in process, with the fake embedder."""

from __future__ import annotations

import pytest

from test_segment_announced import topics_of

HIKE = ["hi ! i just got back from a long hike in the mountains .",
        "nice , i love hiking in the mountains too , the views are great .",
        "the mountains were cold but the hike was worth it .",
        "a cold hike is still a good hike , the mountains are calm ."]
COOKING = ["true , the hike was calm . do you like cooking ?",
           "yes , i love cooking pasta and baking bread at home .",
           "baking bread at home is fun , i bake on sundays .",
           "sundays are for baking , my bread is always too dense ."]


def test_a_question_offering_a_new_subject_opens_its_topic(run, store_dir):
    # The offering message still shares "hike" and "calm" with the one before; without the offer
    # rule (offer_gap 0) it stayed with the hike and the cut fell one message late.
    topics = topics_of(run, HIKE + COOKING)
    assert len(set(topics[:4])) == 1 and len(set(topics[4:])) == 1
    assert topics[0] != topics[4]


@pytest.mark.parametrize(("text", "offers"), [
    ("i agree . working out is great . do you like country music ?", True),
    ("have you ever been to disneyland ?", True),
    ("so then have you ever been to disneyland ?", False),   # "so" leans on what was said
    ("what kind of volunteer work do you do ?", False),      # a wh-question asks about the subject at hand
    ("that sounds fun . have you been to it ?", False),      # points back
    ("i love country music .", False),                       # no question
    ("do you want the red one or the blue one ?", False),    # a choice, not a yes or a no
])
def test_which_questions_offer_a_subject(text, offers):
    from memctl.topics.segment import _offers_subject

    assert _offers_subject(text) is offers


MUSEUM = ["你知道朱炳仁艺术博物馆吗？", "知道，朱炳仁艺术博物馆在北京，是一家铜艺博物馆。",
          "参观这个博物馆需要门票吗？", "博物馆不需要门票，免费开放。",
          "那博物馆的开放时间是什么时候？", "博物馆十点到十八点开放。"]
ART = ["挺好这个时间，而且它边上就是七九八艺术区，可以逛逛。",
       "七九八艺术区不错，艺术区是文艺青年聚集的地方。", "艺术区的建筑新锐时尚，艺术区设计感十足。",
       "艺术区要玩多久？", "艺术区可以玩半天到一天。"]


def test_a_chinese_message_pointing_back_stays_with_the_subject_it_points_to(run, store_dir):
    # "它" (it: the museum) ties the first mention of the art district to the museum; by its words
    # alone it is closer to the district, where the cut fell before the rule.
    topics = topics_of(run, MUSEUM + ART)
    assert len(set(topics[:7])) == 1 and len(set(topics[7:])) == 1
    assert topics[0] != topics[7]


def test_a_block_much_shorter_than_the_others_joins_the_neighbour_it_is_more_like():
    import numpy as np

    from memctl.topics.segment import _short_blocks_folded

    sim = np.zeros((10, 10))
    sim[5, 6:] = sim[6:, 5] = 1.0  # the lone message 5 is like the block after it
    blocks = [(0, 5), (5, 6), (6, 10)]
    assert _short_blocks_folded(sim, list(blocks), set(), 0.4) == [(0, 5), (5, 10)]
    assert _short_blocks_folded(sim, list(blocks), {6}, 0.4) == [(0, 6), (6, 10)]  # never into an announcement
    assert _short_blocks_folded(sim, list(blocks), {5}, 0.4) == blocks               # an announcement stays
    assert _short_blocks_folded(sim, list(blocks), set(), 0.0) == blocks
