"""Rank one person's messages for a query: windowed BM25, optionally fused with dense cosine, then
the study's priors in its order (fuse → session → neighbours → speaker → length → date → when).

The weights are the ones measured in shared/research/retrieval.md (round two); they were tuned on
LoCoMo conversations 0-4 and held on 5-9, so change them only with a benchmark on both halves.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

import numpy as np
import numpy.typing as npt
import simsimd

from memoryhub.core.recall.analyzer import query_terms, words
from memoryhub.core.recall.dates import DateTarget, parse_query_dates, starts_with_when
from memoryhub.core.recall.index import RecallIndex, epoch_seconds, name_words, quantized
from memoryhub.core.search import EmptySearchQuery
from memoryhub.core.threads import ProcessThread

Mode = Literal["hybrid", "lexical", "semantic"]

# "Within ±10 days" of a named day, as in the study.
DATE_WINDOW_DAYS = 10


@dataclass(frozen=True, slots=True)
class Weights:
    """The study's alpha (dense share of the fusion), sigma (session), beta (neighbour
    smoothing), gamma (speaker), lambda (length), delta (date) and omega ("when")."""

    dense: float
    session: float
    smoothing: float
    speaker: float
    length: float
    date: float
    when: float


# Round two of the study: with a MiniLM vector per message (H5), and without any model (L5).
H5 = Weights(dense=0.5, session=0.2, smoothing=0.25, speaker=0.2, length=0.15, date=0.4, when=0.2)
L5 = Weights(dense=0.0, session=0.3, smoothing=0.2, speaker=0.4, length=0.2, date=0.5, when=0.1)


@dataclass(frozen=True, slots=True)
class Signals:
    """What contributed to a hit: useful to show why it was found, or to drop weak hits."""

    lexical: bool
    semantic: bool
    speaker: bool
    date: bool
    when: bool

    def as_dict(self) -> dict[str, bool]:
        return {
            "lexical": self.lexical,
            "semantic": self.semantic,
            "speaker": self.speaker,
            "date": self.date,
            "when": self.when,
        }


# Every combination, built once: a search's hits share them (Signals is immutable) instead of
# building one per hit.
_SIGNALS = {flags: Signals(*flags) for flags in itertools.product((False, True), repeat=5)}


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked message. `lexical_score` is its raw windowed BM25 (0 when no term matched);
    `dense_score` its raw cosine, None when no dense score took part for it."""

    id: Hashable
    score: float
    lexical_score: float
    dense_score: float | None
    signals: Signals
    # Its row in the index that ranked it (RecallIndex.neighbour_ids takes it); -1 when no
    # index did (the database's full-text search).
    row: int = -1


QueryVector = npt.NDArray[np.float32] | Callable[[], npt.NDArray[np.float32] | None]
# Cosines by message id, or a function that computes them once it is told which messages the
# ranking needs (see `rank`'s `dense_scores`).
DenseScores = (
    Mapping[Hashable, float] | Callable[[Sequence[Hashable]], Mapping[Hashable, float] | None]
)

# When the cosines come from elsewhere for a person's nearest messages only (pgvector), the
# ranking asks for these too: its best lexical matches, whose fused score needs their own cosine
# (counted as no vector, a match loses its whole dense share), and a stride sample, so that the
# min-max sees the far end of the cosines' range, not only the nearest. On LoCoMo's development
# questions (bench/recall_partial_cosines.py) with the nearest 1-20 % of each conversation, the
# exact top 10 kept 74-78 % -> 98 %, R@10 79.9-80.2 -> 81.7 (every cosine: 81.5); with the five
# conversations as one person (2,760 messages) and the nearest 1-5 %, 73-77 % -> 95 % (250
# matches asked for: 93-94 %, 1,000: 96 %).
DENSE_LEXICAL_ROWS = 500
DENSE_SAMPLE_ROWS = 64

