"""Notes, under /api/v1/users/<user_id>/notes/ (facts_app.api.urls supplies the prefix)."""

from django.urls import path

from facts_app.api import notes, notes_zone

urlpatterns = [
    path("", notes.NotesRecallView.as_view(), name="notes-recall"),
    path("long-term/", notes.NoteLongTermView.as_view(), name="notes-long-term"),
    path(
        "long-term/history/",
        notes.NoteLongTermHistoryView.as_view(),
        name="notes-long-term-history",
    ),
    path("daily/", notes.NoteDailyView.as_view(), name="notes-daily"),
    path("daily/<str:day>/", notes.NoteDailyDayView.as_view(), name="notes-daily-day"),
    path("clear/", notes.NoteClearView.as_view(), name="notes-clear"),
    path("show/", notes_zone.NoteShowView.as_view(), name="notes-show"),
    path("prune/", notes_zone.NotePruneView.as_view(), name="notes-prune"),
]
