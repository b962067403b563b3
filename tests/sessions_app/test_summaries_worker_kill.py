"""A worker SIGKILLed in the middle of a summary (inside the LLM call) loses nothing and doubles
nothing: summarize_session is acks_late with reject_on_worker_lost, so its message comes back to
the queue, the next run calls the LLM again, and the session ends with exactly one summary.

Two ways to die, both with real `celery worker` processes (prefork, one pool process, as the
Procfile runs it) over real Redis, a real LLM endpoint (the fake server) and the test database:

- the pool process dies: the worker sees WorkerLostError and rejects the message with requeue,
  so the same worker runs it again at once;
- the whole worker dies (the issue's case): nobody acks or rejects; Redis keeps the message as
  unacked and hands it out again once it is older than the broker's visibility timeout (an hour
  in production, a few seconds here), which the restarted worker does when it starts.

The redelivered message carries the same task id, which is how the tests tell a redelivery from
a re-enqueue (no beat runs here, so the sweep never does).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from sessions_app.models import Session, Summary
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import client_for
from tests.sessions_app.workers import VISIBILITY_TIMEOUT_ENV, CeleryWorker, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL: a real broker for a real worker"
    ),
]

SUMMARIZE = "sessions_app.tasks.summarize_session"
THRESHOLD = 100
KEEP_RECENT = 10
LONG_MESSAGES = 20  # well over THRESHOLD together; the summary folds exactly these
SHORT_MESSAGES = KEEP_RECENT  # kept out of the summary, and together under THRESHOLD
# The first LLM answer takes longer than any test: the worker is killed while it waits.
STALL_SECONDS = 120
VISIBILITY_TIMEOUT = 2
WAIT_SECONDS = 30
SUMMARY_TEXT = "The user keeps reporting on the tomatoes ripening in the garden."


def worker_env(fake_llm: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    return {
        "MEMORYHUB_SUMMARY_THRESHOLD_TOKENS": str(THRESHOLD),
        "MEMORYHUB_SUMMARY_KEEP_RECENT": str(KEEP_RECENT),
        "LLM_BASE_URL": fake_llm.base_url,
        "LLM_MODEL": fake_llm.model,
        "LLM_API_KEY": "test-key",
        # Never a client timeout (it would retry on its own): the kill ends the first call.
        "LLM_TIMEOUT_SECONDS": str(STALL_SECONDS * 2),
        **extra,
    }


@pytest.fixture
def llm(fake_llm: FakeOpenAIServer, settings: Any) -> FakeOpenAIServer:
    settings.SUMMARY_THRESHOLD_TOKENS = THRESHOLD
    settings.SUMMARY_KEEP_RECENT = KEEP_RECENT
    fake_llm.stall(STALL_SECONDS)  # the call the worker dies in
    fake_llm.reply(SUMMARY_TEXT)  # the call after the redelivery
    return fake_llm


def session_mid_summary(llm: FakeOpenAIServer, worker: CeleryWorker) -> tuple[str, str]:
    """Append past the threshold through the API and wait until the worker's summarize task is
    inside its LLM call. Returns the session id and the task's id."""
    slug = f"kill-{uuid.uuid4().hex[:8]}"
    tenant = Tenant.objects.create(slug=slug, name=slug)
    api = client_for(api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1])
    session_id = api.post("/api/v1/sessions/", {}, format="json").json()["id"]
    messages = [
        {"role": "user", "content": f"Message {i}: the tomatoes in the garden are ripening."}
        for i in range(LONG_MESSAGES)
    ] + [{"role": "user", "content": f"ok {i}"} for i in range(SHORT_MESSAGES)]
    response = api.post(
        f"/api/v1/sessions/{session_id}/messages/", {"messages": messages}, format="json"
    )
    assert response.status_code == 201, response.content

    wait_until(
        lambda: llm.requests,
        timeout=WAIT_SECONDS,
        describe=lambda: f"the LLM was never asked:\n{worker.log_tail()}",
    )
    assert "Message 0:" in llm.requests[0].content_of("user")
    # One pool process and prefetch 1 with late acks: the worker holds just one message, the one
    # whose task is waiting on the LLM, and it is the last one it received.
    task_id = worker.task_ids(SUMMARIZE)[-1]
    assert not Summary.objects.filter(session_id=session_id).exists()
    assert Session.objects.get(pk=session_id).summary_requested_at is not None
    return session_id, task_id


