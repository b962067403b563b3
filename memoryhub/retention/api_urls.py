from django.urls import URLPattern, path

from memoryhub.retention.api import PurgeView

urlpatterns: list[URLPattern] = [
    path("purge/", PurgeView.as_view(), name="purge"),
]