# A hybrid ranking of an index that keeps sign bits (from index.SIGN_BITS_FROM_ROWS messages
# on) takes its cosines from a first pass over them instead of the product over every vector:
# the exact cosine for the FIRST_PASS_SHARE nearest by Hamming distance, a stride sample of
# FIRST_PASS_SAMPLE_SHARE as many more, and the messages a `dense_scores` function would be
# asked for (`_dense_wanted_rows`); for every other message a straight line fitted from
# Hamming distance to cosine on the nearest and the sample. On LoCoMo's five development
# conversations as one person (2,760 messages, bench/recall_partial_cosines.py, "first pass")
# at 1-5 %: 98.3-98.6 % of the exact top 10 kept, R@5 73.7-73.8 / R@10 80.4-80.5 / R@20
# 85.7-85.9 against every cosine's 73.7 / 80.0 / 85.9 (without the fit, the others counted as
# messages without a vector: 94.9-95.3 %, R@5 73.7 / R@10 79.6 / R@20 85.2). Against the exact
# ranking alone (no evidence to judge by), on the bench's histories with their texts' real
# embeddings and 300-400 bench questions: 98.8 % of the top 10 kept at 10,000 messages and
# 97.1 % at 100,000 (the same first hit 99.2 / 97.7 %).
FIRST_PASS_SHARE = 0.01
FIRST_PASS_SAMPLE_SHARE = 0.25


