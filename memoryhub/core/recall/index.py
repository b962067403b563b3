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
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

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
# Postings summed per slice of the vocabulary at build time: bounds the sort's temporary memory.
_POSTINGS_PER_SLICE = 500_000
# Vectors quantized per slice at build time, for the same reason.
_QUANTIZE_ROWS = 4096
# From this many messages on the index also keeps each vector's sign bits (`sign_columns`, 48
# bytes a message at 384 dimensions), and a hybrid ranking takes its cosines from a first pass
# over them instead of the product over every vector (hybrid._first_pass_cosine).
SIGN_BITS_FROM_ROWS = 50_000


@dataclass(frozen=True, slots=True, eq=False)
class RecallDoc:
    """One message as the engine sees it.

    `session_key` groups messages into conversations: the neighbour window and the session score
    never cross it. `position` orders messages within a session. `vector`, if given, is an
    L2-normalised float32 embedding (the index keeps it as int8, `quantized`); a message not
    embedded yet passes None.
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


def _int64s(values: Sequence[Hashable]) -> bool:
    """Whether every value is an int that fits int64 (bool, an int subclass, is not)."""
    if not all(type(value) is int for value in values):
        return False
    numbers = cast(Sequence[int], values)
    return not numbers or (min(numbers) >= -(2**63) and max(numbers) < 2**63)


def _frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.setflags(write=False)
    return array


def name_words(name: str) -> tuple[str, ...]:
    """A speaker's name as the lower-case words a query would spell it with."""
    return tuple(words(name))


