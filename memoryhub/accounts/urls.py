"""Page URLs (the web UI); the API's are under api/.

The purge-by-age page calls sessions_app, so its view lives in memoryhub.web.purge (accounts
must not import sessions_app); this module is only routing, and that one import of the page
layer is accepted for it.
"""

from django.urls import URLPattern, path

from memoryhub.accounts import views
from memoryhub.web.purge import purge_page

app_name = "accounts_pages"

urlpatterns: list[URLPattern] = [
    path("audit/", views.audit, name="audit"),
    path("policy/", views.policy, name="policy"),
    path("policy/agents/new/", views.policy_agent_new, name="policy-agent-new"),
    path("policy/agents/<int:pk>/", views.policy_agent_edit, name="policy-agent-edit"),
    path("policy/agents/<int:pk>/delete/", views.policy_agent_delete, name="policy-agent-delete"),
    path("purge/", purge_page, name="purge"),
    path("keys/", views.keys, name="keys"),
    path("keys/<str:prefix>/revoke/", views.key_revoke, name="key-revoke"),
]
