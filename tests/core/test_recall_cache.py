"""The per-process cache of built recall indexes (memoryhub.core.recall.cache): bounded in bytes,
least recently used out first, rebuilt on a new token, and what it remembers of an index too
large to keep."""

from __future__ import annotations

from memoryhub.core.recall import RecallDoc, RecallIndex
from memoryhub.core.recall.cache import OVERSIZE_MEMORY, IndexCache


def index_of(words: int) -> RecallIndex:
    return RecallIndex.build(
        [
            RecallDoc(id=n, session_key="s", position=n, text=f"note {n} on topic {n % 7}")
            for n in range(words)
        ]
    )


class Builds:
    """A build function that counts its calls."""

    def __init__(self, index: RecallIndex) -> None:
        self.index = index
        self.calls = 0

    def __call__(self) -> RecallIndex:
        self.calls += 1
        return self.index


def test_an_index_is_built_once_per_token() -> None:
    cache = IndexCache(max_bytes=10 * index_of(20).memory_bytes())
    build = Builds(index_of(20))

    first = cache.get_or_build("p", token=1, build=build)
    again = cache.get_or_build("p", token=1, build=build)
    newer = cache.get_or_build("p", token=2, build=build)

    assert first is again is newer is build.index
    assert build.calls == 2
    assert cache.stats().entries == 1
    assert cache.stats().hits == 1


def test_the_least_recently_used_index_goes_first_when_the_bytes_run_out() -> None:
    size = index_of(20).memory_bytes()
    cache = IndexCache(max_bytes=2 * size + size // 2)  # room for two
    for key in ("a", "b"):
        cache.get_or_build(key, token=1, build=Builds(index_of(20)))
    cache.get_or_build("a", token=1, build=Builds(index_of(20)))  # "a" used last

    cache.get_or_build("c", token=1, build=Builds(index_of(20)))

    assert cache.peek("a") is not None
    assert cache.peek("b") is None
    assert cache.peek("c") is not None
    assert cache.stats().bytes <= cache.stats().max_bytes


def test_an_index_larger_than_the_cache_is_used_once_and_remembered_not_kept() -> None:
    small = index_of(5)
    cache = IndexCache(max_bytes=small.memory_bytes() + 1)
    cache.get_or_build("p", token=1, build=Builds(small))
    large = Builds(index_of(500))

    assert cache.get_or_build("p", token=2, build=large) is large.index

    assert cache.peek("p") is None  # the smaller, older one is gone too
    assert cache.stats().bytes == 0
    assert cache.oversize("p") == 2
    assert cache.oversize("q") is None

    # Once the key's index fits again, the mark goes.
    cache.get_or_build("p", token=3, build=Builds(small))
    assert cache.oversize("p") is None


def test_discard_and_clear_forget_what_was_too_large() -> None:
    cache = IndexCache(max_bytes=1)
    for key in ("p", "q"):
        cache.get_or_build(key, token=1, build=Builds(index_of(5)))
    assert cache.oversize("p") == cache.oversize("q") == 1

    cache.discard("p")
    assert cache.oversize("p") is None
    assert cache.oversize("q") == 1

    cache.clear()
    assert cache.oversize("q") is None


def test_only_so_many_oversize_keys_are_remembered() -> None:
    cache = IndexCache(max_bytes=1)
    index = index_of(2)
    for key in range(OVERSIZE_MEMORY + 5):
        cache.get_or_build(key, token=1, build=Builds(index))

    assert cache.oversize(0) is None  # the oldest marks went first
    assert cache.oversize(OVERSIZE_MEMORY + 4) == 1
