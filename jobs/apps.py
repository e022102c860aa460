from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Registers the SQLite clock and search functions on every connection, from the first on;
        # checks registers the system checks of the SCHEDULES option.
        from . import checks, db, search  # noqa: F401
        from .sentry import keep_repeats_out

        keep_repeats_out()
