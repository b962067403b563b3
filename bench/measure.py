"""Timing, percentiles, CPU accounting and the report's lines, shared by every part.

Concurrent clients (run_clients) warm up, meet at a barrier, then time each request; the CPU
each process used in between comes from Linux's /proc. The report's lines go through say() and
section(), flushed at once so a slow part shows how far it got.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class BenchError(Exception):
    """Something broke (not: a target was missed). Printed without a traceback."""


# --- the report -----------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of `values` (seconds in, seconds out)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Latency:
    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        return cls(
            count=len(seconds),
            mean_ms=1000 * sum(seconds) / len(seconds) if seconds else math.nan,
            p50_ms=1000 * percentile(seconds, 50),
            p95_ms=1000 * percentile(seconds, 95),
            p99_ms=1000 * percentile(seconds, 99),
            max_ms=1000 * max(seconds) if seconds else math.nan,
        )

    def line(self) -> str:
        return (
            f"p50 {self.p50_ms:6.2f} ms   p95 {self.p95_ms:6.2f} ms   p99 {self.p99_ms:6.2f} ms"
            f"   max {self.max_ms:6.2f} ms   mean {self.mean_ms:6.2f} ms"
        )


def mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


QUICK_NA = "n/a (quick: judged in bench-big)"


def judged(ok: bool, judged: bool) -> str:
    """PASS/FAIL where this run's sizes are the target's, else QUICK_NA."""
    return mark(ok) if judged else QUICK_NA


@dataclass
class Verdict:
    """One target of the run's final table: what was measured against what bound, the raw
    baseline it compares with (if any) and the ratio, as printed; `ok` None when this run does
    not judge it (the quick run of a target set at --big sizes, or a part that did not run)."""

    target: str  # the target as the issue states it
    measured: str
    baseline: str = "-"  # the raw baseline's number, "-" when the target has none
    ratio: str = "-"
    ok: bool | None = None
    note: str = ""  # why it is not judged (default: QUICK_NA)

    @property
    def verdict(self) -> str:
        if self.ok is None:
            return self.note or QUICK_NA
        return mark(self.ok)


def verdicts_table(rows: list[Verdict]) -> list[str]:
    """The final table's lines: target | measured | raw baseline | ratio | verdict."""
    header = ("target", "measured", "raw baseline", "ratio", "verdict")
    cells = [header] + [(r.target, r.measured, r.baseline, r.ratio, r.verdict) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(4)]
    lines = []
    for index, row in enumerate(cells):
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*padded, row[4]]))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  " + "-" * 7)
    return lines


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 94 - len(title)), flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


# --- concurrent clients ---------------------------------------------------------------------------


Worker = Callable[[threading.Barrier], list[float]]

# Set when a client fails or the run is interrupted: the other clients stop at their next request.
STOP = threading.Event()


def check_stop() -> None:
    if STOP.is_set():
        raise BenchError("stopped")


@dataclass
class ClientsOutcome:
    wall: float  # seconds from the barrier to the last client's end
    latencies: list[list[float]]  # per client
    cpu_before: CpuSample | None
    cpu_after: CpuSample | None


def run_clients(workers: list[Worker], server_group: int | None = None) -> ClientsOutcome:
    """Run each worker in its own thread. A worker warms up, waits on the barrier, then does its
    timed part and returns its latencies. CPU use is sampled around the timed part."""
    barrier = threading.Barrier(len(workers) + 1)
    results: list[list[float]] = [[] for _ in workers]
    errors: list[BaseException] = []

    def target(index: int, worker: Worker) -> None:
        try:
            results[index] = worker(barrier)
        except BaseException as error:
            errors.append(error)
            STOP.set()
            barrier.abort()

    threads = [
        threading.Thread(target=target, args=(i, w), name=f"client-{i}", daemon=True)
        for i, w in enumerate(workers)
    ]
    STOP.clear()
    for thread in threads:
        thread.start()
    try:
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:
            STOP.set()
            for thread in threads:
                thread.join(timeout=30)
            if errors:
                raise errors[0] from None
            raise BenchError("clients did not finish their warm-up within 300 s") from None
        started = time.perf_counter()
        before = cpu_sample(server_group)
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        after = cpu_sample(server_group)
    except BaseException:  # Ctrl-C included: let the clients stop before cleaning up
        STOP.set()
        for thread in threads:
            thread.join(timeout=10)
        raise
    if errors:
        raise errors[0]
    return ClientsOutcome(wall, results, before, after)


@dataclass
class AppendResult:
    appends: int
    seconds: float
    rate: float
    latency: Latency
    cpu: dict[str, float] | None  # CPU ms per append by owner (see cpu_per_request)


