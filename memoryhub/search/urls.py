"""Page URLs (namespace `search_pages`), included under /search/."""

from django.urls import URLPattern, path

from memoryhub.search.views import search_page

app_name = "search_pages"

urlpatterns: list[URLPattern] = [
    path("", search_page, name="search"),
]
