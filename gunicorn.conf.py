"""gunicorn in production: `gunicorn -c gunicorn.conf.py memoryhub.wsgi`.

Threaded workers (`gthread`), so that a slow client holds one thread, not a whole process. Each
worker takes a new connection only while it has a free thread (`worker_connections = threads`):
a request is never queued inside a worker behind slow uploads while another worker idles. So
fast requests wait only when all GUNICORN_WORKERS x GUNICORN_THREADS threads are busy: with the
defaults, 4 x 8 = 32 slow clients at once, where 4 sync workers were stalled by 4. Beyond that,
or against clients that trickle bytes for minutes (a thread has no read timeout), the fix is a
buffering reverse proxy in front (README, "Running it in production").

The environment (or `.env`, as for the settings) sets the sizes (GUNICORN_WORKERS,
GUNICORN_THREADS, GUNICORN_MAX_REQUESTS) and the address (PORT, as gunicorn's own default does);
the command line overrides anything here.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import environ

environ.Env.read_env(Path(__file__).resolve().parent / ".env", overwrite=False)


def _env_int(name: str, *, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "").strip()
    value = int(raw) if raw else default
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {raw!r}")
    return value


# --- where and how many ---------------------------------------------------------------------------
# gunicorn's own convention: PORT set (a platform or a container) listens on every interface;
# without it, only on the loopback, for the reverse proxy on the same host.
bind = [f"0.0.0.0:{os.environ['PORT']}" if os.environ.get("PORT") else "127.0.0.1:8000"]
workers = _env_int("GUNICORN_WORKERS", default=4, minimum=1)
worker_class = "gthread"
threads = _env_int("GUNICORN_THREADS", default=8, minimum=1)
# A worker holding this many connections stops accepting, and the kernel's backlog keeps the
# next one for a worker with a free thread (gthread would otherwise queue it in its own pool,
# behind whatever holds its threads). The cost: no idle keep-alive connections (below).
worker_connections = threads

# --- time ---------------------------------------------------------------------------------------
# gthread's main loop notifies the arbiter every second, so this only catches a wedged worker;
# a slow request in a thread is not killed by it.
timeout = 30
graceful_timeout = 30
# Not 5: an idle kept-alive connection counts against worker_connections, i.e. it would hold a
# thread's place while doing nothing; the proxy in front keeps its clients' connections alive.
# In gunicorn >= 25 this is also how long an accepted connection may wait, after 5 s in a
# thread, before sending its request: 0 closes such a connection at once.
keepalive = 0

# --- limits on what a client may send (before Django sees it) -----------------------------------
# The request line at gunicorn's maximum, so that MemoryHub's own limit, lower
# (MEMORYHUB_MAX_URL_LENGTH), answers an over-long API URL with a JSON 414. Only a request line
# longer than this gets gunicorn's plain-text 414.
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190

# --- hygiene --------------------------------------------------------------------------------------
# The heartbeat file on a RAM disk: on a disk-backed /tmp its fchmod can block a worker.
if os.path.isdir("/dev/shm"):  # noqa: S108 (gunicorn's own advice; it makes a private file)
    worker_tmp_dir = "/dev/shm"  # noqa: S108
# A worker is replaced after this many requests (0: never), bounding a slow leak; the jitter
# keeps workers from restarting together. High, because a restart drops the worker's caches
# (recall indexes, the embedding model).
max_requests = _env_int("GUNICORN_MAX_REQUESTS", default=10_000, minimum=0)
max_requests_jitter = max_requests // 10
# The application is imported once, in the master, and every worker is a fork of it: a worker
# that max_requests replaces (or one that died) is serving within milliseconds, not after the
# seconds a fresh interpreter takes to import it on a busy host (README, "The web server"; with
# the bench's 4 appending clients and GUNICORN_MAX_REQUESTS=500, the slowest append 9.3-9.5 s
# without the preload, 0.11-0.18 s with it and pre_fork's freeze). The workers also share the
# imported code's memory. The import opens no database connection and starts no thread
# (tests/test_wsgi.py); what holds one is made per process on first use. Operators should know:
# SIGHUP reloads the configuration but not the code, so a new release needs a restart.
preload_app = True
# gunicorn >= 25 opens a control socket in $HOME by default; MemoryHub is managed by signals,
# and two instances on one host would fight over that path.
control_socket_disable = True

# --- logs (stdout/stderr, for the process manager to collect) -------------------------------------
# With LOG_FORMAT=json (the default without DJANGO_DEBUG) MemoryHub writes its own access line,
# as JSON with the request id, tenant and route (memoryhub.core.observability): gunicorn's plain
# one would only repeat it.
_debug = os.environ.get("DJANGO_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
_log_format = os.environ.get("LOG_FORMAT", "").strip() or ("text" if _debug else "json")
accesslog = "-" if _log_format == "text" else None
errorlog = "-"
# Path without the query string: queries carry people's words (search `q=`). Ids in paths stay,
# as in any log of an API. Duration in milliseconds last.
access_log_format = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(B)s "%(a)s" %(M)sms'


# --- metrics: every worker's counts in one scrape -------------------------------------------------
# prometheus-client's multiprocess mode: each worker writes its counters and histograms to files in
# PROMETHEUS_MULTIPROC_DIR, and /metrics sums them. It must be set before a worker imports the
# client (gunicorn forks the workers after reading this file). When metrics are on and the
# operator named no folder, a fresh private one on the RAM disk serves this server.
_metrics_on = bool(
    os.environ.get("MEMORYHUB_METRICS_TOKEN")
    or os.environ.get("MEMORYHUB_METRICS_ALLOWED_NETWORKS")
)
if _metrics_on and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    import tempfile

    _base = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108 (a private mkdtemp)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(
        prefix="memoryhub-metrics-", dir=_base
    )
    _own_metrics_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"]
else:
    _own_metrics_dir = ""


def on_starting(server: object) -> None:
    """A new server starts from zero: the files of a previous run's processes would otherwise be
    added to this run's counts forever."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        for stale in Path(folder).glob("*.db"):
            stale.unlink(missing_ok=True)


def pre_fork(server: object, worker: object) -> None:
    """Right before each fork, the master's objects (the preloaded application) move to the
    collector's permanent generation (CPython's advice for fork without exec): a worker's
    collections no longer walk them, so neither its garbage collection nor its exit writes to
    the pages it shares with the master. Measured: a forked worker's exit 1.0 s -> 0.15 s on an
    idle bench machine; under load, before it, max_requests' replacements left the clients with
    no worker for 1.5-2.2 s."""
    gc.freeze()


def child_exit(server: object, worker: object) -> None:
    """A worker that exits (max_requests, a crash) leaves its counts to the sums; its live
    gauges (none of MemoryHub's own) are dropped."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined]


def on_exit(server: object) -> None:
    """The folder this file made (not one the operator named) goes with the server."""
    if _own_metrics_dir:
        import shutil

        shutil.rmtree(_own_metrics_dir, ignore_errors=True)
