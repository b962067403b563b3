"""The tenant pages: audit log, memory policy (with its per-agent overrides) and API keys.

Thin, as DESIGN.md §2 asks: reads go through the tenant (`request.tenant`), writes through
memoryhub.accounts.services (api_key_create, api_key_revoke, audited_delete,
audit_event_record). The purge-by-age page is memoryhub.retention.views (it calls sessions_app).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import IntegrityError
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from memoryhub.accounts.forms import (
    POLICY_FIELDS,
    AgentPolicyForm,
    ApiKeyCreateForm,
    AuditFilterForm,
    MemoryPolicyForm,
    PurgeOlderThanForm,
    day_start,
)
from memoryhub.accounts.models import (
    ApiKey,
    AuditEvent,
    MemoryPolicy,
)
from memoryhub.accounts.pages import TenantRequest, actor_for_request, tenant_page
from memoryhub.accounts.services import (
    api_key_create,
    api_key_revoke,
    audited_delete,
    deletion_counts,
    memory_policy_save,
)
from memoryhub.core.pages import count_rows, htmx_partial, pager_for

PAGE_SIZE = 50
POLICY_OBJECT_TYPE = "memory_policy"


def _require_editor(request: TenantRequest) -> None:
    if not request.can_edit:
        raise PermissionDenied("Viewers can look but not change or delete.")


# --- Audit log --------------------------------------------------------------------------------


def audit_events_filtered(*, request: TenantRequest, form: AuditFilterForm) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.filter(tenant=request.tenant).order_by("-created_at", "-pk")
    if not form.is_valid():
        return events
    data = form.cleaned_data
    if data["actor"]:
        events = events.filter(actor__icontains=data["actor"])
    if data["action"]:
        events = events.filter(action=data["action"])
    if data["since"]:
        events = events.filter(created_at__gte=day_start(data["since"]))
    if data["until"]:
        events = events.filter(created_at__lt=day_start(data["until"] + dt.timedelta(days=1)))
    return events


@tenant_page()
@require_http_methods(["GET"])
def audit(request: TenantRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        # Bad filters narrow nothing and say why at the field; no rows are shown for them.
        page = Paginator(AuditEvent.objects.none(), PAGE_SIZE).get_page(1)
    else:
        events = audit_events_filtered(request=request, form=form)
        page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    partial = htmx_partial(request)
    template = "accounts/partials/audit_panel.html" if partial else "accounts/audit.html"
    pager = pager_for(request, page, target="audit-panel", label="Audit log pages")
    return render(request, template, {"form": form, "page": page, "pager": pager})


# --- Memory policy ----------------------------------------------------------------------------


def _save_or_error(*, request: TenantRequest, form: MemoryPolicyForm) -> MemoryPolicy | None:
    try:
        return memory_policy_save(
            policy=form.save(commit=False),
            changes=form.changes(),
            actor=actor_for_request(request),
        )
    except IntegrityError:
        # Someone saved the same policy (or agent) at the same moment.
        form.add_error(None, "Someone else saved this policy meanwhile. Reload and try again.")
        return None


def _read_only(form: MemoryPolicyForm) -> None:
    for field in form.fields.values():
        field.disabled = True


@tenant_page()
@require_http_methods(["GET", "POST"])
def policy(request: TenantRequest) -> HttpResponse:
    tenant = request.tenant
    saved = MemoryPolicy.objects.filter(tenant=tenant, agent_id="").first()
    instance = saved or MemoryPolicy(tenant=tenant, agent_id="")
    if request.method == "POST":
        _require_editor(request)
        form = MemoryPolicyForm(request.POST, instance=instance, tenant=tenant)
        if form.is_valid() and _save_or_error(request=request, form=form) is not None:
            messages.success(request, "Saved the tenant's memory policy.")
            return redirect("accounts_pages:policy")
    else:
        form = MemoryPolicyForm(instance=instance, tenant=tenant)
    if not request.can_edit:
        _read_only(form)
    overrides = MemoryPolicy.objects.filter(tenant=tenant).exclude(agent_id="").order_by("agent_id")
    page = Paginator(overrides, PAGE_SIZE).get_page(request.GET.get("page"))
    purge_form = PurgeOlderThanForm(
        tenant=tenant, initial={"days": (saved or instance).retention_days or 90}
    )
    status = 400 if form.is_bound else 200
    return render(
        request,
        "accounts/policy.html",
        {
            "form": form,
            "saved": saved,
            "page": page,
            "pager": pager_for(request, page, label="Override pages"),
            "purge_form": purge_form,
            "fields": POLICY_FIELDS,
        },
        status=status,
    )


def _override_or_404(request: TenantRequest, pk: int) -> MemoryPolicy:
    overrides = MemoryPolicy.objects.filter(tenant=request.tenant).exclude(agent_id="")
    return get_object_or_404(overrides, pk=pk)


@tenant_page(editor=True)
@require_http_methods(["GET", "POST"])
def policy_agent_new(request: TenantRequest) -> HttpResponse:
    tenant = request.tenant
    # An override starts from what the agent gets now: the tenant's policy, or the defaults.
    base = MemoryPolicy.objects.filter(tenant=tenant, agent_id="").first() or MemoryPolicy()
    instance = MemoryPolicy(tenant=tenant, **{name: getattr(base, name) for name in POLICY_FIELDS})
    form = AgentPolicyForm(request.POST or None, instance=instance, tenant=tenant)
    if form.is_bound and form.is_valid():
        policy_row = _save_or_error(request=request, form=form)
        if policy_row is not None:
            messages.success(request, f"Added an override for agent {policy_row.agent_id}.")
            return redirect("accounts_pages:policy")
    return render(
        request,
        "accounts/policy_agent.html",
        {"form": form, "override": None},
        status=400 if form.is_bound else 200,
    )


@tenant_page()
@require_http_methods(["GET", "POST"])
def policy_agent_edit(request: TenantRequest, pk: int) -> HttpResponse:
    override = _override_or_404(request, pk)
    if request.method == "POST":
        _require_editor(request)
    form = AgentPolicyForm(request.POST or None, instance=override, tenant=request.tenant)
    if form.is_bound and form.is_valid():
        policy_row = _save_or_error(request=request, form=form)
        if policy_row is not None:
            messages.success(request, f"Saved the override for agent {policy_row.agent_id}.")
            return redirect("accounts_pages:policy")
    if not request.can_edit:
        _read_only(form)
    return render(
        request,
        "accounts/policy_agent.html",
        {"form": form, "override": override},
        status=400 if form.is_bound else 200,
    )


@tenant_page(editor=True)
@require_http_methods(["GET", "POST"])
def policy_agent_delete(request: TenantRequest, pk: int) -> HttpResponse:
    override = _override_or_404(request, pk)
    if request.method == "POST":
        counts = audited_delete(
            obj=override,
            tenant=request.tenant,
            actor=actor_for_request(request),
            object_type=POLICY_OBJECT_TYPE,
            object_id=override.agent_id,
        )
        removed = ", ".join(f"{count} {kind}" for kind, count in counts.items())
        messages.success(
            request,
            f"Deleted the override for agent {override.agent_id} ({removed}); "
            "the agent follows the tenant's policy again.",
        )
        return redirect("accounts_pages:policy")
    return render(
        request,
        "accounts/policy_agent_delete.html",
        {"override": override, "count_rows": count_rows(deletion_counts(obj=override))},
    )


# --- API keys ---------------------------------------------------------------------------------


def _keys_context(request: TenantRequest, form: ApiKeyCreateForm) -> dict[str, Any]:
    keys = (
        ApiKey.objects.filter(tenant=request.tenant)
        .select_related("created_by")
        .order_by("-created", "prefix")
    )
    page = Paginator(keys, PAGE_SIZE).get_page(request.GET.get("page"))
    pager = pager_for(request, page, target="keys-panel", label="API key pages")
    return {"form": form, "page": page, "pager": pager}


@tenant_page()
@require_http_methods(["GET", "POST"])
def keys(request: TenantRequest) -> HttpResponse:
    if request.method != "POST":
        form = ApiKeyCreateForm()
        if htmx_partial(request):
            return render(
                request, "accounts/partials/keys_table.html", _keys_context(request, form)
            )
        return render(request, "accounts/keys.html", _keys_context(request, form))
    _require_editor(request)
    form = ApiKeyCreateForm(request.POST)
    if not form.is_valid():
        return render(request, "accounts/keys.html", _keys_context(request, form), status=400)
    api_key, secret = api_key_create(
        tenant=request.tenant,
        name=form.cleaned_data["name"],
        scopes=form.cleaned_data["scopes"],
        expires_at=form.expires_at(),
        created_by=request.user,  # type: ignore[arg-type]
    )
    # The secret is in this response only: not in the session, not in a redirect, not cached.
    context = _keys_context(request, ApiKeyCreateForm())
    context.update(new_key=api_key, secret=secret)
    response = render(request, "accounts/keys.html", context)
    response["Cache-Control"] = "no-store"
    return response


@tenant_page(editor=True)
@require_http_methods(["GET", "POST"])
def key_revoke(request: TenantRequest, prefix: str) -> HttpResponse:
    api_key = get_object_or_404(ApiKey.objects.filter(tenant=request.tenant), prefix=prefix)
    if request.method == "POST":
        if api_key.revoked:
            messages.info(request, f"The key {api_key.name} was already revoked.")
        else:
            api_key_revoke(api_key=api_key, actor=actor_for_request(request))
            messages.success(
                request, f"Revoked the key {api_key.name}: it no longer authenticates anything."
            )
        return redirect("accounts_pages:keys")
    return render(request, "accounts/key_revoke.html", {"api_key": api_key})
