"""Append with summarization and extraction on vs off (issue 4): the append workload on a
gunicorn with an LLM configured (a fake one, never called), two tenants whose policies differ,
alternating rounds; then one append of each in-process."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench.config import Config
from bench.harness import (
    SUMMARY_OUT_OF_REACH,
    Gunicorn,
    Setup,
    broker_description,
    pg_connect,
    policy_tenant_key,
)
from bench.measure import (
    AppendResult,
    BenchError,
    ClientsOutcome,
    Verdict,
    append_result,
    mark,
    run_clients,
    say,
    say_appends,
    section,
)
from bench.parts.appends import APPEND_PHASES, api_append_worker, check_gapless, message_content
from bench.profiling import InProcessClient, Phase, print_profile, profile_requests

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant

# Summarization and extraction on vs off (issue 4): p99(on) / p99(off), at most.
TARGET_LLM_P99_RATIO = 1.2
LLM_TENANTS = {"off": "memoryhub-bench-llm-off", "on": "memoryhub-bench-llm-on"}

# Alternated, so both modes see the same machine; --appends per client split over each mode's.
LLM_ROUNDS = ("off", "on") * 3


class RequestReset:
    """What a finished summary or extraction task does to its request (pending_finish): clear
    `summary_requested_at` and `extraction_requested_at`, so the next append requests again.
    One psycopg connection per client, opened on first use (in the client's thread). Counts the
    requests it found set (`requested`, per kind): the ones the appends made."""

    SQL = (
        "UPDATE sessions_app_session AS s SET summary_requested_at = NULL, "
        "extraction_requested_at = NULL FROM (SELECT id, summary_requested_at IS NOT NULL, "
        "extraction_requested_at IS NOT NULL FROM sessions_app_session WHERE id = %s) "
        "AS old (id, summary, extraction) WHERE s.id = old.id "
        "RETURNING old.summary, old.extraction"
    )
    KINDS: tuple[str, ...] = ("summary", "extraction")

    def __init__(self, database_url: str, session_id: str, every: int) -> None:
        self.database_url = database_url
        self.session_id = uuid.UUID(session_id)
        self.every = every  # reset after every `every`-th append
        self.appends = 0
        self.conn: Any = None
        self.requested = dict.fromkeys(self.KINDS, 0)

    def __call__(self) -> None:

        self.appends += 1
        if self.appends % self.every:
            return
        if self.conn is None:
            self.conn = pg_connect(self.database_url, autocommit=True)
        cursor = self.conn.execute(self.SQL, (self.session_id,))
        row = cursor.fetchone() if cursor.description else None
        for kind, was_set in zip(self.KINDS, row or (), strict=False):
            self.requested[kind] += bool(was_set)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# What a web process publishes for its appends' requests (summary, extraction, embedding): one
# batch task per gathering window (sessions_app.pending.APPEND_GATHER_SECONDS) whose keys name
# each request ("summary:<session id>"), not a task per request.
BATCH_TASK = "sessions_app.tasks.enqueue_appended_requests"
SESSION_TASKS = {
    "summary": "sessions_app.tasks.summarize_session",
    "extraction": "sessions_app.tasks.extract_session_facts",
}


def queued_tasks() -> list[tuple[str, list[Any]]]:
    """Take every task waiting in the bench broker's queue (nothing else consumes it): each
    task's name and positional arguments."""
    from bench.harness import CELERY_QUEUE
    from memoryhub.celery import app

    taken: list[tuple[str, list[Any]]] = []
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(CELERY_QUEUE, no_ack=True)
        try:
            while True:
                try:
                    message = queue.get_nowait()
                except queue.Empty:
                    return taken
                args = message.payload[0] if isinstance(message.payload, list) else []
                taken.append((str(message.headers.get("task", "")), list(args)))
        finally:
            queue.close()


def gathered(tasks: list[tuple[str, list[Any]]], kind: str) -> list[str]:
    """The session ids of the `kind` requests the batch tasks among `tasks` carry."""
    prefix = f"{kind}:"
    return [
        str(key)[len(prefix) :]
        for name, args in tasks
        if name == BATCH_TASK and args
        for key in args[0]
        if str(key).startswith(prefix)
    ]


@dataclass
class LlmMode(AppendResult):
    """One mode's rounds pooled."""

    enqueued: int  # tasks the broker's queue grew by (batch tasks, and any other)
    requested: int  # summary and extraction requests the appends set (seen by RequestReset)
    carried: int  # summary and extraction requests in the batch tasks (one a session a window)
    batches: int  # batch tasks carrying at least one of them
    direct: int  # summary or extraction tasks the web processes published themselves


@dataclass
class LlmResult:
    off: LlmMode
    on: LlmMode
    p99_ratio: float
    p50_ratio: float
    rate_ratio: float
    broker: str
    llm_calls: int  # requests the fake LLM server got (none expected)


def llm_verdict(result: LlmResult) -> str:
    ok = result.p99_ratio <= TARGET_LLM_P99_RATIO
    return (
        f"ratio on/off: p99 {result.p99_ratio:.2f} (target <= {TARGET_LLM_P99_RATIO})  "
        f"{mark(ok)}    p50 {result.p50_ratio:.2f}    rate {result.rate_ratio:.2f}"
    )


LLM_APPEND_PHASES: list[Phase] = [
    *APPEND_PHASES,
    (
        3,
        "summary request (pending_claim's UPDATE)",
        "sessions_app/summaries.py",
        "summary_request",
        "max",
    ),
    (
        3,
        "extraction request (pending_claim's UPDATE)",
        "sessions_app/extraction.py",
        "extraction_request",
        "max",
    ),
    (
        3,
        "request gathered for the worker (Coalescer.add)",
        "memoryhub/core/coalesce.py",
        "add",
        "max",
    ),
    (3, "Celery enqueue after commit (Task.delay)", "celery/app/task.py", "delay", "max"),
    (4, "of which the broker's publish", "kombu/messaging.py", "_publish", "max"),
]


def ensure_tenants(*, api_key_ids: list[str]) -> dict[str, tuple[Tenant, str]]:
    """The tenants "off" and "on" with their policies, each with a new API key's secret."""
    tenants: dict[str, tuple[Tenant, str]] = {}
    for mode, slug in LLM_TENANTS.items():
        on = mode == "on"
        tenants[mode] = policy_tenant_key(
            slug,
            api_key_ids=api_key_ids,
            memory_enabled=True,
            extraction_enabled=on,
            summary_threshold_tokens=1 if on else SUMMARY_OUT_OF_REACH,
            summary_keep_recent=0 if on else 10,
        )
    return tenants


def sizes_line(config: Config) -> str:
    return (
        f"summarize/extract off vs on: {config.clients} clients x {config.appends} appends "
        f"each (+{config.warmup} warm-up), in {len(LLM_ROUNDS)} alternating rounds"
    )


def run(setup: Setup) -> LlmResult:
    """The append workload twice on a gunicorn with an LLM configured: tenant policy off
    (extraction off, summary threshold out of reach) and on (extraction on, threshold 1 token),
    alternated over LLM_ROUNDS; every append's request columns are reset after it, as a
    finished task would, so that with the policy on every append requests a summary and every
    assistant reply an extraction."""
    from sessions_app.pending import APPEND_GATHER_SECONDS
    from tests.fakes.openai_server import FakeOpenAIServer  # stdlib only

    config = setup.config
    assert setup.llm_tenants is not None
    section(
        f"Append with summarization and extraction on vs off: {config.clients} clients, "
        "user and assistant turns"
    )
    fake = FakeOpenAIServer().start()
    server = Gunicorn(
        env={**setup.env, "LLM_BASE_URL": fake.base_url, "LLM_TIMEOUT_SECONDS": "5"},
        workers=config.workers,
        worker_class=config.worker_class,
        threads=config.threads,
    )
    per_mode: dict[str, list[ClientsOutcome]] = {"off": [], "on": []}
    counts = {
        mode: dict.fromkeys(("enqueued", "requested", "carried", "batches", "direct"), 0)
        for mode in ("off", "on")
    }
    per_round = max(1, config.appends // LLM_ROUNDS.count("on"))
    expected = 0
    missing = 0  # rounds whose sessions' requests were not all in the batch tasks
    try:
        server.start()
        say(
            f"gunicorn   up on 127.0.0.1:{server.port}, LLM_BASE_URL={fake.base_url} "
            f"(a fake OpenAI server), broker {broker_description(setup.env)}, no worker"
        )
        # One session per client and mode for all rounds; the warm-up is in each mode's first.
        sessions = {
            mode: [
                setup.new_session(f"llm-{mode}-{i}", tenant=setup.llm_tenants[mode][0])
                for i in range(config.clients)
            ]
            for mode in ("off", "on")
        }
        appended = dict.fromkeys(sessions, 0)  # per session
        for round_number, mode in enumerate(LLM_ROUNDS, 1):
            secret = setup.llm_tenants[mode][1]
            warmup = config.warmup if appended[mode] == 0 else 0
            resets = [
                RequestReset(config.database_url, value, config.llm_reset_every)
                for value in sessions[mode]
            ]
            queued_tasks()  # the previous round's tasks: this round counts its own
            try:
                outcome = run_clients(
                    [
                        api_append_worker(
                            port=server.port,
                            secret=secret,
                            session_id=session_id,
                            client=i,
                            warmup=warmup,
                            count=per_round,
                            roles=("user", "assistant"),
                            after=reset,
                        )
                        for i, (session_id, reset) in enumerate(
                            zip(sessions[mode], resets, strict=True)
                        )
                    ],
                    server_group=server.pid,
                )
            finally:
                for reset in resets:
                    reset.close()
            # A web process publishes what its appends requested a moment after the last one.
            time.sleep(APPEND_GATHER_SECONDS + 0.5)
            tasks = queued_tasks()
            kinds = {kind: gathered(tasks, kind) for kind in SESSION_TASKS}
            requested = sum(sum(reset.requested.values()) for reset in resets)
            carried = sum(len(ids) for ids in kinds.values())
            batches = sum(
                1
                for name, args in tasks
                if name == BATCH_TASK
                and args
                and any(str(key).split(":")[0] in SESSION_TASKS for key in args[0])
            )
            direct = sum(1 for name, _ in tasks if name in SESSION_TASKS.values())
            for key, value in (
                ("enqueued", len(tasks)),
                ("requested", requested),
                ("carried", carried),
                ("batches", batches),
                ("direct", direct),
            ):
                counts[mode][key] += value
            if mode == "on" and not all(set(sessions[mode]) <= set(ids) for ids in kinds.values()):
                missing += 1
                say(f"WARNING: round {round_number}: a session's request was not in a batch task")
            per_mode[mode].append(outcome)
            appended[mode] += warmup + per_round
            if mode == "on" and config.llm_reset_every == 1:
                # a summary per append, an extraction per assistant reply
                indexes = [*range(-warmup, 0), *range(per_round)]
                expected += config.clients * sum(1 + (index % 2 == 1) for index in indexes)
            done = append_result(outcome)
            say(
                f"round {round_number} {mode:>3}  {done.appends} appends in "
                f"{done.seconds:5.2f} s = {done.rate:7.1f}/s   p50 "
                f"{done.latency.p50_ms:6.2f} ms   p99 {done.latency.p99_ms:6.2f} ms   "
                f"requests {requested}, queue +{len(tasks)} ({carried} in {batches} batch tasks)"
            )
        for mode, ids in sessions.items():
            check_gapless(config.database_url, ids, appended[mode])
    except BenchError:
        say(f"\ngunicorn log (tail):\n{server.tail()}")
        raise
    finally:
        server.stop()
        fake.stop()
    modes = {
        mode: LlmMode(**vars(append_result(*outcomes)), **counts[mode])
        for mode, outcomes in per_mode.items()
    }
    off, on = modes["off"], modes["on"]
    for mode, data in (("off", off), ("on", on)):
        say_appends(f"{mode:>3}  ", data)
    what = (
        f"expected {expected}: a summary per append, an extraction per reply, warm-up included"
        if config.llm_reset_every == 1
        else f"requests reset every {config.llm_reset_every} appends"
    )
    say(
        f"check: the appends set {off.requested} summary/extraction requests with the policy off "
        f"and {on.requested} with it on ({on.requested / (appended['on'] * config.clients):.2f} "
        f"per append; {what}); the web processes published {off.direct + on.direct} summary or "
        f"extraction tasks themselves and {off.batches + on.batches} batch tasks carrying "
        f"{off.carried + on.carried} of the requests (a session's requests of one "
        f"{APPEND_GATHER_SECONDS} s window go as one key), every round's sessions in them unless "
        f"a WARNING says otherwise; the queue got {off.enqueued} tasks off, {on.enqueued} on "
        "(the embedding's batches included); "
        f"the fake LLM got {len(fake.requests)} requests; every session holds seqs 1..N without "
        "gaps"
    )
    if (
        off.requested
        or off.carried
        or off.direct
        or on.direct
        or missing
        or (config.llm_reset_every == 1 and on.requested != expected)
        or not 0 < on.carried <= on.requested
    ):
        say("WARNING: the requests and tasks are not what the policies should give")
    result = LlmResult(
        off=off,
        on=on,
        p99_ratio=on.latency.p99_ms / off.latency.p99_ms,
        p50_ratio=on.latency.p50_ms / off.latency.p50_ms,
        rate_ratio=on.rate / off.rate,
        broker=broker_description(setup.env),
        llm_calls=len(fake.requests),
    )
    say(llm_verdict(result))
    return result


def record(result: LlmResult, setup: Setup) -> dict[str, Any]:
    return {"llm": asdict(result)}


def profile(setup: Setup, client: InProcessClient) -> dict[str, Any]:
    """One append (user and assistant turns) with the policy off and on, in-process, an LLM
    configured (never called), the requests reset after each append as in the llm part: what a
    summary and an extraction request add to the request, statement by statement. (Each mode
    has its tenant's key, so a client of its own, not `client`.)"""
    import logging

    from django.test import override_settings

    # kombu's filesystem transport warns once that its URL names no host.
    logging.getLogger("kombu.connection").setLevel(logging.ERROR)
    assert setup.llm_tenants is not None
    config = setup.config
    results: dict[str, Any] = {}
    walls: dict[str, float] = {}
    with override_settings(LLM_BASE_URL="http://127.0.0.1:9/v1"):  # never called
        for mode in ("off", "on"):
            tenant, secret = setup.llm_tenants[mode]
            mode_client = InProcessClient(secret)
            session_id = setup.new_session(f"llm-profile-{mode}", tenant=tenant)
            url = f"/api/v1/sessions/{session_id}/messages/"
            reset = RequestReset(config.database_url, session_id, config.llm_reset_every)

            def append(
                index: int,
                url: str = url,
                reset: RequestReset = reset,
                client: InProcessClient = mode_client,
            ) -> None:
                role = "assistant" if index % 2 else "user"
                body = {"role": role, "content": message_content(0, index)}
                client("POST", url, json.dumps(body).encode(), 201)
                reset()

            section(
                f"Profile of one append, summarization and extraction {mode} (in-process, "
                "user and assistant turns, requests reset after each)"
            )
            try:
                measured = profile_requests(
                    what="append",
                    request=append,
                    count=config.profile_requests,
                    phases=LLM_APPEND_PHASES,
                    # --only llm --profile-out F: F-off and F-on (read with python -m pstats)
                    dump=(
                        config.profile_out.with_name(f"{config.profile_out.name}-{mode}")
                        if config.profile_out is not None and config.only == ("llm",)
                        else None
                    ),
                )
            finally:
                reset.close()
            print_profile(measured, top=False)
            results[f"append_llm_{mode}"] = asdict(measured)
            walls[mode] = measured.wall_ms
    say(
        f"on - off: {walls['on'] - walls['off']:+.2f} ms per append in-process "
        f"({walls['on'] / walls['off']:.2f}x; the wall times include the bench's reset UPDATE "
        "after each append, in both)"
    )
    return results


def summary(result: LlmResult, config: Config, profiles: dict[str, Any]) -> None:
    say(
        f"llm     off p99 {result.off.latency.p99_ms:6.2f} ms   "
        f"on p99 {result.on.latency.p99_ms:6.2f} ms    "
        f"rate off {result.off.rate:6.1f}/s  on {result.on.rate:6.1f}/s"
    )
    say(f"llm     {llm_verdict(result)}")


def verdicts(result: LlmResult, config: Config) -> list[Verdict]:
    return [
        Verdict(
            target=f"append p99 summarization+extraction on/off <= {TARGET_LLM_P99_RATIO}",
            measured=f"p99 {result.on.latency.p99_ms:.2f} ms on",
            baseline=f"p99 {result.off.latency.p99_ms:.2f} ms off",
            ratio=f"{result.p99_ratio:.2f}",
            ok=result.p99_ratio <= TARGET_LLM_P99_RATIO,
        )
    ]
