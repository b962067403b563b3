"""Page URLs (namespace `context_pages`), included under /sessions/."""

from django.urls import URLPattern, path

from memoryhub.context import views

app_name = "context_pages"

urlpatterns: list[URLPattern] = [
    path("<uuid:session_id>/context/", views.session_context, name="preview"),
]
