"""Cleanup while appending (issue 5): retention deletes --cleanup-rows expired messages in a
process of its own (bench/prune_worker.py), once alone (against a raw DELETE of the same rows,
alone too) and once while clients append (their p99 against theirs without the cleanup)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench.config import ROOT, Config
from bench.harness import (
    SUMMARY_OUT_OF_REACH,
    ApiClient,
    Gunicorn,
    Setup,
    pg_connect,
    policy_tenant_key,
    writes_flushed,
)
from bench.measure import (
    STOP,
    AppendResult,
    BenchError,
    CpuSample,
    Latency,
    Verdict,
    cpu_per_request,
    cpu_sample,
    mark,
    say,
    say_appends,
    section,
)
from bench.parts.appends import message_content
from bench.prune_worker import process_cpu_seconds

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant

# Cleanup while appending (issue 5): appenders' p99 during the cleanup / without it, at most.
TARGET_CLEANUP_P99_RATIO = 1.3  # appenders' p99 during the cleanup / without it, at most (#18)
TARGET_CLEANUP_RATE_RATIO = 0.5  # retention's rows/s / a raw DELETE's of the same rows, at least
CLEANUP_TENANT = "memoryhub-bench-retention"
CLEANUP_RETENTION_DAYS = 90
CLEANUP_AGE_DAYS = 200  # the expired messages' age (the newest: 200 days - rows seconds)
CLEANUP_HOLDERS = 4  # live sessions holding the expired messages

CLEANUP_LOAD = """
INSERT INTO sessions_app_message
    (tenant_id, session_id, seq, role, content, name, tool_call_id, tool_calls, metadata,
     token_count, created_at)
SELECT %(tenant)s, (%(sessions)s::uuid[])[1 + (g - 1) %% %(holders)s],
       1 + (g - 1) / %(holders)s,
       CASE WHEN ((g - 1) / %(holders)s) %% 2 = 0 THEN 'user' ELSE 'assistant' END,
       'Expired message ' || g || ' of the cleanup benchmark: what did we decide about the '
           || 'deployment window on Thursday, and who is on call?',
       '', '', NULL, '{}'::jsonb, 24,
       now() - make_interval(days => %(age)s) + make_interval(secs => g)