def append_result(*outcomes: ClientsOutcome) -> AppendResult:
    """One timed run of appends, or several pooled (latencies together, wall times and CPU
    summed)."""
    latencies = [value for o in outcomes for client in o.latencies for value in client]
    wall = sum(o.wall for o in outcomes)
    return AppendResult(
        appends=len(latencies),
        seconds=wall,
        rate=len(latencies) / wall,
        latency=Latency.of(latencies),
        cpu=cpu_over(list(outcomes), len(latencies)),
    )


def say_appends(
    label: str, result: AppendResult, *, rate_width: int = 7, cpu_note: str = ""
) -> None:
    """A timed run of appends in three lines: count and rate after `label`, then the latencies
    and the CPU per append, indented to line up under it."""
    indent = " " * len(label)
    say(
        f"{label}{result.appends} appends in {result.seconds:5.2f} s = "
        f"{result.rate:{rate_width}.1f} appends/s"
    )
    say(f"{indent}{result.latency.line()}")
    say(f"{indent}{cpu_line(result.cpu)}{cpu_note}")


# --- CPU accounting (Linux /proc) -----------------------------------------------------------------


@dataclass
class CpuSample:
    machine_busy: float  # seconds of CPU, all processes
    machine_total: float  # seconds of CPU capacity elapsed (busy + idle)
    server: float  # gunicorn master and workers
    postgres: float  # PostgreSQL's processes (backends that exit in between are missed)
    client: float  # this process (the benchmark's client threads)


def cpu_sample(server_group: int | None) -> CpuSample | None:
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    values = [int(value) for value in fields]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # without guest time, already counted in user
    server = postgres = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            head, rest_text = stat.read_text().rsplit(")", 1)
            rest = rest_text.split()
            used = int(rest[11]) + int(rest[12])  # utime + stime
            if server_group is not None and int(rest[2]) == server_group:  # process group
                server += used
            elif head.split("(", 1)[1] == "postgres":
                postgres += used
    times = os.times()
    return CpuSample(
        machine_busy=(total - idle) / ticks,
        machine_total=total / ticks,
        server=server / ticks,
        postgres=postgres / ticks,
        client=times.user + times.system,
    )


def cpu_per_request(
    before: CpuSample | None, after: CpuSample | None, requests: int
) -> dict[str, float] | None:
    """CPU milliseconds per request between two samples, by owner; None without /proc."""
    if before is None or after is None:
        return None
    busy = after.machine_busy - before.machine_busy
    capacity = after.machine_total - before.machine_total
    if capacity <= 0 or busy <= 0:
        return None
    server = after.server - before.server
    postgres = after.postgres - before.postgres
    client = after.client - before.client
    rest = max(0.0, busy - server - client - postgres)  # ticks are coarse: never below zero
    per = 1000 / requests
    return {
        "total_ms": busy * per,
        "gunicorn_ms": server * per,
        "postgres_ms": postgres * per,
        "bench_ms": client * per,
        "other_ms": rest * per,
        "busy_pct": 100 * busy / capacity,
    }


def cpu_over(outcomes: list[ClientsOutcome], requests: int) -> dict[str, float] | None:
    """cpu_per_request over several timed runs: their CPU time summed, per request."""
    if any(o.cpu_before is None or o.cpu_after is None for o in outcomes):
        return None
    names = [f.name for f in dataclasses.fields(CpuSample)]
    summed = CpuSample(
        **{
            name: sum(getattr(o.cpu_after, name) - getattr(o.cpu_before, name) for o in outcomes)
            for name in names
        }
    )
    return cpu_per_request(CpuSample(**dict.fromkeys(names, 0.0)), summed, requests)


def cpu_line(cpu: dict[str, float] | None, what: str = "append") -> str:
    if cpu is None:
        return "CPU: not measured (needs Linux /proc)"
    parts = [f"gunicorn {cpu['gunicorn_ms']:.2f}"] if cpu["gunicorn_ms"] > 0 else []
    parts += [
        f"PostgreSQL {cpu['postgres_ms']:.2f}",
        f"bench process {cpu['bench_ms']:.2f}",
        f"other processes + kernel {cpu['other_ms']:.2f}",
    ]
    line = (
        f"CPU per {what} {cpu['total_ms']:.2f} ms ({', '.join(parts)}); "
        f"CPUs {cpu['busy_pct']:.0f}% busy"
    )
    other = cpu["other_ms"] / cpu["total_ms"]
    if other > 0.2:
        line += (
            f"\n     NOTE: {100 * other:.0f}% of the CPU went to other processes: numbers are noisy"
        )
    return line
