"""The periods a query names: "on 9 November, 2022", "in August 2023", "2023-06-01", "10 days ago",
"last week", "昨天", "2023年6月1日" (the search's date stage, stages.py Dates).

A chat turn is stamped with when it was said; a question that names a day or a month asks about
what was said then. Each period is a half-open [start, end) in UTC (the timestamps of a store are
compared in UTC). Relative phrases are read against `now` (MEMCTL_NOW pins it). A month without
a year ("in May") names that month of every year. The words: rules/dates.toml.
"""

from __future__ import annotations

import re
import tomllib
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path

RULES = Path(__file__).parent / "rules" / "dates.toml"
Period = tuple[datetime, datetime]
ANY_YEAR = 0  # a month named without its year


@lru_cache(maxsize=1)
def _grammar() -> dict:
    with RULES.open("rb") as file:
        rules = tomllib.load(file)
    en, zh = rules["en"], rules["zh"]
    month = "|".join(f"{name[:3]}(?:{name[3:]})?" if len(name) > 3 else name for name in en["months"])
    number = r"\d{1,3}|" + "|".join(en["numbers"])
    return {
        "en": en, "zh": zh,
        "month_of": {name[:3]: at for at, name in enumerate(en["months"], 1)},
        "iso": re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b"),
        "day_month": re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({month})\b\.?,?(?:\s+(\d{{4}}))?", re.I),
        "month_day": re.compile(rf"\b({month})\b\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.I),
        "month_year": re.compile(rf"\b({month})\b\.?,?\s+(\d{{4}})\b", re.I),
        # a bare month only after a preposition: "may" is also a verb
        "month": re.compile(rf"\b(?:in|during|of|since|until|early|late|mid)[\s-]+({month})\b", re.I),
        "year": re.compile(r"\b(?:in|during|of|since)\s+((?:19|20)\d{2})\b", re.I),
        "ago": re.compile(rf"\b({number})\s+({'|'.join(en['units'])})s?\s+{en['ago']}\b", re.I),
        "last": re.compile(rf"\b(?:{en['last']}|{en['this']})\s+(week(?:end)?|month|year|{'|'.join(en['weekdays'])})\b",
                           re.I),
        "today": re.compile(rf"\b(?:{'|'.join(en['today'])})\b", re.I),
        "yesterday": re.compile(rf"\b(?:{'|'.join(en['yesterday'])})\b", re.I),
        "zh_date": re.compile(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月(?:\s*(\d{1,2})\s*[日号號])?"),
        "zh_ago": re.compile(rf"(\d{{1,3}}|[{''.join(zh['numbers'])}])\s*({'|'.join(zh['units'])})(?:之)?{zh['ago']}"),
    }


def named_periods(text: str, now: datetime) -> list[Period]:
    """Every period `text` names, in the order found; [] when it names none."""
    grammar = _grammar()
    now = now.astimezone(timezone.utc) if now.tzinfo else now.replace(tzinfo=timezone.utc)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    reading = _Reading()
    _read_dates(reading, text, grammar)
    _read_relative(reading, text, grammar, now, today)
    _read_chinese_relative(reading, text, grammar, today)
    return reading.periods


class _Reading:
    """The periods found so far and the spans read: "9 November, 2022" is not also "November, 2022"."""

    def __init__(self) -> None:
        self.periods: list[Period] = []
        self.taken: list[tuple[int, int]] = []

    def free(self, match: re.Match) -> bool:
        return not any(match.start() < end and start < match.end() for start, end in self.taken)

    def add(self, match: re.Match, period: Period | None) -> None:
        self.taken.append(match.span())  # read, even when it names no date (31 February)
        if period is not None:
            self.periods.append(period)


def _read_dates(reading: _Reading, text: str, grammar: dict) -> None:
    """The days, months and years named by their numbers or names, the most precise first."""
    for match in grammar["iso"].finditer(text):
        reading.add(match, _day(int(match[1]), int(match[2]), int(match[3])))
    for name in ("day_month", "month_day"):
        for match in grammar[name].finditer(text):
            if reading.free(match):
                day, month = (match[1], match[2]) if name == "day_month" else (match[2], match[1])
                month_number = grammar["month_of"][month[:3].lower()]
                reading.add(match, _day(int(match[3]) if match[3] else ANY_YEAR, month_number, int(day)))
    for match in grammar["month_year"].finditer(text):
        if reading.free(match):
            reading.add(match, _month(int(match[2]), grammar["month_of"][match[1][:3].lower()]))
    for match in grammar["month"].finditer(text):
        if reading.free(match):
            reading.add(match, _month(ANY_YEAR, grammar["month_of"][match[1][:3].lower()]))
    for match in grammar["year"].finditer(text):
        if reading.free(match):
            reading.add(match, (_at(int(match[1]), 1, 1), _at(int(match[1]) + 1, 1, 1)))
    for match in grammar["zh_date"].finditer(text):
        if reading.free(match):
            year = int(match[1]) if match[1] else ANY_YEAR
            reading.add(match, _day(year, int(match[2]), int(match[3])) if match[3] else _month(year, int(match[2])))


def _read_relative(reading: _Reading, text: str, grammar: dict, now: datetime, today: datetime) -> None:
    """The periods named against now: "10 days ago", "3天前", "last week", "today", "yesterday"."""
    en, zh = grammar["en"], grammar["zh"]
    for match in grammar["ago"].finditer(text):
        count = _count(match[1], en["numbers"])
        reading.add(match, _around(now - timedelta(days=count * en["units"][match[2].lower()]),
                                   en["units"][match[2].lower()]))
    for match in grammar["zh_ago"].finditer(text):
        count = _count(match[1], zh["numbers"], first=1)
        reading.add(match, _around(now - timedelta(days=count * zh["units"][match[2]]), zh["units"][match[2]]))
    for match in grammar["last"].finditer(text):
        reading.add(match, _relative(match[0].split()[0].lower() == en["last"], match[1].lower(), today,
                                     en["weekdays"]))
    for match in grammar["today"].finditer(text):
        reading.add(match, (today, today + timedelta(days=1)))
    for match in grammar["yesterday"].finditer(text):
        reading.add(match, (today - timedelta(days=1), today))


def _read_chinese_relative(reading: _Reading, text: str, grammar: dict, today: datetime) -> None:
    """The Chinese words for days, weeks, months and years against today, wherever they stand."""
    en, zh = grammar["en"], grammar["zh"]
    for words, back in ((zh["today"], 0), (zh["yesterday"], 1), (zh["before_yesterday"], 2)):
        if any(word in text for word in words):
            reading.periods.append((today - timedelta(days=back), today - timedelta(days=back - 1)))
    for words, unit, last in ((zh["last_week"], "week", True), (zh["last_month"], "month", True),
                              (zh["last_year"], "year", True), (zh["this_week"], "week", False),
                              (zh["this_month"], "month", False), (zh["this_year"], "year", False)):
        if any(word in text for word in words):
            reading.periods.append(_relative(last, unit, today, en["weekdays"]))


def within(moment: datetime, periods: list[Period]) -> bool:
    """Whether `moment` (aware) falls in one of `periods`; a month of ANY_YEAR matches every year."""
    for start, end in periods:
        if start.year == ANY_YEAR + 1 and end.year <= ANY_YEAR + 2:  # a month or day of every year
            shifted = start.replace(year=moment.year)
            if shifted <= moment < shifted + (end - start):
                return True
        elif start <= moment < end:
            return True
    return False


def _at(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=timezone.utc)


def _day(year: int, month: int, day: int) -> Period | None:
    try:  # ANY_YEAR is stored as year 1: within() moves it onto the year of the moment it checks
        start = _at(year or ANY_YEAR + 1, month, day)
    except ValueError:  # 31 February, month 13: no date
        return None
    return start, start + timedelta(days=1)


def _month(year: int, month: int) -> Period | None:
    if not 1 <= month <= 12:
        return None
    year = year or ANY_YEAR + 1
    return _at(year, month, 1), (_at(year + 1, 1, 1) if month == 12 else _at(year, month + 1, 1))


def _around(moment: datetime, unit_days: int) -> Period:
    """"N units ago" is loose by half a unit (at least a day) either way."""
    slack = timedelta(days=max(1, unit_days // 2))
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - slack, day + timedelta(days=1) + slack


def _relative(last: bool, unit: str, today: datetime, weekdays: list[str]) -> Period:
    """"last week" (the calendar week before this one), "this month", "last Friday", "last weekend"."""
    if unit in weekdays:  # the latest such day before today
        back = (today.weekday() - weekdays.index(unit)) % 7 or 7
        return today - timedelta(days=back), today - timedelta(days=back - 1)
    if unit in ("week", "weekend"):
        start = today - timedelta(days=today.weekday() + (7 if last else 0))
        if unit == "weekend":
            start += timedelta(days=5)
            return start, start + timedelta(days=2)
        return start, start + timedelta(days=7)
    if unit == "month":
        start = today.replace(day=1)
        if last:
            start = (start - timedelta(days=1)).replace(day=1)
        return start, (start + timedelta(days=32)).replace(day=1)
    start = today.replace(month=1, day=1)
    if last:
        start = start.replace(year=start.year - 1)
    return start, start.replace(year=start.year + 1)


def _count(word: str, numbers: list[str], first: int = 0) -> int:
    """A count in digits or words (numbers[i] means i + first; English "a" and "one" both mean 1)."""
    if word.isdigit():
        return int(word)
    word = word.lower()
    at = numbers.index(word) + first
    return max(1, at)
