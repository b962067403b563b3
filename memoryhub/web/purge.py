"""Purge history older than N days (/tenant/purge/, `accounts_pages:purge`).

GET counts what would go (sessions_app.purge.purge_older_than with dry_run=True) and shows a
confirmation; the POST (editors only) purges and shows what was removed. The service writes the
audit event. This view calls sessions_app, so it lives here rather than in memoryhub.accounts
(accounts must not import sessions_app); memoryhub/accounts/urls.py only routes to it.

The confirmation carries the moment it counted at (`as_of`), and the purge uses that same
moment for its cutoff: it removes exactly what the confirmation counted (unless the history
itself changed in between), not what a later cutoff would also catch.
"""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from memoryhub.accounts.forms import PurgeConfirmForm, PurgeOlderThanForm
from memoryhub.accounts.models import ActorType
from memoryhub.accounts.views import count_rows
from memoryhub.core.exceptions import ResourceNotFound
from memoryhub.web.tenancy import TenantRequest, tenant_page
from sessions_app.purge import purge_older_than
from sessions_app.services import Actor


def _purge(
    request: TenantRequest, *, days: int, user_id: str, as_of: dt.datetime, dry_run: bool
) -> dict[str, int]:
    try:
        return purge_older_than(
            tenant=request.tenant,
            days=days,
            user_id=user_id or None,
            dry_run=dry_run,
            actor=Actor(type=ActorType.STAFF, name=str(request.user.get_username())),
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
                "accounts/purge.html",
                {"form": confirm, "stage": "form"},
                status=400,
            )
        data = confirm.cleaned_data
        counts = _purge(
            request, days=data["days"], user_id=data["user_id"], as_of=data["as_of"], dry_run=False
        )
        return render(
            request,
            "accounts/purge.html",
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
        return render(request, "accounts/purge.html", {"form": form, "stage": "form"})
    if not form.is_valid():
        return render(request, "accounts/purge.html", {"form": form, "stage": "form"}, status=400)
    data = form.cleaned_data
    as_of = timezone.now()
    counts = _purge(request, days=data["days"], user_id=data["user_id"], as_of=as_of, dry_run=True)
    return render(
        request,
        "accounts/purge.html",
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
