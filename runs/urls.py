from django.urls import path

from . import views

urlpatterns = [
    path("config", views.ConfigView.as_view(), name="config"),
    path("ui/", views.TimelinePageView.as_view(), name="timeline"),
    path("ui", views.TimelinePageView.as_view()),
]

for kind in ("agent", "team", "workflow"):
    prefix = f"{kind}s"
    urlpatterns += [
        path(prefix, views.ComponentListView.as_view(kind=kind), name=f"{kind}-list"),
        path(f"{prefix}/<str:component_id>", views.ComponentDetailView.as_view(kind=kind), name=f"{kind}-detail"),
        path(f"{prefix}/<str:component_id>/runs", views.SubmitRunView.as_view(kind=kind), name=f"{kind}-runs"),
    ]
    run = f"{prefix}/<str:component_id>/runs/<str:run_id>"
    for suffix, view, name in [
        ("", views.RunDetailView, "run-detail"),
        ("/cancel", views.CancelRunView, "run-cancel"),
        ("/continue", views.ContinueRunView, "run-continue"),
        ("/resume", views.ResumeRunView, "run-resume"),
    ]:
        urlpatterns.append(path(f"{run}{suffix}", view.as_view(kind=kind), name=f"{kind}-{name}"))