FROM generate_series(1, %(rows)s) AS g
"""

# The raw baseline: what retention deletes for this tenant (its policy's cutoff), one statement.
CLEANUP_RAW_DELETE = (
    "DELETE FROM sessions_app_message WHERE tenant_id = %s "
    "AND created_at < now() - make_interval(days => %s)"
)


@dataclass
class PruneRun:
    """One retention_prune_tenant call in bench/prune_worker.py."""

    seconds: float
    rate: float  # rows / seconds
    counts: dict[str, int]
    batches: int
    batch: Latency  # one message batch (select ids + delete + commit), pauses excluded
    worker_cpu_seconds: float  # the worker's Python (its process's CPU)
    yield_checks: int  # looks for busy clients between batches
    yield_pauses: int  # ... that found some and paused
    paused_seconds: float
    backend_cpu_us_per_row: float | None  # its PostgreSQL backend's CPU (server on this machine)


@dataclass
class CleanupResult:
    rows: int
    raw_seconds: float
    raw_rate: float
    raw_backend_cpu_us_per_row: float | None  # the DELETE's backend (server on this machine)
    prune_alone: PruneRun  # nothing else running, as the raw DELETE
    rate_ratio: float  # retention's rate alone / the raw DELETE's
    prune_during: PruneRun  # while the appenders append
    during_rate_ratio: float  # retention's rate while they append / the raw DELETE's (alone)
    alone: AppendResult
    during: AppendResult
    p99_ratio: float  # appenders' p99 during the cleanup / without it
    load_seconds: float
    vacuum_seconds: list[float]


def cleanup_verdict(result: CleanupResult) -> str:
    ok = result.p99_ratio <= TARGET_CLEANUP_P99_RATIO
    return (
        f"appenders' p99 during/without {result.p99_ratio:.2f} "
        f"(target <= {TARGET_CLEANUP_P99_RATIO})  {mark(ok)}"
    )


def rate_verdict(result: CleanupResult) -> str:
    ok = result.rate_ratio >= TARGET_CLEANUP_RATE_RATIO
    return f"(target >= {TARGET_CLEANUP_RATE_RATIO})  {mark(ok)}"


def verdicts(result: CleanupResult, config: Config) -> list[Verdict]:
    return [
        Verdict(
            target=f"retention cleanup >= {TARGET_CLEANUP_RATE_RATIO}x a raw DELETE (rows/s)",
            measured=f"{result.prune_alone.rate:,.0f} rows/s alone ({result.rows:,} rows)",
            baseline=f"{result.raw_rate:,.0f} rows/s alone",
            ratio=f"{result.rate_ratio:.3f}",
            ok=result.rate_ratio >= TARGET_CLEANUP_RATE_RATIO,
        ),
        Verdict(
            target=f"appenders' p99 during cleanup <= {TARGET_CLEANUP_P99_RATIO}x without",
            measured=f"p99 {result.during.latency.p99_ms:.2f} ms during",
            baseline=f"p99 {result.alone.latency.p99_ms:.2f} ms without",
            ratio=f"{result.p99_ratio:.2f}",
            ok=result.p99_ratio <= TARGET_CLEANUP_P99_RATIO,
        ),
    ]


def load_expired(*, database_url: str, tenant_id: int, holders: list[str], rows: int) -> float:
    """`rows` messages CLEANUP_AGE_DAYS old spread over the live holder sessions, then
    ANALYZE (so the planner knows them)."""

    started = time.perf_counter()
    ids = [uuid.UUID(value) for value in holders]
    with pg_connect(database_url) as conn:
        conn.execute(
            CLEANUP_LOAD,
            {
                "tenant": tenant_id,
                "sessions": ids,
                "holders": len(ids),
                "rows": rows,
                "age": CLEANUP_AGE_DAYS,
            },
        )
        for index, session in enumerate(ids):
            count = rows // len(ids) + (1 if index < rows % len(ids) else 0)
            conn.execute(
                "UPDATE sessions_app_session SET last_seq = %(n)s, message_count = %(n)s, "
                "token_count = %(n)s * 24, last_active_at = now(), updated_at = now() "
                "WHERE id = %(id)s",
                {"n": count, "id": session},
            )
        conn.commit()
        conn.execute("ANALYZE sessions_app_message")
        conn.commit()
    return time.perf_counter() - started


def vacuum_messages(database_url: str) -> float:

    started = time.perf_counter()
    with pg_connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) sessions_app_message")
    return time.perf_counter() - started


def count_expired(database_url: str, tenant_id: int) -> int:

    with pg_connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM sessions_app_message WHERE tenant_id = %s "
            "AND created_at < now() - make_interval(days => %s)",
            (tenant_id, CLEANUP_RETENTION_DAYS),
        ).fetchone()
    return int(row[0]) if row else 0


class Appenders:
    """`len(sessions)` threads, each POSTing one user message at a time to its own session
    until stopped: warm-up first, then every request's start (monotonic) and latency."""

    def __init__(self, *, port: int, secret: str, sessions: list[str], warmup: int) -> None:
        self.port, self.secret, self.warmup = port, secret, warmup
        self.sessions = sessions
        self.stop_event = threading.Event()
        self.barrier = threading.Barrier(len(sessions) + 1)
        self.samples: list[list[tuple[float, float]]] = [[] for _ in sessions]
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._run, args=(i,), name=f"appender-{i}", daemon=True)
            for i in range(len(sessions))
        ]

    def _run(self, client: int) -> None:
        path = f"/api/v1/sessions/{self.sessions[client]}/messages/"
        api = ApiClient(self.port, self.secret)
        try:
            for index in range(self.warmup):
                body = {"role": "user", "content": message_content(client, index - self.warmup)}
                api.expect("POST", path, body, 201)
            self.barrier.wait()
            index = 0
            samples = self.samples[client]
            while not self.stop_event.is_set() and not STOP.is_set():
                data = json.dumps(
                    {"role": "user", "content": message_content(client, index)}
                ).encode()
                at = time.monotonic()
                started = time.perf_counter()
                status, payload = api.request("POST", path, data)
                samples.append((at, time.perf_counter() - started))
                if status != 201:
                    raise BenchError(f"append answered {status}: {payload[:300]!r}")
                index += 1
        except BaseException as error:
            self.errors.append(error)
            self.stop_event.set()
            self.barrier.abort()
        finally:
            api.close()

    def start(self) -> None:
        """Start the clients and return once all have warmed up."""
        for thread in self.threads:
            thread.start()
        try:
            self.barrier.wait(timeout=300)
        except threading.BrokenBarrierError:
            self.stop()
            raise BenchError("appenders did not finish their warm-up within 300 s") from None

    def stop(self) -> list[tuple[float, float]]:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)
        if self.errors:
            raise self.errors[0]
        return [sample for client in self.samples for sample in client]


