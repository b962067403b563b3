from django.urls import include, path

from facts_app.api import facts, memories

urlpatterns = [
    path("facts/", facts.FactListView.as_view(), name="fact-list"),
    path("facts/search/", facts.FactSearchView.as_view(), name="fact-search"),
    path("facts/<str:fact_id>/", facts.FactDetailView.as_view(), name="fact-detail"),
    path("users/<str:user_id>/notes/", include("facts_app.api.notes_urls")),
    path(
        "users/<str:user_id>/memories/",
        memories.UserMemoryListView.as_view(),
        name="user-memory-list",
    ),
    path(
        "users/<str:user_id>/memories/<str:key>/",
        memories.UserMemoryDetailView.as_view(),
        name="user-memory-detail",
    ),
    path(
        "users/<str:user_id>/memories/<str:key>/versions/",
        memories.UserMemoryVersionsView.as_view(),
        name="user-memory-versions",
    ),
    path("memories/", memories.TenantMemoryListView.as_view(), name="tenant-memory-list"),
    path(
        "memories/<str:key>/",
        memories.TenantMemoryDetailView.as_view(),
        name="tenant-memory-detail",
    ),
    path(
        "memories/<str:key>/versions/",
        memories.TenantMemoryVersionsView.as_view(),
        name="tenant-memory-versions",
    ),
]
