"""A process's cache of built recall indexes, bounded in bytes, least recently used out first.

The database is the source of truth; an entry is only a copy, kept with the version token it
was built from. A reader brings the token it just read from the database: a different token
means the copy is stale and is rebuilt, so a write through any process (any web process, any
worker) is seen by every process at its next read, and an erased person's text can never come
back from here (their token read finds no person: the entry is dropped).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from memoryhub.core.recall.index import RecallIndex

# How many keys whose index was too large to keep a cache remembers (a few bytes each).
OVERSIZE_MEMORY = 1024


@dataclass(frozen=True, slots=True)
class CacheStats:
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int


class IndexCache:
    def __init__(self, *, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Hashable, RecallIndex, int]] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()
        # One build at a time per key: concurrent readers of a cold person wait for one build
        # instead of each building the same index.
        self._building: dict[Hashable, threading.Lock] = {}
        # key -> the token of its last build, when that index was larger than the whole cache
        # (never kept): callers ask `oversize` before building the same history again.
        self._oversize: OrderedDict[Hashable, Hashable] = OrderedDict()

    def get_or_build(
        self, key: Hashable, *, token: Hashable, build: Callable[[], RecallIndex]
    ) -> RecallIndex:
        found = self._get(key, token=token)
        if found is not None:
            return found
        with self._lock:
            build_lock = self._building.setdefault(key, threading.Lock())
        with build_lock:
            found = self._get(key, token=token, count=False)
            if found is not None:
                return found
            index = build()
            self._put(key, token=token, index=index)
        with self._lock:
            self._building.pop(key, None)
        return index

    def oversize(self, key: Hashable) -> Hashable | None:
        """The token `key`'s last build was made from, if that index was larger than the whole
        cache (so it was used once and not kept); None otherwise."""
        with self._lock:
            return self._oversize.get(key)

    def peek(self, key: Hashable) -> tuple[Hashable, RecallIndex] | None:
        """The entry as it is, whatever its token (for callers that accept a stale copy)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0], entry[1]

    def discard(self, key: Hashable) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._bytes -= entry[2]
            self._oversize.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._oversize.clear()
            self._bytes = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                entries=len(self._entries),
                bytes=self._bytes,
                max_bytes=self.max_bytes,
                hits=self._hits,
                misses=self._misses,
            )

    def _get(self, key: Hashable, *, token: Hashable, count: bool = True) -> RecallIndex | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == token:
                self._entries.move_to_end(key)
                if count:
                    self._hits += 1
                return entry[1]
            if count:
                self._misses += 1
            return None

    def _put(self, key: Hashable, *, token: Hashable, index: RecallIndex) -> None:
        size = index.memory_bytes()
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            if size > self.max_bytes:
                # Larger than the whole cache: used once, never kept.
                self._oversize[key] = token
                self._oversize.move_to_end(key)
                while len(self._oversize) > OVERSIZE_MEMORY:
                    self._oversize.popitem(last=False)
                return
            self._oversize.pop(key, None)
            self._entries[key] = (token, index, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
