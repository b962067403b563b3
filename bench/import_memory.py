"""Peak memory of `manage.py import_memory` on a generated MemoryHub export (issue 7).

    .venv/bin/python bench/import_memory.py            # 200 MB (and a 20 MB run to compare)
    .venv/bin/python bench/import_memory.py --mb 50

Writes a JSON Lines export of the requested size (sessions of 100 messages of ~1 KB, with
memories and facts), then measures, each in its own process and with os.wait4's ru_maxrss:
- the raw baseline: a Python process that only reads the file line by line and parses each line;
- the import into a fresh tenant of the PostgreSQL bench database (`memoryhub_bench`).
It prints both peaks, their ratio, and the import's rate; then it runs a file a tenth the size and
prints the import peaks side by side: flat memory means the two peaks are about the same. The
bench tenants are deleted afterwards. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/memoryhub_bench"
WORDS = [
    "garden",
    "tomato",
    "water",
    "morning",
    "litre",
    "basil",
    "soil",
    "sunlight",
    "balcony",
    "seed",
    "compost",
    "harvest",
    "pepper",
    "window",
    "shade",
    "rain",
    "pot",
    "leaf",
    "root",
    "summer",
]


def write_export(path: Path, *, megabytes: int) -> int:
    """An export of about `megabytes` MB; returns the number of records."""
    target = megabytes * 1024 * 1024
    records = 0
    with path.open("w", encoding="utf-8") as handle:

        def put(record: dict[str, object]) -> None:
            nonlocal records
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            records += 1

        put(
            {
                "type": "header",
                "format": "memoryhub.export",
                "schema_version": 1,
                "tenant": "bench",
                "user_id": None,
                "exported_at": "2026-01-01T00:00:00+00:00",
            }
        )
        number = 0
        while handle.tell() < target:
            number += 1
            user = f"bench:{number % 5000}"
            session_id = str(uuid.UUID(int=number))
            put(
                {
                    "type": "session",
                    "id": session_id,
                    "user_id": user,
                    "agent_id": "chat",
                    "external_key": None,
                    "metadata": {},
                    "created_at": "2026-01-01T00:00:00+00:00",
                    "last_active_at": "2026-01-01T01:00:00+00:00",
                }
            )
            for seq in range(1, 101):
                text = " ".join(WORDS[(number + seq + i) % len(WORDS)] for i in range(150))
                put(
                    {
                        "type": "message",
                        "session_id": session_id,
                        "seq": seq,
                        "role": "user" if seq % 2 else "assistant",
                        "content": text,
                        "name": "",
                        "tool_call_id": "",
                        "tool_calls": None,
                        "metadata": {},
                        "token_count": 160,
                        "created_at": "2026-01-01T00:30:00+00:00",
                    }
                )
            put(
                {
                    "type": "fact",
                    "id": number,
                    "user_id": user,
                    "content": f"Grows {WORDS[number % len(WORDS)]} number {number}",
                    "tags": ["garden"],
                    "metadata": {},
                    "source_session_id": session_id,
                    "source_message_seqs": [1, 2],
                    "created_at": "2026-01-01T00:30:00+00:00",
                    "valid_until": None,
                    "superseded_by": None,
                }
            )
    return records


def run_measured(command: list[str], *, env: dict[str, str]) -> tuple[float, int]:
    """Run `command`; return its wall time and peak resident memory in MB."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return elapsed, usage.ru_maxrss // 1024  # Linux reports kilobytes


BASELINE = """
import json, sys
count = 0
with open(sys.argv[1], encoding="utf-8") as handle:
    for line in handle:
        json.loads(line)
        count += 1
print(count)
"""


def manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def measure(*, megabytes: int, env: dict[str, str], folder: Path) -> dict[str, float]:
    path = folder / f"export-{megabytes}mb.jsonl"
    records = write_export(path, megabytes=megabytes)
    size_mb = path.stat().st_size / 1024 / 1024
    _, baseline_mb = run_measured([sys.executable, "-c", BASELINE, str(path)], env=env)
    slug = f"bench-import-{megabytes}-{int(time.time())}"
    manage(
        "shell",
        "-c",
        "from memoryhub.accounts.models import Tenant; "
        f"Tenant.objects.create(slug='{slug}', name='bench')",
        env=env,
    )
    try:
        seconds, import_mb = run_measured(
            [
                sys.executable,
                "manage.py",
                "import_memory",
                str(path),
                "--tenant",
                slug,
                "--no-progress",
            ],
            env=env,
        )
    finally:
        manage(
            "shell",
            "-c",
            "from memoryhub.accounts.models import Tenant; "
            f"Tenant.objects.filter(slug='{slug}').delete()",
            env=env,
        )
        path.unlink(missing_ok=True)
    return {
        "size_mb": size_mb,
        "records": records,
        "baseline_mb": baseline_mb,
        "import_mb": import_mb,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the big file (default 200)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args()
    env = {
        **os.environ,
        "DATABASE_URL": args.database_url,
        "DJANGO_DEBUG": "true",
        "CELERY_TASK_ALWAYS_EAGER": "true",
        "LLM_BASE_URL": "",
    }
    env.pop("REDIS_URL", None)
    manage("migrate", "--no-input", env=env)
    with tempfile.TemporaryDirectory(prefix="memoryhub-bench-import-") as tmp:
        small = measure(megabytes=max(1, args.mb // 10), env=env, folder=Path(tmp))
        big = measure(megabytes=args.mb, env=env, folder=Path(tmp))
    print("== import_memory: peak memory =====================================================")
    for label, result in (("small", small), ("big", big)):
        print(
            f"{label:5} {result['size_mb']:7.1f} MB, {result['records']:>9,} records: "
            f"import peak {result['import_mb']:4.0f} MB, raw read+parse peak "
            f"{result['baseline_mb']:4.0f} MB "
            f"(ratio {result['import_mb'] / result['baseline_mb']:.1f}), "
            f"{result['records'] / result['seconds']:,.0f} records/s in {result['seconds']:.0f} s"
        )
    growth = big["import_mb"] / small["import_mb"]
    print(
        f"flat:  import peak {small['import_mb']:.0f} MB for {small['size_mb']:.0f} MB in, "
        f"{big['import_mb']:.0f} MB for {big['size_mb']:.0f} MB in: x{growth:.2f} for "
        f"x{big['size_mb'] / small['size_mb']:.0f} the input "
        f"({'PASS' if growth <= 1.5 else 'FAIL'}: flat means <= 1.5)"
    )


if __name__ == "__main__":
    main()
