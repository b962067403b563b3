"""A person's messages as a windowed BM25 index plus the per-message facts the ranker's priors need.

Built once per person and cached by the caller; everything is frozen into numpy arrays so an
index's size is known (`memory_bytes`) and a cache can be bounded by it. A dict of dicts of
postings costs about ten times as much.
"""

from __future__ import annotations

import itertools
import math
import sys
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from memoryhub.core.recall.analyzer import analyze, words
from memoryhub.core.recall.dates import has_time_expression

# The study's measured window and BM25 settings (see shared/research/retrieval.md).
SPEAKER_WEIGHT = 3.0
PREVIOUS_WEIGHT = 0.5
NEXT_WEIGHT = 0.3
BM25_K1 = 0.9
BM25_B = 0.3

_NO_DAY = -1


@dataclass(frozen=True, slots=True, eq=False)
class RecallDoc:
    """One message as the engine sees it.

    `session_key` groups messages into conversations: the neighbour window and the session score
    never cross it. `position` orders messages within a session. `vector`, if given, is an
    L2-normalised float32 embedding; a message not embedded yet passes None.
    """

    id: Hashable
    session_key: Hashable
    position: int
    text: str
    speaker: str = ""
    created_at: datetime | None = None
    token_count: int = 0
    vector: npt.NDArray[np.float32] | None = None


def epoch_seconds(moment: datetime) -> float:
    # Naive datetimes are taken as UTC so that naive and aware values compare instead of raising.
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def name_words(name: str) -> tuple[str, ...]:
    """A speaker's name as the lower-case words a query would spell it with."""
    return tuple(words(name))


