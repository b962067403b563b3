"""An index extended with newer docs (and with vectors made since) is the index a build of all
the docs gives, array for array: only the new docs are analysed, but every score, window and
tie must stay what a whole rebuild would give."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memoryhub.core.recall import RecallDoc, RecallIndex, rank
from memoryhub.core.recall.index import quantized
from tests.core.test_recall_index_standalone import WORDS, assert_same_index

SPEAKERS = ("Caroline", "Melanie", "caroline ", "", "assistant", "the")


def chat_docs(rng: random.Random, count: int, *, vectors: float = 0.7) -> list[RecallDoc]:
    """Messages of a few interleaved sessions, positions mostly rising (sometimes equal, as
    two imports of one seq range would be), some without a speaker or a vector."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    positions: dict[int, int] = {}
    docs = []
    for row in range(count):
        session = rng.randint(0, 4)
        positions[session] = positions.get(session, 0) + rng.choice((0, 1, 1, 1, 2))
        vector = None
        if rng.random() < vectors:
            raw = np.asarray([rng.gauss(0, 1) for _ in range(8)], dtype=np.float32)
            vector = raw / np.linalg.norm(raw)
        docs.append(
            RecallDoc(
                id=1000 + row,
                session_key=f"s{session}",
                position=positions[session],
                text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))),
                speaker=rng.choice(SPEAKERS),
                created_at=start + timedelta(minutes=row * 7),
                token_count=rng.randint(0, 40),
                vector=vector,
            )
        )
    return docs


@pytest.mark.parametrize("seed", range(12))
def test_an_extended_index_is_the_index_of_all_the_docs(seed):
    rng = random.Random(seed)
    docs = chat_docs(rng, rng.randint(0, 60))
    whole = RecallIndex.build(docs)

    cuts = sorted(rng.sample(range(len(docs) + 1), k=min(3, len(docs) + 1)))
    index = RecallIndex.build(docs[: cuts[0]])
    for low, high in zip(cuts, [*cuts[1:], len(docs)], strict=True):
        index = index.extended(docs[low:high])

    assert_same_index(index, whole)


@pytest.mark.parametrize("seed", range(12))
def test_an_extended_index_carries_its_row_lookup_forward(seed):
    rng = random.Random(seed)
    # Ids in any order, negatives too: the merge must keep them sorted.
    numbers = rng.sample(range(-500, 500), 50)
    docs = [dataclasses.replace(d, id=n) for d, n in zip(chat_docs(rng, 50), numbers, strict=True)]
    index = RecallIndex.build(docs[:20])
    index.rows_of([])  # the lookup is made at the first call

    index = index.extended(docs[20:35]).extended(docs[35:])

    assert isinstance(index.row_lookup, tuple)  # carried over, not made again
    keys, rows = index.row_lookup
    made_keys, made_rows = RecallIndex.build(docs)._make_row_lookup()  # type: ignore[misc]
    assert keys.tolist() == made_keys.tolist()
    assert rows.tolist() == made_rows.tolist()
    assert index.rows_of([*numbers, 10_000]).tolist() == [*range(50), -1]
    # An index that never needed one makes none for its extension either.
    assert RecallIndex.build(docs[:20]).extended(docs[20:]).row_lookup is None


@pytest.mark.parametrize("seed", range(8))
def test_vectors_made_since_fill_the_old_docs(seed):
    rng = random.Random(seed)
    docs = chat_docs(rng, 40, vectors=1.0)
    later = set(rng.sample([doc.id for doc in docs[:30]], k=10))
    without = [
        RecallDoc(**{**{s: getattr(doc, s) for s in RecallDoc.__slots__}, "vector": None})
        if doc.id in later
        else doc
        for doc in docs
    ]
    made = {doc.id: doc.vector for doc in docs if doc.id in later}

    index = RecallIndex.build(without[:30]).extended(docs[30:], vectors=made)

    assert_same_index(index, RecallIndex.build(docs))