def appends_between(
    samples: list[tuple[float, float]],
    start: float,
    end: float,
    before: CpuSample | None,
    after: CpuSample | None,
) -> AppendResult:
    """The appends that started in [start, end] (monotonic seconds)."""
    latencies = [seconds for at, seconds in samples if start <= at <= end]
    if not latencies:
        raise BenchError("no append completed during the measured window")
    return AppendResult(
        appends=len(latencies),
        seconds=end - start,
        rate=len(latencies) / (end - start),
        latency=Latency.of(latencies),
        cpu=cpu_per_request(before, after, len(latencies)),
    )


def start_pruner(env: dict[str, str], slug: str) -> subprocess.Popen[str]:
    """bench/prune_worker.py: Django set up, waiting for "go" on stdin."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "prune_worker.py"), slug],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        process.wait()
        raise BenchError(f"bench/prune_worker.py did not start: {line!r}")
    return process


def ensure_tenant(*, api_key_ids: list[str]) -> tuple[Tenant, str]:
    """The retention tenant with its policy (retention on, extraction off, no summaries) and a
    new API key's secret."""
    return policy_tenant_key(
        CLEANUP_TENANT,
        api_key_ids=api_key_ids,
        memory_enabled=True,
        extraction_enabled=False,
        summary_threshold_tokens=SUMMARY_OUT_OF_REACH,
        retention_days=CLEANUP_RETENTION_DAYS,
    )


def sizes_line(config: Config) -> str:
    return (
        f"cleanup of {config.cleanup_rows:,} expired messages, {config.clients} appenders "
        f"({config.cleanup_seconds:g} s alone)"
    )


def prune_go(pruner: subprocess.Popen[str]) -> dict[str, Any]:
    """One retention run in the worker: its JSON line."""
    assert pruner.stdin is not None
    assert pruner.stdout is not None
    pruner.stdin.write("go\n")
    pruner.stdin.flush()
    line = pruner.stdout.readline()
    try:
        report: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError:
        raise BenchError(f"bench/prune_worker.py failed (exit {pruner.poll()})") from None
    return report


def prune_run(report: dict[str, Any], *, rows: int, database_url: str, tenant_id: int) -> PruneRun:
    """The worker's report as a PruneRun, once retention is checked: it removed exactly the
    `rows` expired messages and left none."""
    counts: dict[str, int] = report["counts"]
    left = count_expired(database_url, tenant_id)
    if counts.get("messages") != rows or left:
        raise BenchError(
            f"retention removed {counts.get('messages')} messages of {rows}; {left} expired left"
        )
    seconds = report["ended"] - report["started"]
    batch_times = report["message_batches"]
    return PruneRun(
        seconds=seconds,
        rate=rows / seconds,
        counts=counts,
        batches=len(batch_times),
        batch=Latency.of(batch_times),
        worker_cpu_seconds=report["cpu_seconds"],
        yield_checks=report["yield_checks"],
        yield_pauses=report["yield_pauses"],
        paused_seconds=report["paused_seconds"],
        backend_cpu_us_per_row=(
            None
            if report["backend_cpu_seconds"] is None
            else report["backend_cpu_seconds"] * 1e6 / rows
        ),
    )


