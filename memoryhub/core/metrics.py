"""The Prometheus series MemoryHub records as things happen (prometheus-client).

Only counters and histograms live here: they add up across processes, which is what
prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR, set before this module is
first imported: gunicorn.conf.py does it for the web server) can aggregate. Anything that is a
level rather than a count (backlogs, queue depth, LLM usage per tenant) is read from the
database or the broker when /metrics is scraped (memoryhub.metrics), so it is right whichever
process answers, and costs nothing between scrapes.

Labels are bounded: a route is the URL pattern a request resolved to, never its path, and a
task is a registered task's name.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Labels for requests that never reached a view (404, a refused host or URL).
UNMATCHED_ROUTE = "<unmatched>"

HTTP_REQUEST_DURATION = Histogram(
    "memoryhub_http_request_duration_seconds",
    "Time from the first middleware to the response, per route pattern, method and status.",
    ["route", "method", "status"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
HTTP_REQUEST_DB_QUERIES = Histogram(
    "memoryhub_http_request_db_queries",
    "Database queries one request ran, per route pattern.",
    ["route"],
    buckets=(0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144),
)
HTTP_REQUEST_DB_DURATION = Histogram(
    "memoryhub_http_request_db_duration_seconds",
    "Time one request spent in database queries, per route pattern.",
    ["route"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)

CELERY_TASKS = Counter(
    "memoryhub_celery_tasks",
    "Celery task runs that ended, per task and outcome (succeeded, failed, retried).",
    ["task", "outcome"],
)
CELERY_TASK_DURATION = Histogram(
    "memoryhub_celery_task_duration_seconds",
    "Run time of Celery tasks in the worker, per task.",
    ["task"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)

LLM_ERRORS = Counter(
    "memoryhub_llm_errors",
    "LLM (and remote embedder) calls that failed, per tenant, purpose and kind of error.",
    ["tenant", "purpose", "error"],
)

EMBEDDING_ERRORS = Counter(
    "memoryhub_embedding_errors",
    "Embedder calls that failed in the embedding tasks, per what they embedded (messages, "
    "fact, memory, note) and kind of error (transient: retried; permanent: left to the "
    "sweep).",
    ["target", "error"],
)


def embedding_error_count(*, target: str, permanent: bool) -> None:
    EMBEDDING_ERRORS.labels(target=target, error="permanent" if permanent else "transient").inc()


RETENTION_ROWS_DELETED = Counter(
    "memoryhub_retention_rows_deleted",
    "Rows the retention cleanup removed, per kind (messages, sessions, ...).",
    ["kind"],
)
