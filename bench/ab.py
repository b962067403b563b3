"""An interleaved A/B through HTTP: the recall part's context call and hybrid search, served by
a git revision (A) and by the working tree (B) side by side.

    .venv/bin/python -m bench.ab --base HEAD~1
    .venv/bin/python -m bench.ab --base b5b928b --rows 100000 --kinds context --blocks 30

On the 2-core machines this project runs on, the machine's speed drifts by a quarter or more
within minutes (bench/README.md, the twenty-fifth and twenty-sixth rounds), so two `make bench`
runs one after the other do not compare: only an A/B whose two arms take turns does. Here two
gunicorns (`--workers` sync workers each) serve the same bench database: A from a temporary git
worktree of `--base` (first on PYTHONPATH, so its packages shadow the editable install), B from
this checkout as it is, uncommitted changes included. Both run on this virtualenv: a base whose
dependencies differ needs its own. Both are warmed first (every worker builds the person's
index and loads the embedder). Then one client sends blocks of `--block-size` new questions
(none repeats, so every call embeds its question) to each in turn, the same questions to both,
the order swapped every block.

It reuses the recall part's person of `--rows` messages and its empty probe session: run the
recall part at that size once first (`python -m bench --only recall`, with `--big
--recall-rows 100000` for 100,000). Not a test: nothing asserts a number.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.config import DEFAULT_DATABASE_URL, ROOT
from bench.harness import (
    Gunicorn,
    bench_system_scope,
    cpu_description,
    create_api_key,
    django_environment,
    setup_django,
)
from bench.measure import BenchError, Latency
from bench.parts.recall import (
    context_path,
    existing_probe,
    question_stream,
    search_path,
    timed_gets,
    warm_workers,
)

KINDS = ("context", "search")
WARM_QUESTIONS = 16


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _arms_compared(
    *,
    servers: dict[str, Gunicorn],
    secret: str,
    path_of: Callable[[str], str],
    blocks: int,
    block_size: int,
    seed: int,
) -> dict[str, list[float]]:
    """Each arm's latencies (seconds), the two taking turns block by block."""
    warm = [
        path_of(q) for q in question_stream(WARM_QUESTIONS, seed=seed + 1, repeat_share=0).texts
    ]
    for server in servers.values():
        warm_workers(port=server.port, secret=secret, paths=warm, workers=server.workers)
    questions = question_stream(blocks * block_size, seed=seed, repeat_share=0).texts
    latencies: dict[str, list[float]] = {name: [] for name in servers}
    names = list(servers)
    for block in range(blocks):
        paths = [path_of(q) for q in questions[block * block_size : (block + 1) * block_size]]
        for name in names if block % 2 == 0 else names[::-1]:
            measured, _ = timed_gets(port=servers[name].port, secret=secret, paths=paths)
            latencies[name].extend(measured)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision arm A serves")
    parser.add_argument("--kinds", default=",".join(KINDS), help="context, search or both")
    parser.add_argument("--rows", type=int, default=10_000, help="the recall person's size")
    parser.add_argument("--blocks", type=int, default=20, help="blocks per arm and kind")
    parser.add_argument("--block-size", type=int, default=30, help="calls per block")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers per arm")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    args = parser.parse_args()
    kinds = [kind for kind in args.kinds.split(",") if kind]
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds takes {', '.join(KINDS)}")

    base = _git("rev-parse", "--short", args.base)
    head = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    env = django_environment(args.database_url)
    setup_django(env)
    bench_system_scope(True)
    tenant, external_id, probe_id = existing_probe(args.rows)
    key, secret = create_api_key(tenant)
    bench_system_scope(False)
    paths_of: dict[str, Callable[[str], str]] = {
        "context": lambda q: context_path(probe_id, q),
        "search": lambda q: search_path(external_id, q),
    }
    worktree = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    servers: dict[str, Gunicorn] = {}
    try:
        _git("worktree", "add", "--detach", str(worktree), base)
        servers = {
            f"A {base}": Gunicorn(
                env={**env, "PYTHONPATH": str(worktree)},
                workers=args.workers,
                worker_class="sync",
                threads=1,
                root=worktree,
            ),
            f"B {head}{' + changes' if dirty else ''}": Gunicorn(
                env=env, workers=args.workers, worker_class="sync", threads=1
            ),
        }
        for server in servers.values():
            server.start()
        print(
            f"{args.rows:,} messages a person; {args.blocks} blocks of {args.block_size} "
            f"new questions per arm and kind, the arms taking turns; cpu {cpu_description()}"
        )
        for kind in kinds:
            latencies = _arms_compared(
                servers=servers,
                secret=secret,
                path_of=paths_of[kind],
                blocks=args.blocks,
                block_size=args.block_size,
                seed=int(time.time()) % 100_000,
            )
            for name, measured in latencies.items():
                print(f"{kind:<8} {name:<24} n={len(measured):<5} {Latency.of(measured).line()}")
    except (BenchError, subprocess.CalledProcessError) as error:
        raise SystemExit(f"bench.ab: {error}") from error
    finally:
        for server in servers.values():
            server.stop()
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False
        )
        shutil.rmtree(worktree, ignore_errors=True)  # when the worktree was never added
        bench_system_scope(True)
        key.delete()


if __name__ == "__main__":
    main()