def say_prune(label: str, run: PruneRun, rows: int) -> None:
    say(
        f"{label}retention_prune_tenant: {rows:,} rows in {run.seconds:.2f} s = "
        f"{run.rate:9,.0f} rows/s, {run.batches} message batches (each: select ids, delete, "
        "commit)"
    )
    say(f"           batch {run.batch.line()}")
    cpu = (
        ""
        if run.backend_cpu_us_per_row is None
        else f"its backend's CPU {run.backend_cpu_us_per_row:.1f} us a row; "
    )
    say(
        f"           {cpu}the worker's Python {run.worker_cpu_seconds * 1000:.0f} ms "
        f"({run.worker_cpu_seconds * 1e6 / rows:.1f} us a row); paused for busy clients after "
        f"{run.yield_pauses} of {run.yield_checks} batches looked, {run.paused_seconds:.2f} s"
    )


def run(setup: Setup, server: Gunicorn) -> CleanupResult:
    """The raw DELETE alone, retention alone, the appenders alone, then retention while they
    append."""

    config = setup.config
    assert setup.cleanup_tenant is not None
    tenant, secret = setup.cleanup_tenant
    rows = config.cleanup_rows
    section(
        f"Cleanup while appending: retention deletes {rows:,} expired messages, "
        f"{config.clients} clients append"
    )
    holders = [
        setup.new_session(f"cleanup-holder-{i}", tenant=tenant, user=False)
        for i in range(CLEANUP_HOLDERS)
    ]
    leftover = count_expired(config.database_url, tenant.pk)
    if leftover:  # an interrupted run's
        with pg_connect(config.database_url) as conn:
            conn.execute(CLEANUP_RAW_DELETE, (tenant.pk, CLEANUP_RETENTION_DAYS))
    vacuums: list[float] = []
    say(
        f"tenant     {CLEANUP_TENANT}: retention {CLEANUP_RETENTION_DAYS} days; "
        f"{rows:,} messages {CLEANUP_AGE_DAYS} days old in {CLEANUP_HOLDERS} live sessions "
        "(so only the message rule applies); the appenders write to 4 other sessions"
    )
    # (a) raw: the same rows, one DELETE, alone.
    load = load_expired(
        database_url=config.database_url, tenant_id=tenant.pk, holders=holders, rows=rows
    )
    # In the system scope, as retention's own connection runs (a system task, every tenant):
    # both pay the same row-level security.
    with pg_connect(config.database_url) as conn:
        backend_before = process_cpu_seconds(conn.info.backend_pid)
        started = time.perf_counter()
        cursor = conn.execute(CLEANUP_RAW_DELETE, (tenant.pk, CLEANUP_RETENTION_DAYS))
        conn.commit()
        raw_seconds = time.perf_counter() - started
        backend_after = process_cpu_seconds(conn.info.backend_pid)
        raw_cpu = (
            None
            if backend_before is None or backend_after is None
            else backend_after - backend_before
        )
        if cursor.rowcount != rows:
            raise BenchError(f"the raw DELETE removed {cursor.rowcount} rows, not {rows}")
    vacuums.append(vacuum_messages(config.database_url))
    raw_cpu_note = (
        "" if raw_cpu is None else f"; its backend's CPU {raw_cpu * 1e6 / rows:.1f} us a row"
    )
    say(
        f"raw        DELETE ... WHERE tenant_id = %s AND created_at < cutoff: {rows:,} rows in "
        f"{raw_seconds:.2f} s = {rows / raw_seconds:9,.0f} rows/s (alone, one statement)"
        f"{raw_cpu_note}"
    )
    say(
        f"           loaded in {load:.1f} s (INSERT ... SELECT generate_series, ANALYZE); "
        f"VACUUM ANALYZE sessions_app_message after the DELETE: {vacuums[-1]:.1f} s"
    )
    pruner = start_pruner(setup.env, CLEANUP_TENANT)
    try:
        # (b) retention alone, like for like with the raw DELETE: the same rows, nothing else
        # running (no busy client: no pause).
        load += load_expired(
            database_url=config.database_url, tenant_id=tenant.pk, holders=holders, rows=rows
        )
        prune_alone = prune_run(
            prune_go(pruner), rows=rows, database_url=config.database_url, tenant_id=tenant.pk
        )
        vacuums.append(vacuum_messages(config.database_url))
        say_prune("alone      ", prune_alone, rows)
        load += load_expired(
            database_url=config.database_url, tenant_id=tenant.pk, holders=holders, rows=rows
        )
        # VACUUMed too, as rows 200 days old in production long have been. Without it the
        # baseline window stalled (the eighteenth round's big runs: p99 35-40 ms there, max
        # 195-254 ms, against 17-19 ms p99 beside retention; 10.5 ms with it), most likely the
        # appenders' inserts flushing the load's last entries from the content's GIN pending
        # list.
        vacuums.append(vacuum_messages(config.database_url))
        say(
            f"           loaded again: {rows:,} expired messages; VACUUM ANALYZE "
            f"sessions_app_message {vacuums[-1]:.1f} s"
        )
        say(f"           {writes_flushed(config.admin_url)}")
        # (c) the appenders alone, for their baseline.
        sessions = [
            setup.new_session(f"cleanup-append-{i}", tenant=tenant) for i in range(config.clients)
        ]
        appenders = Appenders(
            port=server.port, secret=secret, sessions=sessions, warmup=config.warmup
        )
        appenders.start()
        try:
            start = time.monotonic()
            before = cpu_sample(server.pid)
            time.sleep(config.cleanup_seconds)
            end = time.monotonic()
            after = cpu_sample(server.pid)
        finally:
            samples = appenders.stop()
        alone = appends_between(samples, start, end, before, after)
        say_appends("appenders  ", alone)
        # (d) retention while the appenders append: their p99 against (c).
        appenders = Appenders(
            port=server.port, secret=secret, sessions=sessions, warmup=config.warmup
        )
        try:
            appenders.start()
            before = cpu_sample(server.pid)
            report = prune_go(pruner)
            after = cpu_sample(server.pid)
        finally:
            samples = appenders.stop()
    finally:
        if pruner.stdin is not None:
            pruner.stdin.close()
        if pruner.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                pruner.wait(timeout=30)
        if pruner.poll() is None:
            pruner.kill()
            pruner.wait()
    during = appends_between(samples, report["started"], report["ended"], before, after)
    prune_during = prune_run(
        report, rows=rows, database_url=config.database_url, tenant_id=tenant.pk
    )
    vacuums.append(vacuum_messages(config.database_url))
    say_prune("during     ", prune_during, rows)
    say_appends("appenders  ", during, cpu_note=" (the cleanup's process counts as other)")
    say(
        f"check: retention removed all {rows:,} expired messages and nothing else, both times "
        f"({', '.join(f'{k} {v}' for k, v in sorted(prune_during.counts.items()))}); VACUUM "
        f"ANALYZE sessions_app_message afterwards: {vacuums[-1]:.1f} s"
    )
    raw_rate = rows / raw_seconds
    result = CleanupResult(
        rows=rows,
        raw_seconds=raw_seconds,
        raw_rate=raw_rate,
        raw_backend_cpu_us_per_row=None if raw_cpu is None else raw_cpu * 1e6 / rows,
        prune_alone=prune_alone,
        rate_ratio=prune_alone.rate / raw_rate,
        prune_during=prune_during,
        during_rate_ratio=prune_during.rate / raw_rate,
        alone=alone,
        during=during,
        p99_ratio=during.latency.p99_ms / alone.latency.p99_ms,
        load_seconds=load,
        vacuum_seconds=vacuums,
    )
    say(
        f"ratio cleanup/raw alone {result.rate_ratio:.3f} (rows/s) {rate_verdict(result)}    "
        f"{cleanup_verdict(result)}"
    )
    say(
        f"           (while they append, retention's rate is {result.during_rate_ratio:.3f} "
        "of the raw DELETE's alone: not judged)"
    )
    return result


def record(result: CleanupResult, setup: Setup) -> dict[str, Any]:
    return {"cleanup": asdict(result)}


def summary(result: CleanupResult, config: Config, profiles: dict[str, Any]) -> None:
    say(
        f"cleanup {result.prune_alone.rate:9,.0f} rows/s alone   raw DELETE "
        f"{result.raw_rate:9,.0f} rows/s   ratio {result.rate_ratio:.3f} {rate_verdict(result)}"
        f"    ({result.rows:,} rows; {result.prune_during.rate:,.0f} rows/s while appending)"
    )
    say(
        f"cleanup appenders p99 {result.alone.latency.p99_ms:6.2f} ms alone, "
        f"{result.during.latency.p99_ms:6.2f} ms during    {cleanup_verdict(result)}"
    )
