"""Page URLs (the web UI); the API's are under api/.

The search page reads facts and messages, so its view lives in memoryhub.web.search (which may
read both apps; facts_app itself must not import sessions_app). This module is only routing:
the one import of the page layer below is accepted for that reason.
"""

from django.urls import URLPattern, path

from memoryhub.web.search import search_page

app_name = "facts_pages"

urlpatterns: list[URLPattern] = [
    path("", search_page, name="search"),
]
