"""Rate and peak memory of `manage.py import_memory` on a generated MemoryHub export (issues 7, 18).

    .venv/bin/python bench/import_memory.py            # 200 MB (and a 20 MB run to compare)
    .venv/bin/python bench/import_memory.py --mb 50

Writes a JSON Lines export of the requested size (sessions of 100 messages of ~1 KB, with a fact
each), then measures, each in its own process (wall time, and os.wait4's ru_maxrss for the peak):
- the import into a fresh tenant of the PostgreSQL bench database (by default as the bench's
  plain role, row-level security forced, as `make bench` and production run), with
  `--retention proceed` (the export is dated 2026-01-01) and embedding requests published to a
  throw-away queue: the embedding itself is a worker's job, not the import's;
- the raw baseline of the rate: a psycopg process (no Django) that reads and parses the same file
  and inserts the same rows (people, sessions, messages, facts) into another fresh tenant, as
  the same role, one transaction per session as the import, messages in one multi-row INSERT;
- the raw baseline of memory: a process that only reads the file line by line and parses each.
Raw and import run back to back (the machine is shared: only their ratio is comparable between
runs). Then it does the same for a file a tenth the size: flat memory means the two import peaks
are about the same. It prints the target line of issue 18 and a JSON line the bench runner reads
(bench/parts/importing.py). The bench tenants are deleted afterwards. Not a test: nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The bench runner's database and role (bench/config.py): a plain role, row-level security on.
DEFAULT_URL = "postgres://memoryhub_bench@127.0.0.1:5432/memoryhub_bench_rls"
TARGET_RATE = 5_000  # records/s (issue 18)
TARGET_GROWTH = 1.5  # the big input's import peak / the small one's, for 10x the input
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


RAW_INSERT = r"""
import hashlib, json, sys
import psycopg
from psycopg.types.json import Jsonb

url, path, tenant_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
MESSAGE = (
    "INSERT INTO sessions_app_message (tenant_id, session_id, seq, role, content, name,"
    " tool_call_id, tool_calls, metadata, token_count, created_at) VALUES "
)
ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
users = {}
with psycopg.connect(url) as connection, open(path, encoding="utf-8") as handle:
    connection.execute(
        "SELECT set_config('app.tenant_id', %s, false), set_config('app.end_user_id', '', false)",
        [str(tenant_id)],
    )
    # As the import's transactions (memoryhub/transfer/sink.py): no wait for the disk at commit.
    connection.execute("SET synchronous_commit TO off")
    connection.commit()
    session = None
    messages = []

    def flush_session():
        if session is None:
            return
        user = session["user_id"]
        if user not in users:
            users[user] = connection.execute(
                "INSERT INTO accounts_enduser (tenant_id, external_id, display_name, metadata,"
                " created_at, recall_version, vectors_version)"
                " VALUES (%s, %s, '', '{}', now(), 0, 0) RETURNING id",
                [tenant_id, user],
            ).fetchone()[0]
        connection.execute(
            "INSERT INTO sessions_app_session (tenant_id, id, end_user_id, agent_id, metadata,"
            " created_at, updated_at, last_active_at, message_count, token_count, last_seq,"
            " state_clock, summarized_tokens, summarized_seq, extracted_seq, pinned)"
            " VALUES (%s, %s, %s, %s, %s, %s, now(), %s, %s, %s, %s, 0, 0, 0, %s, false)",
            [tenant_id, session["id"], users[user], session["agent_id"],
             Jsonb(session["metadata"]), session["created_at"], session["last_active_at"],
             len(messages), sum(m["token_count"] for m in messages),
             messages[-1]["seq"] if messages else 0, messages[-1]["seq"] if messages else 0],
        )
        if messages:
            connection.execute(
                MESSAGE + ", ".join([ROW] * len(messages)),
                [value for m in messages for value in (
                    tenant_id, session["id"], m["seq"], m["role"], m["content"], m["name"],
                    m["tool_call_id"], None if m["tool_calls"] is None else Jsonb(m["tool_calls"]),
                    Jsonb(m["metadata"]), m["token_count"], m["created_at"])],
            )

    for line in handle:
        record = json.loads(line)
        kind = record["type"]
        if kind == "message":
            messages.append(record)
            continue
        flush_session()
        if session is not None:
            connection.commit()
        session, messages = None, []
        if kind == "session":
            session = record
        elif kind == "fact":
            with connection.transaction():
                connection.execute(
                    "INSERT INTO facts_app_fact (tenant_id, end_user_id, content, content_hash,"
                    " search_text, tags, metadata, source_message_ids, created_at, updated_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s, '{}', '[]', %s, now())",
                    [tenant_id, users[record["user_id"]], record["content"],
                     hashlib.sha256(record["content"].encode()).hexdigest(), record["content"],
                     Jsonb(record["tags"]), record["created_at"]],
                )
    flush_session()
    connection.commit()
