"""Recording what each LLM call cost, per tenant."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from memoryhub.llm.models import LLM_MODEL_NAME_MAX_LENGTH, LlmUsage, LlmUsagePurpose
from memoryhub.llm.types import Completion


def llm_usage_record(*, tenant_id: int, completion: Completion, purpose: str) -> None:
    """Add one call and its tokens to today's counter for this tenant, model and purpose.

    Safe under concurrency: the increment is a single UPDATE with F() expressions, and when the
    row does not exist yet, two workers racing to create it both succeed, one by inserting and
    the other by incrementing after its insert hits the unique constraint.
    """
    purpose = LlmUsagePurpose(purpose).value  # a typo'd purpose fails here, not in a report
    key: dict[str, Any] = {
        "tenant_id": tenant_id,
        "day": timezone.now().date(),  # UTC: TIME_ZONE is UTC and USE_TZ is on
        "model": completion.model[:LLM_MODEL_NAME_MAX_LENGTH],
        "purpose": purpose,
    }
    prompt_tokens = max(completion.prompt_tokens, 0)
    completion_tokens = max(completion.completion_tokens, 0)
    increments = {
        "calls": F("calls") + 1,
        "prompt_tokens": F("prompt_tokens") + prompt_tokens,
        "completion_tokens": F("completion_tokens") + completion_tokens,
    }
    if LlmUsage.objects.filter(**key).update(**increments):
        return
    try:
        # A savepoint, so a lost race does not poison a transaction the caller may be in.
        with transaction.atomic():
            LlmUsage.objects.create(
                **key, calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
    except IntegrityError:
        LlmUsage.objects.filter(**key).update(**increments)
