"""Recall over one person's facts: the hybrid search of memoryhub.core.recall over the candidates
the database chose, with the index cached per process.

The database applies every filter (tenant, person, tags, metadata, dates, superseded, expired)
and returns the candidates with their text (selectors/facts.py); the ranking runs here, over an
index of exactly those candidates. The index is a cache keyed by the person and the filters, and
its version token is a hash of the candidate rows as just read (id, text, tags, time, and when
their vector was written): a create, an edit, a delete, a supersede, an expiry or a new vector
changes the rows, so the next read rebuilds, with no counter to bump on any write path. The text
a caller shows comes from that read, never from the cache; a person with no facts left (erased)
drops their entry.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple, cast

from django.conf import settings
from django.utils.dateparse import parse_datetime

from facts_app.models import FactVector
from memoryhub.core.recall import Hit, Mode, RecallDoc, RecallIndex, Signals, Weights, rank
from memoryhub.core.recall.analyzer import query_terms
from memoryhub.core.recall.cache import IndexCache
from memoryhub.core.search import EmptySearchQuery
from memoryhub.llm.embeddings import (
    embed_query_or_none,
    get_embedder,
    matrix_from_bytes,
)

MODES: tuple[Mode, ...] = ("hybrid", "lexical", "semantic")

# Facts stand alone: no conversation, neighbours or speaker, and their length says nothing about
# relevance. What is left of the study's recipe (shared/research/retrieval.md) is the fusion and
# the date boost (on the fact's created_at), at the H5 weights.
FACT_WEIGHTS = Weights(
    dense=0.5, session=0.0, smoothing=0.0, speaker=0.0, length=0.0, date=0.4, when=0.0
)

# A fact no query word matched is returned only if its meaning is this close (MiniLM cosine).
# Without a floor every embedded fact is a candidate and a person's unrelated facts fill the
# list after the real hits. Measured on MiniLM: a paraphrase ("does the user have a dog" /
# "Alice adopted a puppy last spring") scores 0.34, unrelated facts of the same person 0.0-0.28.
SEMANTIC_MIN_COSINE = 0.3

# Beyond this many candidates the caller searches in the database instead (lexical): the read
# and the index of one person's facts would cost more than the ranking saves.
MAX_CANDIDATES = 10_000

LEXICAL_ONLY = Signals(lexical=True, semantic=False, speaker=False, date=False, when=False)


# The share of RECALL_CACHE_MAX_BYTES the fact indexes may hold, beside the messages' cache: a
# person's facts are a small fraction of their turns, and their many turns must not push the
# facts out (nor the other way round).
FACT_CACHE_SHARE = 0.25


@cache
def index_cache() -> IndexCache:
    return IndexCache(max_bytes=int(settings.RECALL_CACHE_MAX_BYTES * FACT_CACHE_SHARE))


class FactCandidate(NamedTuple):
    """One fact the filters allow, as the database sent it (selectors/facts.py): `tags` as JSON
    text, `created_at` as a datetime or its text (SQLite), `vector_written_at` when its vector
    of the current model was written (None: not embedded yet). Unparsed, because a warm search
    needs only to compare the rows with those its index was built from."""

    id: int
    end_user_id: int | None
    content: str
    tags: Any
    created_at: Any
    vector_written_at: Any


@dataclass(frozen=True)
class RankedFact:
    candidate: FactCandidate
    hit: Hit


@dataclass(frozen=True)
class FactRecallResult:
    mode: Mode  # the mode that ran: hybrid without any vector (or query vector) runs as lexical
    hits: list[RankedFact]


def recall_supported(query: str) -> bool:
    """Whether the engine's analyser finds a word in `query`. It reads ASCII words only, so a
    query in another script is left to the database's full-text search."""
    return bool(query_terms(query))


_UNPARSED: Any = object()


def lexical_text(candidate: FactCandidate, tags: Any = _UNPARSED) -> str:
    # The tags are searchable words, as in the database's search text (the person's id is not:
    # every candidate here belongs to the same person). `tags`: the candidate's, parsed already.
    if tags is _UNPARSED:
        tags = json.loads(candidate.tags) if isinstance(candidate.tags, str) else candidate.tags
    return "\n".join([candidate.content, *(str(tag) for tag in tags or ())])


def _tag_lists(candidates: Sequence[FactCandidate]) -> list[Any]:
    """Each candidate's tags, parsed. The database sends JSON text: one json.loads over all of
    them is a fraction of one per fact (a build parses a person's hundred at once)."""
    texts = [candidate.tags for candidate in candidates]
    if texts and all(isinstance(text, str) for text in texts):
        parsed: list[Any] = json.loads("[" + ",".join(texts) + "]")
        return parsed
    return [json.loads(text) if isinstance(text, str) else text for text in texts]


