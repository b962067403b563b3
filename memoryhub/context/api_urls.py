from django.urls import URLPattern, path

from memoryhub.context.api import SessionContextView

urlpatterns: list[URLPattern] = [
    path(
        "sessions/<str:session_id>/context/",
        SessionContextView.as_view(),
        name="session-context",
    ),
]
