"""Page URLs (the web UI); the API's are under api/."""

from django.urls import URLPattern, path

from sessions_app import views

app_name = "sessions_pages"

urlpatterns: list[URLPattern] = [
    path("", views.session_list, name="list"),
    path("work/", views.work_list, name="work"),
    path("<uuid:session_id>/", views.session_detail, name="detail"),
]