"""


def manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def tenant_create(slug: str, *, env: dict[str, str]) -> int:
    output = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from memoryhub.accounts.models import Tenant; "
            f"print(Tenant.objects.create(slug='{slug}', name='bench').pk)",
        ],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(output.split()[-1])


def tenants_delete(slugs: list[str], *, env: dict[str, str]) -> None:
    manage(
        "shell",
        "-c",
        "from memoryhub.accounts.models import Tenant; "
        f"Tenant.objects.filter(slug__in={slugs!r}).delete()",
        env=env,
    )


def measure(*, megabytes: int, env: dict[str, str], folder: Path, url: str) -> dict[str, float]:
    path = folder / f"export-{megabytes}mb.jsonl"
    records = write_export(path, megabytes=megabytes)
    size_mb = path.stat().st_size / 1024 / 1024
    _, baseline_mb = run_measured([sys.executable, "-c", BASELINE, str(path)], env=env)
    stamp = int(time.time())
    slug, raw_slug = f"bench-import-{megabytes}-{stamp}", f"bench-import-raw-{megabytes}-{stamp}"
    raw_tenant = tenant_create(raw_slug, env=env)
    tenant_create(slug, env=env)
    try:
        raw_seconds, _ = run_measured(
            [sys.executable, "-c", RAW_INSERT, url, str(path), str(raw_tenant)], env=env
        )
        seconds, import_mb = run_measured(
            [
                sys.executable,
                "manage.py",
                "import_memory",
                str(path),
                "--tenant",
                slug,
                "--no-progress",
                "--retention",
                "proceed",
            ],
            env=env,
        )
    finally:
        tenants_delete([slug, raw_slug], env=env)
        path.unlink(missing_ok=True)
    return {
        "size_mb": size_mb,
        "records": records,
        "baseline_mb": baseline_mb,
        "import_mb": import_mb,
        "seconds": seconds,
        "raw_seconds": raw_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the big file (default 200)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryhub-bench-import-") as tmp:
        env = {
            **os.environ,
            "DATABASE_URL": args.database_url,
            # As production runs (DEBUG on would log every query, the messages' texts included).
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "bench-" + secrets.token_urlsafe(50),
            # Embedding requests go to a queue of this run's own that no worker reads: the
            # import pays for asking, a worker would pay for the embedding.
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "CELERY_DATA_DIR": str(Path(tmp) / "celery"),
            "LLM_BASE_URL": "",
        }
        env.pop("REDIS_URL", None)
        manage("migrate", "--no-input", env=env)
        small = measure(
            megabytes=max(1, args.mb // 10), env=env, folder=Path(tmp), url=args.database_url
        )
        big = measure(megabytes=args.mb, env=env, folder=Path(tmp), url=args.database_url)
    print("== import_memory: rate and peak memory ============================================")
    for label, result in (("small", small), ("big", big)):
        print(
            f"{label:5} {result['size_mb']:7.1f} MB, {result['records']:>9,} records: "
            f"import peak {result['import_mb']:4.0f} MB, raw read+parse peak "
            f"{result['baseline_mb']:4.0f} MB "
            f"(ratio {result['import_mb'] / result['baseline_mb']:.1f}), "
            f"{result['records'] / result['seconds']:,.0f} records/s in {result['seconds']:.0f} s "
            f"(raw psycopg {result['records'] / result['raw_seconds']:,.0f} records/s: "
            f"x{result['raw_seconds'] / result['seconds']:.2f})"
        )
    growth = big["import_mb"] / small["import_mb"]
    print(
        f"flat:  import peak {small['import_mb']:.0f} MB for {small['size_mb']:.0f} MB in, "
        f"{big['import_mb']:.0f} MB for {big['size_mb']:.0f} MB in: x{growth:.2f} for "
        f"x{big['size_mb'] / small['size_mb']:.0f} the input "
        f"({'PASS' if growth <= TARGET_GROWTH else 'FAIL'}: flat means <= {TARGET_GROWTH})"
    )
    rate = big["records"] / big["seconds"]
    raw_rate = big["records"] / big["raw_seconds"]
    print(
        f"import  {rate:,.0f} records/s (target >= {TARGET_RATE:,})  "
        f"{'PASS' if rate >= TARGET_RATE else 'FAIL'}  "
        f"ratio to raw psycopg {rate / raw_rate:.2f} ({raw_rate:,.0f} records/s)  "
        f"memory growth {growth:.2f}x (flat <= {TARGET_GROWTH})  "
        f"{'PASS' if growth <= TARGET_GROWTH else 'FAIL'}"
    )
    print(
        json.dumps(
            {
                "records_per_s": round(rate, 1),
                "raw_records_per_s": round(raw_rate, 1),
                "ratio_to_raw": round(rate / raw_rate, 3),
                "growth": round(growth, 3),
                "small_peak_mb": small["import_mb"],
                "big_peak_mb": big["import_mb"],
                "records": big["records"],
            }
        )
    )


if __name__ == "__main__":
    main()
