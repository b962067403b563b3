"""Page forms of the tenant pages: audit log filters, memory policies, purge by age, API keys."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils import timezone

from memoryhub.accounts.models import (
    DEFAULT_API_KEY_SCOPES,
    END_USER_ID_MAX_LENGTH,
    TRANSCRIPT_CAP_MAX,
    TRANSCRIPT_CAP_SEED_DEFAULT,
    ApiKeyScope,
    AuditAction,
    MemoryPolicy,
    Tenant,
)
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.core.errors import ResourceNotFound

DATE_INPUT = forms.DateInput(attrs={"type": "date"})
PURGE_DAYS_MAX = 36_500  # as POST /api/v1/purge/ allows


def day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


class AuditFilterForm(forms.Form):
    actor = forms.CharField(
        label="Actor", required=False, max_length=200, help_text="Username, key prefix or task."
    )
    action = forms.ChoiceField(
        label="Action", required=False, choices=[("", "Any"), *AuditAction.choices]
    )
    since = forms.DateField(label="From", required=False, widget=DATE_INPUT)
    until = forms.DateField(
        label="Until", required=False, widget=DATE_INPUT, help_text="Inclusive."
    )

    def clean_actor(self) -> str:
        value: str = self.cleaned_data.get("actor") or ""
        if "\x00" in value:
            raise forms.ValidationError("No NUL characters, please.")
        return value.strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "Must not be before “From”.")
        return data


# The model's check constraints, as field bounds: errors then appear at the field they concern
# (the constraints themselves are still validated by the ModelForm and enforced by the database).
POLICY_BOUNDS: dict[str, tuple[int | None, int | None]] = {
    "summary_threshold_tokens": (1, None),
    "summary_keep_recent": (0, 500),
    "state_cap": (1, 10_000),
    "context_max_tokens": (200, 200_000),
    "context_max_messages": (0, 500),
    "context_max_memories": (0, 500),
    "context_history_tokens": (0, 200_000),
    "retention_days": (1, None),
    "daily_note_retention_days": (1, None),
    "task_retention_days": (1, None),
    "transcript_max_messages": (0, TRANSCRIPT_CAP_MAX),
}

POLICY_FIELDS = [
    "memory_enabled",
    "extraction_enabled",
    "enable_user_memories",
    "enable_summarization",
    "summary_threshold_tokens",
    "summary_keep_recent",
    "state_cap",
    "transcript_max_messages",
    "include_summary_on_truncation",
    "context_max_tokens",
    "context_max_messages",
    "context_max_memories",
    "recall_enabled",
    "context_history_tokens",
    "retention_days",
    # Redaction (issue 17): the mode, then the personal-data classes (secrets are always in).
    "redaction_mode",
    "redact_email",
    "redact_phone",
    "redact_card",
    "redact_iban",
]
# Daily notes and finished tasks belong to no agent: their retention is the tenant policy's.
TENANT_ONLY_FIELDS = ["daily_note_retention_days", "task_retention_days"]
# Numbers that, left empty or out, keep the policy's current value (the default for a new one):
# forms written before they existed still save.
POLICY_KEPT_WHEN_EMPTY = ("context_history_tokens", "redaction_mode")


def keep_when_empty(form: forms.ModelForm[MemoryPolicy]) -> None:
    """Make POLICY_KEPT_WHEN_EMPTY optional in `form`; `kept_values` fills them in."""
    for name in POLICY_KEPT_WHEN_EMPTY:
        if name in form.fields:
            form.fields[name].required = False


def kept_values(form: forms.ModelForm[MemoryPolicy], data: dict[str, Any]) -> dict[str, Any]:
    for name in POLICY_KEPT_WHEN_EMPTY:
        if name in form.fields and data.get(name) in (None, "") and name not in form.errors:
            data[name] = getattr(form.instance, name)
    return data


class MemoryPolicyForm(forms.ModelForm):
    """The tenant's policy (the row with an empty agent id)."""

    class Meta:
        model = MemoryPolicy
        fields = [*POLICY_FIELDS, *TENANT_ONLY_FIELDS]

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.instance.tenant = tenant
        for name, field in self.fields.items():
            # Callable model defaults make Django add a hidden "initial-" input and compare with
            # what the browser sent back; compare with the stored row instead (the audit's
            # "changes" then say what this save changed).
            field.show_hidden_initial = False
            low, high = POLICY_BOUNDS.get(name, (None, None))
            if low is not None:
                field.validators.append(MinValueValidator(low))
                field.widget.attrs["min"] = low
            if high is not None:
                field.validators.append(MaxValueValidator(high))
                field.widget.attrs["max"] = high
        if "transcript_max_messages" in self.fields:
            self.fields["transcript_max_messages"].widget.attrs["placeholder"] = str(
                TRANSCRIPT_CAP_SEED_DEFAULT
            )
        keep_when_empty(self)

    def clean(self) -> dict[str, Any]:
        return kept_values(self, super().clean() or {})

    def changes(self) -> dict[str, Any]:
        """The changed fields and their new values, for the audit event."""
        return {
            name: self.cleaned_data.get(name)
            for name in self.changed_data
            # Left out, it reads as changed to Django, but it kept its value.
            if name not in POLICY_KEPT_WHEN_EMPTY
            or self.cleaned_data.get(name) != self.initial.get(name)
        }


