"""Token usage per tenant: one counter row per (tenant, day, model, purpose), so a month of
heavy use is a few hundred rows, not one per call."""

from __future__ import annotations

from django.db import models

from memoryhub.accounts.models import TenantOwnedModel

LLM_MODEL_NAME_MAX_LENGTH = 200


class LlmUsagePurpose(models.TextChoices):
    SUMMARY = "summary", "Summary"
    EXTRACTION = "extraction", "Fact extraction"


class LlmUsage(TenantOwnedModel):
    day = models.DateField(help_text="UTC day of the calls.")
    model = models.CharField(max_length=LLM_MODEL_NAME_MAX_LENGTH)
    purpose = models.CharField(max_length=16, choices=LlmUsagePurpose.choices)
    calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "LLM usage"
        verbose_name_plural = "LLM usage"
        ordering = ("-day", "model", "purpose")
        constraints = [
            # The counter's identity, and the index every increment and per-tenant report uses.
            models.UniqueConstraint(
                fields=["tenant", "day", "model", "purpose"], name="llmusage_unique_counter"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} {self.model} {self.purpose}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
