"""Which tenant a page shows, and what the signed-in person may do there.

A person sees only the tenants they are a member of (Membership), superusers included: the
admin is for staff-wide work, the pages are per tenant. The current tenant is kept in the
session (the switcher sets it); every page reads its rows through `request.tenant`, so another
tenant's id in a URL finds nothing and is a 404. Viewers read; every other role may also change
and delete.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from memoryhub.accounts.models import Actor, Membership, MembershipRole, Tenant
from memoryhub.core.rls import rls_for_tenant

SESSION_TENANT_KEY = "memoryhub.tenant_id"

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


class TenantRequest(HttpRequest):
    """What `tenant_page` (and django-htmx's middleware) add to a request, for type checkers."""

    htmx: HtmxDetails
    tenant: Tenant
    membership: Membership
    can_edit: bool


def actor_for_request(request: HttpRequest) -> Actor:
    """Who acts, for the audit log, when a signed-in person writes (a page or the admin)."""
    return Actor.staff(request.user.get_username())


def memberships_for(*, user: Any) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug")


def membership_current(*, request: HttpRequest) -> Membership | None:
    """The member's chosen tenant, else their first one; None for someone in no tenant."""
    memberships = memberships_for(user=request.user)
    chosen = request.session.get(SESSION_TENANT_KEY)
    if chosen is not None:
        found = memberships.filter(tenant_id=chosen).first()
        if found is not None:
            return found
    return memberships.first()


def membership_can_edit(membership: Membership) -> bool:
    return membership.role != MembershipRole.VIEWER


def tenant_page(*, editor: bool = False) -> Callable[[View], View]:
    """Decorate a page view: login required, `request.tenant`, `request.membership` and
    `request.can_edit` set. `editor=True`: a viewer gets 403 (for POSTs that change or delete;
    pages hide those buttons from viewers, and this refuses them anyway)."""

    def decorate(view: View) -> View:
        @login_required
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            membership = membership_current(request=request)
            if membership is None:
                return render(request, "accounts/no_tenant.html", status=403)
            request.tenant = membership.tenant  # type: ignore[attr-defined]
            rls_for_tenant(membership.tenant)
            request.membership = membership  # type: ignore[attr-defined]
            request.can_edit = membership_can_edit(membership)  # type: ignore[attr-defined]
            if editor and not membership_can_edit(membership):
                raise PermissionDenied("Viewers can look but not change or delete.")
            return view(request, *args, **kwargs)

        return cast(View, wrapper)

    return decorate
