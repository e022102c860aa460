from django.urls import path

from . import views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="job"),
    path("jobs/<uuid:job_id>/retry/", views.retry, name="retry"),
    path("jobs/<uuid:job_id>/rerun/", views.rerun, name="rerun"),
    path("jobs/<uuid:job_id>/cancel/", views.cancel, name="cancel"),
    path("jobs/<uuid:job_id>/run-now/", views.run_now, name="run_now"),
    path("dead-letters/", views.dead_letter_list, name="dead_letters"),
    path("dead-letters/retry/", views.bulk_retry, name="bulk_retry"),
    path("workers/", views.worker_list, name="workers"),
    path("tasks/", views.task_list, name="tasks"),
    path("tasks/<path:task_path>/", views.task_detail, name="task"),
    path("no-access/", views.no_access, name="no_access"),
]
