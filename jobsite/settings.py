"""Settings for the jobsite project.

Production-shaped: secrets and switches come from the environment, with defaults that are safe
for a laptop. `DATABASE_URL` selects the database (any dj-database-url URL); without it an
SQLite file beside this project is used, in WAL mode so a worker and the web server share it.
"""

import json
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def number_from_environment(name, default, kind=float):
    """The environment variable `name` as a number (`kind`), or `default` when unset or empty;
    a value that is not one stops the process naming the variable."""
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ImproperlyConfigured(f"{name} must be {what}, not {raw!r}") from None


def env_flag(name, default=False):
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_flag("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "").strip()
if not SECRET_KEY:
    if not DEBUG:
        # Anyone who knows the key can forge sessions and signed cookies: every process that
        # loads these settings (web server, worker, manage.py) stops here instead.
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it to a long random string kept secret, e.g. "
            "the output of: python -c 'import secrets; print(secrets.token_urlsafe(50))'. "
            "(./dev up and ./dev test make one for local use; DJANGO_DEBUG=1 runs with a "
            "public development key.)"
        )
    # DJANGO_DEBUG=1 only: a fixed development key, public in this repository.
    SECRET_KEY = "jobsite-local-development-key-not-for-production-use-0123456789"

ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    "jobs",
    "dashboard",
    # The demo project itself: its tasks and the `demo` command.
    "jobsite",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a throttled login into the lockout page.
    "axes.middleware.AxesMiddleware",
]
# Django's built-in Content-Security-Policy (middleware and context processor) is new in 6.0;
# on 5.2 LTS the other security headers still apply.
HAS_BUILTIN_CSP = django.VERSION >= (6, 0)
if not HAS_BUILTIN_CSP:
    MIDDLEWARE.remove("django.middleware.csp.ContentSecurityPolicyMiddleware")

ROOT_URLCONF = "jobsite.urls"
WSGI_APPLICATION = "jobsite.wsgi.application"
ASGI_APPLICATION = "jobsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
            + (["django.template.context_processors.csp"] if HAS_BUILTIN_CSP else []),
        },
    }
]


def database_from_environment():
    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        url = f"sqlite:///{BASE_DIR / 'jobsite.sqlite3'}"
    # Persistent, health-checked connections: a new PostgreSQL connection per request costs
    # more than most console pages.
    config = dj_database_url.parse(
        url,
        conn_max_age=number_from_environment("JOBSITE_CONN_MAX_AGE", 60, int),
        conn_health_checks=True,
    )
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["OPTIONS"] = {
            # Every write transaction takes the write lock up front, so two processes never
            # deadlock upgrading a read lock; waits are bounded by the busy timeout.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;"
            ),
        }
        # Tests that run the worker in a subprocess need a file both processes can open;
        # one per test run, so concurrent runs never share it.
        config["TEST"] = {"NAME": f"/tmp/jobsite-test-{os.getpid()}.sqlite3"}
    elif config["ENGINE"] == "django.db.backends.postgresql":
        config["OPTIONS"] = {"application_name": "jobsite"}
        pool_size = number_from_environment("JOBSITE_DB_POOL", 0, int)
        if pool_size > 0:
            # Django's own pool (psycopg_pool), up to JOBSITE_DB_POOL connections per process;
            # a pooled connection goes back to the pool at each request's end instead of
            # staying open, so the pool replaces CONN_MAX_AGE.
            config["OPTIONS"]["pool"] = {"min_size": 1, "max_size": pool_size}
            config["CONN_MAX_AGE"] = 0
        config["TEST"] = {"NAME": f"test_{config['NAME']}_{os.getpid()}"}
    return config


