"""Where a context call (or a hybrid search) spends its time, in process: a timeline of marks.

    .venv/bin/python -m bench.timeline --rows 100000
    .venv/bin/python -m bench.timeline --rows 100000 --kind search --calls 600
    .venv/bin/python -m bench.timeline --rows 100000 --cached      # every vector cached first

Each call goes through Django's WSGI handler in this process (`bench.profiling.InProcessClient`),
with new questions (none repeats), so every call embeds its question on the query-embedding
thread, as a worker does. The steps in MARKS are wrapped for the run: each records when it
started and ended, measured from the call's start, on whichever thread ran it. The output gives,
per step, the median, mean and 90th percentile of its start, its end and its length, in the
order the steps start. So it shows what a profile cannot: what runs beside the query's
embedding, when the request reaches the vector, and how long it waits for it.

`--cached` embeds each question before its call. The call then finds its vector cached, and the
difference to a run without it is what the embedding costs the call.

It reuses the recall part's person of `--rows` messages and its empty probe session, as
`bench/ab.py` does: run the recall part at that size once first. Not a test: nothing asserts a
number. The marks name private functions: when one is renamed, this tool stops with the
name it could not find, and MARKS needs the new one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.config import DEFAULT_DATABASE_URL
from bench.harness import (
    bench_system_scope,
    cpu_description,
    create_api_key,
    django_environment,
    setup_django,
)
from bench.parts.recall import (
    context_path,
    existing_probe,
    question_stream,
    search_path,
)
from bench.profiling import InProcessClient

# (label, "module:attribute" where the call looks the function up), in no particular order. A
# function imported by name is wrapped where it is imported, not where it is defined.
MARKS: list[tuple[str, str]] = [
    ("embedding submitted", "memoryhub.llm.embeddings:_QueryEmbeddingsAhead.start"),
    ("embedding thread: its task", "memoryhub.llm.embeddings:_QueryEmbeddingsAhead._embed"),
    ("embedding thread: the model", "memoryhub.llm.embeddings:OnnxMiniLMEmbedder._run_batch"),
    ("session read", "sessions_app.selectors:session_get_for_context"),
    ("context reads", "memoryhub.context.gather:context_reads_for_session"),
    ("facts", "memoryhub.context.gather:fact_recall_for_context"),
    ("relevant history", "memoryhub.context.gather:_relevant_history"),
    ("search: the person and token", "sessions_app.recall:_person_and_token"),
    ("search: message_recall", "sessions_app.recall:message_recall"),
    ("the person's index", "sessions_app.recall:_person_index_holding"),
    ("rank", "sessions_app.recall:rank"),
    ("rank: the wait for the vector", "sessions_app.recall:_query_vector"),
    ("hit rows", "sessions_app.recall:_hit_rows"),
    ("assemble", "memoryhub.context.session_context:assemble_context"),
]
WARM_CALLS = 60


class Timeline:
    """The marks of the call under way: label -> [(start, end)], in seconds since its start."""

    def __init__(self) -> None:
        self.started = 0.0
        self.marks: dict[str, list[tuple[float, float]]] = {}
        self._lock = threading.Lock()
        self._active = False

    def begin(self) -> None:
        with self._lock:
            self.marks = {}
            self._active = True
            self.started = time.perf_counter()

    def finish(self) -> dict[str, list[tuple[float, float]]]:
        """The call's marks; what runs after (a vector embedded before the next call) is not."""
        with self._lock:
            self._active = False
            return self.marks

    def record(self, label: str, start: float, end: float) -> None:
        with self._lock:
            if self._active:
                self.marks.setdefault(label, []).append((start - self.started, end - self.started))


def _wrapped(label: str, function: Callable[..., Any], timeline: Timeline) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timeline.record(label, start, time.perf_counter())

    return wrapper


