from django.urls import path

from . import views

urlpatterns = [path("config", views.ConfigView.as_view(), name="config")]

for kind in ("agent", "team", "workflow"):
    prefix = f"{kind}s"
    urlpatterns += [
        path(prefix, views.ComponentListView.as_view(kind=kind), name=f"{kind}-list"),
        path(f"{prefix}/<str:component_id>", views.ComponentDetailView.as_view(kind=kind), name=f"{kind}-detail"),
        path(f"{prefix}/<str:component_id>/runs", views.SubmitRunView.as_view(kind=kind), name=f"{kind}-runs"),
        path(
            f"{prefix}/<str:component_id>/runs/<str:run_id>",
            views.RunDetailView.as_view(kind=kind),
            name=f"{kind}-run-detail",
        ),
        path(
            f"{prefix}/<str:component_id>/runs/<str:run_id>/cancel",
            views.CancelRunView.as_view(kind=kind),
            name=f"{kind}-run-cancel",
        ),
        path(
            f"{prefix}/<str:component_id>/runs/<str:run_id>/continue",
            views.ContinueRunView.as_view(kind=kind),
            name=f"{kind}-run-continue",
        ),
        path(
            f"{prefix}/<str:component_id>/runs/<str:run_id>/resume",
            views.ResumeRunView.as_view(kind=kind),
            name=f"{kind}-run-resume",
        ),
    ]