class RecallIndex:
    """The frozen index of one person's messages, in the order they were given (message order).

    Build it with `RecallIndex.build(docs)`; docs must come oldest first, since that order breaks
    ties between equal scores.
    """

    __slots__ = (
        "avg_length",
        "created_epoch",
        "created_month",
        "created_ordinal",
        "created_year",
        "has_time",
        "idf",
        "ids",
        "length_prior",
        "next_index",
        "participants",
        "post_docs",
        "post_offsets",
        "post_weights",
        "prev_index",
        "session_index",
        "session_order",
        "session_starts",
        "speaker_index",
        "speaker_names",
        "vector_mask",
        "vectors",
        "vocabulary",
    )

    ids: tuple[Hashable, ...]
    vocabulary: dict[str, int]
    idf: npt.NDArray[np.float32]
    post_offsets: npt.NDArray[np.int64]
    post_docs: npt.NDArray[np.int32]
    post_weights: npt.NDArray[np.float32]
    avg_length: float
    prev_index: npt.NDArray[np.int32]
    next_index: npt.NDArray[np.int32]
    session_index: npt.NDArray[np.int32]
    session_order: npt.NDArray[np.int32]
    session_starts: npt.NDArray[np.int64]
    speaker_index: npt.NDArray[np.int32]
    speaker_names: tuple[str, ...]
    participants: tuple[str, ...]
    length_prior: npt.NDArray[np.float32]
    created_epoch: npt.NDArray[np.float64]
    created_ordinal: npt.NDArray[np.int32]
    created_year: npt.NDArray[np.int16]
    created_month: npt.NDArray[np.int8]
    has_time: npt.NDArray[np.bool_]
    vectors: npt.NDArray[np.float32] | None
    vector_mask: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_vectors(self) -> bool:
        return bool(self.vector_mask.any())

    def memory_bytes(self) -> int:
        """About how many bytes the index holds: arrays exactly, vocabulary and ids roughly."""
        arrays = sum(
            array.nbytes
            for array in (
                self.idf,
                self.post_offsets,
                self.post_docs,
                self.post_weights,
                self.prev_index,
                self.next_index,
                self.session_index,
                self.session_order,
                self.session_starts,
                self.speaker_index,
                self.length_prior,
                self.created_epoch,
                self.created_ordinal,
                self.created_year,
                self.created_month,
                self.has_time,
                self.vector_mask,
            )
        )
        if self.vectors is not None:
            arrays += self.vectors.nbytes
        # A dict entry costs about 100 bytes beyond its key string; ids are usually small ints or
        # UUIDs, counted as they are.
        vocabulary = sys.getsizeof(self.vocabulary) + sum(
            sys.getsizeof(term) for term in self.vocabulary
        )
        ids = sys.getsizeof(self.ids) + sum(sys.getsizeof(doc_id) for doc_id in self.ids)
        return arrays + vocabulary + ids

    @classmethod
    def build(cls, docs: Sequence[RecallDoc]) -> RecallIndex:
        """Index `docs` (oldest first). Raises ValueError on duplicate ids or mixed vector sizes."""
        count = len(docs)
        index = cls.__new__(cls)
        index.ids = tuple(doc.id for doc in docs)
        if len(set(index.ids)) != count:
            raise ValueError("RecallDoc ids must be unique within one index.")

        index._link_sessions(docs)
        index._index_terms(docs)
        index._store_priors(docs)
        index._store_vectors(docs)
        # Shared by every thread that searches a cached person: nobody may change it in place.
        for name in cls.__slots__:
            value = getattr(index, name)
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
        return index

    def _link_sessions(self, docs: Sequence[RecallDoc]) -> None:
        count = len(docs)
        by_session: dict[Hashable, list[int]] = {}
        for row, doc in enumerate(docs):
            by_session.setdefault(doc.session_key, []).append(row)
        prev_index = np.full(count, -1, dtype=np.int32)
        next_index = np.full(count, -1, dtype=np.int32)
        session_index = np.empty(count, dtype=np.int32)
        order: list[int] = []
        starts: list[int] = []
        for number, rows in enumerate(by_session.values()):
            # Stable: equal positions keep the order the messages were given in.
            rows.sort(key=lambda row: docs[row].position)
            starts.append(len(order))
            order.extend(rows)
            session_index[rows] = number
            for before, after in itertools.pairwise(rows):
                next_index[before] = after
                prev_index[after] = before
        self.prev_index = prev_index
        self.next_index = next_index
        self.session_index = session_index
        # Rows grouped by session, so a session's best score is one `np.maximum.reduceat`.
        self.session_order = np.asarray(order, dtype=np.int32)
        self.session_starts = np.asarray(starts, dtype=np.int64)

    def _index_terms(self, docs: Sequence[RecallDoc]) -> None:
        count = len(docs)
        vocabulary: dict[str, int] = {}
        # The only per-word Python work: each message's stems as term ids, in one flat typed
        # array. The window, the sums and the BM25 weights are then done in numpy, which is ~5
        # times faster than a dict per message and holds no Python objects per posting.
        token_terms = array("i")
        token_counts = array("q")
        speaker_rows = array("i")
        speaker_terms = array("i")
        speaker_ids: dict[str, list[int]] = {}
        for row, doc in enumerate(docs):
            own = [vocabulary.setdefault(term, len(vocabulary)) for term in analyze(doc.text)]
            token_terms.extend(own)
            token_counts.append(len(own))
            if doc.speaker:
                names = speaker_ids.get(doc.speaker)
                if names is None:
                    names = speaker_ids[doc.speaker] = [
                        vocabulary.setdefault(term, len(vocabulary))
                        for term in analyze(doc.speaker)
                    ]
                speaker_terms.extend(names)
                speaker_rows.extend([row] * len(names))

        size = max(len(vocabulary), 1)
        own_rows = np.repeat(
            np.arange(count, dtype=np.int64), np.frombuffer(token_counts, dtype=np.int64)
        )
        own_keys, own_counts = np.unique(
            own_rows * size + np.frombuffer(token_terms, dtype=np.intc), return_counts=True
        )
        own_row, own_term = np.divmod(own_keys, size)
        own_tf = own_counts.astype(np.float64)
        # A message's words also count, lighter, in the message after it (as its previous turn)
        # and in the one before it (as its next turn).
        after = self.next_index[own_row]
        before = self.prev_index[own_row]
        rows = np.concatenate(
            [
                own_row,
                after[after >= 0],
                before[before >= 0],
                np.frombuffer(speaker_rows, dtype=np.intc),
            ]
        )
        terms = np.concatenate(
            [
                own_term,
                own_term[after >= 0],
                own_term[before >= 0],
                np.frombuffer(speaker_terms, dtype=np.intc),
            ]
        )
        frequencies = np.concatenate(
            [
                own_tf,
                PREVIOUS_WEIGHT * own_tf[after >= 0],
                NEXT_WEIGHT * own_tf[before >= 0],
                np.full(len(speaker_rows), SPEAKER_WEIGHT),
            ]
        )
        # Sorted by term, then row: the postings come out grouped per term (CSR) in one pass.
        keys, inverse = np.unique(terms * max(count, 1) + rows, return_inverse=True)
        tf = np.bincount(inverse, weights=frequencies, minlength=len(keys))
        post_term, post_row = np.divmod(keys, max(count, 1))
        lengths = np.bincount(post_row, weights=tf, minlength=count)

        avg_length = float(lengths.mean()) if count and lengths.mean() > 0 else 1.0
        # The BM25 saturation depends only on the document, so it is computed once here and a
        # query only sums idf times the stored weight.
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[post_row] / avg_length)
        document_frequency = np.bincount(post_term, minlength=len(vocabulary))
        self.post_docs = post_row.astype(np.int32)
        self.post_weights = (tf * (BM25_K1 + 1.0) / (tf + norm)).astype(np.float32)
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(document_frequency, out=offsets[1:])
        self.post_offsets = offsets
        self.idf = np.log(
            1.0 + (count - document_frequency + 0.5) / (document_frequency + 0.5)
        ).astype(np.float32)
        self.vocabulary = vocabulary
        self.avg_length = avg_length

    def _store_priors(self, docs: Sequence[RecallDoc]) -> None:
        count = len(docs)
        speakers: dict[str, int] = {}
        speaker_index = np.empty(count, dtype=np.int32)
        for row, doc in enumerate(docs):
            key = doc.speaker.strip().casefold()
            if key not in speakers:
                speakers[key] = len(speakers)
            speaker_index[row] = speakers[key]
        self.speaker_index = speaker_index
        self.speaker_names = tuple(speakers)
        self.participants = tuple(name for name in speakers if name)

        length = np.log1p(np.asarray([max(doc.token_count, 0) for doc in docs], dtype=np.float64))
        self.length_prior = _minmax(length).astype(np.float32)

        epoch = np.full(count, math.nan, dtype=np.float64)
        ordinal = np.full(count, _NO_DAY, dtype=np.int32)
        year = np.zeros(count, dtype=np.int16)
        month = np.zeros(count, dtype=np.int8)
        for row, doc in enumerate(docs):
            if doc.created_at is not None:
                epoch[row] = epoch_seconds(doc.created_at)
                # The calendar day as the message's own clock saw it: what a person means by
                # "on 8 May".
                day = doc.created_at.date()
                ordinal[row] = day.toordinal()
                year[row] = day.year
                month[row] = day.month
        self.created_epoch = epoch
        self.created_ordinal = ordinal
        self.created_year = year
        self.created_month = month
        self.has_time = np.fromiter(
            (has_time_expression(doc.text) for doc in docs), dtype=np.bool_, count=count
        )

    def _store_vectors(self, docs: Sequence[RecallDoc]) -> None:
        count = len(docs)
        mask = np.zeros(count, dtype=np.bool_)
        dimension = next((doc.vector.shape[-1] for doc in docs if doc.vector is not None), None)
        if dimension is None:
            self.vectors = None
            self.vector_mask = mask
            return
        vectors = np.zeros((count, dimension), dtype=np.float32)
        for row, doc in enumerate(docs):
            if doc.vector is None:
                continue
            vector = np.asarray(doc.vector, dtype=np.float32).reshape(-1)
            if vector.shape[0] != dimension:
                raise ValueError(
                    f"RecallDoc {doc.id!r} has a {vector.shape[0]}-dimensional vector, "
                    f"the others {dimension}."
                )
            vectors[row] = vector
            mask[row] = True
        self.vectors = vectors
        self.vector_mask = mask

    def bm25(self, terms: Sequence[str]) -> npt.NDArray[np.float32]:
        """The BM25 score of every message for the distinct query `terms` (0 where none occurs)."""
        scores = np.zeros(len(self.ids), dtype=np.float32)
        for term in dict.fromkeys(terms):
            term_id = self.vocabulary.get(term)
            if term_id is None:
                continue
            start, end = self.post_offsets[term_id], self.post_offsets[term_id + 1]
            # A term's rows are distinct, so fancy-index addition is safe (no np.add.at needed).
            scores[self.post_docs[start:end]] += self.idf[term_id] * self.post_weights[start:end]
        return scores


def _minmax(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros_like(values)
    return (values - low) / (high - low)
