"""Dates named in a query, and whether a message speaks about time at all.

Only absolute mentions become targets ("13 October, 2023", "October 13, 2023", "in July 2022",
"in June", "in 2023"): a relative one ("last week") has no anchor in the query itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

_MONTHS = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
}
_MONTH_ABBREVIATIONS = {
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
_MONTH_NUMBER = {**_MONTHS, **_MONTH_ABBREVIATIONS}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"

_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b")
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b")
_DAY_MONTH = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}\b")
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!\s*:)")
# A month on its own only after a preposition: "may" is far more often a verb than a month.
_MONTH_ALONE = re.compile(
    r"\b(?:in|during|of|around|early|late|mid|mid-|last|this|next)\s+(?P<month>"
    + "|".join(_MONTHS)
    + r")\b"
)
_YEAR_ALONE = re.compile(rf"\b{_YEAR}\b")


@dataclass(frozen=True, slots=True)
class DateTarget:
    """A date a query names, at the precision it was named.

    `year` is None for a month named alone ("in June"): every June matches.
    `day` is None for a month or a year; `month` is None for a year alone.
    """

    year: int | None
    month: int | None = None
    day: int | None = None

    @property
    def precision(self) -> str:
        if self.day is not None:
            return "day"
        if self.month is not None:
            return "month"
        return "year"


def _valid_day(*, year: int, month: int, day: int) -> bool:
    try:
        date(year, month, day)
    except ValueError:
        return False
    return True


def parse_query_dates(text: str) -> list[DateTarget]:
    """The dates `text` names, most precise first; each span of text is read once.

    Day and month without a year ("on 13 October") becomes a month target: which year is meant
    cannot be told from the query.
    """
    remaining = text.lower()
    targets: list[DateTarget] = []

    def consume(pattern: re.Pattern[str]) -> list[re.Match[str]]:
        nonlocal remaining
        found = list(pattern.finditer(remaining))
        for match in found:
            # Blank the span so "in 2023" inside "13 October, 2023" is not read twice.
            start, end = match.span()
            remaining = remaining[:start] + " " * (end - start) + remaining[end:]
        return found

    for pattern in (_DAY_MONTH_YEAR, _MONTH_DAY_YEAR):
        for match in consume(pattern):
            year, month, day = (
                int(match["year"]),
                _MONTH_NUMBER[match["month"]],
                int(match["day"]),
            )
            if _valid_day(year=year, month=month, day=day):
                targets.append(DateTarget(year=year, month=month, day=day))
            else:
                targets.append(DateTarget(year=year, month=month))
    for match in consume(_MONTH_YEAR):
        targets.append(DateTarget(year=int(match["year"]), month=_MONTH_NUMBER[match["month"]]))
    for pattern in (_DAY_MONTH, _MONTH_DAY):
        for match in consume(pattern):
            month_name = match["month"]
            # "may 5" could be "may 5 people come"; only the full names of other months, or a
            # capitalised-in-the-original May, are trusted here. Lower-cased text cannot tell, so
            # plain "may" is skipped.
            if month_name == "may":
                continue
            if 1 <= int(match["day"]) <= 31:
                targets.append(DateTarget(year=None, month=_MONTH_NUMBER[month_name]))
    for match in consume(_MONTH_ALONE):
        targets.append(DateTarget(year=None, month=_MONTHS[match["month"]]))
    for match in consume(_YEAR_ALONE):
        targets.append(DateTarget(year=int(match["year"])))
    return targets


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Words that say "when" on their own. "may" is left out: it is far more often the verb.
_TIME_WORDS = frozenset(
    {"yesterday", "today", "tonight", "tomorrow", "ago", "recently", "lately", "since", "weekend"}
    | {month for month in _MONTHS if month != "may"}
    | set(_WEEKDAYS)
    | {f"{day}s" for day in _WEEKDAYS}
)
_RELATIVE = frozenset({"last", "next", "this", "past", "coming"})
_RELATIVE_UNITS = frozenset(
    {
        "week",
        "weekend",
        "month",
        "year",
        "night",
        "morning",
        "evening",
        "afternoon",
        "summer",
        "winter",
        "spring",
        "fall",
        "autumn",
        "time",
        "few",
        "couple",
    }
)
_SPANS = frozenset({"days", "weeks", "months", "years"})
_BEFORE_MAY = frozenset({"in", "of", "last", "next", "this", "early", "late", "mid"})
_STARTERS = _RELATIVE | {"few", "couple", "may"}
_YEAR_WORD = re.compile(r"(?:19|20)\d{2}")
_DAY_WORD = re.compile(r"[0-3]?\d(?:st|nd|rd|th)?")
_WORDS = re.compile(r"[a-z0-9]+")


def has_time_expression(text: str) -> bool:
    """Whether `text` says when something happened: a relative time ("last week", "a few days
    ago"), a month, a weekday, a year. Word lookups, not one large regex: it runs on every
    message at index time."""
    words = _WORDS.findall(text.lower())
    present = set(words)
    if not present.isdisjoint(_TIME_WORDS) or any(_YEAR_WORD.fullmatch(word) for word in present):
        return True
    # Most messages hold none of the words a longer expression starts with: skip the walk.
    if present.isdisjoint(_STARTERS):
        return False
    for position, word in enumerate(words):
        following = words[position + 1] if position + 1 < len(words) else ""
        if word in _RELATIVE and (
            following in _RELATIVE_UNITS or following.removesuffix("s") in _RELATIVE_UNITS
        ):
            return True
        if word == "few" and following in _SPANS:
            return True
        after_next = words[position + 2] if position + 2 < len(words) else ""
        if word == "couple" and following == "of" and after_next in _SPANS:
            return True
        if word == "may":
            previous = words[position - 1] if position else ""
            # "in May", "May 5", "5th May": the month; "I may" is not.
            if (
                previous in _BEFORE_MAY
                or _DAY_WORD.fullmatch(previous)
                or _DAY_WORD.fullmatch(following)
            ):
                return True
    return False


def starts_with_when(query: str) -> bool:
    """Whether the query asks "when ...": the answer turn is likely one that names a time."""
    return query.lstrip().lower().startswith("when") and (
        len(query.lstrip()) == 4 or not query.lstrip()[4].isalnum()
    )
