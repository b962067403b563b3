from django.contrib.auth import views as auth_views
from django.urls import path

from memoryhub.web import views

app_name = "web"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("switch-tenant/", views.tenant_switch, name="tenant-switch"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