class RecallIndex:
    """The frozen index of one person's messages, in the order they were given (message order).

    Build it with `RecallIndex.build(docs)`; docs must come oldest first, since that order breaks
    ties between equal scores. `extended(newer_docs)` is the same index as a build of all the
    docs, without analysing the old ones again.
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
        "positions",
        "post_docs",
        "post_offsets",
        "post_tf",
        "post_weights",
        "prev_index",
        "row_lookup",
        "session_index",
        "session_keys",
        "session_order",
        "session_starts",
        "sessions_in_order",
        "sign_columns",
        "speaker_index",
        "speaker_names",
        "speaker_rows",
        "speaker_terms",
        "speaker_terms_of",
        "term_offsets",
        "terms",
        "time_expressions",
        "token_counts",
        "vector_mask",
        "vector_scales",
        "vectors",
        "vocabulary",
    )

    ids: tuple[Hashable, ...]
    vocabulary: dict[str, int]
    idf: npt.NDArray[np.float32]
    post_offsets: npt.NDArray[np.int64]
    post_docs: npt.NDArray[np.int32]
    post_weights: npt.NDArray[np.float32]
    post_tf: npt.NDArray[np.float32]  # each posting's weighted count, before BM25 (extended)
    avg_length: float
    prev_index: npt.NDArray[np.int32]
    next_index: npt.NDArray[np.int32]
    session_index: npt.NDArray[np.int32]
    session_order: npt.NDArray[np.int32]
    session_starts: npt.NDArray[np.int64]
    # Every session's rows consecutive and in position order (`session_order` is 0, 1, 2, ...):
    # a person's conversations one after the other, as most histories are. The ranking then
    # reads neighbours and sessions by slices instead of gathers (hybrid.rank).
    sessions_in_order: bool
    speaker_index: npt.NDArray[np.int32]
    speaker_names: tuple[str, ...]
    participants: tuple[str, ...]
    length_prior: npt.NDArray[np.float32]
    created_epoch: npt.NDArray[np.float64]
    created_ordinal: npt.NDArray[np.int32]
    created_year: npt.NDArray[np.int16]
    created_month: npt.NDArray[np.int8]
    has_time: npt.NDArray[np.bool_]
    # Each vector as int8 codes and a scale (`quantized`): a quarter of float32's memory, and a
    # quarter of the bytes each query's product reads (hybrid._cosine). Rows without a vector
    # are zeros with scale 0.
    vectors: npt.NDArray[np.int8] | None
    vector_scales: npt.NDArray[np.float32]
    vector_mask: npt.NDArray[np.bool_]
    # From SIGN_BITS_FROM_ROWS messages on (else None): the sign bits of each row's codes, 64 to
    # a word, word by word (shape: words x rows), so that a Hamming distance is a few passes
    # over contiguous columns (`hamming_distances`); rows without a vector are all zeros.
    sign_columns: npt.NDArray[np.uint64] | None
    # What each doc was analysed into, kept so that `extended` analyses only the new docs (the
    # stemming and the time expressions were ~80 % of a build): session keys by number, each
    # doc's position, own stems (`terms[term_offsets[i]:term_offsets[i + 1]]`), speaker stems
    # (as (row, term) pairs, and by speaker), and token count.
    session_keys: tuple[Hashable, ...]
    positions: npt.NDArray[np.int64]
    terms: npt.NDArray[np.int32]
    term_offsets: npt.NDArray[np.int64]
    speaker_rows: npt.NDArray[np.int32]
    speaker_terms: npt.NDArray[np.int32]
    speaker_terms_of: dict[str, tuple[int, ...]]
    token_counts: npt.NDArray[np.int64]
    time_expressions: bool
    # What `rows_of` finds ids with, made at its first call (most indexes never need it): the
    # ids sorted and their rows when every id is an int (message ids), else a dict.
    row_lookup: tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]] | dict[Hashable, int] | None

    def neighbour_ids(self, row: int) -> tuple[Hashable | None, Hashable | None]:
        """The ids of the messages just before and after `row` in its session, as the index
        holds them (None at either end)."""
        before, after = int(self.prev_index[row]), int(self.next_index[row])
        return (
            self.ids[before] if before >= 0 else None,
            self.ids[after] if after >= 0 else None,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def rows_of(self, ids: Sequence[Hashable]) -> npt.NDArray[np.intp]:
        """The row of each of `ids`, -1 for an id the index does not hold.

        For cosines computed elsewhere (pgvector's, by message id): a dict from id to row cost
        4.1 ms a query at 100,000 messages; the sorted ids (16 bytes a message, made in ~6 ms
        at the first call and carried over by `extended`) place 1,564 given cosines in
        0.15-0.19 ms."""
        lookup = self.row_lookup
        if lookup is None:
            # Two threads may both make it: the same value, and the later assignment wins.
            lookup = self.row_lookup = self._make_row_lookup()
        if isinstance(lookup, dict):
            return np.fromiter((lookup.get(i, -1) for i in ids), dtype=np.intp, count=len(ids))
        keys, rows = lookup
        integer = np.fromiter((type(i) is int for i in ids), dtype=np.bool_, count=len(ids))
        wanted = np.fromiter(
            (i if type(i) is int else 0 for i in ids), dtype=np.int64, count=len(ids)
        )
        if not keys.size:
            return np.full(len(ids), -1, dtype=np.intp)
        at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
        found = (np.take(keys, at) == wanted) & integer
        return np.where(found, np.take(rows, at), -1)

    @property
    def has_vectors(self) -> bool:
        return bool(self.vector_mask.any())

    def _make_row_lookup(
        self,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]] | dict[Hashable, int]:
        ids = self.ids
        if _int64s(ids):
            keys = np.fromiter(ids, dtype=np.int64, count=len(ids))
            order = np.argsort(keys, kind="stable")
            return _frozen(np.take(keys, order)), _frozen(order)
        return dict(zip(ids, range(len(ids)), strict=True))

    def _row_lookup_with(
        self, docs: Sequence[RecallDoc]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]] | None:
        """This index's sorted-id lookup with `docs` as the rows after its own (None when it has
        none yet, or a new id is not an int): merged in O(n), where sorting again cost ~6 ms at
        100,000 messages on every search after an append."""
        lookup = self.row_lookup
        added = [doc.id for doc in docs]
        if not isinstance(lookup, tuple) or not _int64s(added):
            return None
        keys, rows = lookup
        new = np.fromiter(added, dtype=np.int64, count=len(added))
        order = np.argsort(new, kind="stable")
        at = np.searchsorted(keys, np.take(new, order))
        return (
            _frozen(np.insert(keys, at, np.take(new, order))),
            _frozen(np.insert(rows, at, order + len(self.ids))),
        )

    def session_last_positions(self) -> dict[Hashable, int]:
        """Each session's highest position in the index, by session key."""
        if not len(self.ids):
            return {}
        last = np.maximum.reduceat(self.positions[self.session_order], self.session_starts)
        return dict(zip(self.session_keys, last.tolist(), strict=True))

    def ids_without_vector(self) -> list[Hashable]:
        return [self.ids[row] for row in np.flatnonzero(~self.vector_mask).tolist()]

    def memory_bytes(self) -> int:
        """About how many bytes the index holds: arrays exactly, vocabulary and ids roughly."""
        arrays = sum(
            value.nbytes
            for name in self.__slots__
            if isinstance(value := getattr(self, name), np.ndarray)
        )
        # The dict's own table, each key string, and each term id (an int object of 28 bytes:
        # past 256 they are not shared). Ids are counted shallowly: usually ints or UUIDs.
        # (map over the builtin: the same sums without a Python step per item.)
        vocabulary = (
            sys.getsizeof(self.vocabulary)
            + sum(map(sys.getsizeof, self.vocabulary))
            + 28 * len(self.vocabulary)
        )
        ids = sys.getsizeof(self.ids) + sum(map(sys.getsizeof, self.ids))
        keys = sys.getsizeof(self.session_keys) + sum(map(sys.getsizeof, self.session_keys))
        lookup = self.row_lookup
        if isinstance(lookup, tuple):
            arrays += sum(array.nbytes for array in lookup)
        elif lookup is not None:
            arrays += sys.getsizeof(lookup)
        return arrays + vocabulary + ids + keys

    @classmethod
    def build(cls, docs: Sequence[RecallDoc], *, time_expressions: bool = True) -> RecallIndex:
        """Index `docs` (oldest first). Raises ValueError on duplicate ids or mixed vector sizes.

        `time_expressions=False` skips finding which texts name a time (`has_time` is then all
        False): for a caller whose weights never read it (`Weights.when` 0), it is most of the
        build's per-text work after the stemming."""
        index = cls.__new__(cls)
        index.time_expressions = time_expressions
        index._analyse(docs, base=None, vectors={})
        index._assemble(base=None)
        return index

    def extended(
        self,
        docs: Sequence[RecallDoc],
        *,
        vectors: Mapping[Hashable, npt.NDArray[np.float32]] | None = None,
    ) -> RecallIndex:
        """The index of this index's docs followed by `docs`, equal array for array to
        `build(old_docs + docs)`: only the new docs are analysed (the windows, sums and BM25
        weights, which depend on every doc, are computed again in numpy). `vectors`: vectors
        for docs already in this index that had none (made since it was built). This index is
        not changed (it may be in use by another thread). Raises ValueError as `build` does,
        and on an id of `vectors` that is not a doc without a vector here."""
        index = type(self).__new__(type(self))
        index.time_expressions = self.time_expressions
        index._analyse(docs, base=self, vectors=vectors or {})
        index._assemble(base=self)
        index.row_lookup = self._row_lookup_with(docs)
        return index

    def _analyse(
        self,
        docs: Sequence[RecallDoc],
        *,
        base: RecallIndex | None,
        vectors: Mapping[Hashable, npt.NDArray[np.float32]],
    ) -> None:
        """The per-doc columns of `base`'s docs (copied, never changed) followed by `docs`'."""
        old = 0 if base is None else len(base.ids)
        count = old + len(docs)
        self.ids = (() if base is None else base.ids) + tuple(doc.id for doc in docs)
        if len(set(self.ids)) != count:
            raise ValueError("RecallDoc ids must be unique within one index.")

        sessions: dict[Hashable, int] = (
            {} if base is None else {key: n for n, key in enumerate(base.session_keys)}
        )
        session_index = np.fromiter(
            (sessions.setdefault(doc.session_key, len(sessions)) for doc in docs),
            dtype=np.int32,
            count=len(docs),
        )
        self.session_keys = tuple(sessions)
        positions = np.fromiter((doc.position for doc in docs), dtype=np.int64, count=len(docs))

        # The only per-word Python work: each message's stems as term ids, in one flat typed
        # array. The window, the sums and the BM25 weights are then done in numpy, which is ~5
        # times faster than a dict per message and holds no Python objects per posting.
        vocabulary: dict[str, int] = {} if base is None else dict(base.vocabulary)
        speaker_terms_of: dict[str, tuple[int, ...]] = (
            {} if base is None else dict(base.speaker_terms_of)
        )
        token_terms = array("i")
        token_counts = array("q")
        speaker_rows = array("i")
        speaker_terms = array("i")
        for row, doc in enumerate(docs, start=old):
            own = [vocabulary.setdefault(term, len(vocabulary)) for term in analyze(doc.text)]
            token_terms.extend(own)
            token_counts.append(len(own))
            if doc.speaker:
                names = speaker_terms_of.get(doc.speaker)
                if names is None:
                    names = speaker_terms_of[doc.speaker] = tuple(
                        vocabulary.setdefault(term, len(vocabulary))
                        for term in analyze(doc.speaker)
                    )
                speaker_terms.extend(names)
                speaker_rows.extend([row] * len(names))
        self.vocabulary = vocabulary
        self.speaker_terms_of = speaker_terms_of
        new_offsets = np.cumsum(np.frombuffer(token_counts, dtype=np.int64))

        speakers: dict[str, int] = (
            {} if base is None else {name: n for n, name in enumerate(base.speaker_names)}
        )
        speaker_index = np.fromiter(
            (speakers.setdefault(doc.speaker.strip().casefold(), len(speakers)) for doc in docs),
            dtype=np.int32,
            count=len(docs),
        )
        self.speaker_names = tuple(speakers)
        self.participants = tuple(name for name in speakers if name)

        epoch = np.full(len(docs), math.nan, dtype=np.float64)
        ordinal = np.full(len(docs), _NO_DAY, dtype=np.int32)
        year = np.zeros(len(docs), dtype=np.int16)
        month = np.zeros(len(docs), dtype=np.int8)
        for row, doc in enumerate(docs):
            if doc.created_at is not None:
                epoch[row] = epoch_seconds(doc.created_at)
                # The calendar day as the message's own clock saw it: what a person means by
                # "on 8 May".
                day = doc.created_at.date()
                ordinal[row] = day.toordinal()
                year[row] = day.year
                month[row] = day.month
        has_time = (
            np.fromiter(
                (has_time_expression(doc.text) for doc in docs), dtype=np.bool_, count=len(docs)
            )
            if self.time_expressions
            else np.zeros(len(docs), dtype=np.bool_)
        )
        tokens = np.fromiter(
            (max(doc.token_count, 0) for doc in docs), dtype=np.int64, count=len(docs)
        )

        def joined(name: str, new: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return new if base is None else np.concatenate((getattr(base, name), new))

        self.session_index = joined("session_index", session_index)
        self.positions = joined("positions", positions)
        self.terms = joined("terms", np.frombuffer(token_terms, dtype=np.intc).astype(np.int32))
        self.term_offsets = (
            np.concatenate(([0], new_offsets)).astype(np.int64)
            if base is None
            else np.concatenate((base.term_offsets, base.term_offsets[-1] + new_offsets))
        )
        self.speaker_rows = joined(
            "speaker_rows", np.frombuffer(speaker_rows, dtype=np.intc).astype(np.int32)
        )
        self.speaker_terms = joined(
            "speaker_terms", np.frombuffer(speaker_terms, dtype=np.intc).astype(np.int32)
        )
        self.speaker_index = joined("speaker_index", speaker_index)
        self.created_epoch = joined("created_epoch", epoch)
        self.created_ordinal = joined("created_ordinal", ordinal)
        self.created_year = joined("created_year", year)
        self.created_month = joined("created_month", month)
        self.has_time = joined("has_time", has_time)
        self.token_counts = joined("token_counts", tokens)
        self._take_vectors(docs, base=base, vectors=vectors, count=count)

    def _take_vectors(
        self,
        docs: Sequence[RecallDoc],
        *,
        base: RecallIndex | None,
        vectors: Mapping[Hashable, npt.NDArray[np.float32]],
        count: int,
    ) -> None:
        old = count - len(docs)
        given = [(old + row, doc.id, doc.vector) for row, doc in enumerate(docs)]
        if vectors:
            assert base is not None, "vectors for old docs come with a base index"
            missing = {base.ids[row]: row for row in np.flatnonzero(~base.vector_mask).tolist()}
            for doc_id, vector in vectors.items():
                if doc_id not in missing:
                    raise ValueError(f"RecallDoc {doc_id!r} has a vector already or is unknown.")
                given.append((missing[doc_id], doc_id, vector))
        dimension = (
            base.vectors.shape[1]
            if base is not None and base.vectors is not None
            else next((v.shape[-1] for _, _, v in given if v is not None), None)
        )
        mask = np.zeros(count, dtype=np.bool_)
        if base is not None:
            mask[:old] = base.vector_mask
        if dimension is None:
            self.vectors = None
            self.vector_scales = np.zeros(count, dtype=np.float32)
            self.vector_mask = mask
            self.sign_columns = None
            return
        rows: list[int] = []
        block: list[npt.NDArray[np.float32]] = []
        for row, doc_id, value in given:
            if value is None:
                continue
            vector = np.asarray(value, dtype=np.float32).reshape(-1)
            if vector.shape[0] != dimension:
                raise ValueError(
                    f"RecallDoc {doc_id!r} has a {vector.shape[0]}-dimensional vector, "
                    f"the others {dimension}."
                )
            rows.append(row)
            block.append(vector)
        codes = np.zeros((count, dimension), dtype=np.int8)
        scales = np.zeros(count, dtype=np.float32)
        if base is not None and base.vectors is not None:
            # The base's codes as they are: an extension equals a build of all the docs.
            codes[:old] = base.vectors
            scales[:old] = base.vector_scales
        # In slices: the float32 copy and quantized's temporaries stay a few MB, not several
        # times the whole matrix.
        for start in range(0, len(rows), _QUANTIZE_ROWS):
            part = rows[start : start + _QUANTIZE_ROWS]
            codes[part], scales[part] = quantized(np.stack(block[start : start + _QUANTIZE_ROWS]))
        mask[rows] = True
        self.vectors = codes
        self.vector_scales = scales
        self.vector_mask = mask
        self.sign_columns = (
            _sign_columns_with(codes, base=base, changed=rows)
            if count >= SIGN_BITS_FROM_ROWS
            else None
        )

    def hamming_distances(self, codes: npt.NDArray[np.int8]) -> npt.NDArray[np.uint16]:
        """Each row's Hamming distance from the sign bits of `codes` (one query's int8 codes, as
        `quantized` makes them). Needs `sign_columns`."""
        columns = self.sign_columns
        assert columns is not None, "only an index of SIGN_BITS_FROM_ROWS rows keeps sign bits"
        query = _sign_words(codes.reshape(1, -1))[0]
        rows = columns.shape[1]
        total = np.zeros(rows, dtype=np.uint16)
        differing = np.empty(rows, dtype=np.uint64)
        counted = np.empty(rows, dtype=np.uint8)
        # Word by word over contiguous columns: 0.42 ms at 100,000 x 384 bits on the 2-core
        # bench machine, where simsimd's Hamming kernel over the rows took 0.72-0.78 ms and
        # numpy over the (rows x words) matrix 3.4 ms.
        for word, column in zip(query.tolist(), columns, strict=True):
            np.bitwise_xor(column, np.uint64(word), out=differing)
            np.bitwise_count(differing, out=counted)
            total += counted
        return total

    def _assemble(self, *, base: RecallIndex | None) -> None:
        """What depends on every doc (neighbours, postings, BM25 weights, the length prior),
        from the per-doc columns, in numpy (the postings from `base`'s, when extending it);
        then every array made read-only."""
        self.row_lookup = None
        self._link_sessions()
        if base is None:
            self._index_terms()
        else:
            self._index_terms_extending(base)
        length = np.log1p(self.token_counts.astype(np.float64))
        self.length_prior = _minmax(length).astype(np.float32)
        # Shared by every thread that searches a cached person: nobody may change it in place.
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    def _link_sessions(self) -> None:
        count = len(self.ids)
        if len(self.session_keys) == count:
            # Every doc its own session (facts): no neighbours, session i is row i.
            self.prev_index = np.full(count, -1, dtype=np.int32)
            self.next_index = np.full(count, -1, dtype=np.int32)
            self.session_order = np.arange(count, dtype=np.int32)
            self.session_starts = np.arange(count, dtype=np.int64)
        else:
            # Rows grouped by session (numbered by first appearance), by position within one;
            # lexsort is stable, so equal positions keep the order the messages were given in.
            order = np.lexsort((self.positions, self.session_index)).astype(np.int32)
            grouped = self.session_index[order]
            same = grouped[1:] == grouped[:-1]
            prev_index = np.full(count, -1, dtype=np.int32)
            next_index = np.full(count, -1, dtype=np.int32)
            prev_index[order[1:][same]] = order[:-1][same]
            next_index[order[:-1][same]] = order[1:][same]
            self.prev_index = prev_index
            self.next_index = next_index
            # Rows grouped by session, so a session's best score is one `np.maximum.reduceat`.
            self.session_order = order
            self.session_starts = np.flatnonzero(np.concatenate(([True], ~same))).astype(np.int64)
        self.sessions_in_order = bool(
            (self.session_order == np.arange(count, dtype=np.int32)).all()
        )

    def _index_terms(self) -> None:
        count = len(self.ids)
        vocabulary_size = len(self.vocabulary)
        token_counts = np.diff(self.term_offsets)
        token_terms = self.terms.astype(np.intc)
        if not self.speaker_rows.size and not (self.prev_index >= 0).any():
            # No window and no speakers (facts): a doc's postings are its own words' counts.
            slices = [
                _own_postings(count=count, token_terms=token_terms, token_counts=token_counts)
            ]
        else:
            slices = _windowed_postings(
                count=count,
                vocabulary_size=vocabulary_size,
                token_terms=token_terms,
                token_counts=token_counts,
                speaker_rows=self.speaker_rows.astype(np.intc),
                speaker_terms=self.speaker_terms.astype(np.intc),
                prev_index=self.prev_index,
                next_index=self.next_index,
            )
        del token_terms, token_counts
        document_frequency = np.zeros(vocabulary_size, dtype=np.int64)
        for terms, _, _ in slices:
            document_frequency += np.bincount(terms, minlength=vocabulary_size)
        # Copied slice by slice, each slice freed as soon as it is copied: the whole posting
        # list is never held twice.
        total = int(document_frequency.sum())
        post_docs = np.empty(total, dtype=np.int32)
        post_tf = np.empty(total, dtype=np.float32)
        filled = 0
        slices.reverse()
        while slices:
            _, rows, tf = slices.pop()
            post_docs[filled : filled + rows.size] = rows
            post_tf[filled : filled + rows.size] = tf
            filled += rows.size
        self._weigh(post_docs=post_docs, post_tf=post_tf, document_frequency=document_frequency)

    def _index_terms_extending(self, base: RecallIndex) -> None:
        """_index_terms' postings, from `base`'s: only the postings of the new docs and of the
        old ones whose window changed (the last message of a session that went on) are
        computed, then merged into the old ones in order. Equal to _index_terms' (each
        posting's parts are summed in the same order); sorting only the changed ones is what
        makes an extension of a big index cheap."""
        old = len(base.ids)
        count = len(self.ids)
        changed = np.flatnonzero(
            (self.prev_index[:old] != base.prev_index) | (self.next_index[:old] != base.next_index)
        )
        targets = np.zeros(count, dtype=np.bool_)
        targets[changed] = True
        targets[old:] = True
        terms, rows, tf = _postings_of_rows(
            targets=targets,
            terms=self.terms,
            term_offsets=self.term_offsets,
            speaker_rows=self.speaker_rows,
            speaker_terms=self.speaker_terms,
            prev_index=self.prev_index,
            next_index=self.next_index,
        )
        old_terms = np.repeat(
            np.arange(len(base.vocabulary), dtype=np.int64), np.diff(base.post_offsets)
        )
        keep = ~targets[base.post_docs]
        old_keys = (old_terms[keep] << 32) | base.post_docs[keep].astype(np.int64)
        new_keys = (terms.astype(np.int64) << 32) | rows.astype(np.int64)
        at = np.searchsorted(old_keys, new_keys)
        keys = np.insert(old_keys, at, new_keys)
        post_tf = np.insert(base.post_tf[keep], at, tf)
        document_frequency = np.bincount(keys >> 32, minlength=len(self.vocabulary))
        post_docs = (keys & 0xFFFFFFFF).astype(np.int32)
        self._weigh(post_docs=post_docs, post_tf=post_tf, document_frequency=document_frequency)

    def _weigh(
        self,
        *,
        post_docs: npt.NDArray[np.int32],
        post_tf: npt.NDArray[np.float32],
        document_frequency: npt.NDArray[np.int64],
    ) -> None:
        """The BM25 weights of the postings (doc-ordered by term, then row), their offsets and
        the terms' idf. The saturation depends only on the document, so it is computed once
        here and a query only sums idf times the stored weight."""
        count = len(self.ids)
        # One pass over every posting, in their order: the same sums whether the postings came
        # in slices (a build) or merged (an extension).
        lengths = np.bincount(post_docs, weights=post_tf, minlength=count)
        avg_length = float(lengths.mean()) if count and lengths.mean() > 0 else 1.0
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[post_docs] / avg_length)
        self.post_weights = (post_tf * (BM25_K1 + 1.0) / (post_tf + norm)).astype(np.float32)
        self.post_docs = post_docs
        self.post_tf = post_tf
        offsets = np.zeros(len(document_frequency) + 1, dtype=np.int64)
        np.cumsum(document_frequency, out=offsets[1:])
        self.post_offsets = offsets
        self.idf = np.log(
            1.0 + (count - document_frequency + 0.5) / (document_frequency + 0.5)
        ).astype(np.float32)
        self.avg_length = avg_length

    def bm25(self, terms: Sequence[str]) -> npt.NDArray[np.float32]:
        """The BM25 score of every message for the distinct query `terms` (0 where none occurs)."""
        scores = np.zeros(len(self.ids), dtype=np.float32)
        for term in dict.fromkeys(terms):
            term_id = self.vocabulary.get(term)
            if term_id is None:
                continue
            start, end = self.post_offsets[term_id], self.post_offsets[term_id + 1]
            # np.add.at: the same sums as fancy-index addition (a term's rows are distinct), in
            # one pass instead of a gather, an add and a scatter: ~40 % less at 100,000 messages.
            np.add.at(
                scores, self.post_docs[start:end], self.idf[term_id] * self.post_weights[start:end]
            )
        return scores


