"""The console, its JSON API (`api/v1/...`) and Prometheus metrics (`metrics`), under one prefix.

A host project mounts all three with `path("ops/", include("dashboard.urls"))`; the demo
project mounts them at the root.
"""

from django.urls import include, path, re_path

from . import action_views, bulk_views, limit_views, schedule_views, views, workflow_views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/bulk/", bulk_views.bulk_action, name="bulk_action"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="job"),
    path("jobs/<uuid:job_id>/retry/", action_views.retry, name="retry"),
    path("jobs/<uuid:job_id>/rerun/", action_views.rerun, name="rerun"),
    path("jobs/<uuid:job_id>/cancel/", action_views.cancel, name="cancel"),
    path("jobs/<uuid:job_id>/run-now/", action_views.run_now, name="run_now"),
    path("jobs/<uuid:job_id>/discard/", action_views.discard, name="discard"),
    path("dead-letters/", views.dead_letter_list, name="dead_letters"),
    path("dead-letters/retry/", bulk_views.bulk_retry, name="bulk_retry"),
    path("queues/", views.queue_list, name="queues"),
    re_path(r"^queues/(?P<name>[\s\S]+)/pause/$", action_views.queue_pause, name="queue_pause"),
    re_path(r"^queues/(?P<name>[\s\S]+)/resume/$", action_views.queue_resume, name="queue_resume"),
    path("workers/", views.worker_list, name="workers"),
    path("schedules/", schedule_views.schedule_list, name="schedules"),
    path("schedules/<str:name>/pause/", schedule_views.pause, name="schedule_pause"),
    path("schedules/<str:name>/resume/", schedule_views.resume, name="schedule_resume"),
    path("schedules/<str:name>/trigger/", schedule_views.trigger, name="schedule_trigger"),
    path("limits/", limit_views.limit_list, name="limits"),
    path("limits/set/", limit_views.set_limit, name="limit_set"),
    path("limits/clear/", limit_views.clear_limit, name="limit_clear"),
    path("workflows/", workflow_views.workflow_list, name="workflows"),
    path("workflows/<uuid:workflow_id>/", workflow_views.workflow_detail, name="workflow"),
    path(
        "workflows/<uuid:workflow_id>/cancel/",
        workflow_views.cancel,
        name="workflow_cancel",
    ),
    path(
        "workflows/<uuid:workflow_id>/retry-failed/",
        workflow_views.retry_failed,
        name="workflow_retry_failed",
    ),
    path("tasks/", views.task_list, name="tasks"),
    # Any stored task path reverses, newlines and all: a row written by raw SQL or another
    # tool must not take the page listing it down.
    re_path(r"^tasks/(?P<task_path>[\s\S]+)/$", views.task_detail, name="task"),
    path("audit/", views.audit, name="audit"),
    path("api/docs/", views.api_docs, name="api_docs"),
    path("status/worker-banner/", views.worker_banner, name="worker_banner"),
    path("no-access/", views.no_access, name="no_access"),
]
urlpatterns += [
    path("api/v1/", include("dashboard.api_urls")),
    path("metrics", include("dashboard.metrics")),
]
