"""The console, its JSON API (`api/v1/...`) and Prometheus metrics (`metrics`), under one prefix.

A host project mounts all three with `path("ops/", include("dashboard.urls"))`; the demo
project mounts them at the root.
"""

from django.urls import include, path

from . import views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="job"),
    path("jobs/<uuid:job_id>/retry/", views.retry, name="retry"),
    path("jobs/<uuid:job_id>/rerun/", views.rerun, name="rerun"),
    path("jobs/<uuid:job_id>/cancel/", views.cancel, name="cancel"),
    path("dead-letters/", views.dead_letter_list, name="dead_letters"),
    path("dead-letters/retry/", views.bulk_retry, name="bulk_retry"),
    path("workers/", views.worker_list, name="workers"),
    path("no-access/", views.no_access, name="no_access"),
]
urlpatterns += [
    path("api/v1/", include("dashboard.api_urls")),
    path("metrics", include("dashboard.metrics")),
]
