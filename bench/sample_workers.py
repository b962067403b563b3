"""Where the gunicorn workers' requests spend their wall-clock time, sampled while a load runs.

    .venv/bin/python bench/sample_workers.py --seconds 20 --py-spy /tmp/py-spy/bin/py-spy

The in-process profiles of `make bench` run cProfile on one thread, without HTTP or
concurrency: they do not see another thread's work (the query embedded ahead), and they double
the cost of Python code. This samples every worker of a running gunicorn from outside (py-spy,
`--nonblocking`: the workers are not paused) and adds up, over the samples taken inside a
request, how often each function (and line) was on the stack, waits included: the share of
the requests' wall-clock time spent there. Start a load first (for instance
`python -m bench --only recall --no-save --no-profile --recall-searches 3000`, whose search
phase then lasts ~25 s) and run this once its gunicorn is up.

py-spy is not one of the project's dependencies (a native profiler, needed only here):
`python3 -m pip install --target /tmp/py-spy py-spy` puts it in /tmp/py-spy/bin. It needs
ptrace rights on the workers (root, or the same user with ptrace allowed). Not a test: it
prints shares, nothing is judged.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

# Stacks inside a request: from the sync or threaded worker's handling of a connection in (py-spy
# names a frame "Class.method (package/module.py:line)").
_IN_REQUEST = ("SyncWorker.handle (", "ThreadWorker.handle (")


def shares(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples inside a request, inclusive samples per frame, own samples per leaf frame)."""
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = stack.split(";")
        start = next((at for at, frame in enumerate(frames) if frame.startswith(_IN_REQUEST)), None)
        if start is None:
            continue
        count = int(count_text)
        total += count
        # From the request's frame in: the worker's own frames above it are in every sample.
        names = frames[start:]
        for name in dict.fromkeys(names):
            inclusive[name] += count
        own[names[-1]] += count
    return total, inclusive, own


def gunicorn_master() -> int:
    found = subprocess.run(
        ["pgrep", "-o", "-f", "gunicorn memoryhub.wsgi"], capture_output=True, text=True
    )
    if found.returncode != 0 or not found.stdout.strip():
        sys.exit("no gunicorn serving memoryhub.wsgi is running: start the load first")
    return int(found.stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20, help="how long to sample")
    parser.add_argument("--rate", type=int, default=200, help="samples a second per worker")
    parser.add_argument("--pid", type=int, help="gunicorn's master (found with pgrep if left out)")
    parser.add_argument("--py-spy", default=shutil.which("py-spy"), help="the py-spy binary")
    parser.add_argument("--match", default="", help="only frames matching this regex")
    parser.add_argument("--top", type=int, default=40, help="lines of each list")
    parser.add_argument("--raw", type=Path, help="also keep py-spy's raw samples in this file")
    args = parser.parse_args()
    if not args.py_spy:
        sys.exit(
            "py-spy not found: python3 -m pip install --target /tmp/py-spy py-spy, "
            "then --py-spy /tmp/py-spy/bin/py-spy"
        )
    pid = args.pid or gunicorn_master()
    with tempfile.TemporaryDirectory(prefix="sample-workers-") as folder:
        out = Path(folder) / "samples.txt"
        subprocess.run(
            [
                args.py_spy,
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--nonblocking",
                "--rate",
                str(args.rate),
                "--duration",
                str(args.seconds),
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        raw = out.read_text()
    if args.raw is not None:
        args.raw.write_text(raw)
    total, inclusive, own = shares(raw)
    if not total:
        sys.exit("no sample fell inside a request: was the load running?")
    pattern = re.compile(args.match) if args.match else None
    print(f"{total} samples inside requests (gunicorn {pid} and its workers, {args.seconds} s)")
    print("share of the requests' wall-clock time with the frame on the stack (inclusive):")
    shown = 0
    for name, count in inclusive.most_common():
        if pattern is not None and not pattern.search(name):
            continue
        print(f"  {100 * count / total:5.1f}%  {name}")
        shown += 1
        if shown >= args.top:
            break
    print("innermost frames (own):")
    for name, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
