from django.urls import path

from sessions_app.api import views
from sessions_app.api.plans import PlanViewSet
from sessions_app.api.storage import SessionStorageView, SessionWorkingMemoryView
from sessions_app.api.summaries import SessionSummarizeView, SessionSummaryView
from sessions_app.api.task_contexts import TaskContextBySubtaskView, TaskContextViewSet

session_list = views.SessionViewSet.as_view({"get": "list", "post": "create"})
session_detail = views.SessionViewSet.as_view(
    {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}
)
plan_list = PlanViewSet.as_view({"get": "list", "post": "create"})
plan_detail = PlanViewSet.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
)
task_context_list = TaskContextViewSet.as_view({"get": "list", "post": "create"})
task_context_detail = TaskContextViewSet.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
)

urlpatterns = [
    path("messages/search/", views.MessageSearchView.as_view(), name="message-search"),
    path("sessions/", session_list, name="session-list"),
    path("sessions/<str:session_id>/", session_detail, name="session-detail"),
    path(
        "sessions/<str:session_id>/messages/",
        views.SessionMessagesView.as_view(),
        name="session-messages",
    ),
    path(
        "sessions/<str:session_id>/state/", views.SessionStateView.as_view(), name="session-state"
    ),
    path(
        "sessions/<str:session_id>/summary/",
        SessionSummaryView.as_view(),
        name="session-summary",
    ),
    path(
        "sessions/<str:session_id>/working-memory/",
        SessionWorkingMemoryView.as_view(),
        name="session-working-memory",
    ),
    path(
        "sessions/<str:session_id>/storage/",
        SessionStorageView.as_view(),
        name="session-storage",
    ),
    path(
        "sessions/<str:session_id>/summarize/",
        SessionSummarizeView.as_view(),
        name="session-summarize",
    ),
    path(
        "sessions/<str:session_id>/state/<str:key>/",
        views.SessionStateKeyView.as_view(),
        name="session-state-key",
    ),
    path("plans/", plan_list, name="plan-list"),
    path("plans/<str:plan_id>/", plan_detail, name="plan-detail"),
    path("task-contexts/", task_context_list, name="task-context-list"),
    path(
        "task-contexts/by-subtask/<str:subtask_id>/",
        TaskContextBySubtaskView.as_view(),
        name="task-context-by-subtask",
    ),
    path("task-contexts/<str:task_id>/", task_context_detail, name="task-context-detail"),
]
