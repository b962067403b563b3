"""Purge pages: history older than N days (/tenant/purge/, `retention_pages:purge`) and one
session (/sessions/<id>/purge/, `retention_pages:session-purge`).

GET counts what would go (the purge service with dry_run=True) and shows a confirmation; the
POST (editors only) purges and shows what was removed. The service writes the audit event.

The confirmation carries the moment it counted at (`as_of`), and the purge uses that same
moment for its cutoff: it removes exactly what the confirmation counted (unless the history
itself changed in between), not what a later cutoff would also catch.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from memoryhub.accounts.forms import PurgeConfirmForm, PurgeOlderThanForm
from memoryhub.accounts.pages import TenantRequest, actor_for_request, tenant_page
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.pages import count_rows, counts_text, not_found_as_404
from memoryhub.retention.purge import purge_older_than, purge_session
from sessions_app.selectors import session_get_for_tenant


def _purge(
    request: TenantRequest, *, days: int, user_id: str, as_of: dt.datetime, dry_run: bool
) -> dict[str, int]:
    try:
        return purge_older_than(
            tenant=request.tenant,
            days=days,
            user_id=user_id or None,
            dry_run=dry_run,
            actor=actor_for_request(request),
            now=as_of,
        )
    except ResourceNotFound as error:
        raise Http404(str(error)) from None


@tenant_page()
@require_http_methods(["GET", "POST"])
def purge_page(request: TenantRequest) -> HttpResponse:
    tenant = request.tenant
    if request.method == "POST":
        if not request.can_edit:
            raise PermissionDenied("Viewers can look but not change or delete.")
        confirm = PurgeConfirmForm(request.POST, tenant=tenant)
        if not confirm.is_valid():
            return render(
                request,
                "retention/purge.html",
                {"form": confirm, "stage": "form"},
                status=400,
            )
        data = confirm.cleaned_data
        counts = _purge(
            request, days=data["days"], user_id=data["user_id"], as_of=data["as_of"], dry_run=False
        )
        return render(
            request,
            "retention/purge.html",
            {
                "form": confirm,
                "stage": "done",
                "counts": counts,
                "count_rows": count_rows(counts),
                **_choice(data),
            },
        )
    form = PurgeOlderThanForm(request.GET or None, tenant=tenant)
    if not form.is_bound:
        return render(request, "retention/purge.html", {"form": form, "stage": "form"})
    if not form.is_valid():
        return render(request, "retention/purge.html", {"form": form, "stage": "form"}, status=400)
    data = form.cleaned_data
    as_of = timezone.now()
    counts = _purge(request, days=data["days"], user_id=data["user_id"], as_of=as_of, dry_run=True)
    return render(
        request,
        "retention/purge.html",
        {
            "form": form,
            "stage": "confirm",
            "counts": counts,
            "count_rows": count_rows(counts),
            "as_of": as_of,
            **_choice(data),
        },
    )


def _choice(data: dict[str, object]) -> dict[str, object]:
    return {"days": data["days"], "user_id": data["user_id"]}


@tenant_page()
@require_http_methods(["GET", "POST"])
def session_purge(request: TenantRequest, session_id: uuid.UUID) -> HttpResponse:
    """GET: what purging the session would remove (the dry run). POST (not for viewers): purge
    it; memoryhub.retention.purge writes the audit event."""
    with not_found_as_404("No such session."):
        session = session_get_for_tenant(tenant=request.tenant, session_id=session_id)
    if request.method == "POST":
        if not request.can_edit:
            raise PermissionDenied("Viewers can look but not change or delete.")
        with not_found_as_404("No such session."):  # purged by someone else meanwhile
            counts = purge_session(
                tenant=request.tenant,
                session_id=session.pk,
                dry_run=False,
                actor=actor_for_request(request),
            )
        messages.success(
            request, f"Purged session {session.pk}: {counts_text(counts) or 'nothing'} removed."
        )
        return redirect("sessions_pages:list")
    counts = purge_session(
        tenant=request.tenant, session_id=session.pk, dry_run=True, actor=actor_for_request(request)
    )
    return render(
        request,
        "retention/session_purge.html",
        {"session": session, "counts": counts, "count_rows": count_rows(counts)},
    )
