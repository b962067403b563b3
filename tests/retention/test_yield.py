"""Retention yields to busy clients of the database (memoryhub.retention.prune.retention_pacer):
after a batch of messages it looks whether another client backend is busy and, if so, pauses a
share of the batch's time; alone it runs without a pause. The clock and the sleep are injected
here (the pauses asked for are counted, never timed); "busy" is another connection inside a
transaction, or one back to idle just now."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from memoryhub.retention import prune as retention
from sessions_app.models import Message
from sessions_app.prune import BatchPacer
from tests.retention.test_batched_deletes import FakeClock, age, run_batches
from tests.retention.test_transcript_cap_and_counters import assert_counters_true, chat

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="pg_stat_activity is PostgreSQL's"
)


class TestYieldToClients:
    def test_pauses_only_after_the_batches_that_found_clients_busy(self):
        answers = iter([True, False, True, False])
        pauses: list[float] = []
        yielder = retention.YieldToClients(busy=lambda: next(answers), sleep=pauses.append)
        pacer = BatchPacer(size=700, pause_ratio=2.0, clock=FakeClock(0.07), sleep=yielder)

        assert run_batches(pacer, 2800) == [700] * 5  # the last one finds nothing

        # One look after each batch that left work (four), a pause of twice the batch's time
        # after the first and the third.
        assert yielder.checks == 4
        assert pauses == [pytest.approx(0.14), pytest.approx(0.14)]
        assert yielder.pauses == 2
        assert yielder.paused_seconds == pytest.approx(0.28)

    def test_alone_it_never_pauses(self):
        pauses: list[float] = []
        yielder = retention.YieldToClients(busy=lambda: False, sleep=pauses.append)
        pacer = BatchPacer(size=700, pause_ratio=2.0, clock=FakeClock(0.07), sleep=yielder)

        run_batches(pacer, 2800)

        assert yielder.checks == 4
        assert pauses == []
        assert yielder.pauses == 0


@pytest.mark.django_db
class TestRetentionPacer:
    def test_a_ratio_of_zero_never_looks(self):
        pacer = retention.retention_pacer(size=10, ratio=0)

        assert pacer.pause_ratio == 0
        assert not isinstance(pacer.sleep, retention.YieldToClients)

    @override_settings(RETENTION_YIELD_RATIO=0.5)
    def test_the_setting_is_the_default_ratio_on_postgresql(self):
        pacer = retention.retention_pacer(size=10)

        if connection.vendor == "postgresql":
            assert isinstance(pacer.sleep, retention.YieldToClients)
            assert pacer.pause_ratio == 0.5
        else:
            # No view of the other clients: the pacer's own (no pause).
            assert pacer.pause_ratio == 0
            assert not isinstance(pacer.sleep, retention.YieldToClients)
            assert retention.clients_busy(using="default") is False


@pytest.fixture
def other_client() -> Iterator[Any]:
    """A second connection to the test database, as a web worker's."""
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    try:
        yield raw
    finally:
        raw.close()


@postgres_only
@pytest.mark.django_db
class TestClientsBusy:
    def test_alone_nobody_is_busy(self):
        # Window 0: only a client in a statement or a transaction counts (no timing involved).
        assert retention.clients_busy(using="default", window=0) is False

    def test_a_client_inside_a_transaction_is_busy(self, other_client):
        other_client.autocommit = False
        other_client.execute("SELECT 1")  # now "idle in transaction"

        assert retention.clients_busy(using="default", window=0) is True

        other_client.rollback()
        assert retention.clients_busy(using="default", window=0) is False

    def test_a_client_back_to_idle_within_the_window_is_busy(self, other_client):
        other_client.execute("SELECT 1")  # idle since just now

        assert retention.clients_busy(using="default", window=3600) is True
        assert retention.clients_busy(using="default", window=0) is False


@postgres_only
@pytest.mark.django_db
class TestRetentionYields:
    def prune(self, tenant: Any, *, window: float) -> tuple[retention.YieldToClients, list[float]]:
        sessions = [chat(tenant, user=u, texts=[f"m{i}" for i in range(5)]) for u in "abc"]
        for session in sessions:
            age(session, seq_up_to=4)
        pacer = retention.retention_pacer(size=3, ratio=1.0)
        yielder = pacer.sleep
        assert isinstance(yielder, retention.YieldToClients)
        pauses: list[float] = []
        yielder.sleep = pauses.append
        yielder.busy = partial(retention.clients_busy, using="default", window=window)
        pacer.clock = FakeClock(0.07)  # each batch within the time band: 3 rows each

        report = retention.retention_prune_tenant(tenant=tenant, pacer=pacer)

        # Exactly the expired messages, however the batches were paced.
        assert report.counts["messages"] == 12
        assert Message.objects.count() == 3
        for session in sessions:
            assert_counters_true(session)
        return yielder, pauses

    def test_a_pause_after_each_batch_while_another_client_is_busy(self, tenant, other_client):
        other_client.autocommit = False
        other_client.execute("SELECT 1")

        yielder, pauses = self.prune(tenant, window=0)

        # 12 rows, 3 a batch: 5 batches, a look and a pause after each of the first four.
        assert yielder.checks == 4
        assert pauses == [pytest.approx(0.07)] * 4

    def test_alone_no_pause(self, tenant):
        yielder, pauses = self.prune(tenant, window=0)

        assert yielder.checks == 4
        assert pauses == []
