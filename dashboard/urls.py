from django.urls import path

from . import schedule_views, views

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
    path("schedules/", schedule_views.schedule_list, name="schedules"),
    path("schedules/<str:name>/pause/", schedule_views.pause, name="schedule_pause"),
    path("schedules/<str:name>/resume/", schedule_views.resume, name="schedule_resume"),
    path("schedules/<str:name>/trigger/", schedule_views.trigger, name="schedule_trigger"),
    path("no-access/", views.no_access, name="no_access"),
]
