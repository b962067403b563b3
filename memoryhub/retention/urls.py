"""Page URLs (namespace `retention_pages`), included at the root: the tenant-wide purge sits with
the tenant's settings, a session's purge under its session."""

from django.urls import URLPattern, path

from memoryhub.retention import views

app_name = "retention_pages"

urlpatterns: list[URLPattern] = [
    path("tenant/purge/", views.purge_page, name="purge"),
    path("sessions/<uuid:session_id>/purge/", views.session_purge, name="session-purge"),
]
