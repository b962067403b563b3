"""Import: bench/import_memory.py (a script of its own, another owner's) run as a subprocess on
the bench's database, its report passed through, and its numbers read back for the summary's
table: the import's rate and whether its peak memory stays flat.

The script's output is read two ways: a JSON object on a line of its own holding
"records_per_s" (and "raw_records_per_s", its raw psycopg baseline; "growth", the big input's
peak over the small one's; the peaks "small_peak_mb"/"big_peak_mb"), when it prints one;
otherwise its text lines ("... 555 records/s in 32 s (raw psycopg 1,541 records/s, ...)" of the
big input, "flat: ... x1.25 for x10 the input")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from bench.config import ROOT, Config
from bench.harness import Setup
from bench.measure import Verdict, mark, say, section

TARGET_IMPORT_RATE = 5_000.0  # records imported per second, at least (issue 18)
TARGET_IMPORT_GROWTH = 1.5  # peak memory for 10x the input / for the input, at most ("flat")
SCRIPT = ROOT / "bench" / "import_memory.py"

_RATE = re.compile(r"^big\b.*?([\d,.]+) records/s", re.MULTILINE)
_PEAKS = re.compile(r"^(small|big)\b.*?import peak\s+([\d.]+) MB", re.MULTILINE)
_RAW_RATE = re.compile(r"^big\b.*?raw psycopg ([\d,.]+) records/s", re.MULTILINE)
_GROWTH = re.compile(r"^flat:.*?x([\d.]+) for x", re.MULTILINE)


@dataclass
class ImportResult:
    returncode: int
    records_per_s: float | None  # the big input's
    raw_records_per_s: float | None  # the script's raw psycopg baseline of the big input, if any
    growth: float | None  # the big input's peak / the small one's
    small_peak_mb: float | None
    big_peak_mb: float | None
    seconds: float


def parse(output: str) -> dict[str, float | None]:
    """The script's numbers: its JSON line when it prints one, else its text lines."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line.startswith("{") and "records_per_s" in line:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            return {
                key: (float(data[key]) if data.get(key) is not None else None)
                for key in (
                    "records_per_s",
                    "raw_records_per_s",
                    "growth",
                    "small_peak_mb",
                    "big_peak_mb",
                )
            }
    rate = _RATE.search(output)
    raw_rate = _RAW_RATE.search(output)
    growth = _GROWTH.search(output)
    peaks = {label: float(value) for label, value in _PEAKS.findall(output)}
    return {
        "records_per_s": float(rate.group(1).replace(",", "")) if rate else None,
        "raw_records_per_s": float(raw_rate.group(1).replace(",", "")) if raw_rate else None,
        "growth": float(growth.group(1)) if growth else None,
        "small_peak_mb": peaks.get("small"),
        "big_peak_mb": peaks.get("big"),
    }


def sizes_line(config: Config) -> str:
    size = f"{config.import_mb} MB" if config.import_mb else "the script's default size"
    return f"import of {size} (and a tenth), in bench/import_memory.py's own processes"


def run(setup: Setup) -> ImportResult:
    import time

    config = setup.config
    section("Import: bench/import_memory.py (its own process; peak memory and rate)")
    command = [sys.executable, str(SCRIPT), "--database-url", config.database_url]
    if config.import_mb is not None:
        command += ["--mb", str(config.import_mb)]
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        for line in process.stdout:  # passed through as it comes: the import takes minutes
            lines.append(line)
            say(line.rstrip("\n"))
        returncode = process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=15)
    numbers = parse("".join(lines))
    result = ImportResult(returncode=returncode, seconds=time.perf_counter() - started, **numbers)
    if returncode != 0:
        say(f"NOTE: bench/import_memory.py exited with {returncode}")
    elif result.records_per_s is None:
        say("NOTE: could not read the import's rate from bench/import_memory.py's output")
    return result


def record(result: ImportResult, setup: Setup) -> dict[str, Any]:
    return {"import": asdict(result)}


def verdicts(result: ImportResult, config: Config) -> list[Verdict]:
    failed = f"n/a (import_memory.py exited {result.returncode})" if result.returncode else ""
    rate, growth, raw = result.records_per_s, result.growth, result.raw_records_per_s
    return [
        Verdict(
            target=f"import >= {TARGET_IMPORT_RATE:,.0f} records/s",
            measured=f"{rate:,.0f} records/s" if rate is not None else "?",
            baseline=f"{raw:,.0f} records/s" if raw else "-",
            ratio=f"{rate / raw:.3f}" if rate and raw else "-",
            ok=None if failed or rate is None else rate >= TARGET_IMPORT_RATE,
            note=failed or "n/a (rate not found in the script's output)",
        ),
        Verdict(
            target=f"import memory flat: peak x10 input / x1 <= {TARGET_IMPORT_GROWTH}",
            measured=f"peak {result.big_peak_mb:.0f} MB" if result.big_peak_mb else "?",
            baseline=f"peak {result.small_peak_mb:.0f} MB" if result.small_peak_mb else "-",
            ratio=f"{growth:.2f}" if growth is not None else "?",
            ok=None if failed or growth is None else growth <= TARGET_IMPORT_GROWTH,
            note=failed or "n/a (growth not found in the script's output)",
        ),
    ]


def summary(result: ImportResult, config: Config, profiles: dict[str, Any]) -> None:
    if result.returncode:
        say(f"import  bench/import_memory.py exited with {result.returncode}")
        return
    rate, growth = result.records_per_s, result.growth
    say(
        "import  "
        + (f"{rate:,.0f} records/s {mark(rate >= TARGET_IMPORT_RATE)}" if rate else "rate n/a")
        + "    "
        + (f"peak growth x{growth:.2f} {mark(growth <= TARGET_IMPORT_GROWTH)}" if growth else "")
    )
