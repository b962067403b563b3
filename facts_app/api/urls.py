from django.urls import include, path

urlpatterns: list = [
    path("users/<str:user_id>/notes/", include("facts_app.api.notes_urls")),
]
