from django.urls import path, re_path

from . import api, limit_api, schedule_api, workflow_api

app_name = "api"
urlpatterns = [
    path("jobs", api.job_list, name="job-list"),
    path("jobs/bulk", api.bulk_action, name="job-bulk"),
    path("jobs/<str:job_id>", api.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/logs", api.job_logs, name="job-logs"),
    path("jobs/<str:job_id>/retry", api.retry, name="job-retry"),
    path("jobs/<str:job_id>/rerun", api.rerun, name="job-rerun"),
    path("jobs/<str:job_id>/cancel", api.cancel, name="job-cancel"),
    path("jobs/<str:job_id>/run-now", api.run_now, name="job-run-now"),
    path("jobs/<str:job_id>/discard", api.discard, name="job-discard"),
    path("queues", api.queue_list, name="queue-list"),
    # Any queue name, slashes and line breaks included.
    re_path(r"^queues/(?P<name>[\s\S]+)/pause$", api.queue_pause, name="queue-pause"),
    re_path(r"^queues/(?P<name>[\s\S]+)/resume$", api.queue_resume, name="queue-resume"),
    path("metrics/summary", api.summary, name="metrics-summary"),
    path("schedules", schedule_api.schedule_list, name="schedule-list"),
    path("schedules/<str:name>/pause", schedule_api.pause, name="schedule-pause"),
    path("schedules/<str:name>/resume", schedule_api.resume, name="schedule-resume"),
    path("schedules/<str:name>/trigger", schedule_api.trigger, name="schedule-trigger"),
    path("limits", limit_api.limit_list, name="limit-list"),
    re_path(r"^limits/(?P<name>[\s\S]+)$", limit_api.limit_detail, name="limit-detail"),
    path("workflows", workflow_api.workflow_list, name="workflow-list"),
    path("workflows/<str:workflow_id>", workflow_api.workflow_detail, name="workflow-detail"),
    path("workflows/<str:workflow_id>/cancel", workflow_api.cancel, name="workflow-cancel"),
    path(
        "workflows/<str:workflow_id>/retry-failed",
        workflow_api.retry_failed,
        name="workflow-retry-failed",
    ),
    path("openapi.json", api.openapi_document, name="openapi"),
    # Anything else under /api/v1/ answers a JSON 404, not the site's HTML page.
    re_path(r"^(?P<rest>[\s\S]*)$", api.not_found),
]
