"""Pages every tenant member uses: the dashboard and the tenant switcher."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from memoryhub.accounts.pages import SESSION_TENANT_KEY, TenantRequest, memberships_for, tenant_page
from memoryhub.web import selectors


@tenant_page()
def dashboard(request: TenantRequest) -> HttpResponse:
    tenant = request.tenant
    activity = selectors.activity_per_day(tenant=tenant)
    return render(
        request,
        "web/dashboard.html",
        {
            "counts": selectors.dashboard_counts(tenant=tenant),
            "activity": activity,
            "activity_rows": list(
                zip(activity["days"], activity["messages"], activity["sessions"], strict=True)
            ),
            "agents": selectors.top_agents(tenant=tenant),
            "cleanups": selectors.cleanup_runs_recent(tenant=tenant),
        },
    )


@login_required
@require_POST
def tenant_switch(request: HttpRequest) -> HttpResponse:
    """Make another of the person's tenants the current one; a tenant they are not a member of
    changes nothing."""
    chosen = memberships_for(user=request.user).filter(tenant__slug=request.POST.get("tenant"))
    membership = chosen.first()
    if membership is not None:
        request.session[SESSION_TENANT_KEY] = membership.tenant_id
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/"
    return redirect(target or "/")
