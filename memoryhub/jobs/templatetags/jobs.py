"""`{% session_jobs_panel session %}` for the session page and `{% tenant_backlog_panel tenant %}`
for the dashboard: tags, so the pages that show them need not know this wing."""

from __future__ import annotations

from typing import Any

from django import template

from memoryhub.jobs.selectors import session_jobs, tenant_backlog

register = template.Library()


@register.inclusion_tag("jobs/partials/session_jobs.html")
def session_jobs_panel(session: Any) -> dict[str, Any]:
    return {"session": session, "jobs": session_jobs(session=session)}


@register.inclusion_tag("jobs/partials/tenant_backlog.html")
def tenant_backlog_panel(tenant: Any) -> dict[str, Any]:
    return {"backlog": tenant_backlog(tenant=tenant)}