def _windowed_postings(
    *,
    count: int,
    vocabulary_size: int,
    token_terms: npt.NDArray[np.intc],
    token_counts: npt.NDArray[np.int64],
    speaker_rows: npt.NDArray[np.intc],
    speaker_terms: npt.NDArray[np.intc],
    prev_index: npt.NDArray[np.int32],
    next_index: npt.NDArray[np.int32],
) -> list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.float32]]]:
    """(term, row, weighted tf) of every windowed document in slices of the vocabulary, each
    sorted by term then row: read in order, they are the postings in CSR order.

    Written for peak memory at 100,000 messages: the windowed postings are summed in slices of
    the vocabulary, so the sort's temporaries cover one slice at a time (one global
    np.unique(return_inverse) peaked near 900 MB there).
    """
    size = max(vocabulary_size, 1)
    # A message's words also count, lighter, in the message after it (as that one's previous
    # turn) and in the one before it (as its next turn).
    counts = _own_counts(
        token_rows=np.repeat(np.arange(count, dtype=np.int64), token_counts),
        token_terms=token_terms,
        prev_index=prev_index,
        next_index=next_index,
    )
    own_term = counts.term
    after, before = counts.after, counts.before

    # Slices of about equal posting counts: term ids follow first use, not frequency.
    per_term = np.bincount(own_term, minlength=size) * 3 + np.bincount(
        speaker_terms, minlength=size
    )
    total = int(per_term.sum())
    parts = max(1, -(-total // _POSTINGS_PER_SLICE))
    cumulative = np.cumsum(per_term)
    bounds = [0, *np.searchsorted(cumulative, np.arange(1, parts) * total / parts).tolist(), size]

    slices: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.float32]]] = []
    for low, high in itertools.pairwise(bounds):
        if high <= low:
            continue
        own = (own_term >= low) & (own_term < high)
        has_after = own & (after >= 0)
        has_before = own & (before >= 0)
        speaking = (speaker_terms >= low) & (speaker_terms < high)
        part = _summed_parts(
            count=count,
            counts=counts,
            own=own,
            has_after=has_after,
            has_before=has_before,
            speaker_rows=speaker_rows,
            speaker_terms=speaker_terms,
            speaking=speaking,
        )
        if part is not None:
            slices.append(part)
    return slices


