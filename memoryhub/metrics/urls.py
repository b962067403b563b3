from django.urls import URLPattern, path

from memoryhub.metrics import views

urlpatterns: list[URLPattern] = [
    path("metrics", views.metrics, name="metrics"),
]
