"""Page URLs (the web UI) of the tenant's settings: audit log, memory policy, API keys."""

from django.urls import URLPattern, path

from memoryhub.accounts import views

app_name = "accounts_pages"

urlpatterns: list[URLPattern] = [
    path("audit/", views.audit, name="audit"),
    path("policy/", views.policy, name="policy"),
    path("policy/agents/new/", views.policy_agent_new, name="policy-agent-new"),
    path("policy/agents/<int:pk>/", views.policy_agent_edit, name="policy-agent-edit"),
    path("policy/agents/<int:pk>/delete/", views.policy_agent_delete, name="policy-agent-delete"),
    path("keys/", views.keys, name="keys"),
    path("keys/<str:prefix>/revoke/", views.key_revoke, name="key-revoke"),
]
