from django.urls import path

from memoryhub.people import api

urlpatterns = [
    path("users/", api.EndUserListView.as_view(), name="user-list"),
    path("users/<str:user_id>/", api.EndUserDetailView.as_view(), name="user-detail"),
    path("users/<str:user_id>/export/", api.EndUserExportView.as_view(), name="user-export"),
]
