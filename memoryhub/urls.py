from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from memoryhub import health

urlpatterns = [
    # The API first: a bot's request is resolved without trying every page's pattern before it.
    path("api/v1/", include("memoryhub.retention.api_urls")),
    path("api/v1/", include("sessions_app.api.urls")),
    path("api/v1/", include("memoryhub.context.api_urls")),
    path("api/v1/", include("facts_app.api.urls")),
    path("api/v1/", include("memoryhub.people.urls")),
    path("api/v1/", include("memoryhub.jobs.api_urls")),
    path("api/v1/", include("memoryhub.credentials.urls")),
    path("", include("memoryhub.web.urls")),
    path("", include("memoryhub.retention.urls")),
    path("sessions/", include("sessions_app.urls")),
    path("sessions/", include("memoryhub.context.urls")),
    path("people/", include("memoryhub.people.page_urls")),
    path("search/", include("memoryhub.search.urls")),
    path("tenant/", include("memoryhub.accounts.urls")),
    path("admin/", admin.site.urls),
    path("mcp/", include("memoryhub.mcp.urls")),
    # Seed 002's Memory Service API, as its SDK calls it (README: Compatibility).
    path("v1/memory/", include("memoryhub.compat.seed002.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file (?script), so the page keeps the
    # Content-Security-Policy's script-src 'self'; Swagger UI's own inline <style> needs styles.
    path(
        "api/docs/",
        csp_update({"style-src": ["'unsafe-inline'"]})(
            SpectacularSwaggerSplitView.as_view(url_name="api-schema")
        ),
        name="api-docs",
    ),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("memoryhub.metrics.urls")),
]

# Errors raised outside DRF's views: JSON under /api/, Django's pages elsewhere; a database
# outage is a 503 with Retry-After either way (memoryhub.core.errors).
handler400 = "memoryhub.core.errors.page_or_api_400"
handler403 = "memoryhub.core.errors.page_or_api_403"
handler404 = "memoryhub.core.errors.page_or_api_404"
handler500 = "memoryhub.core.errors.page_or_api_500"
