from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Registers the SQLite clock and search functions on every connection, from the first on.
        from . import search, store  # noqa: F401
