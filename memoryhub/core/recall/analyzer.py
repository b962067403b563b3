"""Text to search terms: lower-case `[a-z0-9]+` words, English stop-words dropped, Snowball stems.

The same analyser must see both the indexed messages and the query, or their stems will not meet.
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")

# NLTK's English list, less the forms with an apostrophe: the tokenizer never yields those
# (it splits "don't" into "don" and "t", both listed here). A standard list rather than a tuned one:
# the study's numbers were measured with plain English stop-words, and "when"/"who" carry no
# lexical evidence (the "when" boost reads the raw query instead).
STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this
    that these those am is are was were be been being have has had having do does did doing a an
    the and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don should now d ll m o re ve y ain aren
    couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won
    wouldn""".split()  # noqa: SIM905 (a word list reads better as text)
)

# PyStemmer is a C extension without type information; loaded by name so that mypy needs neither
# an ignore comment nor an override (either would turn into an error once the other exists).
_STEMMER: Any = importlib.import_module("Stemmer").Stemmer("english")


def words(text: str) -> list[str]:
    """Every lower-case word of `text`, stop-words included, in order."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    # Conversations reuse a small vocabulary: caching makes stemming nearly free after the first
    # few thousand messages (PyStemmer's own cache is per call of stemWords, not across calls).
    return str(_STEMMER.stemWord(word))


def analyze(text: str) -> list[str]:
    """The stems of `text`'s words that are not stop-words, in order, repeats kept."""
    return [stem(word) for word in words(text) if word not in STOP_WORDS]


def query_terms(text: str) -> list[str]:
    """The distinct stems of a query, in first-seen order: BM25 counts each query term once."""
    return list(dict.fromkeys(analyze(text)))
