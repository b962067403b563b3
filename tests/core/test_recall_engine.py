"""The recall engine on small hand-written conversations: no database, no model."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import numpy as np
import pytest

from memoryhub.core.recall import H5, L5, Hit, Mode, RecallDoc, RecallIndex, Weights, hybrid, rank
from memoryhub.core.recall.analyzer import analyze, query_terms
from memoryhub.core.recall.dates import DateTarget, has_time_expression, parse_query_dates
from memoryhub.core.recall.hybrid import _kth_largest
from memoryhub.core.recall.index import quantized
from memoryhub.core.search import EmptySearchQuery


def only(**weights: float) -> Weights:
    """Every weight 0 but the ones given: a test of one prior switches on just that one."""
    return Weights(**{**{name: 0.0 for name in Weights.__slots__}, **weights})


PLAIN = only()  # BM25 alone


def doc(
    doc_id: Hashable,
    text: str,
    *,
    session: Hashable | None = None,
    position: int = 0,
    speaker: str = "",
    created_at: datetime | None = None,
    vector: Sequence[float] | None = None,
) -> RecallDoc:
    # Each message its own session unless told: the window then leaves it alone.
    return RecallDoc(
        id=doc_id,
        session_key=doc_id if session is None else session,
        position=position,
        text=text,
        speaker=speaker,
        created_at=created_at,
        token_count=len(text.split()),
        vector=None if vector is None else _unit(vector),
    )


def _unit(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float32)
    return array / np.linalg.norm(array)


def ids(hits: Sequence[Hit]) -> list[Hashable]:
    return [hit.id for hit in hits]


def session_of(texts: Sequence[str], *, session: Hashable = 1) -> list[RecallDoc]:
    return [
        RecallDoc(id=f"{session}:{n}", session_key=session, position=n, text=text)
        for n, text in enumerate(texts)
    ]


# --- the analyser ----------------------------------------------------------------------------


def test_it_stems_and_drops_stop_words() -> None:
    assert analyze("The runners were RUNNING to their gardens!") == ["runner", "run", "garden"]


def test_it_counts_each_query_term_once_in_first_seen_order() -> None:
    assert query_terms("garden gardens Gardening, and the garden") == ["garden"]
    assert query_terms("cats and dogs and cats") == ["cat", "dog"]


# --- BM25 and the window -------------------------------------------------------------------


def test_a_rare_word_outranks_a_common_one() -> None:
    docs = [doc(f"m{n}", "we ate pizza again tonight") for n in range(8)]
    docs.append(doc("rare", "I practised the saxophone"))
    docs.append(doc("common", "pizza pizza with friends"))
    index = RecallIndex.build(docs)

    hits = rank(index, "pizza saxophone", top_k=3, mode="lexical", weights=PLAIN)

    assert ids(hits)[0] == "rare"
    assert hits[0].lexical_score > hits[1].lexical_score


def test_the_window_finds_an_answer_whose_question_is_in_the_previous_turn() -> None:
    docs = session_of(
        [
            "Where did you go hiking last weekend?",
            "Up the ridge trail by the lake, the views were stunning.",
            "Lovely. Shall we book the dentist for Tuesday?",
        ]
    )
    index = RecallIndex.build(docs)

    hits = rank(index, "hiking", top_k=5, mode="lexical", weights=PLAIN)

    # The question ranks first (its own word), the answer next through the 0.5 window; the
    # dentist turn sits two turns away and must not match.
    assert ids(hits) == ["1:0", "1:1"]
    assert hits[1].signals.lexical


def test_the_window_never_crosses_a_session() -> None:
    docs = [
        *session_of(["Where did you go hiking?"], session=1),
        *session_of(["The ridge trail by the lake."], session=2),
    ]
    index = RecallIndex.build(docs)

    assert ids(rank(index, "hiking", top_k=5, mode="lexical", weights=PLAIN)) == ["1:0"]


def test_a_session_holding_the_best_turn_lifts_its_other_turns() -> None:
    filler = ["ok", "sure thing", "sounds good", "right", "yes"]
    docs = [
        # Message order puts the other session's identical turn first: without the session
        # score, the tie would go to it.
        *session_of([*filler, "the museum tickets were pricey"], session="b"),
        *session_of(
            ["the louvre in paris, what a museum", *filler, "the museum tickets were pricey"],
            session="a",
        ),
    ]
    index = RecallIndex.build(docs)
    query = "louvre museum tickets"

    without = ids(rank(index, query, top_k=10, mode="lexical", weights=PLAIN))
    with_session = ids(rank(index, query, top_k=10, mode="lexical", weights=only(session=0.3)))

    assert without.index("b:5") < without.index("a:6")
    assert with_session.index("a:6") < with_session.index("b:5")


def test_neighbour_smoothing_lifts_the_turn_beside_a_strong_match() -> None:
    docs = [
        *session_of(["the garden party", "filler words here"], session=1),
        *session_of(["tomatoes and the garden", "garden"], session=2),
    ]
    index = RecallIndex.build(docs)

    plain = rank(index, "garden tomatoes", top_k=4, mode="lexical", weights=PLAIN)
    smoothed = rank(index, "garden tomatoes", top_k=4, mode="lexical", weights=only(smoothing=1.0))

    assert ids(plain)[0] == "2:0"
    # "2:1" has the strongest neighbour of all: smoothing puts it right behind it.
    assert ids(smoothed)[:2] == ["2:0", "2:1"]


# --- the priors ----------------------------------------------------------------------------


def test_the_speaker_prior_prefers_the_named_participant() -> None:
    docs = [
        doc("b1", "I really love playing tennis", speaker="Bob"),
        doc("a1", "I really love playing tennis", speaker="Alice"),
        doc("b2", "nothing to do with it", speaker="Bob"),
        doc("a2", "nothing to do with it", speaker="Alice"),
    ]
    index = RecallIndex.build(docs)

    neutral = rank(index, "tennis", top_k=2, mode="lexical", weights=only(speaker=0.4))
    explicit = rank(
        index, "tennis", top_k=2, mode="lexical", weights=only(speaker=0.4), speaker="alice"
    )
    named = rank(
        index, "Does Alice like tennis?", top_k=2, mode="lexical", weights=only(speaker=0.4)
    )
    both = rank(
        index, "Do Alice and Bob like tennis?", top_k=2, mode="lexical", weights=only(speaker=0.4)
    )

    assert ids(neutral) == ["b1", "a1"]  # a tie: message order
    assert ids(explicit) == ["a1", "b1"]
    assert explicit[0].signals.speaker
    assert not explicit[1].signals.speaker
    # A name in the query matches that speaker's turns (the window holds the name) and turns
    # the prior on for them.
    assert ids(named) == ["a1", "a2"]
    assert all(hit.signals.speaker for hit in named)
    # Naming both participants names no one in particular: back to message order.
    assert ids(both) == ["b1", "a1"]
    assert not any(hit.signals.speaker for hit in both)


def test_the_date_boost_prefers_messages_near_the_named_date() -> None:
    may = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    july = datetime(2023, 7, 20, 18, 0, tzinfo=UTC)
    docs = [
        doc("may", "we went to the beach", session="s1", position=0, created_at=may),
        doc("july", "we went to the beach", session="s2", position=0, created_at=july),
    ]
    index = RecallIndex.build(docs)
    weights = only(date=0.5)

    assert ids(rank(index, "beach", top_k=2, weights=weights)) == ["may", "july"]
    hits = rank(index, "the beach on 25 July, 2023", top_k=2, weights=weights)
    assert ids(hits) == ["july", "may"]
    assert hits[0].signals.date
    assert not hits[1].signals.date
    assert ids(rank(index, "beach in July 2023", top_k=2, weights=weights)) == ["july", "may"]
    assert ids(rank(index, "beach in July", top_k=2, weights=weights)) == ["july", "may"]
    # Both are in 2023: a year alone tells them apart no more than nothing does.
    assert ids(rank(index, "beach in 2023", top_k=2, weights=weights)) == ["may", "july"]


def test_the_when_boost_prefers_turns_that_say_when() -> None:
    docs = [
        doc("m1", "we adopted the puppy"),
        doc("m2", "we adopted the puppy yesterday"),
        # A weak match, so that min-max has a range to place the two others in.
        doc("m3", "the puppy next door barked for hours while we tried hard to sleep"),
    ]
    index = RecallIndex.build(docs)
    weights = only(when=0.5)

    # The shorter turn wins on BM25 alone ...
    assert ids(rank(index, "did you adopt a puppy?", top_k=3, weights=weights)) == [
        "m1",
        "m2",
        "m3",
    ]
    # ... but a "when" question wants the one that names a time.
    hits = rank(index, "When did you adopt the puppy?", top_k=3, weights=weights)
    assert ids(hits) == ["m2", "m1", "m3"]
    assert hits[0].signals.when


def test_ties_go_to_message_order() -> None:
    texts = ["my sister called", "my sister called", "my sister called"]
    forward = RecallIndex.build([doc(f"m{n}", text) for n, text in enumerate(texts)])
    backward = RecallIndex.build(
        [doc(f"m{n}", text) for n, text in reversed(list(enumerate(texts)))]
    )

    assert ids(rank(forward, "sister", top_k=3, weights=L5)) == ["m0", "m1", "m2"]
    # The order the messages were given in is the message order.
    assert ids(rank(backward, "sister", top_k=3, weights=PLAIN)) == ["m2", "m1", "m0"]


# --- modes -----------------------------------------------------------------------------------


def conversation(*, vectors: bool) -> list[RecallDoc]:
    texts_and_vectors = [
        ("I adopted a small tabby kitten from the animal shelter", [1.0, 0.0, 0.0]),
        ("my car needs new tyres", [0.0, 1.0, 0.0]),
        ("the vet said the cat is healthy", [0.9, 0.1, 0.0]),
        ("we planted roses in spring", [0.0, 0.0, 1.0]),
    ]
    return [
        doc(f"m{n}", text, speaker="Sam", vector=vector if vectors else None)
        for n, (text, vector) in enumerate(texts_and_vectors)
    ]


def test_without_vectors_hybrid_is_lexical_with_l5() -> None:
    index = RecallIndex.build(conversation(vectors=False))

    hybrid = rank(index, "kitten healthy", top_k=4, query_vector=np.ones(3, np.float32))
    lexical = rank(index, "kitten healthy", top_k=4, mode="lexical", weights=L5)

    assert ids(hybrid) == ids(lexical)
    assert set(ids(hybrid)) == {"m0", "m2"}
    assert [hit.score for hit in hybrid] == [hit.score for hit in lexical]
    assert all(hit.dense_score is None and not hit.signals.semantic for hit in hybrid)


def test_semantic_mode_ranks_by_cosine_alone() -> None:
    index = RecallIndex.build(conversation(vectors=True))
    query_vector = _unit([1.0, 0.05, 0.0])

    hits = rank(index, "feline", top_k=4, mode="semantic", query_vector=query_vector)

    # No word of "feline" occurs anywhere: the order is the vectors' alone.
    assert ids(hits) == ["m0", "m2", "m1", "m3"]
    assert hits[0].score == pytest.approx(float(query_vector @ _unit([1.0, 0.0, 0.0])))
    assert not any(hit.signals.lexical for hit in hits)


def test_semantic_mode_needs_a_query_vector() -> None:
    index = RecallIndex.build(conversation(vectors=True))
    with pytest.raises(ValueError, match="query vector"):
        rank(index, "cat", top_k=3, mode="semantic")


def test_hybrid_mode_fuses_the_dense_score() -> None:
    index = RecallIndex.build(conversation(vectors=True))
    query_vector = _unit([1.0, 0.0, 0.0])

    lexical = rank(index, "my pet", top_k=4, mode="lexical")
    hybrid = rank(index, "my pet", top_k=4, query_vector=query_vector, weights=H5)

    assert lexical == []  # no message says "pet"
    assert ids(hybrid)[:2] == ["m0", "m2"]
    assert hybrid[0].signals.semantic
    assert hybrid[0].dense_score == pytest.approx(1.0)


def test_hybrid_mode_still_finds_messages_without_a_vector_yet() -> None:
    docs = conversation(vectors=True)
    docs.append(doc("new", "the kitten chased a moth", speaker="Sam"))  # not embedded yet
    index = RecallIndex.build(docs)

    hits = rank(index, "kitten moth", top_k=5, query_vector=_unit([0.0, 0.0, 1.0]))

    new = next(hit for hit in hits if hit.id == "new")
    # Its full lexical match weighs what m3's perfect cosine does; both lead the others.
    assert set(ids(hits)[:2]) == {"new", "m3"}
    assert new.dense_score is None
    assert new.signals.lexical
    assert not new.signals.semantic


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_query_vector_given_as_a_function_ranks_as_the_vector_does(mode: Mode) -> None:
    index = RecallIndex.build(conversation(vectors=True))
    query_vector = _unit([1.0, 0.05, 0.0])
    asked: list[str] = []

    def later() -> np.ndarray:
        asked.append("vector")
        return query_vector

    given = rank(index, "kitten healthy", top_k=4, mode=mode, query_vector=query_vector)
    waited = rank(index, "kitten healthy", top_k=4, mode=mode, query_vector=later)

    assert given
    assert waited == given
    assert asked == ["vector"]  # once


def test_a_query_vector_function_is_called_after_the_lexical_scores(monkeypatch) -> None:
    # The point of a function: a vector embedded on another thread arrives while BM25 runs.
    index = RecallIndex.build(conversation(vectors=True))
    order: list[str] = []
    bm25 = RecallIndex.bm25

    def scored(self: RecallIndex, terms: Sequence[str]) -> np.ndarray:
        order.append("bm25")
        return bm25(self, terms)

    def later() -> np.ndarray:
        order.append("vector")
        return _unit([1.0, 0.0, 0.0])

    monkeypatch.setattr(RecallIndex, "bm25", scored)
    rank(index, "kitten healthy", top_k=4, query_vector=later)

    assert order == ["bm25", "vector"]


def test_a_query_vector_function_that_gives_none_leaves_hybrid_lexical_semantic_empty() -> None:
    index = RecallIndex.build(conversation(vectors=True))

    hybrid = rank(index, "kitten healthy", top_k=4, query_vector=lambda: None)
    lexical = rank(index, "kitten healthy", top_k=4, mode="lexical", weights=L5)

    assert hybrid == lexical
    assert rank(index, "kitten healthy", top_k=4, mode="semantic", query_vector=lambda: None) == []
    # Never called in lexical mode.
    rank(index, "kitten", top_k=4, mode="lexical", query_vector=lambda: pytest.fail("called"))


def _unit_rows(count: int, dimensions: int, *, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dimensions)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_the_int8_cosines_are_within_the_quantization_error_of_float32s() -> None:
    # The embedder's shape: 384-dimensional unit vectors. The index keeps int8 codes with a
    # scale per row; the cosines it computes from them must stay close to float32's.
    vectors = _unit_rows(5_000, 384, seed=11)
    index = RecallIndex.build(
        [doc(f"m{i}", f"turn {i}", vector=vectors[i]) for i in range(len(vectors))]
    )
    query = _unit_rows(1, 384, seed=12)[0]

    cosine = hybrid._cosine(index, query)

    assert cosine is not None
    assert index.vectors is not None
    assert index.vectors.dtype == np.int8
    exact = vectors @ query
    assert np.abs(cosine - exact).max() < 0.005
    # The best match of a near-duplicate of one row is that row.
    near = _unit(vectors[1234] + 0.05 * query)
    assert int(np.argmax(hybrid._cosine(index, near))) == 1234


@pytest.mark.parametrize("split", [False, True])
def test_ranking_leaves_none_s_reference_count_as_it_was(monkeypatch, split: bool) -> None:
    # simsimd's cdist with out= returned None without a reference of its own: every ranked
    # search took one from None's count, and a process aborts when it reaches zero (a web
    # worker after ~230,000 searches). sys.getrefcount(None) moves a little with whatever the
    # interpreter holds; the leak moved it by one per product.
    monkeypatch.setattr(hybrid, "SPLIT_MIN_ROWS", 2 if split else 10**9)
    vectors = _unit_rows(50, 8, seed=3)
    index = RecallIndex.build(
        [doc(f"m{i}", f"turn {i} about tea", vector=vectors[i]) for i in range(len(vectors))]
    )
    query = _unit_rows(1, 8, seed=4)[0]
    products = 2_000
    rank(index, "tea", top_k=5, query_vector=query)  # anything cached on first use, first
    before = sys.getrefcount(None)

    for _ in range(products):
        hybrid._cosine(index, query)

    assert abs(sys.getrefcount(None) - before) < products // 10


def _many_vectors(count: int) -> list[RecallDoc]:
    vectors = _unit_rows(count, 16, seed=7)
    return [
        doc(f"m{i}", f"turn {i} about tea" if i % 3 else f"turn {i}", vector=vectors[i])
        for i in range(count)
    ]


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_long_index_ranks_the_same_with_its_product_split_across_two_threads(
    monkeypatch, mode: Mode
) -> None:
    index = RecallIndex.build(_many_vectors(hybrid.SPLIT_MIN_ROWS + 1))
    query_vector = _unit([1.0] + [0.5] * 15)
    threads: list[str] = []
    submit = ThreadPoolExecutor.submit

    def watched(self: ThreadPoolExecutor, fn: object, /, *args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return submit(self, fn, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ThreadPoolExecutor, "submit", watched)
    split = rank(index, "tea", top_k=20, mode=mode, query_vector=query_vector)
    assert len(threads) == 1  # the other half went to the helper thread
    split_cosine = hybrid._cosine(index, query_vector)

    monkeypatch.setattr(hybrid, "SPLIT_MIN_ROWS", len(index) + 1)
    whole = rank(index, "tea", top_k=20, mode=mode, query_vector=query_vector)
    whole_cosine = hybrid._cosine(index, query_vector)
    assert len(threads) == 2  # only the split cosine above; neither of these was split

    assert split == whole  # the same ids, scores and signals: each row's sum is its own
    assert split_cosine is not None
    assert whole_cosine is not None
    assert split_cosine.tolist() == whole_cosine.tolist()


def _sessions(*, interleaved: bool, seed: int) -> list[RecallDoc]:
    """Nine sessions of 3-12 turns each about tea, coffee or the weather; consecutive, or
    interleaved (turns of two sessions alternating, as two open chats append)."""
    rng = np.random.default_rng(seed)
    topics = ["green tea", "strong coffee", "rainy weather", "tea and cake"]
    turns = [
        (session, position, f"{topics[int(rng.integers(len(topics)))]} turn {position}")
        for session in range(9)
        for position in range(int(rng.integers(3, 13)))
    ]
    if interleaved:
        rng.shuffle(turns)
        turns.sort(key=lambda turn: (turn[0] // 2, turn[1]))  # sessions 2k and 2k+1 alternate
    vectors = _unit_rows(len(turns), 8, seed=seed)
    return [
        doc(f"m{row}", text, session=f"s{session}", position=position, vector=vectors[row])
        for row, (session, position, text) in enumerate(turns)
    ]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_sessions_in_order_rank_by_slices_as_the_gathers_rank(mode: Mode) -> None:
    index = RecallIndex.build(_sessions(interleaved=False, seed=5))
    query = _unit_rows(1, 8, seed=6)[0]
    assert index.sessions_in_order

    by_slices = rank(index, "tea weather", top_k=len(index), mode=mode, query_vector=query)
    index.sessions_in_order = False  # the general path, on the same index
    by_gathers = rank(index, "tea weather", top_k=len(index), mode=mode, query_vector=query)

    assert by_slices == by_gathers  # every hit, score and signal
    assert len(by_slices) > 20


def test_interleaved_sessions_are_not_in_order_and_keep_their_neighbours() -> None:
    index = RecallIndex.build(_sessions(interleaved=True, seed=5))

    assert not index.sessions_in_order
    # Each row's neighbours are in its own session, not the row beside it in message order.
    sessions = [index.session_keys[number] for number in index.session_index.tolist()]
    for row in range(len(index)):
        before, after = int(index.prev_index[row]), int(index.next_index[row])
        assert before < 0 or sessions[before] == sessions[row]
        assert after < 0 or sessions[after] == sessions[row]
    assert (index.prev_index >= 0).any()


def test_a_history_of_one_message_sessions_ranks_without_neighbours() -> None:
    index = RecallIndex.build(conversation(vectors=True))  # every message its own session
    assert index.sessions_in_order

    hits = rank(index, "kitten cat", top_k=4, query_vector=_unit([1.0, 0.0, 0.0]))
    index.sessions_in_order = False
    assert hits == rank(index, "kitten cat", top_k=4, query_vector=_unit([1.0, 0.0, 0.0]))


def test_the_product_is_computed_whole_while_the_helper_thread_is_taken(monkeypatch) -> None:
    rng = np.random.default_rng(3)
    matrix = rng.integers(-127, 128, (hybrid.SPLIT_MIN_ROWS, 8), dtype=np.int8)
    codes = rng.integers(-127, 128, (1, 8), dtype=np.int8)
    monkeypatch.setattr(
        hybrid._product_thread, "executor", lambda: pytest.fail("the helper was used")
    )

    with hybrid._product_thread_free:  # another request's half is on it
        product = hybrid._codes_times(codes, matrix)

    assert product.tolist() == (matrix.astype(np.int64) @ codes[0].astype(np.int64)).tolist()


def test_quantized_rows_keep_their_own_scale_and_zero_rows_stay_zero() -> None:
    matrix = np.asarray([[0.5, -0.25, 0.0], [0.0, 0.0, 0.0], [-0.001, 0.002, 0.0005]], np.float32)

    codes, scales = quantized(matrix)

    assert codes.dtype == np.int8
    assert codes.tolist() == [[127, -64, 0], [0, 0, 0], [-64, 127, 32]]
    assert scales.tolist() == pytest.approx([0.5 / 127, 0.0, 0.002 / 127])
    # Each row back within half a step of its scale.
    np.testing.assert_allclose(codes * scales[:, None], matrix, atol=float(scales.max()) / 2)


def test_a_zero_query_vector_and_rows_without_vectors_have_cosine_zero() -> None:
    docs = [doc("m0", "tea", vector=[1.0, 0.0]), doc("m1", "tea"), doc("m2", "tea", vector=[0, 1])]
    index = RecallIndex.build(docs)

    assert hybrid._cosine(index, np.zeros(2, np.float32)).tolist() == [0.0, 0.0, 0.0]
    assert hybrid._cosine(index, _unit([1.0, 0.0])).tolist() == [1.0, 0.0, 0.0]


def test_a_query_vector_of_the_wrong_size_is_refused() -> None:
    index = RecallIndex.build(conversation(vectors=True))
    with pytest.raises(ValueError, match="dimensions"):
        rank(index, "cat", top_k=3, query_vector=np.ones(5, np.float32))


# --- dense scores given by the caller (pgvector's nearest messages) ---------------------------


def cosines(docs: Sequence[RecallDoc], query_vector: np.ndarray) -> dict[Hashable, float]:
    return {d.id: float(d.vector @ query_vector) for d in docs if d.vector is not None}


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_given_dense_scores_rank_as_the_index_own_vectors_do(mode: Mode) -> None:
    docs = conversation(vectors=True)
    query_vector = _unit([1.0, 0.2, 0.1])
    with_vectors = RecallIndex.build(docs)
    without = RecallIndex.build(conversation(vectors=False))

    own = rank(with_vectors, "kitten cat", top_k=4, mode=mode, query_vector=query_vector)
    given = rank(
        without, "kitten cat", top_k=4, mode=mode, dense_scores=cosines(docs, query_vector)
    )

    assert not without.has_vectors
    assert ids(given) == ids(own)
    # The index's cosines are its int8 codes' (quantized), the given ones float32's.
    assert [hit.score for hit in given] == pytest.approx([hit.score for hit in own], abs=5e-3)
    assert [hit.dense_score for hit in given] == pytest.approx(
        [hit.dense_score for hit in own], abs=5e-3
    )
    assert [hit.signals for hit in given] == [hit.signals for hit in own]


def test_given_dense_scores_by_message_number_rank_as_by_any_id() -> None:
    # Message ids are ints: the index finds them by its sorted ids, not a dict.
    named = conversation(vectors=False)
    numbered = [dataclasses.replace(d, id=1000 - row) for row, d in enumerate(named)]
    query_vector = _unit([1.0, 0.2, 0.1])
    by_name = cosines(conversation(vectors=True), query_vector)
    by_number = {1000 - row: by_name[d.id] for row, d in enumerate(named)}
    by_number[5] = 0.99  # not in the index: ignored

    for mode in ("hybrid", "semantic"):
        a = rank(RecallIndex.build(named), "kitten cat", top_k=4, mode=mode, dense_scores=by_name)
        b = rank(
            RecallIndex.build(numbered), "kitten cat", top_k=4, mode=mode, dense_scores=by_number
        )
        assert [1000 - int(str(hit.id)[1:]) for hit in a] == ids(b)
        assert [hit.score for hit in a] == [hit.score for hit in b]


@pytest.mark.parametrize("kind", [int, str])
def test_rows_of_finds_each_id_and_minus_one_for_the_others(kind: type) -> None:
    held = [kind(i) for i in (97, 3, 50, 12, 7)]
    index = RecallIndex.build([doc(i, f"line {i}") for i in held])
    before = index.memory_bytes()

    rows = index.rows_of([kind(50), kind(97), kind(4), kind(7), kind(1000), None, True, "3"])

    expected = [2, 0, -1, 4, -1, -1, -1, 1 if kind is str else -1]
    assert rows.tolist() == expected
    assert index.rows_of([]).tolist() == []
    if kind is int:
        assert index.memory_bytes() == before + 16 * len(held)  # the sorted ids and their rows
    assert RecallIndex.build([]).rows_of([1, "a"]).tolist() == [-1, -1]


def test_a_message_without_a_given_dense_score_counts_as_not_embedded() -> None:
    index = RecallIndex.build(conversation(vectors=False))
    # The database returned only its nearest messages; m2 and m3 are not among them. An id the
    # index does not hold (a message appended after it was built) is ignored.
    scores = {"m0": 0.9, "m1": 0.1, "unknown": 0.99}

    semantic = rank(index, "pet", top_k=4, mode="semantic", dense_scores=scores)
    hybrid = rank(index, "cat kitten", top_k=4, dense_scores=scores)

    assert ids(semantic) == ["m0", "m1"]
    assert semantic[0].dense_score == pytest.approx(0.9)
    m2 = next(hit for hit in hybrid if hit.id == "m2")  # found by its word "cat" alone
    assert m2.dense_score is None
    assert m2.signals.lexical
    assert not m2.signals.semantic
    assert next(hit for hit in hybrid if hit.id == "m0").signals.semantic


def test_empty_dense_scores_leave_hybrid_lexical_and_semantic_empty() -> None:
    index = RecallIndex.build(conversation(vectors=False))

    hybrid = rank(index, "kitten healthy", top_k=4, dense_scores={})
    lexical = rank(index, "kitten healthy", top_k=4, mode="lexical", weights=L5)

    assert ids(hybrid) == ids(lexical)
    assert [hit.score for hit in hybrid] == [hit.score for hit in lexical]
    assert rank(index, "kitten", top_k=4, mode="semantic", dense_scores={}) == []


def test_a_query_vector_and_dense_scores_together_are_refused() -> None:
    index = RecallIndex.build(conversation(vectors=True))
    with pytest.raises(ValueError, match="not both"):
        rank(index, "cat", top_k=3, query_vector=_unit([1.0, 0.0, 0.0]), dense_scores={"m0": 1.0})


def test_a_dense_scores_function_is_asked_once_for_the_lexical_matches_and_a_sample() -> None:
    docs = [
        doc(f"d{n}", "a kitten purrs" if n % 10 == 0 else f"plain line {n}") for n in range(200)
    ]
    index = RecallIndex.build(docs)
    asked: list[Sequence[Hashable]] = []

    def dense_scores(wanted: Sequence[Hashable]) -> dict[Hashable, float]:
        asked.append(list(wanted))
        return {"d1": 0.9}  # the nearest, by the caller's own search

    rank(index, "kitten", top_k=5, dense_scores=dense_scores)
    rank(index, "kitten", top_k=5, mode="semantic", dense_scores=dense_scores)

    matches = {f"d{n}" for n in range(0, 200, 10)}
    stride = 200 // hybrid.DENSE_SAMPLE_ROWS
    sample = {f"d{n}" for n in range(0, 200, stride)}
    assert len(asked) == 2
    assert len(asked[0]) == len(set(asked[0]))
    assert set(asked[0]) == matches | sample
    assert asked[1] == []  # semantic: the nearest are all it ranks


def test_past_dense_lexical_rows_only_the_best_matches_are_asked_for(monkeypatch) -> None:
    monkeypatch.setattr(hybrid, "DENSE_LEXICAL_ROWS", 3)
    monkeypatch.setattr(hybrid, "DENSE_SAMPLE_ROWS", 1)  # the first message only
    # Every message matches; the shorter, the higher its BM25.
    index = RecallIndex.build([doc(f"d{n}", "kitten" + " filler" * (20 - n)) for n in range(20)])
    asked: list[Hashable] = []

    rank(index, "kitten", top_k=5, dense_scores=lambda wanted: asked.extend(wanted))

    assert sorted(asked, key=str) == ["d0", "d17", "d18", "d19"]


def test_a_dense_scores_function_ranks_as_the_mapping_it_returns() -> None:
    docs = conversation(vectors=True)
    query_vector = _unit([1.0, 0.2, 0.1])
    index = RecallIndex.build(conversation(vectors=False))
    scores = cosines(docs, query_vector)

    for mode in ("hybrid", "semantic"):
        given = rank(index, "kitten cat", top_k=4, mode=mode, dense_scores=scores)
        asked = rank(index, "kitten cat", top_k=4, mode=mode, dense_scores=lambda _: scores)
        assert asked == given
    # None: the query could not be embedded; hybrid is then lexical, semantic empty.
    lexical = rank(index, "kitten cat", top_k=4, mode="lexical")
    assert rank(index, "kitten cat", top_k=4, dense_scores=lambda _: None) == lexical
    assert rank(index, "kitten cat", top_k=4, mode="semantic", dense_scores=lambda _: None) == []


def test_semantic_mode_without_any_vector_returns_nothing() -> None:
    index = RecallIndex.build(conversation(vectors=False))

    assert rank(index, "cat", top_k=3, mode="semantic", query_vector=_unit([1, 0, 0])) == []


# --- bounds and edge cases -------------------------------------------------------------------


def test_top_k_bounds_the_hits() -> None:
    index = RecallIndex.build([doc(f"m{n}", f"coffee number {n}") for n in range(30)])

    assert len(rank(index, "coffee", top_k=5)) == 5
    assert len(rank(index, "coffee", top_k=100)) == 30
    assert rank(index, "coffee", top_k=0) == []
    with pytest.raises(ValueError, match="top_k"):
        rank(index, "coffee", top_k=-1)


def test_only_matching_messages_are_returned_in_lexical_mode() -> None:
    index = RecallIndex.build(conversation(vectors=False))

    assert rank(index, "dentist appointment", top_k=10, mode="lexical") == []


@pytest.mark.parametrize("query", ["", "   ", "?!", "the and of it", "When was it?"])
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_query_without_searchable_words_raises_empty_search_query(query: str, mode: str) -> None:
    index = RecallIndex.build(conversation(vectors=True))
    with pytest.raises(EmptySearchQuery):
        rank(index, query, top_k=3, mode=mode, query_vector=_unit([1.0, 0.0, 0.0]))  # type: ignore[arg-type]


def test_an_empty_index_returns_nothing() -> None:
    index = RecallIndex.build([])

    assert rank(index, "anything", top_k=5) == []
    assert index.memory_bytes() > 0


def test_since_and_until_filter_by_time() -> None:
    docs = [
        doc("old", "tea time", created_at=datetime(2022, 1, 5, tzinfo=UTC)),
        doc("new", "tea time", created_at=datetime(2024, 1, 5)),  # naive: taken as UTC
        doc("undated", "tea time"),
    ]
    index = RecallIndex.build(docs)

    assert ids(rank(index, "tea", top_k=5)) == ["old", "new", "undated"]
    assert ids(rank(index, "tea", top_k=5, since=datetime(2023, 1, 1, tzinfo=UTC))) == ["new"]
    assert ids(rank(index, "tea", top_k=5, until=datetime(2023, 1, 1))) == ["old"]


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        RecallIndex.build([doc("m1", "one"), doc("m1", "two")])


def test_memory_bytes_grows_with_the_index() -> None:
    small = RecallIndex.build([doc(f"m{n}", f"note {n} about topic {n % 7}") for n in range(10)])
    large = RecallIndex.build([doc(f"m{n}", f"note {n} about topic {n % 7}") for n in range(1000)])

    assert large.memory_bytes() > 10 * small.memory_bytes() / 2
    assert large.memory_bytes() > small.memory_bytes()


# --- dates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What happened on 13 October, 2023?", [DateTarget(year=2023, month=10, day=13)]),
        ("plans for October 13, 2023", [DateTarget(year=2023, month=10, day=13)]),
        ("what did she do in July 2022", [DateTarget(year=2022, month=7)]),
        ("any trips in June?", [DateTarget(year=None, month=6)]),
        ("what changed in 2023", [DateTarget(year=2023)]),
        ("may I ask about my plans", []),
        ("no date here", []),
    ],
)
def test_it_reads_the_dates_a_query_names(query: str, expected: list[DateTarget]) -> None:
    assert parse_query_dates(query) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I saw her yesterday", True),
        ("we moved two years ago", True),
        ("next weekend we fly", True),
        ("a few days later it rained", True),
        ("back in 2019", True),
        ("every Saturday morning", True),
        ("in May we married", True),
        ("I may be late", False),
        ("the soup was cold", False),
    ],
)
def test_it_flags_time_expressions(text: str, expected: bool) -> None:
    assert has_time_expression(text) is expected


@pytest.mark.parametrize("seed", range(20))
def test_the_kth_best_score_is_exactly_what_a_full_partition_finds(seed: int) -> None:
    # _top's cut comes from a sample first (a speed-up): it must never change the answer, with
    # ties, NaN (sorted last by numpy, as the largest) and any size or k.
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 50_000))
    values = rng.integers(0, int(rng.integers(1, 1000)), size).astype(np.float64)
    if seed % 3 == 0:
        values[rng.integers(0, size, int(rng.integers(1, 50)))] = np.nan
    for k in {1, 2, int(rng.integers(1, size)), size - 1} - {0}:
        expected = np.partition(values, size - k)[size - k]
        found = _kth_largest(values, k)
        assert (np.isnan(expected) and np.isnan(found)) or found == expected


def _formula_scores(
    index: RecallIndex, query: str, weights: Weights, cosine: np.ndarray | None
) -> np.ndarray:
    """The fusion as the study writes it, one new array per step (rank computes it in place),
    in float32 as rank does: the scores rank must return, value for value."""

    def minmax(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = np.zeros(values.shape, dtype=np.float32)
        if mask.any():
            low, high = values[mask].min(), values[mask].max()
            out[mask] = (values[mask] - low) / (high - low) if high > low else 1.0
        return out

    bm25 = index.bm25(query_terms(query))
    alpha = weights.dense if cosine is not None else 0.0
    fused = (1.0 - alpha) * minmax(bm25.astype(np.float32), bm25 > 0)
    if cosine is not None:
        fused = fused + alpha * minmax(cosine.astype(np.float32), index.vector_mask)
    best = np.array(
        [fused[index.session_index == s].max() for s in range(index.session_index.max() + 1)]
    )
    fused = (
        fused + weights.session * minmax(best, np.ones(best.size, np.bool_))[index.session_index]
    )
    padded = np.append(fused, np.float32(0.0))
    fused = fused + weights.smoothing * np.maximum(
        padded[index.prev_index], padded[index.next_index]
    )
    return fused + weights.length * index.length_prior


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("vector_share", [0.0, 0.8, 1.0])
def test_the_scores_are_the_fusion_formula_value_for_value(seed: int, vector_share: float) -> None:
    # rank fuses in place, on arrays it owns (a speed-up): every hit's score must still be
    # exactly the formula's, with a common word matching most turns and a rare one few. Every
    # message with a vector (1.0) takes rank's shortcuts for a mask that holds every row.
    with_vectors = vector_share > 0
    rng = np.random.default_rng(seed)
    vocabulary = ["apple", "river", "violin", "garden", "ticket", "dentist", "harbour", "pepper"]
    docs = []
    for n in range(int(rng.integers(50, 400))):
        words = rng.choice(vocabulary, size=int(rng.integers(1, 8)), p=[0.4, *[0.6 / 7] * 7])
        vector = rng.standard_normal(8).tolist() if rng.random() < vector_share else None
        docs.append(doc(n, " ".join(words), session=n // 17, position=n % 17, vector=vector))
    index = RecallIndex.build(docs)
    query_vector = rng.standard_normal(8).astype(np.float32) if with_vectors else None
    cosine = None
    if query_vector is not None:
        cosine = hybrid._cosine(index, query_vector)  # the index's own (int8) cosines
    for query in ("apple", "violin dentist", "apple pepper river harbour"):
        weights = H5 if with_vectors else L5
        expected = _formula_scores(index, query, weights, cosine)
        hits = rank(index, query, top_k=len(docs), query_vector=query_vector)
        assert hits
        assert [hit.score for hit in hits] == [float(expected[hit.row]) for hit in hits]
        # Every row is a hit (a vector each, or a word): the ties in message order, as the
        # formula's scores sorted stably give them.
        if vector_share == 1.0:
            assert [hit.row for hit in hits] == np.argsort(-expected, kind="stable").tolist()
            cut = rank(index, query, top_k=7, query_vector=query_vector)
            assert [hit.row for hit in cut] == [hit.row for hit in hits[:7]]