def rank(
    index: RecallIndex,
    query: str,
    *,
    top_k: int,
    mode: Mode = "hybrid",
    query_vector: QueryVector | None = None,
    dense_scores: DenseScores | None = None,
    weights: Weights | None = None,
    speaker: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[Hit]:
    """The best `top_k` messages of `index` for `query`, best first, ties in message order.

    Modes:
    - "hybrid": BM25 fused with cosine. Without a `query_vector`, or when no message has a
      vector yet, it is exactly "lexical". Messages without a vector still rank (dense part 0).
    - "lexical": BM25 and the priors only; `query_vector` is ignored.
    - "semantic": cosine alone, no priors, over messages that have a vector; needs
      `query_vector` (or `dense_scores`).

    `query_vector` may be a function returning the vector (or None: as if none was given). It
    is called at most once, after the lexical scores and the query's priors are computed: a
    vector still being embedded on another thread arrives meanwhile. In "semantic" mode a
    function that returns None gives no hits. In "hybrid" mode an index of
    index.SIGN_BITS_FROM_ROWS messages or more ranks on a first pass's cosines, most of them
    fitted (see FIRST_PASS_SHARE); each hit's `dense_score` is still its exact cosine.

    `dense_scores` replaces `query_vector` times the index's vectors when the cosines were
    computed elsewhere (pgvector returns a person's nearest messages): the cosine of each
    message id it holds; a message not in it counts as one without a vector, and ids not in
    the index are ignored. Give one of the two, not both. A function instead of a mapping is
    called once, after the lexical scores, with the ids whose cosines the ranking needs besides
    the nearest ones (its DENSE_LEXICAL_ROWS best lexical matches and a stride sample of
    DENSE_SAMPLE_ROWS; none in "semantic" mode), and returns the mapping (None: no dense part).

    `weights` defaults to H5 when a dense part takes part, L5 otherwise; given weights are used
    as they are, except that their dense share counts as 0 when there is no dense part (so the
    lexical score is not scaled down for nothing).

    `speaker` acts as if the query named that participant (the speaker prior); `since`/`until`
    (inclusive; naive values are UTC) are filters: messages outside, or without a time, are not
    returned, though they still lend their score to neighbours and their session.

    Only messages that match are returned: at least one query term in their windowed text, or
    (when a dense part takes part) a vector. A person who never spoke of a dentist gets no hits
    for "dentist" in lexical mode, not the longest turns. (On LoCoMo this cut costs nothing:
    the priors alone never lifted an unmatched message into the top 20.) `Hit.signals` tells
    which parts contributed.

    Raises EmptySearchQuery when the query has no searchable word (empty, punctuation or
    stop-words only), in every mode; ValueError on a bad `top_k`, mode or vector.
    """
    if query_vector is not None and dense_scores is not None:
        raise ValueError("Give a query vector or dense scores, not both.")
    if top_k < 0:
        raise ValueError("top_k must not be negative.")
    if mode not in ("hybrid", "lexical", "semantic"):
        raise ValueError(f"Unknown recall mode {mode!r}.")
    terms = query_terms(query)
    if not terms:
        raise EmptySearchQuery("The query has no searchable words.")
    if mode == "semantic" and query_vector is None and dense_scores is None:
        raise ValueError("Semantic recall needs a query vector or dense scores.")
    count = len(index)
    if count == 0 or top_k == 0:
        return []

    allowed = _in_range(index, since=since, until=until)
    if mode == "semantic":
        cosine, dense, _ = _dense_part(
            index, query_vector=query_vector, dense_scores=dense_scores, bm25=None
        )
        if cosine is None:  # no vector, or no message has a vector to compare it with
            return []
        no_signal = np.zeros(count, dtype=np.bool_)
        return _top(
            index,
            scores=cosine,
            eligible=dense & allowed,
            top_k=top_k,
            bm25=np.zeros(count, dtype=np.float32),
            cosine=cosine,
            semantic=dense,
            speaker=no_signal,
            date=no_signal,
            when=no_signal,
        )

    # Everything that does not need the query's vector first (see `query_vector`).
    bm25 = index.bm25(terms)
    matched = bm25 > 0
    # In place on arrays made here (the same arithmetic, value for value, as building new
    # ones), in float32: the fusion's ~25 passes over every row read half the bytes of float64
    # (at 100,000 messages rank took 1.62-1.67 ms in float64, 1.39-1.46 in float32; the same
    # hits in the same order for 300 questions, scores within 3e-7). bm25 is float32 already:
    # a copy, since _top still reports it.
    fused = _minmax_where(bm25.copy(), matched)
    named = _named_speaker(index, query=query, speaker=speaker)
    named_rows = _speaker_rows(index, named) if named is not None else None
    targets = parse_query_dates(query)
    boost = _date_boost(index, targets) if targets else None
    asks_when = starts_with_when(query)

    # `dense` marks the messages that have a cosine: those with a vector in the index, or those
    # the caller scored.
    cosine, dense, exact_cosines = (
        (None, index.vector_mask, None)
        if mode == "lexical"
        else _dense_part(index, query_vector=query_vector, dense_scores=dense_scores, bm25=bm25)
    )
    use_dense = cosine is not None and bool(dense.any())
    if weights is None:
        weights = H5 if use_dense else L5
    alpha = weights.dense if use_dense else 0.0

    if alpha:
        fused *= 1.0 - alpha
    if use_dense:
        assert cosine is not None
        dense_part = _minmax_where(cosine.copy(), dense)  # _top still reports `cosine`
        dense_part *= alpha
        fused += dense_part

    # With every session's rows consecutive and in order (most histories), the same values by
    # slices instead of gathers: 0.2-0.45 ms less at 100,000 messages.
    in_order = index.sessions_in_order
    if weights.session:
        # Conversations are topical: the best turn of a session lifts its weaker neighbours.
        # np.take: the same gather as fancy indexing, about twice as fast on 1-D arrays. The
        # weight multiplies one value per session, before the gather, not one per message.
        ordered = fused if in_order else np.take(fused, index.session_order)
        best = np.maximum.reduceat(ordered, index.session_starts)
        lift = _minmax_where(best, None)
        lift *= weights.session
        fused += (
            np.repeat(lift, np.diff(index.session_starts, append=count))
            if in_order
            else np.take(lift, index.session_index)
        )

    if weights.smoothing:
        # Both neighbours read the values before smoothing.
        neighbour = _neighbours_best(index, fused)
        neighbour *= weights.smoothing
        fused += neighbour

    speaker_hit = np.zeros(count, dtype=np.bool_)
    if named_rows is not None and weights.speaker:
        speaker_hit = named_rows
        fused += weights.speaker * np.where(speaker_hit, np.float32(0.5), np.float32(-0.5))

    if weights.length:
        fused += weights.length * index.length_prior

    date_hit = np.zeros(count, dtype=np.bool_)
    if boost is not None and weights.date:
        date_hit = boost > 0
        fused += weights.date * boost

    when_hit = np.zeros(count, dtype=np.bool_)
    if weights.when and asks_when:
        when_hit = index.has_time
        fused += np.float32(weights.when) * when_hit

    candidates = matched | dense if use_dense else matched
    return _top(
        index,
        scores=fused,
        eligible=allowed & candidates,
        top_k=top_k,
        bm25=bm25,
        cosine=cosine if use_dense else None,
        semantic=dense if use_dense else np.zeros(count, dtype=np.bool_),
        speaker=speaker_hit,
        date=date_hit,
        when=when_hit,
        # A hit ranked on a fitted cosine reports its own: `Hit.dense_score` is always exact.
        exact_cosines=exact_cosines if use_dense else None,
    )


def _neighbours_best(
    index: RecallIndex, values: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Each row's larger neighbour value in its session (the one before or after it), 0 where
    it has none: both neighbours read `values` as given."""
    if not index.sessions_in_order:
        # -1 (no neighbour) reads the 0 pad.
        padded = np.append(values, np.float32(0.0))
        best = np.take(padded, index.prev_index)
        np.maximum(best, np.take(padded, index.next_index), out=best)
        return best
    best = np.empty_like(values)
    best[1:] = values[:-1]
    best[index.session_starts] = 0.0  # a session's first row has no previous one
    after = np.empty_like(values)
    after[:-1] = values[1:]
    after[index.session_starts - 1] = 0.0  # nor the row before it a next one (-1: the last row)
    np.maximum(best, after, out=best)
    return best


# The exact cosines of some rows, for a ranking that took fitted ones (`_first_pass_cosine`).
ExactCosines = Callable[[npt.NDArray[np.intp]], npt.NDArray[np.float32]]


def _dense_part(
    index: RecallIndex,
    *,
    query_vector: QueryVector | None,
    dense_scores: DenseScores | None,
    bm25: npt.NDArray[np.float32] | None,
) -> tuple[npt.NDArray[np.float32] | None, npt.NDArray[np.bool_], ExactCosines | None]:
    """The cosines (None without a vector, or when no message has one), the mask of the
    messages that have one, and, when some of the cosines are fitted (a hybrid ranking of an
    index with sign bits), how to get any row's exact one. `bm25`: the lexical scores, which
    pick the ids a `dense_scores` function is asked for and the rows a first pass computes
    exactly (None: only the nearest are needed, and the product is exact)."""
    if callable(dense_scores):
        given = dense_scores(_dense_wanted_ids(index, bm25) if bm25 is not None else ())
        if given is None:
            return None, np.zeros(len(index), dtype=np.bool_), None
        return (*_given_cosine(index, given), None)
    if dense_scores is not None:
        return (*_given_cosine(index, dense_scores), None)
    # The rows a first pass computes exactly whatever the vector, chosen before the wait for it:
    # the vector is usually still being embedded on another thread (rank's `query_vector`), so
    # this costs the call nothing, where after the wait it was ~0.36 ms of a 4 ms `rank` at
    # 100,000 messages (bench/README.md, twenty-sixth round).
    wanted = (
        _dense_wanted_rows(index, bm25)
        if bm25 is not None and index.sign_columns is not None
        else None
    )
    vector = query_vector() if callable(query_vector) else query_vector
    if wanted is not None and vector is not None:
        return _first_pass_cosine(index, vector, wanted)
    return _cosine(index, vector), index.vector_mask, None


def _dense_wanted_rows(index: RecallIndex, bm25: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
    """The rows of the DENSE_LEXICAL_ROWS best lexical matches and of a stride sample of
    DENSE_SAMPLE_ROWS messages, ascending, without repeats."""
    count = len(index)
    matched = np.flatnonzero(bm25 > 0)
    if matched.size > DENSE_LEXICAL_ROWS:
        best = np.argpartition(np.take(bm25, matched), matched.size - DENSE_LEXICAL_ROWS)
        matched = np.take(matched, best[matched.size - DENSE_LEXICAL_ROWS :])
    sample = np.arange(0, count, max(count // DENSE_SAMPLE_ROWS, 1))
    return np.union1d(matched, sample)


def _dense_wanted_ids(index: RecallIndex, bm25: npt.NDArray[np.float32]) -> list[Hashable]:
    """The ids of `_dense_wanted_rows`."""
    ids = index.ids
    return [ids[row] for row in _dense_wanted_rows(index, bm25).tolist()]


def _minmax_where(
    values: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_] | None
) -> npt.NDArray[np.float32]:
    """Min-max over the masked values (`mask` None: every value); unmasked ones become 0. If
    all masked values are equal they become 1: they all matched, equally.

    Written into `values` (finite, and no longer needed by the caller) and returned: at
    100,000 messages each pass over a float32 array costs about half the float64 one's ~0.05 ms,
    and a new array as much again."""
    if mask is not None and not mask.any():
        values[:] = 0.0
        return values
    # A mask holding every value (the cosines when every message has a vector) is no mask: no
    # copy to take the extremes from, nothing to zero.
    partial = None if mask is None or mask.all() else mask
    chosen = values if partial is None else np.compress(partial, values)
    low, high = float(chosen.min()), float(chosen.max())
    if high > low:
        values -= low
        values /= high - low
    else:
        values[:] = 1.0
    if partial is not None:
        # Times the mask, then + 0.0 to turn the -0.0 of unmasked negatives into 0.0: the
        # result np.where gives, for finite values, at a seventh of the cost of np.where or a
        # masked copyto (their branch on a scattered mask is slow).
        values *= partial
        values += 0.0
    return values


def _cosine(
    index: RecallIndex, query_vector: npt.NDArray[np.float32] | None
) -> npt.NDArray[np.float32] | None:
    if query_vector is None or index.vectors is None:
        return None
    query = _query_codes(index, query_vector)
    if query is None or len(index) == 0:
        return np.zeros(len(index), dtype=np.float32)
    return _cosine_of_codes(index, codes=query[0], scale=query[1])


def _query_codes(
    index: RecallIndex, query_vector: npt.NDArray[np.float32]
) -> tuple[npt.NDArray[np.int8], float] | None:
    """The query's int8 codes (one row) and scale, as the index's rows are kept; None for a
    zero vector. ValueError on a vector of another size."""
    assert index.vectors is not None
    vector = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    if vector.shape[0] != index.vectors.shape[1]:
        raise ValueError(
            f"The query vector has {vector.shape[0]} dimensions, "
            f"the index {index.vectors.shape[1]}."
        )
    norm = float(np.linalg.norm(vector))
    if norm == 0:
        return None
    codes, scales = quantized((vector / norm).reshape(1, -1))
    return codes, float(scales[0])


def _first_pass_cosine(
    index: RecallIndex, query_vector: npt.NDArray[np.float32], wanted: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], ExactCosines]:
    """The cosines of a first pass over the sign bits (see FIRST_PASS_SHARE): exact for the
    nearest by Hamming distance, a stride sample and the rows `wanted` (`_dense_wanted_rows`),
    fitted for the rest; with the mask of the messages that have a vector, and the exact cosine
    of any row.

    It reads 48 bytes a message where the product reads 384: at 100,000 messages of 384
    dimensions 1.25-1.60 ms on one core against the product's 2.17-2.45 ms on two (2-core
    bench machine; through the API ~2.3 ms less CPU a search, bench/README.md)."""
    rows = len(index)
    mask = index.vector_mask
    query = _query_codes(index, query_vector)
    if query is None:
        return np.zeros(rows, dtype=np.float32), mask, lambda at: np.zeros(at.size, np.float32)
    codes, scale = query

    def exact_of(at: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
        return _cosine_of_codes(index, codes=codes, scale=scale, rows=at)

    distance = index.hamming_distances(codes)
    kept = min(max(int(rows * FIRST_PASS_SHARE), 1), rows)
    # The nearest `kept`, ties at the cut included: every row at most the kept-th smallest
    # distance, found by np.partition of the distances copied as int32. numpy selects 16-bit
    # integers in SIMD code only on AVX-512 (x86-simd-sort's AVX512_ICL: 0.04 ms at 100,000
    # rows); elsewhere its scalar introselect took 0.80 ms on the uint16 distances (AVX2, Zen 3),
    # where the copy and its AVX2 selection of int32 take 0.15. Counting the distances
    # (np.bincount, which first copies them as 64-bit integers) took 0.14-0.20 on both.
    cut = np.partition(distance.astype(np.int32), kept - 1)[kept - 1]
    fit = distance <= cut
    fit[:: max(int(rows / max(kept * FIRST_PASS_SAMPLE_SHARE, 1)), 1)] = True
    every_row = bool(mask.all())
    if not every_row:
        fit &= mask  # a row without a vector has no cosine to fit to
    exact = fit.copy()
    exact[wanted] = True
    if not every_row:
        exact &= mask
    exact_rows = np.flatnonzero(exact)
    values = exact_of(exact_rows)
    # The least-squares line through (distance, cosine) of the nearest and the sample.
    in_fit = np.take(fit, exact_rows)
    x = np.take(distance, exact_rows)[in_fit].astype(np.float64)
    y = values[in_fit].astype(np.float64)
    slope = 0.0
    if x.size > 1:
        spread = x - x.mean()
        variance = float(spread @ spread)
        if variance > 0:
            slope = float(spread @ (y - y.mean())) / variance
    intercept = float(y.mean()) - slope * float(x.mean()) if y.size else 0.0
    cosine = distance.astype(np.float32)
    cosine *= slope
    cosine += intercept
    cosine[exact_rows] = values
    if not every_row:
        cosine *= mask  # as the product gives them: 0 without a vector
    return cosine, mask, exact_of


def _cosine_of_codes(
    index: RecallIndex,
    *,
    codes: npt.NDArray[np.int8],
    scale: float,
    rows: npt.NDArray[np.intp] | None = None,
) -> npt.NDArray[np.float32]:
    """The query's cosine with every row, or with `rows` only (in their order)."""
    assert index.vectors is not None
    # The product of the int8 codes, in simsimd's SIMD kernel: exact integer sums (at most
    # 384 x 127 x 127 here, exact in float32 too), then each row's scale. It reads a quarter of
    # the bytes of a float32 product, and it is the largest cost of a search of a long history:
    # at 100,000 messages of 384 dimensions 1.3-1.4 ms on one core, where numpy's float32 product
    # took 12 ms (6.3 split over two threads) on the 2-core bench machine. numpy has no fast
    # int8 product, BLAS none at all.
    if rows is None:
        cosine = _codes_times(codes, index.vectors)
        scales = index.vector_scales
    else:
        cosine = _codes_dot(codes, np.take(index.vectors, rows, axis=0))
        scales = np.take(index.vector_scales, rows)
    # Rows without a vector are zeros with scale 0: cosine 0, and the mask keeps them out of
    # minmax.
    cosine *= scales
    cosine *= scale
    return cosine


# A product this long is split in two halves, one on a helper thread, the other on the caller's.
# It reads the whole matrix (38 MB of codes at 100,000 messages of 384 dimensions), and one
# core's share of the memory bandwidth is its limit: 1.24 -> 0.72-0.75 ms at 100,000 rows,
# 0.36 -> 0.23 at 32,768, 0.20 -> 0.16 at 20,000, nothing at 10,000 (the hand-off costs what the
# half saves), on the 2-core bench machine: split where it saves a third. simsimd lets go of
# the GIL inside its kernel (a Python thread spinning beside 100 products kept 94 % of its
# pace), so the halves run at once. Not simsimd's own `threads=`: they are OpenMP's, which a
# forked process (gunicorn, Celery's prefork pool) cannot use safely. The halves give the same
# floats: each row's sum is its own.
SPLIT_MIN_ROWS = 32_768
_product_thread = ProcessThread("recall-product")
# Held while the helper thread computes a half: a request that finds it taken (another thread of
# a threaded server) computes its product whole rather than queue behind another's half.
_product_thread_free = threading.Lock()


def _codes_times(
    codes: npt.NDArray[np.int8], matrix: npt.NDArray[np.int8]
) -> npt.NDArray[np.float32]:
    """The dot product of the query's codes (one row) with each row of `matrix`, as float32;
    split in halves across two threads from SPLIT_MIN_ROWS rows on, when the helper is free."""
    rows = matrix.shape[0]
    if rows < SPLIT_MIN_ROWS or not _product_thread_free.acquire(blocking=False):
        return _codes_dot(codes, matrix)
    try:
        half = rows // 2
        other = _product_thread.executor().submit(_codes_dot, codes, matrix[half:])
        first = _codes_dot(codes, matrix[:half])
        return np.concatenate((first, other.result()))
    finally:
        _product_thread_free.release()


def _codes_dot(
    codes: npt.NDArray[np.int8], matrix: npt.NDArray[np.int8]
) -> npt.NDArray[np.float32]:
    """simsimd's product, taken as it returns it, never written into an `out=` array: simsimd
    6.5.16's `cdist(..., out=...)` returns None without a reference of its own, so each call
    took one from None's count, and a process aborts ("Fatal Python error: none_dealloc") once
    that count reaches zero: after ~230,000 ranked searches in a web worker, fewer in a smaller
    process. Returned, the product costs the same (1.26 ms at 100,000 x 384 either way). A
    matrix of no rows gives no products: simsimd refuses it with a ValueError."""
    if not matrix.shape[0]:
        return np.zeros(0, dtype=np.float32)
    product = np.asarray(simsimd.cdist(codes, matrix, metric="dot", out_dtype="float32"))
    return product[0]


def _given_cosine(
    index: RecallIndex, dense_scores: Mapping[Hashable, float]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """The given cosines as a row array, and the mask of the rows that have one."""
    cosine = np.zeros(len(index), dtype=np.float32)
    given = np.zeros(len(index), dtype=np.bool_)
    if not dense_scores:
        return cosine, given
    rows = index.rows_of(list(dense_scores))
    values = np.fromiter(dense_scores.values(), dtype=np.float32, count=len(dense_scores))
    held = rows >= 0  # ids not in the index are ignored
    rows = rows[held]
    cosine[rows] = values[held]
    given[rows] = True
    return cosine, given


def _in_range(
    index: RecallIndex, *, since: datetime | None, until: datetime | None
) -> npt.NDArray[np.bool_]:
    allowed = np.ones(len(index), dtype=np.bool_)
    # NaN (no time) compares False, so such messages drop out as soon as a bound is given.
    if since is not None:
        allowed &= index.created_epoch >= epoch_seconds(since)
    if until is not None:
        allowed &= index.created_epoch <= epoch_seconds(until)
    return allowed


def _named_speaker(index: RecallIndex, *, query: str, speaker: str | None) -> str | None:
    """The participant whose messages get the speaker prior: the explicit one, or the only
    participant the query names (two named → none: the question is about both)."""
    if speaker is not None:
        return speaker.strip().casefold()
    query_words = words(query)
    named = [
        participant
        for participant in index.participants
        if _contains(query_words, name_words(participant))
    ]
    return named[0] if len(named) == 1 else None


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    if not needle:
        return False
    width = len(needle)
    return any(
        tuple(haystack[start : start + width]) == tuple(needle)
        for start in range(len(haystack) - width + 1)
    )


def _speaker_rows(index: RecallIndex, name: str) -> npt.NDArray[np.bool_]:
    try:
        number = index.speaker_names.index(name)
    except ValueError:
        return np.zeros(len(index), dtype=np.bool_)
    return index.speaker_index == number


def _date_boost(index: RecallIndex, targets: Sequence[DateTarget]) -> npt.NDArray[np.float32]:
    """1 for messages near a named day or in a named month, 0.5 in a named year only; the best
    of all targets."""
    boost = np.zeros(len(index), dtype=np.float32)
    dated = index.created_ordinal >= 0
    for target in targets:
        if target.month is None:
            assert target.year is not None
            year = dated & (index.created_year == target.year)
            boost = np.maximum(boost, np.float32(0.5) * year)
            continue
        same_month = dated & (index.created_month == target.month)
        if target.year is not None:
            same_month &= index.created_year == target.year
        hit = same_month
        if target.day is not None and target.year is not None:
            day = date(target.year, target.month, target.day).toordinal()
            hit = hit | (dated & (np.abs(index.created_ordinal - day) <= DATE_WINDOW_DAYS))
        boost = np.maximum(boost, hit.astype(np.float32))
    return boost


def _top(
    index: RecallIndex,
    *,
    scores: npt.NDArray[np.float32],
    eligible: npt.NDArray[np.bool_],
    top_k: int,
    bm25: npt.NDArray[np.float32],
    cosine: npt.NDArray[np.float32] | None,
    semantic: npt.NDArray[np.bool_],
    speaker: npt.NDArray[np.bool_],
    date: npt.NDArray[np.bool_],
    when: npt.NDArray[np.bool_],
    exact_cosines: ExactCosines | None = None,
) -> list[Hit]:
    """The best `top_k` eligible rows as Hits; their `dense_score` from `cosine`, or from
    `exact_cosines` when given (`cosine` then holds fitted values)."""
    rows: npt.NDArray[np.intp] | None = None
    if eligible.size and eligible.all():
        # Every row (the usual case: every message has a vector): the scores as they are, not
        # a copy of them, and no list of rows until the cut.
        candidate_scores = scores
    else:
        rows = np.flatnonzero(eligible)
        if rows.size == 0:
            return []
        candidate_scores = np.take(scores, rows)
    if candidate_scores.size > top_k:
        # Everything scoring at least the k-th best: ties at the cut must all be seen so that
        # message order, not argpartition's whim, decides between them.
        kth = _kth_largest(candidate_scores, top_k)
        keep = candidate_scores >= kth
        rows = np.flatnonzero(keep) if rows is None else rows[keep]
        candidate_scores = candidate_scores[keep]
    elif rows is None:
        rows = np.arange(candidate_scores.size)
    # Rows ascend (message order); a stable sort on the negated score keeps that order in ties.
    order = np.argsort(-candidate_scores, kind="stable")[:top_k]
    chosen = np.take(rows, order)
    # Each column of the chosen rows read at once (tolist gives the same Python floats and
    # bools as float()/bool() of each numpy scalar): per-row scalar reads were most of this.
    lexical = np.take(bm25, chosen)
    if cosine is None:
        dense: list[float] | list[None] = [None] * chosen.size
    elif exact_cosines is not None:
        dense = exact_cosines(chosen).tolist()
    else:
        dense = np.take(cosine, chosen).tolist()
    columns = zip(
        chosen.tolist(),
        np.take(candidate_scores, order).tolist(),
        lexical.tolist(),
        dense,
        (lexical > 0).tolist(),
        np.take(semantic, chosen).tolist(),
        np.take(speaker, chosen).tolist(),
        np.take(date, chosen).tolist(),
        np.take(when, chosen).tolist(),
        strict=True,
    )
    return [
        Hit(
            id=index.ids[row],
            score=score,
            lexical_score=lexical_score,
            dense_score=cosine_score if semantic_flag else None,
            signals=_SIGNALS[lexical_flag, semantic_flag, speaker_flag, date_flag, when_flag],
            row=row,
        )
        for (
            row,
            score,
            lexical_score,
            cosine_score,
            lexical_flag,
            semantic_flag,
            speaker_flag,
            date_flag,
            when_flag,
        ) in columns
    ]


def _kth_largest(values: npt.NDArray[np.float32], k: int) -> float:
    """The k-th largest of `values` (1 <= k < values.size), exactly np.partition's.

    The k-th largest of an every-nth sample is at most the k-th largest of all, so only the
    values at or above it need the partition: about sqrt(size * k) of them each time instead
    of all (at 76,000 candidates and k=57: 0.56 -> ~0.1 ms). Correct for any data; a sample
    that happens to be unrepresentative only leaves more to partition."""
    stride = int(np.sqrt(values.size / k))
    if stride >= 2:
        sample = values[::stride]
        floor = np.partition(sample, sample.size - k)[sample.size - k]
        if not np.isnan(floor):
            # np.partition sorts NaN last (as the largest): kept too, so the answer is the same.
            values = values[~(values < floor)]
    return float(np.partition(values, values.size - k)[values.size - k])
