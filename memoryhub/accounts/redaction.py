"""Redaction by memory policy: which writes are masked or refused, and what recall masks.

The detectors are in core.redaction; this module decides, per tenant and agent policy
(MemoryPolicy.redaction_mode and its redact_* switches), whether they run at all, and records
what was masked in the audit log (classes and counts, never the text). Off (the default) costs
one look at the tenant's cached policies and no regex at all.

Facts, memories and notes belong to a person, not to an agent: the tenant's policy applies to
them. Messages and summaries follow their session's agent policy.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from memoryhub.accounts.models import Actor, AuditAction, RedactionMode, Tenant
from memoryhub.accounts.selectors import memory_policy_for, tenant_policies_cached
from memoryhub.accounts.services import audit_event_record
from memoryhub.core import redaction
from memoryhub.core.errors import DomainError
from memoryhub.core.observability import log_context

logger = logging.getLogger(__name__)

REDACTION_ACTOR = Actor.system("redaction")


class RedactedContentRefused(DomainError):
    """A write holding a secret or chosen personal data, under a policy that refuses them.

    The answer names the fields and the classes found, never the matched text."""

    http_status = 422
    default_code = "redacted_content_refused"

    def __init__(self, *, found: Mapping[str, Mapping[str, int]]) -> None:
        classes = sorted({kind for kinds in found.values() for kind in kinds})
        super().__init__(
            "Refused by the memory policy's redaction: "
            + "; ".join(f"{name} holds {', '.join(sorted(kinds))}" for name, kinds in found.items())
            + "."
        )
        self.found = {name: dict(kinds) for name, kinds in found.items()}
        self.fields = {
            name: [
                {
                    "code": self.code,
                    "message": f"Holds {', '.join(sorted(kinds))}: remove it or mask it.",
                }
            ]
            for name, kinds in found.items()
        }
        self.extra = {"classes": classes}


def phone_region() -> str:
    return str(settings.MEMORYHUB_REDACTION_PHONE_REGION)


def redaction_on_anywhere(*, tenant_id: int) -> bool:
    """Whether any of the tenant's policies redacts: when none does (the usual case), a write
    need not even look up its session's agent."""
    return any(
        policy.redaction_mode != RedactionMode.OFF
        for policy in tenant_policies_cached(tenant_id=tenant_id).values()
    )


def redaction_for(*, tenant_id: int, agent_id: str = "") -> tuple[str, list[str]]:
    """The mode and classes in force for the agent (the tenant's policy for agent ""): the
    classes are [] when redaction is off."""
    if not redaction_on_anywhere(tenant_id=tenant_id):
        return RedactionMode.OFF, []
    policy = memory_policy_for(tenant_id=tenant_id, agent_id=agent_id)
    return policy.redaction_mode, policy.redaction_classes


def redact_for_write(
    *,
    tenant_id: int,
    values: Mapping[str, str],
    object_type: str,
    object_id: str = "",
    agent_id: str = "",
    never_refuse: bool = False,
) -> dict[str, str]:
    """`values` (field name → text, as the API names the fields) as the policy wants them
    stored: unchanged when off, masked under "mask", and RedactedContentRefused under "refuse"
    if any holds a match (before anything is written). A masking is audited.

    `never_refuse` masks even under "refuse": for text the service writes itself (an LLM
    summary), where there is no client to answer.
    """
    mode, classes = redaction_for(tenant_id=tenant_id, agent_id=agent_id)
    if not classes:
        return dict(values)
    region = phone_region()
    masked: dict[str, str] = {}
    found: dict[str, dict[str, int]] = {}
    for name, text in values.items():
        new_text, findings = redaction.redact(text, classes, phone_region=region)
        masked[name] = new_text
        if findings:
            found[name] = redaction.counts(findings)
    if not found:
        return masked
    if mode == RedactionMode.REFUSE and not never_refuse:
        logger.info(
            "redaction refused a write",
            extra={"object_type": object_type, "redaction": found, "tenant_id": tenant_id},
        )
        raise RedactedContentRefused(found=found)
    totals: Counter[str] = Counter()
    for kinds in found.values():
        totals.update(kinds)
    audit_event_record(
        # Only the key is needed for the row: callers in tasks hold no Tenant object.
        tenant=Tenant(pk=tenant_id),
        actor=REDACTION_ACTOR,
        action=AuditAction.REDACT,
        object_type=object_type,
        object_id=object_id[:1024],
        counts=dict(totals),
        detail={
            "mode": mode,
            "fields": found,
            **(
                {"request_id": log_context()["request_id"]} if "request_id" in log_context() else {}
            ),
        },
    )
    return masked


def recall_redactor(*, tenant_id: int, agent_id: str = "") -> redaction.Redactor | None:
    """A function masking recalled text under the policy in force, or None when redaction is
    off: callers then skip it (no regex runs)."""
    _mode, classes = redaction_for(tenant_id=tenant_id, agent_id=agent_id)
    if not classes:
        return None
    region = phone_region()

    def redactor(text: str) -> str:
        return redaction.redact(text, classes, phone_region=region)[0] if text else text

    return redactor


def redact_tool_calls(
    *,
    tool_calls: list[dict[str, Any]] | None,
) -> dict[str, str]:
    """The string arguments of an OpenAI-style tool call list, by field path: they carry what
    the person said (a recipient, a card number) as much as the content does."""
    values: dict[str, str] = {}
    for index, call in enumerate(tool_calls or []):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str) and arguments:
            values[f"tool_calls.{index}.function.arguments"] = arguments
    return values


def tool_calls_with(
    *, tool_calls: list[dict[str, Any]] | None, values: Mapping[str, str]
) -> list[dict[str, Any]] | None:
    """`tool_calls` with the arguments `redact_tool_calls` named replaced by `values`'."""
    if not tool_calls:
        return tool_calls
    rebuilt: list[dict[str, Any]] = []
    for index, call in enumerate(tool_calls):
        key = f"tool_calls.{index}.function.arguments"
        if key in values and isinstance(call, dict) and isinstance(call.get("function"), dict):
            call = {**call, "function": {**call["function"], "arguments": values[key]}}
        rebuilt.append(call)
    return rebuilt


def search_redactor(*, tenant_id: int) -> redaction.Redactor | None:
    """For answers that cross agents (searches): the union of the classes of every policy of
    the tenant that redacts, so no agent's override is undercut; None when none does."""
    if not redaction_on_anywhere(tenant_id=tenant_id):
        return None
    classes = sorted(
        {
            kind
            for policy in tenant_policies_cached(tenant_id=tenant_id).values()
            for kind in policy.redaction_classes
        }
    )
    region = phone_region()

    def redactor(text: str) -> str:
        return redaction.redact(text, classes, phone_region=region)[0] if text else text

    return redactor


def rows_redacted(
    rows: list[dict[str, Any]], *, redact: redaction.Redactor | None, key: str = "content"
) -> list[dict[str, Any]]:
    """Serialized rows (facts, messages, memories) with `key` masked, in place and returned."""
    if redact is not None:
        for row in rows:
            if isinstance(row.get(key), str):
                row[key] = redact(row[key])
    return rows