def wait_for_success(worker: CeleryWorker, task_id: str) -> None:
    wait_until(
        lambda: task_id in worker.task_ids(SUMMARIZE, "succeeded"),
        timeout=WAIT_SECONDS,
        describe=lambda: f"task {task_id} did not succeed:\n{worker.log_tail()}",
    )


def assert_summarized_once(session_id: str, llm: FakeOpenAIServer) -> None:
    summaries = list(
        Summary.objects.filter(session_id=session_id).values_list("through_seq", "model", "text")
    )
    assert summaries == [(LONG_MESSAGES, llm.model, SUMMARY_TEXT)]
    assert Session.objects.get(pk=session_id).summary_requested_at is None
    # Asked twice, for the same fold: the killed call, then the redelivered task's.
    assert len(llm.requests) == 2
    assert llm.requests[1].messages == llm.requests[0].messages


def unacked_since(task_id: str) -> float | None:
    """When Redis handed out the task's still-unacknowledged message (kombu's bookkeeping:
    the `unacked` hash of messages by delivery tag, `unacked_index` scored by delivery time)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for tag, payload in client.hgetall("unacked").items():
            message = json.loads(payload)[0]
            if message.get("headers", {}).get("id") == task_id:
                score = client.zscore("unacked_index", tag)
                return float(score) if score is not None else None
        return None
    finally:
        client.close()


def test_a_pool_process_killed_mid_summary_is_requeued_and_summarizes_once(
    celery_workers: Callable[..., CeleryWorker], enqueue_for_real: None, llm: FakeOpenAIServer
) -> None:
    # The production visibility timeout (an hour): only the reject brings the message back.
    worker = celery_workers(env=worker_env(llm), pool="prefork")
    session_id, task_id = session_mid_summary(llm, worker)
    [pool_process] = worker.pool_processes()

    os.kill(pool_process, signal.SIGKILL)

    wait_for_success(worker, task_id)
    assert "WorkerLostError" in worker.log()
    assert worker.alive
    assert pool_process not in worker.pool_processes()  # a fresh pool process ran it again
    assert worker.task_ids(SUMMARIZE).count(task_id) == 2  # the same message, received again
    assert_summarized_once(session_id, llm)


def test_a_worker_killed_mid_summary_summarizes_once_after_restart(
    celery_workers: Callable[..., CeleryWorker], enqueue_for_real: None, llm: FakeOpenAIServer
) -> None:
    env = worker_env(llm, **{VISIBILITY_TIMEOUT_ENV: str(VISIBILITY_TIMEOUT)})
    first = celery_workers(env=env, pool="prefork")
    session_id, task_id = session_mid_summary(llm, first)

    first.kill()  # the whole process group: no warm shutdown, no reject, no ack

    # The message is neither lost nor requeued: Redis still holds it as handed out, unacked.
    delivered_at = unacked_since(task_id)
    assert delivered_at is not None, first.log_tail()
    assert not Summary.objects.filter(session_id=session_id).exists()
    # A starting worker gives back unacked messages older than the visibility timeout (and then
    # only looks again every ~100 s): start the new one once this one is old enough.
    wait_until(
        lambda: time.time() > delivered_at + VISIBILITY_TIMEOUT + 0.5,
        timeout=WAIT_SECONDS,
        describe=lambda: "the clock stopped",
        interval=0.1,
    )

    second = celery_workers(env=env, pool="prefork")

    wait_for_success(second, task_id)
    assert second.task_ids(SUMMARIZE).count(task_id) == 1  # redelivered: the same task id
    assert unacked_since(task_id) is None
    assert_summarized_once(session_id, llm)
