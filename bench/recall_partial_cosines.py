"""How the hybrid ranking changes when only some messages get their exact cosine, on LoCoMo's
development half, offline (no database).

    .venv/bin/python -m bench.recall_partial_cosines
    .venv/bin/python -m bench.recall_partial_cosines --shares 0.01,0.02,0.05

Ways a long history could avoid the full product over every vector, each keeping the
exact int8 cosine for a share of the messages (at least 10):

- **nearest only**: the nearest share by exact cosine, the others counted as messages without a
  vector (`rank(dense_scores=...)`). It is what the pgvector path did until rank asked for more
  (sessions_app.recall: the person's 1,000 nearest from the database, DENSE_CANDIDATES then), so
  for a person with more than 1,000 messages it ranked like this at the share 1,000 / messages
  (there with pgvector's cosines of the float vectors, here the index's int8 ones).
- **nearest + asked**: the pgvector path as it is: the nearest share, and the messages rank asks
  a `dense_scores` function for (its DENSE_LEXICAL_ROWS best lexical matches and a stride
  sample of DENSE_SAMPLE_ROWS); the others without a vector.
- **Hamming + fit**: a first pass over the vectors' sign bits (48 bytes a message at 384
  dimensions: what simsimd's Hamming kernel reads, an eighth of the int8 codes), the exact
  cosine for the share nearest by Hamming distance and for a stride sample of a quarter as many
  more, and for every other message a straight line fitted from Hamming distance to cosine on
  those. Every message keeps a cosine, so the min-max and the session and neighbour priors see
  the whole history.
- **Hamming + asked**: the share nearest by Hamming distance instead of by exact cosine, and
  the messages rank asks for, as "nearest + asked"; the others without a vector.
- **Hamming + fit + asked**: "Hamming + fit", with the messages rank asks for exact too: an
  offline model of the first pass below.
- **first pass (the index's)**: the first pass the in-process index takes from
  index.SIGN_BITS_FROM_ROWS messages on (hybrid._first_pass_cosine, its FIRST_PASS_SHARE set to
  the share), run on the same docs built with sign bits: the shipped code.

Printed per variant: evidence recall@k (as bench/recall_offline.py) and how many of the exact
ranking's top 10 it keeps. The data is read where it lies (see bench/recall_offline.py: never
copied). Not a test: nothing asserts a number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import simsimd

from bench.recall_offline import (
    CATEGORIES,
    DEFAULT_DATA,
    KS,
    attach_vectors,
    conversation_docs,
    load_embedder,
    normalise_evidence,
    token_counter,
)
from memoryhub.core.recall import RecallDoc, RecallIndex, hybrid, rank
from memoryhub.core.recall import index as recall_index
from memoryhub.core.search import EmptySearchQuery

EXACT = "exact (every cosine)"
MIN_KEPT = 10
SAMPLE_SHARE = 0.25  # of the kept share, read at a stride for the fit


def hamming_fit_cosines(
    *, cosine: npt.NDArray[np.float32], distance: npt.NDArray[np.float64], kept: int
) -> npt.NDArray[np.float32]:
    """The exact cosines of the `kept` messages nearest by Hamming `distance` and of a stride
    sample, a line fitted from distance to cosine on them for every other message."""
    nearest = hamming_nearest(distance=distance, kept=kept)
    stride = max(int(cosine.size / max(kept * SAMPLE_SHARE, 1)), 1)
    exact_rows = np.union1d(nearest, np.arange(0, cosine.size, stride))
    slope, intercept = np.polyfit(
        distance[exact_rows].astype(np.float64), cosine[exact_rows].astype(np.float64), 1
    )
    estimated = (intercept + slope * distance.astype(np.float64)).astype(np.float32)
    estimated[exact_rows] = cosine[exact_rows]
    return estimated


def _index_with_sign_bits(docs: list[RecallDoc]) -> RecallIndex:
    kept = recall_index.SIGN_BITS_FROM_ROWS
    recall_index.SIGN_BITS_FROM_ROWS = 0
    try:
        return RecallIndex.build(docs)
    finally:
        recall_index.SIGN_BITS_FROM_ROWS = kept


@contextmanager
def _first_pass_share(share: float) -> Iterator[None]:
    kept = hybrid.FIRST_PASS_SHARE
    hybrid.FIRST_PASS_SHARE = share
    try:
        yield
    finally:
        hybrid.FIRST_PASS_SHARE = kept


def hamming_nearest(*, distance: npt.NDArray[np.float64], kept: int) -> npt.NDArray[np.intp]:
    """The rows of the `kept` messages nearest by Hamming `distance` (ties in row order)."""
    return np.argsort(distance, kind="stable")[:kept]


def nearest_and_asked(
    wanted: Sequence[Hashable],
    *,
    nearest: dict[Hashable, float],
    cosine: npt.NDArray[np.float32],
    index: RecallIndex,
) -> dict[Hashable, float]:
    """What the pgvector path gives rank: the nearest, and the cosines of the ids it asks for."""
    asked = np.take(cosine, index.rows_of(wanted)).tolist()
    return {**nearest, **dict(zip(wanted, asked, strict=True))}


def persons(
    data: list[dict[str, Any]], *, embedder: Any, one_person: bool
) -> list[tuple[list[RecallDoc], list[tuple[str, list[Hashable]]]]]:
    """Each history's docs (with vectors) and its questions (text, evidence ids), categories
    1-4 with evidence among the turns; one history of every conversation with `one_person`
    (ids and sessions then keyed by the conversation too)."""
    count_tokens = token_counter()
    found: list[tuple[list[RecallDoc], list[tuple[str, list[Hashable]]]]] = []
    for number, sample in enumerate(data):
        docs = conversation_docs(sample["conversation"], captions=True, count_tokens=count_tokens)
        attach_vectors(docs, embedder.embed_passages)
        known = {doc.id for doc in docs}
        questions: list[tuple[str, list[Hashable]]] = []
        for question in sample["qa"]:
            gold = [g for g in normalise_evidence(question.get("evidence", [])) if g in known]
            if question.get("category") in CATEGORIES and gold:
                questions.append((question["question"], gold))
        if one_person:
            docs = [
                dataclasses.replace(d, id=(number, d.id), session_key=(number, d.session_key))
                for d in docs
            ]
            questions = [(text, [(number, g) for g in gold]) for text, gold in questions]
        found.append((docs, questions))
    if one_person:
        return [
            (
                [d for docs, _ in found for d in docs],
                [question for _, questions in found for question in questions],
            )
        ]
    return found


def evaluate(data: list[dict[str, Any]], *, shares: list[float], one_person: bool) -> None:
    embedder = load_embedder()
    recalls: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    kept_of_exact: dict[str, list[float]] = defaultdict(list)
    for docs, questions in persons(data, embedder=embedder, one_person=one_person):
        index = RecallIndex.build(docs)
        assert index.vectors is not None
        # The same index keeping its sign bits, whatever its size: ranked as the service ranks
        # a history of SIGN_BITS_FROM_ROWS messages or more (the first pass).
        with_bits = _index_with_sign_bits(docs)
        bits = np.packbits(index.vectors > 0, axis=1)
        for text, gold in questions:
            query_vector = np.asarray(embedder.embed_query(text), dtype=np.float32)
            cosine = hybrid._cosine(index, query_vector)
            assert cosine is not None
            try:
                exact = [h.id for h in rank(index, text, top_k=max(KS), query_vector=query_vector)]
            except EmptySearchQuery:
                continue
            variants: dict[str, list[Any]] = {EXACT: exact}
            query_bits = np.packbits(query_vector > 0).reshape(1, -1)
            # Each message's Hamming distance over the sign bits, once for every share.
            hamming = simsimd.cdist(query_bits, bits, metric="hamming", dtype="bin8")
            distance = np.asarray(hamming)[0]
            for share in shares:
                kept = max(round(share * len(index)), MIN_KEPT)
                nearest = np.argsort(-cosine, kind="stable")[:kept].tolist()
                given = {index.ids[row]: float(cosine[row]) for row in nearest}
                variants[f"nearest only {share:.0%}"] = [
                    h.id for h in rank(index, text, top_k=max(KS), dense_scores=given)
                ]
                asked = partial(nearest_and_asked, nearest=given, cosine=cosine, index=index)
                variants[f"nearest + asked {share:.0%}"] = [
                    h.id for h in rank(index, text, top_k=max(KS), dense_scores=asked)
                ]
                estimated = hamming_fit_cosines(cosine=cosine, distance=distance, kept=kept)
                # Every message given a cosine: ranked as with the query's vector.
                every = dict(zip(index.ids, estimated.tolist(), strict=True))
                variants[f"Hamming + fit {share:.0%}"] = [
                    h.id for h in rank(index, text, top_k=max(KS), dense_scores=every)
                ]
                by_hamming = hamming_nearest(distance=distance, kept=kept)
                near = {index.ids[row]: float(cosine[row]) for row in by_hamming.tolist()}
                asked = partial(nearest_and_asked, nearest=near, cosine=cosine, index=index)
                variants[f"Hamming + asked {share:.0%}"] = [
                    h.id for h in rank(index, text, top_k=max(KS), dense_scores=asked)
                ]
                asked = partial(nearest_and_asked, nearest=every, cosine=cosine, index=index)
                variants[f"Hamming + fit + asked {share:.0%}"] = [
                    h.id for h in rank(index, text, top_k=max(KS), dense_scores=asked)
                ]
                with _first_pass_share(share):
                    variants[f"first pass (the index's) {share:.0%}"] = [
                        h.id
                        for h in rank(with_bits, text, top_k=max(KS), query_vector=query_vector)
                    ]
            for name, ranked in variants.items():
                for k in KS:
                    recalls[name][k].append(len(set(gold) & set(ranked[:k])) / len(gold))
                kept_of_exact[name].append(len(set(exact[:10]) & set(ranked[:10])) / 10)
    print(
        f"{'variant':<32}{'n':>6}"
        + "".join(f"{'R@' + str(k):>8}" for k in KS)
        + "  exact top 10 kept"
    )
    for name, by_k in recalls.items():
        print(
            f"{name:<32}{len(by_k[KS[0]]):>6}"
            + "".join(f"{100 * np.mean(by_k[k]):>8.1f}" for k in KS)
            + f"  {100 * np.mean(kept_of_exact[name]):>6.1f} %"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON file")
    parser.add_argument(
        "--shares",
        default="0.02,0.05,0.1,0.2",
        help="comma-separated shares of each conversation that keep their exact cosine",
    )
    parser.add_argument(
        "--one-person",
        action="store_true",
        help="every conversation as one person's history (more word matches than "
        "DENSE_LEXICAL_ROWS; the shares are of the whole)",
    )
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"No data at {args.data} (see shared/data/locomo-dev/README.md).")
    evaluate(
        json.loads(args.data.read_text()),
        shares=[float(share) for share in args.shares.split(",")],
        one_person=args.one_person,
    )


if __name__ == "__main__":
    main()
