"""The index's shortcuts for docs that stand alone (facts: each its own session, no speaker) and
for callers that never read time expressions: the same index as the general way, bit for bit."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memoryhub.core.recall import RecallDoc, RecallIndex, Weights, rank
from memoryhub.core.recall.index import _own_postings, _windowed_postings

WORDS = (
    *("tea", "coffee", "green", "dark", "mode", "peanut", "allergic", "nurse", "night"),
    *("shift", "may", "last", "week", "2021", "running", "runs", "run", "the", "a", "of"),
    *("in", "on"),
)


def random_docs(rng: random.Random, count: int) -> list[RecallDoc]:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    return [
        RecallDoc(
            id=row * 7 + 3,
            session_key=row * 7 + 3,
            position=0,
            text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 9))),
            created_at=start + timedelta(hours=rng.randint(0, 5000)),
        )
        for row in range(count)
    ]


def assert_same_index(a: RecallIndex, b: RecallIndex, *, skip: tuple[str, ...] = ()) -> None:
    for name in RecallIndex.__slots__:
        if name in skip:
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, name
            assert np.array_equal(x, y, equal_nan=True), name
        else:
            assert x == y, name


@pytest.mark.parametrize("seed", range(40))
def test_own_postings_are_the_windowed_postings_of_docs_without_neighbours(seed):
    """With no neighbour and no speaker the windowed postings are one doc's own counts: the
    shortcut must give the same (term, row, tf) arrays, in the same order."""
    rng = random.Random(seed)
    count = rng.randint(0, 60)
    vocabulary = rng.randint(1, 40)
    token_counts = np.asarray([rng.randint(0, 12) for _ in range(count)], dtype=np.int64)
    token_terms = np.asarray(
        [rng.randrange(vocabulary) for _ in range(int(token_counts.sum()))], dtype=np.intc
    )
    none = np.full(count, -1, dtype=np.int32)
    windowed = _windowed_postings(
        count=count,
        vocabulary_size=vocabulary,
        token_terms=token_terms,
        token_counts=token_counts,
        speaker_rows=np.zeros(0, dtype=np.intc),
        speaker_terms=np.zeros(0, dtype=np.intc),
        prev_index=none,
        next_index=none,
    )
    terms, rows, tf = _own_postings(count=count, token_terms=token_terms, token_counts=token_counts)

    for got, part in ((terms, 0), (rows, 1), (tf, 2)):
        want = (
            np.concatenate([piece[part] for piece in windowed])
            if windowed
            else np.zeros(0, dtype=got.dtype)
        )
        assert got.dtype == want.dtype
        assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(20))
def test_standalone_docs_link_as_sessions_of_one(seed):
    docs = random_docs(random.Random(seed), random.Random(seed).randint(0, 30))
    index = RecallIndex.build(docs)
    count = len(docs)

    assert np.array_equal(index.prev_index, np.full(count, -1))
    assert np.array_equal(index.next_index, np.full(count, -1))
    assert np.array_equal(index.session_index, np.arange(count))
    assert np.array_equal(index.session_order, np.arange(count))
    assert np.array_equal(index.session_starts, np.arange(count))
    assert index.session_order.dtype == np.int32
    assert index.session_starts.dtype == np.int64


@pytest.mark.parametrize("seed", range(10))
def test_without_time_expressions_only_has_time_differs(seed):
    rng = random.Random(seed)
    docs = random_docs(rng, rng.randint(1, 30))
    full = RecallIndex.build(docs)
    lean = RecallIndex.build(docs, time_expressions=False)

    assert_same_index(full, lean, skip=("has_time", "time_expressions"))
    assert not lean.has_time.any()
    # Weights without a "when" boost never read has_time: the same ranking, to the bit.
    weights = Weights(
        dense=0.5, session=0.0, smoothing=0.0, speaker=0.0, length=0.0, date=0.4, when=0.0
    )
    for query in ("when did she run last week", "green tea in may 2021", "nurse night"):
        assert rank(full, query, top_k=10, weights=weights) == rank(
            lean, query, top_k=10, weights=weights
        )


def test_a_hit_names_its_row_and_the_index_its_neighbours_in_its_session() -> None:
    # Two conversations, interleaved in time, positions out of order within one of them.
    docs = [
        RecallDoc(id="a2", session_key="A", position=2, text="the kitten is grey"),
        RecallDoc(id="b1", session_key="B", position=1, text="hello there"),
        RecallDoc(id="a1", session_key="A", position=1, text="we adopted something"),
        RecallDoc(id="a3", session_key="A", position=3, text="her name is Luna"),
        RecallDoc(id="b2", session_key="B", position=2, text="a grey kitten? lovely"),
    ]
    index = RecallIndex.build(docs)

    hits = rank(index, "grey kitten", top_k=5, mode="lexical")

    assert {index.ids[hit.row] for hit in hits} == {hit.id for hit in hits}
    neighbours = {hit.id: index.neighbour_ids(hit.row) for hit in hits}
    assert neighbours["a2"] == ("a1", "a3")
    assert neighbours["b2"] == ("b1", None)
    assert index.neighbour_ids(index.ids.index("a1")) == (None, "a2")  # the first of A
