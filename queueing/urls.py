from django.urls import path

from . import views

urlpatterns = [
    path("queue/jobs", views.JobListView.as_view(), name="queue-jobs"),
    path("queue/jobs/<str:job_id>", views.JobDetailView.as_view(), name="queue-job"),
    path("queue/jobs/<str:job_id>/requeue", views.JobRequeueView.as_view(), name="queue-job-requeue"),
    path("queue/stats", views.QueueStatsView.as_view(), name="queue-stats"),
    path("metrics", views.MetricsView.as_view(), name="metrics"),
]
