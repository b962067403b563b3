from django.urls import URLPattern, path

from memoryhub.credentials import api

urlpatterns: list[URLPattern] = [
    path("users/<str:user_id>/tokens/", api.PersonTokenListView.as_view(), name="user-tokens"),
    path("tokens/rotate-secret/", api.SigningKeyRotateView.as_view(), name="tokens-rotate"),
    path("tokens/<str:jti>/", api.PersonTokenDetailView.as_view(), name="token-detail"),
]
