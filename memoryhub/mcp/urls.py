from django.urls import path

from memoryhub.mcp.views import McpView

app_name = "mcp"

urlpatterns = [path("", McpView.as_view(), name="endpoint")]
