"""Minimal Django settings for the Django-based peers (django-tasks-db, django-q2).

BENCH_DB_URL picks the database (postgres://... or sqlite:////abs/path), BENCH_APP the peer.
"""

import json
import os

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_url = os.environ["BENCH_DB_URL"]
if _url.startswith("sqlite:"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _url.split("sqlite://", 1)[1],
            "OPTIONS": json.loads(os.environ.get("BENCH_SQLITE_OPTIONS", "{}")),
        }
    }
else:
    _name = _url.rsplit("/", 1)[1]
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _name,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "5432",
        }
    }

# BENCH_CONN_MAX_AGE=none: persistent connections (Django's CONN_MAX_AGE = None). Both peers
# call close_old_connections() around every task / broker call, so with Django's default (0)
# they open a new PostgreSQL connection each time.
if os.environ.get("BENCH_CONN_MAX_AGE"):
    _age = os.environ["BENCH_CONN_MAX_AGE"]
    DATABASES["default"]["CONN_MAX_AGE"] = None if _age == "none" else int(_age)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

_app = os.environ["BENCH_APP"]
if _app == "django_tasks_db":
    INSTALLED_APPS = ["django_tasks_db"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
else:
    INSTALLED_APPS = ["django_q"]
    Q_CLUSTER = {
        "name": "bench",
        "orm": "default",
        "log_level": "WARNING",
        **json.loads(os.environ.get("BENCH_Q_CLUSTER", "{}")),
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "WARNING"},
    "loggers": {
        name: {"level": "WARNING"} for name in ("django_tasks_db", "django.tasks", "django-q")
    },
}