def test_vectors_for_an_index_that_had_none_yet():
    docs = chat_docs(random.Random(3), 20, vectors=0.0)
    base = RecallIndex.build(docs)
    assert base.vectors is None
    vector = np.full(8, 8**-0.5, dtype=np.float32)

    index = base.extended([], vectors={docs[4].id: vector})

    assert index.vectors is not None
    assert index.vector_mask.tolist() == [row == 4 for row in range(20)]
    codes, scales = quantized(vector.reshape(1, -1))
    assert np.array_equal(index.vectors[4], codes[0])
    assert index.vector_scales.tolist() == [scales[0] if row == 4 else 0.0 for row in range(20)]


def test_the_base_index_is_left_as_it_was():
    rng = random.Random(5)
    docs = chat_docs(rng, 50)
    base = RecallIndex.build(docs[:30])
    copy = RecallIndex.build(docs[:30])

    extended = base.extended(docs[30:])

    assert_same_index(base, copy)
    assert len(extended) == 50
    for name in RecallIndex.__slots__:
        value = getattr(extended, name)
        if isinstance(value, np.ndarray):
            assert not value.flags.writeable, name


def test_ranking_over_an_extended_index_is_the_rankings_over_a_build():
    rng = random.Random(9)
    docs = chat_docs(rng, 80)
    extended = RecallIndex.build(docs[:50]).extended(docs[50:70]).extended(docs[70:])
    whole = RecallIndex.build(docs)
    query = np.full(8, 8**-0.5, dtype=np.float32)

    for question in ("green tea last week", "who runs the night shift?", "coffee in may 2021"):
        got = rank(extended, question, query_vector=query, top_k=10)
        want = rank(whole, question, query_vector=query, top_k=10)
        assert got == want
        assert got


def test_without_time_expressions_stays_without():
    docs = chat_docs(random.Random(1), 30)
    lean = RecallIndex.build(docs[:10], time_expressions=False).extended(docs[10:])

    assert_same_index(lean, RecallIndex.build(docs, time_expressions=False))


def test_a_doc_already_in_the_index_or_a_vector_for_one_that_has_it_is_refused():
    docs = chat_docs(random.Random(2), 10, vectors=1.0)
    base = RecallIndex.build(docs)

    with pytest.raises(ValueError, match="unique"):
        base.extended([docs[3]])
    with pytest.raises(ValueError, match="has a vector already or is unknown"):
        base.extended([], vectors={docs[3].id: docs[3].vector})
    with pytest.raises(ValueError, match="has a vector already or is unknown"):
        base.extended([], vectors={"nobody": docs[3].vector})


def test_session_last_positions_and_the_docs_without_vectors():
    docs = [
        RecallDoc(id=1, session_key="a", position=1, text="x"),
        RecallDoc(id=2, session_key="b", position=7, text="y"),
        RecallDoc(id=3, session_key="a", position=4, text="z", vector=np.ones(2, np.float32)),
        RecallDoc(id=4, session_key="a", position=2, text="w"),
    ]
    index = RecallIndex.build(docs)

    assert index.session_last_positions() == {"a": 4, "b": 7}
    assert index.ids_without_vector() == [1, 2, 4]
    assert RecallIndex.build([]).session_last_positions() == {}


def test_docs_placed_between_older_ones_of_their_session_relink_those():
    start = datetime(2024, 1, 1, tzinfo=UTC)
    docs = [
        RecallDoc(id=n, session_key="a", position=p, text=t, speaker="Ana", created_at=start)
        for n, (p, t) in enumerate(
            [(1, "green tea"), (2, "dark coffee"), (5, "night shift"), (6, "the nurse")]
        )
    ]
    later = [
        RecallDoc(id=10, session_key="a", position=3, text="peanut allergy", created_at=start),
        RecallDoc(id=11, session_key="b", position=1, text="green mode", created_at=start),
        RecallDoc(id=12, session_key="a", position=0, text="running week", created_at=start),
    ]

    index = RecallIndex.build(docs).extended(later)

    assert_same_index(index, RecallIndex.build(docs + later))
    assert index.neighbour_ids(1) == (0, 10)  # "dark coffee" now runs into the new turn