class _OwnCounts(NamedTuple):
    """Each (message row, term) of the messages' own words, row then term, with its count
    and the rows of that message's next and previous turns (-1: none)."""

    row: npt.NDArray[np.int32]
    term: npt.NDArray[np.int32]
    tf: npt.NDArray[np.float32]
    after: npt.NDArray[np.int32]
    before: npt.NDArray[np.int32]


def _own_counts(
    *,
    token_rows: npt.NDArray[np.int64],
    token_terms: npt.NDArray[Any],
    prev_index: npt.NDArray[np.int32],
    next_index: npt.NDArray[np.int32],
) -> _OwnCounts:
    keys, counts = np.unique(
        token_rows * (1 << 32) + token_terms.astype(np.int64), return_counts=True
    )
    row = (keys >> 32).astype(np.int32)
    return _OwnCounts(
        row=row,
        term=(keys & 0xFFFFFFFF).astype(np.int32),
        tf=counts.astype(np.float32),
        after=next_index[row],
        before=prev_index[row],
    )


def _summed_parts(
    *,
    count: int,
    counts: _OwnCounts,
    own: npt.NDArray[np.bool_],
    has_after: npt.NDArray[np.bool_],
    has_before: npt.NDArray[np.bool_],
    speaker_rows: npt.NDArray[Any],
    speaker_terms: npt.NDArray[Any],
    speaking: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.float32]] | None:
    """(term, row, weighted tf), sorted by term then row, of the chosen parts: each message's own
    counts (`own`), the same counts as the next message's previous turn (`has_after`, to row
    `counts.after`) and as the previous message's next turn (`has_before`, to row
    `counts.before`), and the speakers' words (`speaking`). None when no part is chosen.
    Shared by a build and an extension: each posting's parts are summed in this one order, to
    the same float."""
    rows = np.concatenate(
        [
            counts.row[own],
            counts.after[has_after],
            counts.before[has_before],
            speaker_rows[speaking],
        ],
        dtype=np.int64,
    )
    if rows.size == 0:
        return None
    terms = np.concatenate(
        [
            counts.term[own],
            counts.term[has_after],
            counts.term[has_before],
            speaker_terms[speaking],
        ],
        dtype=np.int64,
    )
    frequencies = np.concatenate(
        [
            counts.tf[own],
            PREVIOUS_WEIGHT * counts.tf[has_after],
            NEXT_WEIGHT * counts.tf[has_before],
            np.full(int(speaking.sum()), SPEAKER_WEIGHT),
        ],
        dtype=np.float64,
    )
    keys = terms * max(count, 1) + rows
    del terms, rows
    # Stable, so that equal messages sum their parts in the same order to the same float:
    # ties between them must stay exact for message order to decide.
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    frequencies = frequencies[order]
    del order
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    term, row = np.divmod(keys[starts], max(count, 1))
    # Summed in float64, kept in float32: a weighted count needs no more.
    summed = np.add.reduceat(frequencies, starts).astype(np.float32)
    return term.astype(np.int32), row.astype(np.int32), summed


