"""Retention deletes messages in batches sized by time (sessions_app.prune.BatchPacer): each
batch keeps the sessions' counters exact and takes the messages' dependants along, however many
batches it takes; the pacer grows and shrinks by the time a batch took (an injected clock here,
never the wall clock); and the rows a run deleted are counted in the metric even when the run
is cut short."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY

from memoryhub.accounts.idempotency import ERASED_STATUS
from memoryhub.accounts.models import AuditEvent, IdempotencyRecord
from memoryhub.retention import prune as retention
from sessions_app.models import Message, MessageVector, Session
from sessions_app.prune import BatchPacer
from sessions_app.services import MESSAGE_APPEND_SCOPE
from sessions_app.summaries import summary_set
from tests.retention.test_transcript_cap_and_counters import assert_counters_true, chat

DAY = dt.timedelta(days=1)


class FakeClock:
    """Each batch takes `seconds` by this clock: the pacer reads it once before and once
    after a batch."""

    def __init__(self, seconds: float) -> None:
        self.now = 0.0
        self.seconds = seconds
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:
            self.now += self.seconds
        return self.now


def age(session: Session, *, seq_up_to: int, days: int = 100) -> None:
    Message.objects.filter(session=session, seq__lte=seq_up_to).update(
        created_at=timezone.now() - days * DAY
    )


def vectors_for(session: Session) -> None:
    for message in Message.objects.filter(session=session):
        MessageVector.objects.create(
            tenant_id=session.tenant_id,
            message=message,
            end_user_id=session.end_user_id,
            model="test",
            vector=b"\0" * 16,
        )


def metric(kind: str) -> float:
    return REGISTRY.get_sample_value("memoryhub_retention_rows_deleted_total", {"kind": kind}) or 0


@pytest.mark.django_db
class TestBatchesKeepEverythingExact:
    def test_counters_stay_exact_and_dependants_go_over_many_batches(self, tenant):
        texts = [f"message number {i} " + "word " * i for i in range(12)]
        sessions = [chat(tenant, user=user, texts=texts) for user in ("a", "b", "c")]
        for session in sessions:
            summary_set(tenant=tenant, session_id=session.pk, text="All of it.")
            vectors_for(session)
            age(session, seq_up_to=9)
        first = Message.objects.get(session=sessions[0], seq=1)
        batch_first = Message.objects.get(session=sessions[1], seq=2)
        kept = Message.objects.get(session=sessions[2], seq=12)
        records = {
            "single": IdempotencyRecord.objects.create(
                tenant=tenant,
                key="k-single",
                session_id=sessions[0].pk,
                scope=MESSAGE_APPEND_SCOPE,
                request_hash="h1",
                response_status=201,
                response_body={"id": first.pk},
            ),
            "batch": IdempotencyRecord.objects.create(
                tenant=tenant,
                key="k-batch",
                session_id=sessions[1].pk,
                scope=MESSAGE_APPEND_SCOPE,
                request_hash="h2",
                response_status=201,
                response_body={"messages": [{"id": batch_first.pk}, {"id": batch_first.pk + 1}]},
            ),
            "kept": IdempotencyRecord.objects.create(
                tenant=tenant,
                key="k-kept",
                session_id=sessions[2].pk,
                scope=MESSAGE_APPEND_SCOPE,
                request_hash="h3",
                response_status=201,
                response_body={"id": kept.pk},
            ),
        }
        pacer = BatchPacer(size=4, min_size=1, sleep=lambda seconds: None)

        report = retention.retention_prune_tenant(tenant=tenant, pacer=pacer)

        assert report.counts["messages"] == 27
        assert pacer.batches >= 3  # 27 rows, 4 at first: never in one batch
        for session in sessions:
            assert_counters_true(session)
            assert list(Message.objects.filter(session=session).values_list("seq", flat=True)) == [
                10,
                11,
                12,
            ]
            session.refresh_from_db()
            # What is left is what the summary covered: its tokens, no more.
            assert session.summarized_tokens == session.token_count
        # Vectors went with their messages, and only with them.
        assert MessageVector.objects.count() == 9
        assert not MessageVector.objects.exclude(message__in=Message.objects.all()).exists()
        statuses = {
            name: IdempotencyRecord.objects.get(pk=record.pk).response_status
            for name, record in records.items()
        }
        assert statuses == {"single": ERASED_STATUS, "batch": ERASED_STATUS, "kept": 201}
        # Idempotent: nothing left to do.
        assert retention.retention_prune_tenant(tenant=tenant).total == 0

    def test_a_pinned_session_keeps_its_old_messages(self, tenant):
        pinned = chat(tenant, user="p")
        free = chat(tenant, user="f")
        Session.objects.filter(pk=pinned.pk).update(pinned=True)
        age(pinned, seq_up_to=3)
        age(free, seq_up_to=2)

        report = retention.retention_prune_tenant(tenant=tenant, batch_size=1)

        assert report.counts["messages"] == 2
        assert Message.objects.filter(session=pinned).count() == 3
        assert_counters_true(pinned)
        assert_counters_true(free)

    def test_many_messages_of_one_instant_go_over_batches_smaller_than_them(self, tenant):
        # Each batch starts at the last one's instant (>=): the rows tied with it that the
        # batch did not take are found by the next one, and nothing is left behind.
        sessions = [chat(tenant, user=u, texts=[f"m{i}" for i in range(7)]) for u in "xyz"]
        Message.objects.filter(session__in=sessions).update(created_at=timezone.now() - 100 * DAY)
        pacer = BatchPacer(size=2, min_size=2, max_size=2, sleep=lambda seconds: None)

        report = retention.retention_prune_tenant(tenant=tenant, pacer=pacer)

        assert report.counts["messages"] == 21
        assert pacer.batches >= 11
        assert Message.objects.count() == 0
        for session in sessions:
            assert_counters_true(session)

    def test_a_tenant_without_vectors_leaves_another_tenants_vectors(self, tenant, other_tenant):
        mine = chat(tenant)
        theirs = chat(other_tenant)
        vectors_for(theirs)
        age(mine, seq_up_to=3)

        retention.retention_prune_tenant(tenant=tenant, batch_size=2)

        assert Message.objects.filter(session=mine).count() == 0
        assert MessageVector.objects.filter(message__session=theirs).count() == 3

    def test_other_tenants_messages_stay(self, tenant, other_tenant):
        mine = chat(tenant)
        theirs = chat(other_tenant)
        age(mine, seq_up_to=3)
        age(theirs, seq_up_to=3)
        # Their policy keeps everything forever: only our tenant's run is asked.
        retention.retention_prune_tenant(tenant=tenant, batch_size=2)

        assert Message.objects.filter(session=mine).count() == 0
        assert Message.objects.filter(session=theirs).count() == 3
        assert_counters_true(theirs)


def before_each_batch(pacer: BatchPacer, look: Callable[[int], object]) -> None:
    """Have `pacer` call `look(size)` just before each batch it runs."""
    original_run = pacer.run

    def run(batch: Callable[[int], bool]) -> None:
        def looked(size: int) -> bool:
            look(size)
            return batch(size)

        original_run(looked)

    pacer.run = run  # type: ignore[method-assign]


@pytest.mark.django_db
def test_with_a_tiny_time_budget_it_takes_many_batches_and_deletes_everything(tenant):
    sessions = [chat(tenant, user=str(i), texts=[f"m{j}" for j in range(5)]) for i in range(4)]
    for session in sessions:
        age(session, seq_up_to=5)
    sizes: list[int] = []
    pauses: list[float] = []
    # Every batch "takes" a second against a budget of 50-100 ms: the pacer shrinks to its floor.
    pacer = BatchPacer(
        size=8, min_size=2, pause_ratio=0.25, clock=FakeClock(1.0), sleep=pauses.append
    )
    before_each_batch(pacer, sizes.append)

    report = retention.retention_prune_tenant(tenant=tenant, pacer=pacer)

    assert report.counts["messages"] == 20
    assert Message.objects.count() == 0
    # A quarter at most per step, down to the floor; the last batch finds nothing left.
    assert sizes == [8] + [2] * 7
    # A pause after each batch that left work, the share of its time asked.
    assert pauses == [pytest.approx(0.25)] * 7
    for session in sessions:
        assert_counters_true(session)


_BATCH_SETTINGS = ("enable_sort", "synchronous_commit", "jit")


def _settings_now() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + ", ".join(f"current_setting('{name}')" for name in _BATCH_SETTINGS)
        )
        row = cursor.fetchone()
    return dict(zip(_BATCH_SETTINGS, row, strict=True))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner settings")
@pytest.mark.django_db
def test_batches_run_without_sort_wait_for_the_disk_or_jit_and_the_settings_come_back(tenant):
    # jit: a batch over a million expired messages was priced above jit_above_cost, and its
    # compile took most of each batch (sessions_app.prune._batch_settings).
    session = chat(tenant, user="u", texts=[f"m{j}" for j in range(6)])
    age(session, seq_up_to=6)
    before = _settings_now()
    during: list[dict[str, str]] = []
    pacer = BatchPacer(size=2, min_size=2, clock=FakeClock(0.07))
    before_each_batch(pacer, lambda size: during.append(_settings_now()))

    report = retention.retention_prune_tenant(tenant=tenant, pacer=pacer)

    assert report.counts["messages"] == 6
    assert len(during) == 4  # three batches of two, and the one that finds nothing
    assert during == [{"enable_sort": "off", "synchronous_commit": "off", "jit": "off"}] * 4
    assert _settings_now() == before


def run_batches(pacer: BatchPacer, rows: int) -> list[int]:
    """The sizes the pacer asks for while deleting `rows` rows (a batch short of its size ends
    the run)."""
    sizes: list[int] = []
    left = [rows]

    def batch(size: int) -> bool:
        sizes.append(size)
        taken = min(size, left[0])
        left[0] -= taken
        return taken == size

    pacer.run(batch)
    assert left[0] == 0
    return sizes


class TestThePacer:
    def run(self, pacer: BatchPacer, rows: int) -> list[int]:
        return run_batches(pacer, rows)

    def test_fast_batches_grow_at_most_twofold_up_to_the_ceiling(self):
        pacer = BatchPacer(size=1000, max_size=5000, clock=FakeClock(0.001), sleep=lambda s: None)

        assert self.run(pacer, 20_000) == [1000, 2000, 4000, 5000, 5000, 5000]

    def test_slow_batches_shrink_toward_the_target(self):
        pacer = BatchPacer(size=8000, min_size=500, clock=FakeClock(0.3), sleep=lambda s: None)

        sizes = self.run(pacer, 10_000)

        assert sizes[:3] == [8000, 2000, 500]  # 0.075 / 0.3 = a quarter each time
        assert min(sizes) == 500

    def test_a_batch_within_the_band_keeps_its_size(self):
        pauses: list[float] = []
        pacer = BatchPacer(size=700, pause_ratio=0.25, clock=FakeClock(0.07), sleep=pauses.append)

        assert self.run(pacer, 2000) == [700, 700, 700]
        assert pauses == [pytest.approx(0.07 * 0.25)] * 2  # none after the last

    def test_by_default_batches_follow_each_other_without_a_pause(self):
        pauses: list[float] = []
        pacer = BatchPacer(size=700, clock=FakeClock(0.07), sleep=pauses.append)

        assert self.run(pacer, 2000) == [700, 700, 700]
        assert pauses == []


@pytest.mark.django_db
class TestTheMetric:
    def test_a_run_cut_short_counts_what_it_deleted(self, tenant, monkeypatch):
        for user in ("a", "b"):
            age(chat(tenant, user=user, texts=[f"m{i}" for i in range(6)]), seq_up_to=6)
        before = metric("messages")
        batches = []

        def progress(kind: str, rows: int) -> None:
            batches.append(rows)
            if len(batches) == 2:
                raise TimeoutError("soft time limit")  # as Celery's SoftTimeLimitExceeded

        with pytest.raises(TimeoutError):
            retention.retention_prune_tenant(
                tenant=tenant,
                progress=progress,
                # Each batch within the time band: they stay at 3 rows.
                pacer=BatchPacer(size=3, clock=FakeClock(0.07), sleep=lambda seconds: None),
            )

        assert Message.objects.count() == 6  # two batches of 3 went, then the limit
        assert metric("messages") - before == 6
        assert AuditEvent.objects.get(object_type="retention").counts == {"messages": 6}

    def test_a_dry_run_counts_nothing(self, tenant):
        age(chat(tenant), seq_up_to=3)
        before = metric("messages")

        retention.retention_prune_tenant(tenant=tenant, dry_run=True)

        assert metric("messages") == before
        assert Message.objects.count() == 3

    def test_a_full_run_counts_each_kind(self, tenant):
        session = chat(tenant)
        Session.objects.filter(pk=session.pk).update(last_active_at=timezone.now() - 100 * DAY)
        age(session, seq_up_to=2)
        before = {kind: metric(kind) for kind in ("messages", "sessions")}

        report = retention.retention_prune_tenant(tenant=tenant)

        assert report.as_dict() == {"messages": 3, "sessions": 1}
        assert metric("messages") - before["messages"] == 3
        assert metric("sessions") - before["sessions"] == 1
