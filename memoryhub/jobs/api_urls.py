from django.urls import URLPattern, path

from memoryhub.jobs.api import SessionJobsView

urlpatterns: list[URLPattern] = [
    path("sessions/<str:session_id>/jobs/", SessionJobsView.as_view(), name="session-jobs"),
]