def _moment(value: Any) -> dt.datetime | None:
    """A stored time as an aware datetime (SQLite sends text, naive, in UTC)."""
    if value is None or isinstance(value, dt.datetime):
        moment = value
    else:
        moment = parse_datetime(str(value))
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment


def _model_name() -> str | None:
    embedder = get_embedder()
    return None if embedder is None else embedder.model_name


def _build(candidates: Sequence[FactCandidate]) -> RecallIndex:
    vectors: dict[int, Any] = {}
    embedder = get_embedder()
    with_vector = [candidate.id for candidate in candidates if candidate.vector_written_at]
    if embedder is not None and with_vector:
        stored = list(
            FactVector.objects.filter(
                fact_id__in=with_vector, model=embedder.model_name
            ).values_list("fact_id", "vector")
        )
        if stored:
            matrix = matrix_from_bytes(
                [bytes(blob) for _, blob in stored], dimensions=embedder.dimensions
            )
            vectors = {fact_id: matrix[row] for row, (fact_id, _) in enumerate(stored)}
    return RecallIndex.build(
        [
            RecallDoc(
                id=candidate.id,
                # Each fact is its own "conversation": no neighbour window, no session score.
                session_key=candidate.id,
                position=0,
                text=lexical_text(candidate, tags),
                created_at=_moment(candidate.created_at),
                vector=vectors.get(candidate.id),
            )
            for candidate, tags in zip(candidates, _tag_lists(candidates), strict=True)
        ],
        # The fact weights give no "when" boost: which facts name a time is never read.
        time_expressions=FACT_WEIGHTS.when != 0,
    )


def _index(
    *, tenant_id: int, end_user_id: int | None, filters_key: Hashable, rows: list[FactCandidate]
) -> RecallIndex:
    key = ("facts", tenant_id, end_user_id, _model_name(), filters_key)
    # The rows are the token: anything that changes what the index holds changes them.
    token = hash(tuple(rows))
    return index_cache().get_or_build(key, token=token, build=lambda: _build(rows))


def index_discard(*, tenant_id: int, end_user_id: int | None, filters_key: Hashable) -> None:
    index_cache().discard(("facts", tenant_id, end_user_id, _model_name(), filters_key))


def _matches(hit: Hit) -> bool:
    return hit.signals.lexical or (
        hit.dense_score is not None and hit.dense_score >= SEMANTIC_MIN_COSINE
    )


def candidates_rank(
    *,
    tenant_id: int,
    filters_key: Hashable,
    candidates: list[FactCandidate],
    query: str,
    mode: Mode = "hybrid",
    top_k: int = 10,
) -> FactRecallResult:
    """The best `top_k` of one person's `candidates` for `query`, best first.

    `candidates` are every fact the filters allow (at most MAX_CANDIDATES), newest first: ties
    go to the newer fact. `filters_key` names the filters that chose them (the cache holds one
    index per person and filters). A hit either shares a word with the query or, when a dense
    part takes part, means something close (SEMANTIC_MIN_COSINE). Raises EmptySearchQuery for a
    query with no searchable word.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown recall mode {mode!r}.")
    if not query_terms(query):
        raise EmptySearchQuery("The query has no searchable words.")
    if not candidates:
        return FactRecallResult(mode="lexical" if mode == "hybrid" else mode, hits=[])
    persons = {candidate.end_user_id for candidate in candidates}
    if len(persons) != 1:
        raise ValueError("Fact recall ranks one person's facts at a time.")
    index = _index(
        tenant_id=tenant_id,
        end_user_id=persons.pop(),
        filters_key=filters_key,
        rows=candidates,
    )
    query_vector = embed_query_or_none(query) if mode != "lexical" and index.has_vectors else None
    if mode == "semantic" and query_vector is None:
        return FactRecallResult(mode="semantic", hits=[])
    ran: Mode = mode if (mode != "hybrid" or query_vector is not None) else "lexical"
    by_id = {candidate.id: candidate for candidate in candidates}
    fetch = min(len(index), max(top_k * 3, 30))
    while True:
        hits = rank(
            index,
            query,
            top_k=fetch,
            mode=ran,
            query_vector=query_vector,
            weights=FACT_WEIGHTS,
        )
        # A hash collision of two tokens could hand back another index: only ids just read.
        kept = [
            RankedFact(candidate=by_id[cast(int, hit.id)], hit=hit)
            for hit in hits
            if hit.id in by_id and _matches(hit)
        ]
        if len(kept) >= top_k or len(hits) < fetch or fetch >= len(index):
            return FactRecallResult(mode=ran, hits=kept[:top_k])
        # Weak semantic-only hits were cut: look further down the ranking.
        fetch = len(index)
