"""System checks for configuration that would otherwise break at runtime."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

REQUIRED_LIMITS = (
    "MESSAGE_CONTENT_MAX_BYTES",
    "METADATA_MAX_BYTES",
    "STATE_VALUE_MAX_BYTES",
    "FACT_CONTENT_MAX_BYTES",
    "MEMORY_CONTENT_MAX_BYTES",
    "MESSAGE_BATCH_MAX",
    "STATE_CAP",
    "PAGE_SIZE_DEFAULT",
    "PAGE_SIZE_MAX",
    "MESSAGES_READ_MAX",
    "REQUEST_BODY_MAX_BYTES",
    "NOTE_CONTENT_MAX_BYTES",
    "TASK_DATA_MAX_BYTES",
    "TASK_SUB_TASKS_MAX",
)


@register()
def check_limits(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    limits = getattr(settings, "MEMORYHUB_LIMITS", {})
    for name in REQUIRED_LIMITS:
        value = limits.get(name)
        if not isinstance(value, int) or value < 1:
            errors.append(
                Error(
                    f"MEMORYHUB_LIMITS[{name!r}] must be a positive integer, not {value!r}.",
                    hint=f"Set MEMORYHUB_{name} in the environment.",
                    id="memoryhub.E001",
                )
            )
    if not errors and limits["PAGE_SIZE_DEFAULT"] > limits["PAGE_SIZE_MAX"]:
        errors.append(
            Error(
                "MEMORYHUB_PAGE_SIZE_DEFAULT exceeds MEMORYHUB_PAGE_SIZE_MAX.", id="memoryhub.E002"
            )
        )
    batch_bytes = limits.get("MESSAGE_BATCH_MAX", 0) * limits.get("MESSAGE_CONTENT_MAX_BYTES", 0)
    if not errors and batch_bytes > limits["REQUEST_BODY_MAX_BYTES"]:
        errors.append(
            Warning(
                "MEMORYHUB_REQUEST_BODY_MAX_BYTES is below a full batch of maximum-size messages; "
                "such batches are refused with 413 before they are validated.",
                id="memoryhub.W001",
            )
        )
    return errors
