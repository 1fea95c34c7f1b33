from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from .health import HealthView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", HealthView.as_view(), name="health"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("", include("queueing.urls")),
    path("", include("runs.urls")),
]

handler400 = "agentos_project.core.exceptions.bad_request"
handler403 = "agentos_project.core.exceptions.permission_denied"
handler404 = "agentos_project.core.exceptions.not_found"
handler500 = "agentos_project.core.exceptions.server_error"