@contextmanager
def marks_wrapped(timeline: Timeline, marks: list[tuple[str, str]]) -> Iterator[None]:
    """Every function of `marks` (as MARKS names them) wrapped for the duration; SystemExit
    naming one that is not there."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for label, target in marks:
            module_name, _, dotted = target.partition(":")
            *path, name = dotted.split(".")
            try:
                owner: Any = importlib.import_module(module_name)
                for part in path:
                    owner = getattr(owner, part)
            except (ImportError, AttributeError):
                owner = None
            function = getattr(owner, name, None)
            if function is None:
                raise SystemExit(f"bench.timeline: {target} is gone; MARKS needs its new name")
            # A class's own attribute as defined (a staticmethod or classmethod stays one); None
            # for an inherited method, which the undo deletes again.
            previous = vars(owner).get(name) if isinstance(owner, type) else function
            replacement: Any = (
                type(previous)(_wrapped(label, previous.__func__, timeline))
                if isinstance(previous, staticmethod | classmethod)
                else _wrapped(label, function, timeline)
            )
            undo.append((owner, name, previous))
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, previous in reversed(undo):
            if previous is None:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)


def _embedding_finished(timeline: Timeline) -> None:
    """Until the call's embedding task has ended (a vector nobody waited for: a person without
    vectors), at most 0.1 s: its marks belong to this call, not the next one."""
    deadline = time.perf_counter() + 0.1
    while (
        "embedding submitted" in timeline.marks
        and "embedding thread: its task" not in timeline.marks
        and time.perf_counter() < deadline
    ):
        time.sleep(0.001)


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (
        f"{1000 * statistics.median(ordered):6.2f} {1000 * statistics.fmean(ordered):6.2f} "
        f"{1000 * p90:6.2f}"
    )


def report(
    calls: list[dict[str, list[tuple[float, float]]]],
    totals: list[float],
    marks: list[tuple[str, str]],
) -> None:
    """Per step: its first start, its last end and its summed length in each call."""
    rows: list[tuple[float, str]] = []
    for label, _ in marks:
        seen = [call[label] for call in calls if label in call]
        if not seen:
            continue
        starts = [spans[0][0] for spans in seen]
        ends = [spans[-1][1] for spans in seen]
        lengths = [sum(end - start for start, end in spans) for spans in seen]
        times = statistics.fmean(len(spans) for spans in seen)
        line = (
            f"{label:<32} {len(seen):>5} {times:>5.1f}  {_ms(starts)}   {_ms(ends)}   "
            f"{_ms(lengths)}"
        )
        rows.append((statistics.median(starts), line))
    heading = "p50/mean/p90 ms"
    print(
        f"{'step':<32} {'calls':>5} {'times':>5}  {'starts at (' + heading + ')':<22}   "
        f"{'ends at':<20}   {'lasts':<20}"
    )
    for _, line in sorted(rows):
        print(line)
    print(f"{'the whole call':<32} {len(totals):>5} {1:>5.1f}  {'':<20}   {_ms(totals)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="the recall person's size")
    parser.add_argument("--kind", choices=("context", "search"), default="context")
    parser.add_argument("--calls", type=int, default=400, help="calls measured, after warm-up")
    parser.add_argument("--cached", action="store_true", help="each question embedded first")
    parser.add_argument("--seed", type=int, default=None, help="the questions' seed")
    parser.add_argument(
        "--mark",
        action="append",
        default=[],
        metavar="LABEL=MODULE:ATTRIBUTE",
        help="one more step to time (repeatable), e.g. 'db wait=psycopg:Connection.wait'",
    )
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    args = parser.parse_args()
    marks = list(MARKS)
    for extra in args.mark:
        label, equals, target = extra.partition("=")
        if not equals or ":" not in target:
            parser.error(f"--mark takes LABEL=MODULE:ATTRIBUTE, not {extra!r}")
        marks.append((label, target))
    setup_django(django_environment(args.database_url))
    bench_system_scope(True)
    from memoryhub.llm.embeddings import embed_query_cached, get_embedder

    tenant, external_id, probe_id = existing_probe(args.rows)
    if get_embedder() is None:
        raise SystemExit("bench.timeline: embeddings are off here (EMBEDDINGS_BACKEND)")
    key, secret = create_api_key(tenant)
    bench_system_scope(False)
    client = InProcessClient(secret)
    path_of: Callable[[str], str] = (
        (lambda q: context_path(probe_id, q))
        if args.kind == "context"
        else (lambda q: search_path(external_id, q))
    )
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    questions = question_stream(WARM_CALLS + args.calls, seed=seed, repeat_share=0).texts
    try:
        # The person's index built, the model loaded, the connection and caches warm.
        for question in questions[:WARM_CALLS]:
            client("GET", path_of(question), None, 200)
        timeline = Timeline()
        calls: list[dict[str, list[tuple[float, float]]]] = []
        totals: list[float] = []
        with marks_wrapped(timeline, marks):
            for question in questions[WARM_CALLS:]:
                if args.cached:
                    embed_query_cached(question)
                timeline.begin()
                client("GET", path_of(question), None, 200)
                totals.append(time.perf_counter() - timeline.started)
                _embedding_finished(timeline)
                calls.append(timeline.finish())
        print(
            f"{args.kind} calls in process, {args.rows:,}-message person, {args.calls} new "
            f"questions{' (each embedded first)' if args.cached else ''}; seed {seed}; "
            f"cpu {cpu_description()}"
        )
        report(calls, totals, marks)
    finally:
        bench_system_scope(True)
        key.delete()


if __name__ == "__main__":
    main()
