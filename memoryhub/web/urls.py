from django.contrib.auth import views as auth_views
from django.urls import path

from memoryhub.web import transfer, views

app_name = "web"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("switch-tenant/", views.tenant_switch, name="tenant-switch"),
    path("import/", transfer.import_upload, name="import"),
    path("import/confirm/", transfer.import_confirm, name="import-confirm"),
    path("export/", transfer.export_download, name="export"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
