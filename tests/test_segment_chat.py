"""The built-in split on open chit-chat (issue 22, TIAGE-like): both people open subjects, nobody
announces a change, and a closed question that leans on nothing ("do you like cooking?") is how a
new subject is offered. Through `memctl split` in process, with the fake embedder."""

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
