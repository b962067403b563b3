"""Page URLs (the web UI); the API's are under api/."""

from django.urls import URLPattern, path  # noqa: F401

app_name = "people_pages"

urlpatterns: list[URLPattern] = []