DATABASES = {"default": database_from_environment()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def demo_schedules():
    """Recurring jobs of the demo; JOBSITE_SCHEDULES (JSON) replaces them ('{}' for none)."""
    if "JOBSITE_SCHEDULES" in os.environ:
        try:
            return json.loads(os.environ["JOBSITE_SCHEDULES"])
        except ValueError as e:
            raise ImproperlyConfigured(f"JOBSITE_SCHEDULES is not valid JSON: {e}") from None
    return {
        "heartbeat-report": {"task": "jobsite.tasks.heartbeat_report", "every": 60},
        "nightly-cleanup": {
            "task": "jobsite.tasks.nightly_cleanup",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "queue_name": "reports",
        },
    }


def limits_from_environment():
    """Flow-control limits; JOBSITE_LIMITS (JSON) sets them (none by default)."""
    try:
        return json.loads(os.environ.get("JOBSITE_LIMITS", "{}"))
    except ValueError as e:
        raise ImproperlyConfigured(f"JOBSITE_LIMITS is not valid JSON: {e}") from None


TASKS = {
    "default": {
        "BACKEND": "jobs.backend.JobsBackend",
        "QUEUES": [],
        "OPTIONS": {
            "MAX_ATTEMPTS": 3,
            "BACKOFF": {
                "strategy": "exponential",
                "base": 15,
                "multiplier": 2,
                "max": 3600,
                "jitter": 3,
            },
            # Overridable for operations and for tests that exercise recovery quickly.
            "HEARTBEAT_SECONDS": number_from_environment("JOBSITE_HEARTBEAT_SECONDS", 10.0),
            "LEASE_SECONDS": number_from_environment("JOBSITE_LEASE_SECONDS", 60.0),
            "CANCEL_GRACE_SECONDS": number_from_environment("JOBSITE_CANCEL_GRACE_SECONDS", 10.0),
            "SCHEDULES": demo_schedules(),
            "SCHEDULE_GRACE_SECONDS": number_from_environment(
                "JOBSITE_SCHEDULE_GRACE_SECONDS", 10.0
            ),
            "LIMITS": limits_from_environment(),
            "MAX_SNOOZES": number_from_environment("JOBSITE_MAX_SNOOZES", 100, int),
            # A direct connection for the worker's wake-ups when DATABASE_URL names a pooler.
            "LISTEN_DATABASE_URL": os.environ.get("JOBSITE_LISTEN_DATABASE_URL") or None,
        },
    }
}

# Login throttling (django-axes): 5 failures for one username, or from one client address,
# within 15 minutes refuse further attempts for 15 minutes (from the last counted failure;
# attempts while refused are not counted, so the wait does not grow). API tokens are not logins.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "jobsite.lockout.lockout_response"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "jobsite.storage.StaticStorage"
        )
    },
}
# Serve from the app folders too, so a fresh checkout works before collectstatic (production
# runs it: hashed names, long cache lifetimes).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Security headers: no inline scripts, no framing, no third-party origins.
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
    "base-uri": ["'self'"],
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
# A refused form (stale or missing token) answers inside the console layout.
CSRF_FAILURE_VIEW = "dashboard.errors.csrf_failure"
SESSION_COOKIE_SECURE = env_flag("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# HTTPS. HSTS is sent on HTTPS responses only. Behind a reverse proxy that terminates TLS, Django
# sees plain HTTP unless told which header says otherwise: opt in only when the proxy always sets
# (overwrites) X-Forwarded-Proto, or any client could claim HTTPS.
if env_flag("DJANGO_SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_flag("DJANGO_SECURE_SSL_REDIRECT")
SECURE_HSTS_SECONDS = number_from_environment("DJANGO_SECURE_HSTS_SECONDS", 0, int)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env_flag("DJANGO_SECURE_HSTS_PRELOAD")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        # One line per event: job data a task logs is escaped as the engine's own lines are.
        "worker": {
            "()": "jobs.logs.OneLineFormatter",
            "fmt": "%(asctime)s %(levelname)-7s %(message)s",
        },
    },
    "handlers": {
        "worker": {"class": "logging.StreamHandler", "formatter": "worker"},
    },
    "loggers": {
        "jobs": {
            "handlers": ["worker"],
            "level": os.environ.get("JOBSITE_LOG_LEVEL", "INFO"),
            "propagate": False,
        },
        # A 500's traceback, to the same stream as the worker's lines (standard error). Django's
        # own handlers print these only with DEBUG on.
        "django.request": {"handlers": ["worker"], "level": "ERROR", "propagate": False},
        "dashboard": {"handlers": ["worker"], "level": "WARNING", "propagate": False},
        "django.tasks": {"level": "WARNING"},
        "django_tasks": {"level": "WARNING"},
    },
}
