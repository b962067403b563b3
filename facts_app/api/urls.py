from django.urls import include, path

from facts_app.api import facts

urlpatterns = [
    path("facts/", facts.FactListView.as_view(), name="fact-list"),
    path("facts/search/", facts.FactSearchView.as_view(), name="fact-search"),
    path("facts/<str:fact_id>/", facts.FactDetailView.as_view(), name="fact-detail"),
    path("users/<str:user_id>/notes/", include("facts_app.api.notes_urls")),
]