def _postings_of_rows(
    *,
    targets: npt.NDArray[np.bool_],
    terms: npt.NDArray[np.int32],
    term_offsets: npt.NDArray[np.int64],
    speaker_rows: npt.NDArray[np.int32],
    speaker_terms: npt.NDArray[np.int32],
    prev_index: npt.NDArray[np.int32],
    next_index: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """_windowed_postings' (term, row, weighted tf) for the `targets` rows only, sorted by term
    then row: each posting's parts (its own count, then its previous turn's, then its next
    turn's, then its speaker's) summed in the order and with the types _windowed_postings
    uses, so that each equals the whole build's bit for bit."""
    count = targets.size
    # The rows whose own words reach a target: the targets and their neighbours.
    sources = targets.copy()
    around = np.concatenate((prev_index[targets], next_index[targets]))
    sources[around[around >= 0]] = True
    source_rows = np.flatnonzero(sources)
    lengths = term_offsets[source_rows + 1] - term_offsets[source_rows]
    starts = np.repeat(term_offsets[source_rows] - np.cumsum(lengths) + lengths, lengths)
    counts = _own_counts(
        token_rows=np.repeat(source_rows.astype(np.int64), lengths),
        token_terms=terms[starts + np.arange(int(lengths.sum()), dtype=np.int64)],
        prev_index=prev_index,
        next_index=next_index,
    )
    after, before = counts.after, counts.before
    own = targets[counts.row]
    has_after = (after >= 0) & targets[np.maximum(after, 0)]
    has_before = (before >= 0) & targets[np.maximum(before, 0)]
    speaking = targets[speaker_rows]
    part = _summed_parts(
        count=count,
        counts=counts,
        own=own,
        has_after=has_after,
        has_before=has_before,
        speaker_rows=speaker_rows,
        speaker_terms=speaker_terms,
        speaking=speaking,
    )
    if part is None:
        empty = np.zeros(0, dtype=np.int32)
        return empty, empty, np.zeros(0, dtype=np.float32)
    return part


def _own_postings(
    *,
    count: int,
    token_terms: npt.NDArray[np.intc],
    token_counts: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """_windowed_postings' one slice when no doc has a neighbour or a speaker: (term, row, tf)
    sorted by term then row, the same arrays in a few numpy calls instead of dozens (which is
    what a small index's build spent its time on)."""
    width = max(count, 1)
    keys, counts = np.unique(
        token_terms.astype(np.int64) * width
        + np.repeat(np.arange(count, dtype=np.int64), token_counts),
        return_counts=True,
    )
    term, row = np.divmod(keys, width)
    # A count is exact in float32, as the windowed sum of one part is.
    return term.astype(np.int32), row.astype(np.int32), counts.astype(np.float32)


def _sign_words(codes: npt.NDArray[np.int8]) -> npt.NDArray[np.uint64]:
    """Each row's sign bits (a code > 0 is 1), packed 64 to a word, zero-padded: rows x words."""
    packed = np.packbits(codes > 0, axis=1)
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def _sign_columns_with(
    codes: npt.NDArray[np.int8], *, base: RecallIndex | None, changed: Sequence[int]
) -> npt.NDArray[np.uint64]:
    """The sign columns of `codes`: `base`'s carried over where it has them (only the rows in
    `changed`, given a vector since, packed again), else packed from every row."""
    count = codes.shape[0]
    known = None if base is None else base.sign_columns
    if known is None:
        columns = np.empty((-(-codes.shape[1] // 64), count), dtype=np.uint64)
        for start in range(0, count, _QUANTIZE_ROWS):
            part = _sign_words(codes[start : start + _QUANTIZE_ROWS])
            columns[:, start : start + part.shape[0]] = part.T
        return columns
    old = known.shape[1]
    columns = np.empty((known.shape[0], count), dtype=np.uint64)
    columns[:, :old] = known
    columns[:, old:] = 0  # the new rows without a vector
    rows = np.asarray(changed, dtype=np.intp)
    if rows.size:
        columns[:, rows] = _sign_words(codes[rows]).T
    return columns


def quantized(
    matrix: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Each row as int8 codes and its own scale (row ≈ codes x scale; a zero row: zeros, 0).

    A scale per row, not one for the matrix: a row's largest component maps to ±127, so every
    row keeps its full 8 bits. For 384-dimensional unit vectors a cosine computed from the codes
    is within ~0.004 of float32's; LoCoMo's evidence recall is the same through the API
    (`make bench-recall`) and offline (bench/README.md, seventeenth round)."""
    scales = (np.abs(matrix).max(axis=1, initial=0.0) / 127.0).astype(np.float32)
    divisors = np.where(scales > 0, scales, np.float32(1.0))
    codes = np.rint(matrix / divisors[:, None]).clip(-127, 127).astype(np.int8)
    return codes, scales


def _minmax(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros_like(values)
    return (values - low) / (high - low)
