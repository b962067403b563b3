"""Per-tenant token accounting."""

import threading

import pytest
from django.db import connection
from django.utils import timezone

from memoryhub.core.rls import rls_scope
from memoryhub.llm import Completion
from memoryhub.llm.models import LlmUsage, LlmUsagePurpose
from memoryhub.llm.usage import llm_usage_record
from tests.factories import TenantFactory


def completion(prompt_tokens=100, completion_tokens=20, model="gpt-4o-mini"):
    return Completion(
        text="ok", model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )


def test_it_starts_and_then_accumulates_a_daily_counter(tenant):
    llm_usage_record(tenant_id=tenant.id, completion=completion(), purpose="summary")
    llm_usage_record(
        tenant_id=tenant.id, completion=completion(50, 5), purpose=LlmUsagePurpose.SUMMARY
    )

    row = LlmUsage.objects.for_tenant(tenant).get()
    assert row.day == timezone.now().date()
    assert (row.model, row.purpose) == ("gpt-4o-mini", "summary")
    assert (row.calls, row.prompt_tokens, row.completion_tokens) == (2, 150, 25)
    assert row.total_tokens == 175


def test_it_keeps_separate_counters_per_tenant_model_and_purpose(tenant, other_tenant):
    llm_usage_record(tenant_id=tenant.id, completion=completion(), purpose="summary")
    llm_usage_record(tenant_id=tenant.id, completion=completion(), purpose="extraction")
    llm_usage_record(tenant_id=tenant.id, completion=completion(model="llama3"), purpose="summary")
    llm_usage_record(tenant_id=other_tenant.id, completion=completion(), purpose="summary")

    assert LlmUsage.objects.for_tenant(tenant).count() == 3
    assert LlmUsage.objects.for_tenant(other_tenant).get().calls == 1


def test_an_unknown_purpose_is_refused(tenant):
    with pytest.raises(ValueError, match="chat"):
        llm_usage_record(tenant_id=tenant.id, completion=completion(), purpose="chat")


def test_deleting_a_tenant_deletes_its_usage(tenant):
    llm_usage_record(tenant_id=tenant.id, completion=completion(), purpose="summary")

    tenant.delete()

    assert not LlmUsage.objects.exists()


def test_the_admin_lists_usage_read_only(admin_client, tenant):
    llm_usage_record(tenant_id=tenant.id, completion=completion(), purpose="extraction")
    row = LlmUsage.objects.get()

    listing = admin_client.get("/admin/llm/llmusage/")
    assert listing.status_code == 200
    assert "gpt-4o-mini" in listing.content.decode()
    assert admin_client.get("/admin/llm/llmusage/add/").status_code == 403
    detail = admin_client.get(f"/admin/llm/llmusage/{row.pk}/change/")
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()


@pytest.mark.slow
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_increments_are_not_lost():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serialises writers anyway")
    tenant = TenantFactory()
    workers, calls_each = 8, 5
    barrier = threading.Barrier(workers)
    errors = []

    def record():
        try:
            barrier.wait()
            # A thread's connection starts unscoped (row-level security, core.rls): as a task.
            with rls_scope(tenant_id=tenant.id):
                for _ in range(calls_each):
                    llm_usage_record(
                        tenant_id=tenant.id, completion=completion(10, 1), purpose="summary"
                    )
        except Exception as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=record) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    row = LlmUsage.objects.get()
    assert (row.calls, row.prompt_tokens, row.completion_tokens) == (40, 400, 40)
