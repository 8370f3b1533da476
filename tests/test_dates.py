"""The periods a query names (memctl/search/dates.py), read against a pinned now."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memctl.search.dates import named_periods, within

NOW = datetime(2023, 3, 25, 18, 0, tzinfo=timezone.utc)  # a Saturday


def days(text: str) -> list[tuple[str, str]]:
    return [(start.date().isoformat(), end.date().isoformat()) for start, end in named_periods(text, NOW)]


@pytest.mark.parametrize("text, expected", [
    ("What dish did Nate make on 9 November, 2022?", [("2022-11-09", "2022-11-10")]),
    ("How did Joanna feel on October 25, 2022?", [("2022-10-25", "2022-10-26")]),
    ("What happened on 2023-06-01?", [("2023-06-01", "2023-06-02")]),
    ("What did Maria start in December 2023?", [("2023-12-01", "2024-01-01")]),
    ("Where did we go in 2021?", [("2021-01-01", "2022-01-01")]),
    ("What kitchen appliance did I buy 10 days ago?", [("2023-03-14", "2023-03-17")]),
    ("what did I read two weeks ago", [("2023-03-08", "2023-03-15")]),
    ("what did we decide last week", [("2023-03-13", "2023-03-20")]),
    ("what did I cook last Friday", [("2023-03-24", "2023-03-25")]),
    ("what did I say yesterday", [("2023-03-24", "2023-03-25")]),
    ("我2023年6月1日去了哪里", [("2023-06-01", "2023-06-02")]),
    ("三天前买了什么", [("2023-03-21", "2023-03-24")]),
    ("上个月的会议", [("2023-02-01", "2023-03-01")]),
])
def test_named_periods(text, expected):
    assert days(text) == expected


@pytest.mark.parametrize("text", ["What may I bring?", "How many days ago did I meet Emma?", "Book 3 chairs",
                                  "I ran 5 miles", "31 February, 2023"])
def test_no_period_where_none_is_named(text):
    assert named_periods(text, NOW) == []


def test_a_month_without_its_year_is_that_month_of_every_year():
    (period,) = named_periods("Which spot did Joanna visit in May?", NOW)
    assert within(datetime(2022, 5, 14, tzinfo=timezone.utc), [period])
    assert within(datetime(2019, 5, 31, 23, tzinfo=timezone.utc), [period])
    assert not within(datetime(2022, 6, 1, tzinfo=timezone.utc), [period])
