"""Cost of the default embedder (all-MiniLM-L6-v2 int8 on onnxruntime), on one thread.

    .venv/bin/python bench/embeddings.py
    .venv/bin/python bench/embeddings.py --messages 1000 --queries 300 --threads 1

Prints: model load time and the process's RSS before and after loading; passage throughput in
messages/s for chat-length messages embedded in one call (batched, as an import or a backfill
does) and one message per call (as messages arrive); single-query latency p50/p95/p99, uncached;
RSS again after a few more runs, to see that it levels off.

Messages are real conversation turns when LoCoMo's development half is beside the repository
(`../shared/data/locomo-dev/locomo-dev.json`, read at run time, never copied), passages formatted
"<speaker>: <text>" as the retrieval recipe does; otherwise generated sentences of about the
same length. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo-dev" / "locomo-dev.json"
TARGET_MESSAGES_PER_SECOND = 60.0

WORDS = [
    "I",
    "we",
    "you",
    "they",
    "went",
    "saw",
    "bought",
    "cooked",
    "painted",
    "visited",
    "told",
    "asked",
    "really",
    "think",
    "maybe",
    "yesterday",
    "tomorrow",
    "last",
    "week",
    "next",
    "month",
    "weekend",
    "the",
    "a",
    "my",
    "our",
    "new",
    "old",
    "friend",
    "sister",
    "dog",
    "cat",
    "garden",
    "kitchen",
    "beach",
    "trip",
    "concert",
    "book",
    "movie",
    "job",
    "interview",
    "class",
    "recipe",
    "bike",
    "car",
    "race",
    "happy",
    "tired",
    "excited",
    "nervous",
    "great",
    "amazing",
    "because",
    "so",
    "and",
    "but",
    "then",
    "with",
    "after",
    "before",
]


def rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / (1024 * 1024)


def locomo_texts(limit: int) -> tuple[list[str], list[str]]:
    conversations = json.loads(LOCOMO.read_text(encoding="utf-8"))
    passages: list[str] = []
    questions: list[str] = []
    for conversation in conversations:
        turns = conversation["conversation"]
        sessions = sorted(
            (key for key in turns if key.startswith("session_") and not key.endswith("date_time")),
            key=lambda key: int(key.split("_")[1]),
        )
        for key in sessions:
            passages.extend(f"{turn['speaker']}: {turn['text']}" for turn in turns[key])
        questions.extend(str(qa["question"]) for qa in conversation["qa"])
    return passages[:limit], questions


def generated_texts(limit: int, *, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    passages = [
        f"{rng.choice(['Ana', 'Ben'])}: " + " ".join(rng.choices(WORDS, k=rng.randint(14, 45)))
        for _ in range(limit)
    ]
    questions = [" ".join(rng.choices(WORDS, k=rng.randint(5, 12))) + "?" for _ in range(limit)]
    return passages, questions


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    parser.add_argument("--repeat", type=int, default=3, help="extra runs to watch RSS")
    parser.add_argument("--synthetic", action="store_true", help="ignore LoCoMo if present")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from memoryhub.llm.embeddings import OnnxMiniLMEmbedder

    if LOCOMO.exists() and not args.synthetic:
        passages, questions = locomo_texts(args.messages)
        source = "LoCoMo dev turns"
    else:
        passages, questions = generated_texts(args.messages, seed=7)
        source = "generated sentences"
    rng = random.Random(11)
    questions = rng.sample(questions, min(args.queries, len(questions)))

    rss_before = rss_mb()
    embedder = OnnxMiniLMEmbedder(intra_op_threads=args.threads)
    started = time.perf_counter()
    embedder.warm_up()
    load_ms = (time.perf_counter() - started) * 1000
    rss_loaded = rss_mb()

    tokenizer = embedder._loaded().tokenizer
    token_counts = [len(tokenizer.encode(text).ids) for text in passages]
    print(f"onnxruntime threads: {args.threads}; pid {os.getpid()}")
    print(
        f"messages: {len(passages)} {source}, MiniLM tokens per message: mean "
        f"{statistics.mean(token_counts):.1f}, median {statistics.median(token_counts):.0f}, "
        f"max {max(token_counts)} (with [CLS]/[SEP])"
    )
    print(
        f"model load: {load_ms:.0f} ms; RSS {rss_before:.0f} MB before, {rss_loaded:.0f} MB after"
    )

    embedder.embed_passages(passages[:64])  # first-run allocations out of the measurement
    wall, cpu = time.perf_counter(), time.process_time()
    embedder.embed_passages(passages)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    batched = len(passages) / wall
    verdict = "PASS" if batched >= TARGET_MESSAGES_PER_SECOND else "FAIL"
    print(
        f"passages, one call (batches of {embedder.batch_size}): {batched:.0f} messages/s "
        f"({wall * 1000 / len(passages):.1f} ms wall, {cpu * 1000 / len(passages):.1f} ms CPU "
        f"each) [{verdict} vs target {TARGET_MESSAGES_PER_SECOND:.0f}/s]"
    )

    wall, cpu = time.perf_counter(), time.process_time()
    for text in passages:
        embedder.embed_passages([text])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"passages, one per call: {len(passages) / wall:.0f} messages/s "
        f"({wall * 1000 / len(passages):.1f} ms wall, {cpu * 1000 / len(passages):.1f} ms CPU "
        f"each)"
    )

    latencies = []
    for question in questions:
        started = time.perf_counter()
        embedder.embed_query(question)
        latencies.append((time.perf_counter() - started) * 1000)
    print(
        f"query latency over {len(latencies)} distinct queries: p50 "
        f"{percentile(latencies, 0.5):.1f} ms, p95 {percentile(latencies, 0.95):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms"
    )
    print(f"RSS after the runs: {rss_mb():.0f} MB")
    for _ in range(args.repeat):
        embedder.embed_passages(passages)
    if args.repeat:
        print(f"RSS after {args.repeat} more batched runs: {rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
