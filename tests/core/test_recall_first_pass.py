"""The first pass over the sign bits that a long history's hybrid ranking takes instead of the
product over every vector (hybrid._first_pass_cosine): the bits it keeps, the rows it computes
exactly, and the cosines it reports. Its recall against the exact ranking is measured on LoCoMo
(bench/recall_partial_cosines.py), not here: random vectors have nothing to find."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime

import numpy as np
import pytest

from memoryhub.core.recall import RecallDoc, RecallIndex, hybrid, rank
from memoryhub.core.recall import index as index_module
from memoryhub.core.recall.index import quantized
from tests.core.test_recall_index_extended import chat_docs
from tests.core.test_recall_index_standalone import assert_same_index

DIMENSIONS = 70  # not a multiple of 64: the last word is padded


def docs_with_vectors(count: int, *, seed: int, share: float = 0.8) -> list[RecallDoc]:
    rng = np.random.default_rng(seed)
    docs = chat_docs(random.Random(seed), count, vectors=0.0)
    vectors = rng.standard_normal((count, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    has = rng.random(count) < share
    return [
        dataclasses.replace(d, vector=v if h else None)
        for d, v, h in zip(docs, vectors, has, strict=True)
    ]


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(np.float32)
    return vector / np.linalg.norm(vector)


@pytest.fixture
def sign_bits_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "SIGN_BITS_FROM_ROWS", 0)


def test_a_short_index_keeps_no_sign_bits_and_ranks_by_the_product(monkeypatch) -> None:
    index = RecallIndex.build(docs_with_vectors(40, seed=1))
    assert index.sign_columns is None
    monkeypatch.setattr(
        RecallIndex, "hamming_distances", lambda *_: pytest.fail("no first pass expected")
    )
    assert rank(index, "tea", top_k=5, query_vector=unit(2))


@pytest.mark.usefixtures("sign_bits_always")
def test_the_hamming_distance_counts_the_signs_that_differ() -> None:
    docs = docs_with_vectors(60, seed=3)
    index = RecallIndex.build(docs)
    codes, _ = quantized(unit(4).reshape(1, -1))

    distances = index.hamming_distances(codes)

    assert index.vectors is not None
    expected = [
        int(np.count_nonzero((row > 0) != (codes[0] > 0))) for row in index.vectors
    ]  # a row without a vector is all zeros: every positive sign of the query differs
    assert distances.tolist() == expected
    assert index.memory_bytes() > 0


@pytest.mark.usefixtures("sign_bits_always")
@pytest.mark.parametrize("seed", range(6))
def test_an_extended_index_keeps_the_sign_bits_a_build_of_all_the_docs_keeps(seed: int) -> None:
    docs = docs_with_vectors(50, seed=seed)
    without = [d for d in docs[:20] if d.vector is None]
    late = {d.id: unit(100 + n) for n, d in enumerate(without[:3])}
    plain = [dataclasses.replace(d, vector=None) if d.id in late else d for d in docs]
    whole = RecallIndex.build(
        [dataclasses.replace(d, vector=late[d.id]) if d.id in late else d for d in docs]
    )

    index = RecallIndex.build(plain[:20]).extended(plain[20:35], vectors=late).extended(plain[35:])

    assert index.sign_columns is not None
    assert_same_index(index, whole)


def test_an_index_extended_past_the_threshold_packs_every_row(monkeypatch) -> None:
    monkeypatch.setattr(index_module, "SIGN_BITS_FROM_ROWS", 30)
    docs = docs_with_vectors(50, seed=8)
    base = RecallIndex.build(docs[:20])
    assert base.sign_columns is None

    extended = base.extended(docs[20:])

    assert extended.sign_columns is not None
    assert_same_index(extended, RecallIndex.build(docs))


@pytest.mark.usefixtures("sign_bits_always")
# 1.0: every row exact, nothing fitted; 1.5: a share giving more rows than the index holds must
# not ask np.partition for the kept-th distance of a row that is not there.
@pytest.mark.parametrize("share", [1.0, 1.5])
def test_with_every_row_in_the_first_pass_it_ranks_as_the_product(monkeypatch, share) -> None:
    docs = docs_with_vectors(120, seed=11)
    index = RecallIndex.build(docs)
    monkeypatch.setattr(hybrid, "FIRST_PASS_SHARE", share)
    query = unit(12)

    first_pass = rank(index, "green tea on friday", top_k=30, query_vector=query)
    monkeypatch.setattr(index, "sign_columns", None)
    product = rank(index, "green tea on friday", top_k=30, query_vector=query)

    assert first_pass == product


@pytest.mark.usefixtures("sign_bits_always")
def test_the_first_pass_fits_the_far_rows_and_keeps_the_nearest_and_the_asked_exact() -> None:
    docs = docs_with_vectors(400, seed=13)
    index = RecallIndex.build(docs)
    query = unit(14)
    codes, _ = quantized(query.reshape(1, -1))
    bm25 = index.bm25(["tea"])
    exact = hybrid._cosine(index, query)
    assert exact is not None

    wanted = hybrid._dense_wanted_rows(index, bm25)
    cosine, mask, exact_of = hybrid._first_pass_cosine(index, query, wanted)

    assert mask.tolist() == index.vector_mask.tolist()
    distance = index.hamming_distances(codes)
    kept = max(int(len(index) * hybrid.FIRST_PASS_SHARE), 1)
    nearest = np.argsort(distance, kind="stable")[:kept]
    for row in {*nearest.tolist(), *wanted.tolist()}:
        if index.vector_mask[row]:
            assert cosine[row] == exact[row], row
    assert cosine[~index.vector_mask].tolist() == [0.0] * int((~index.vector_mask).sum())
    fitted = index.vector_mask.copy()
    fitted[nearest] = False
    fitted[wanted] = False
    # The fitted ones lie on one line in the Hamming distance, falling as it grows.
    far = np.flatnonzero(fitted & (cosine != exact))
    assert far.size > 0
    slope = np.polyfit(distance[far].astype(np.float64), cosine[far].astype(np.float64), 1)[0]
    assert slope < 0
    assert exact_of(far).tolist() == exact[far].tolist()


@pytest.mark.usefixtures("sign_bits_always")
def test_the_rows_asked_for_are_chosen_before_the_wait_for_the_vector(monkeypatch) -> None:
    """The query's vector is usually still being embedded on another thread when rank asks for
    it: the work that does not need it is done first, so that it costs the call nothing."""
    index = RecallIndex.build(docs_with_vectors(300, seed=23))
    query = unit(24)
    expected = rank(index, "green tea", top_k=20, query_vector=query)
    order: list[str] = []
    wanted_rows = hybrid._dense_wanted_rows

    def wanted(*args, **kwargs):
        order.append("wanted rows")
        return wanted_rows(*args, **kwargs)

    def vector() -> np.ndarray:
        order.append("vector")
        return query

    monkeypatch.setattr(hybrid, "_dense_wanted_rows", wanted)

    assert rank(index, "green tea", top_k=20, query_vector=vector) == expected
    assert order == ["wanted rows", "vector"]


@pytest.mark.usefixtures("sign_bits_always")
def test_a_hit_ranked_on_a_fitted_cosine_reports_its_exact_one() -> None:
    index = RecallIndex.build(docs_with_vectors(400, seed=15))
    query = unit(16)
    exact = hybrid._cosine(index, query)
    assert exact is not None

    hits = rank(index, "tea", top_k=len(index), query_vector=query)

    assert len(hits) > 100
    for hit in hits:
        if index.vector_mask[hit.row]:
            assert hit.dense_score == float(exact[hit.row])
        else:
            assert hit.dense_score is None


@pytest.mark.usefixtures("sign_bits_always")
@pytest.mark.parametrize("mode", ["semantic", "lexical"])
def test_only_the_hybrid_ranking_takes_the_first_pass(monkeypatch, mode) -> None:
    index = RecallIndex.build(docs_with_vectors(80, seed=17))
    query = unit(18)
    monkeypatch.setattr(
        hybrid, "_first_pass_cosine", lambda *_: pytest.fail("no first pass expected")
    )
    semantic = rank(index, "tea", top_k=10, mode=mode, query_vector=query)
    monkeypatch.setattr(index, "sign_columns", None)
    assert semantic == rank(index, "tea", top_k=10, mode=mode, query_vector=query)


@pytest.mark.usefixtures("sign_bits_always")
def test_a_zero_query_vector_gives_every_row_cosine_zero() -> None:
    index = RecallIndex.build(docs_with_vectors(60, seed=19))
    cosine, _, exact_of = hybrid._first_pass_cosine(
        index,
        np.zeros(DIMENSIONS, dtype=np.float32),
        hybrid._dense_wanted_rows(index, index.bm25(["tea"])),
    )
    assert not cosine.any()
    assert exact_of(np.arange(3)).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.usefixtures("sign_bits_always")
def test_a_history_with_few_vectors_and_a_ranking_with_no_hits_need_no_exact_row() -> None:
    index = RecallIndex.build(docs_with_vectors(200, seed=21, share=0.01))
    query = unit(22)
    exact = hybrid._cosine(index, query)
    assert exact is not None

    hits = rank(index, "tea", top_k=50, query_vector=query)
    nothing = rank(
        index, "tea", top_k=50, query_vector=query, since=datetime(2100, 1, 1, tzinfo=UTC)
    )

    assert hits
    assert nothing == []
    for hit in hits:
        expected = float(exact[hit.row]) if index.vector_mask[hit.row] else None
        assert hit.dense_score == expected
