from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from memoryhub import health

urlpatterns = [
    path("", include("memoryhub.web.urls")),
    path("", include("memoryhub.retention.urls")),
    path("sessions/", include("sessions_app.urls")),
    path("sessions/", include("memoryhub.context.urls")),
    path("people/", include("memoryhub.people.page_urls")),
    path("search/", include("memoryhub.search.urls")),
    path("tenant/", include("memoryhub.accounts.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("memoryhub.retention.api_urls")),
    path("api/v1/", include("sessions_app.api.urls")),
    path("api/v1/", include("memoryhub.context.api_urls")),
    path("api/v1/", include("facts_app.api.urls")),
    path("api/v1/", include("memoryhub.people.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
]

handler404 = "memoryhub.core.errors.page_or_api_404"
