"""Template context for every page: the navigation and the tenant switcher."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from memoryhub.accounts.pages import membership_can_edit, memberships_for

# (URL name, label): a page appears in the navigation once its URL exists.
NAVIGATION = (
    ("web:dashboard", "Dashboard"),
    ("sessions_pages:list", "Sessions"),
    ("sessions_pages:work", "Plans and tasks"),
    ("people_pages:list", "People"),
    ("search_pages:search", "Search"),
    ("accounts_pages:audit", "Audit log"),
    ("accounts_pages:policy", "Memory policy"),
    ("accounts_pages:keys", "API keys"),
    ("web:import", "Import / export"),
)


def navigation(request: HttpRequest) -> dict[str, Any]:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    links = []
    for name, label in NAVIGATION:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        current = request.path == url if url == "/" else request.path.startswith(url)
        links.append({"url": url, "label": label, "current": current})
    memberships = list(memberships_for(user=request.user))
    tenant = getattr(request, "tenant", None)
    membership = getattr(request, "membership", None)
    return {
        "navigation": links,
        "memberships": memberships,
        "current_tenant": tenant,
        "can_edit": membership_can_edit(membership) if membership else False,
    }