class AgentPolicyForm(MemoryPolicyForm):
    """An agent's override: it replaces the tenant's policy, whole, for that agent."""

    class Meta:
        model = MemoryPolicy
        fields = ["agent_id", *POLICY_FIELDS]

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, tenant=tenant, **kwargs)
        self.tenant = tenant
        agent_id = self.fields["agent_id"]
        agent_id.required = True
        agent_id.help_text = "The agent id the bot sends with its sessions."

    def clean_agent_id(self) -> str:
        value: str = (self.cleaned_data.get("agent_id") or "").strip()
        if not value:
            raise forms.ValidationError("An override needs an agent id.")
        if "\x00" in value:
            raise forms.ValidationError("No NUL characters, please.")
        # The (tenant, agent_id) constraint involves `tenant`, which is not a form field, so
        # the ModelForm would not check it: ask here, for an inline error instead of a 500.
        taken = MemoryPolicy.objects.filter(tenant=self.tenant, agent_id=value)
        if self.instance.pk is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise forms.ValidationError("This agent already has an override.")
        return value


class PurgeOlderThanForm(forms.Form):
    """History older than N days, for the whole tenant or one person."""

    days = forms.IntegerField(
        label="Older than (days)",
        min_value=1,
        max_value=PURGE_DAYS_MAX,
        widget=forms.NumberInput(attrs={"min": 1, "max": PURGE_DAYS_MAX}),
    )
    user_id = forms.CharField(
        label="Only this person (user id)",
        required=False,
        max_length=END_USER_ID_MAX_LENGTH,
        help_text="Empty: everyone in the tenant.",
    )

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_user_id(self) -> str:
        value: str = self.cleaned_data.get("user_id") or ""
        if value:
            try:
                end_user_get_for_tenant(tenant=self.tenant, external_id=value)
            except ResourceNotFound:
                raise forms.ValidationError("No one with this id in this tenant.") from None
        return value


class PurgeConfirmForm(PurgeOlderThanForm):
    """The confirmation's POST: the same choice, and the moment the counts were taken, so the
    purge removes exactly what the confirmation page counted (the cutoff does not move)."""

    as_of = forms.DateTimeField(widget=forms.HiddenInput)

    def clean_as_of(self) -> dt.datetime:
        value: dt.datetime = self.cleaned_data["as_of"]
        now = timezone.now()
        if value > now or value < now - dt.timedelta(days=1):
            raise forms.ValidationError("The confirmation is out of date; count again.")
        return value


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(
        label="Name", max_length=50, help_text="Which bot or deployment uses it."
    )
    scopes = forms.MultipleChoiceField(
        label="Scopes",
        choices=ApiKeyScope.choices,
        initial=DEFAULT_API_KEY_SCOPES,
        widget=forms.CheckboxSelectMultiple,
    )
    expires_on = forms.DateField(
        label="Expires on", required=False, widget=DATE_INPUT, help_text="Empty: never."
    )

    def clean_name(self) -> str:
        value: str = (self.cleaned_data.get("name") or "").strip()
        if not value:
            raise forms.ValidationError("Give the key a name.")
        if "\x00" in value:
            raise forms.ValidationError("No NUL characters, please.")
        return value

    def clean_expires_on(self) -> dt.date | None:
        value: dt.date | None = self.cleaned_data.get("expires_on")
        if value is not None and value <= timezone.localdate():
            raise forms.ValidationError("Must be a day after today.")
        return value

    def expires_at(self) -> dt.datetime | None:
        day: dt.date | None = self.cleaned_data.get("expires_on")
        return day_start(day) if day else None
