"""What /metrics reads at scrape time: levels, not events. Each is a few grouped counts over
indexed or small tables, computed when Prometheus asks (every 15-60 s), so they are right
whichever process answers and nothing is kept in memory between scrapes.

- Backlogs per tenant: sessions with a summary, extraction or embedding run requested (the
  sessions' pending-request columns), messages still without a vector in those sessions, and
  job runs running or failed (memoryhub.jobs).
- LLM calls and tokens per tenant and purpose: the totals of memoryhub.llm's usage counters,
  which the worker already keeps in the database (one row per tenant, day, model and purpose),
  so they add up across every worker on every host.
- The Celery queue depth, for a Redis broker (the filesystem broker of `make run` has none
  worth watching).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from memoryhub.accounts.models import Tenant
from memoryhub.celery import app as celery_app
from memoryhub.core.rls import rls_system_scope
from memoryhub.jobs.models import JobKind, JobRun, JobState
from memoryhub.jobs.selectors import REQUEST_FIELDS
from memoryhub.llm.models import LlmUsage
from sessions_app.models import Message, Session

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 0.5
# kombu's Redis transport keeps a queue's messages of each priority step in a list of its own:
# the queue's name, then the name + "\x06\x16" + the step.
_PRIORITY_STEPS = ("", "\x06\x163", "\x06\x166", "\x06\x169")


class DatabaseCollector:
    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "memoryhub_metrics_database_up",
            "1 when the scrape could read the backlogs from the database, else 0.",
        )
        try:
            # A scrape counts every tenant's backlog: the system scope (core.rls).
            with rls_system_scope():
                metrics = list(self._from_database())
        except DatabaseError:
            logger.warning("/metrics: the database did not answer", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics

    def _from_database(self) -> Iterator[Metric]:
        slugs = dict(Tenant.objects.values_list("pk", "slug"))
        yield from self._session_backlogs(slugs)
        yield from self._job_runs(slugs)
        yield from self._llm_usage(slugs)

    def _session_backlogs(self, slugs: dict[int, str]) -> Iterator[Metric]:
        pending = {kind: Q(**{f"{field}__isnull": False}) for kind, field in REQUEST_FIELDS.items()}
        any_pending = Q()
        for condition in pending.values():
            any_pending |= condition
        rows = (
            Session.objects.filter(any_pending)
            .values("tenant_id")
            .annotate(
                **{kind: Count("pk", filter=condition) for kind, condition in pending.items()}
            )
        )
        counts = {row["tenant_id"]: row for row in rows}
        for kind, description in (
            (JobKind.SUMMARY, "Sessions with a summary requested and not yet written."),
            (JobKind.EXTRACTION, "Sessions with a fact extraction requested and not yet run."),
            (JobKind.EMBEDDING, "Sessions with messages waiting for their embeddings."),
        ):
            gauge = GaugeMetricFamily(
                f"memoryhub_{kind}_backlog_sessions", description, labels=["tenant"]
            )
            # Every tenant, zeros included: a series that vanishes is not a series at 0.
            for tenant_id, slug in slugs.items():
                gauge.add_metric([slug], counts.get(tenant_id, {}).get(kind, 0))
            yield gauge
        messages = GaugeMetricFamily(
            "memoryhub_embedding_backlog_messages",
            "Messages without an embedding in sessions whose embedding run is requested.",
            labels=["tenant"],
        )
        waiting: dict[int, int] = {}
        if str(settings.EMBEDDINGS_BACKEND) != "off":
            # Through the sessions with a request (few): each one's messages by the
            # (session, seq) index, anti-joined with the vectors by their key.
            waiting = dict(
                Message.objects.filter(
                    session__embedding_requested_at__isnull=False, vector__isnull=True
                )
                .values("tenant_id")
                .annotate(n=Count("pk"))
                .values_list("tenant_id", "n")
            )
        for tenant_id, slug in slugs.items():
            messages.add_metric([slug], waiting.get(tenant_id, 0))
        yield messages

    def _job_runs(self, slugs: dict[int, str]) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "memoryhub_jobs",
            "Sessions' background jobs whose last run is running or failed, per kind.",
            labels=["tenant", "kind", "state"],
        )
        rows = (
            JobRun.objects.filter(state__in=[JobState.RUNNING, JobState.FAILED])
            .values_list("tenant_id", "kind", "state")
            .annotate(n=Count("pk"))
        )
        counts = {(tenant_id, kind, state): n for tenant_id, kind, state, n in rows}
        for tenant_id, slug in slugs.items():
            for kind in JobKind:
                for state in (JobState.RUNNING, JobState.FAILED):
                    gauge.add_metric(
                        [slug, kind.value, state.value],
                        counts.get((tenant_id, kind.value, state.value), 0),
                    )
        yield gauge

    def _llm_usage(self, slugs: dict[int, str]) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "memoryhub_llm_calls",
            "LLM calls that answered, per tenant and purpose (from the usage counters).",
            labels=["tenant", "purpose"],
        )
        tokens = CounterMetricFamily(
            "memoryhub_llm_tokens",
            "LLM tokens per tenant, purpose and kind (prompt, completion).",
            labels=["tenant", "purpose", "kind"],
        )
        rows = (
            LlmUsage.objects.values("tenant_id", "purpose")
            .annotate(
                calls=Sum("calls"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
            )
            .order_by()
        )
        for row in rows:
            slug = slugs.get(row["tenant_id"])
            if slug is None:
                continue
            calls.add_metric([slug, row["purpose"]], row["calls"] or 0)
            tokens.add_metric([slug, row["purpose"], "prompt"], row["prompt"] or 0)
            tokens.add_metric([slug, row["purpose"], "completion"], row["completion"] or 0)
        yield calls
        yield tokens


@functools.lru_cache(maxsize=4)
def _redis_client(url: str) -> object:
    import redis

    return redis.Redis.from_url(
        url,
        socket_connect_timeout=BROKER_TIMEOUT_SECONDS,
        socket_timeout=BROKER_TIMEOUT_SECONDS,
    )


def queue_names() -> list[str]:
    names = [str(celery_app.conf.task_default_queue or "celery")]
    for queue in celery_app.conf.task_queues or ():
        name = getattr(queue, "name", None)
        if name and name not in names:
            names.append(str(name))
    return names


class BrokerCollector:
    def collect(self) -> Iterator[Metric]:
        url = str(settings.CELERY_BROKER_URL)
        if not url.startswith(("redis://", "rediss://", "unix://")):
            return
        up = GaugeMetricFamily(
            "memoryhub_celery_broker_up", "1 when the scrape could read the queue lengths, else 0."
        )
        depth = GaugeMetricFamily(
            "memoryhub_celery_queue_length",
            "Task messages waiting in the broker's queue (not yet taken by a worker).",
            labels=["queue"],
        )
        try:
            client = _redis_client(url)
            pipe = client.pipeline(transaction=False)  # type: ignore[attr-defined]
            names = queue_names()
            for name in names:
                for step in _PRIORITY_STEPS:
                    pipe.llen(f"{name}{step}")
            lengths = pipe.execute()
        except Exception:
            logger.warning("/metrics: the broker did not answer", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for index, name in enumerate(names):
            steps = len(_PRIORITY_STEPS)
            depth.add_metric([name], sum(lengths[index * steps : (index + 1) * steps]))
        yield up
        yield depth
