"""Seed 002's paths, as its SDK calls them; a trailing slash is accepted too."""

from django.urls import re_path

from memoryhub.compat.seed002 import api

_ID = r"(?P<{}>[^/]+)"

urlpatterns = [
    re_path(r"^task-context/?$", api.TaskContextsView.as_view(), name="seed002-task-contexts"),
    re_path(
        rf"^task-context/by-subtask/{_ID.format('subtask_id')}/?$",
        api.TaskContextBySubtaskView.as_view(),
        name="seed002-task-context-by-subtask",
    ),
    re_path(
        rf"^task-context/{_ID.format('task_id')}/?$",
        api.TaskContextView.as_view(),
        name="seed002-task-context",
    ),
    re_path(r"^plans/?$", api.PlansView.as_view(), name="seed002-plans"),
    re_path(rf"^plans/{_ID.format('plan_id')}/?$", api.PlanView.as_view(), name="seed002-plan"),
    re_path(r"^sessions/?$", api.SessionsView.as_view(), name="seed002-sessions"),
    re_path(
        rf"^sessions/{_ID.format('session_id')}/?$",
        api.SessionView.as_view(),
        name="seed002-session",
    ),
    re_path(r"^(?P<rest>.*)$", api.not_found, name="seed002-not-found"),
]
