"""Django system checks of the jobs app: `manage.py check` reports bad SCHEDULES, LIMITS,
MAX_SNOOZES, timing (HEARTBEAT_SECONDS, LEASE_SECONDS, CANCEL_GRACE_SECONDS) and
SENTRY_CAPTURE options, and SQLite settings under which a worker and enqueuers would fail with
"database is locked"."""

from django.core import checks


@checks.register(checks.Tags.compatibility)
def check_schedules(app_configs=None, **kwargs):
    from . import schedules

    return _option_errors("SCHEDULES", schedules.check, "jobs.E001")


@checks.register(checks.Tags.compatibility)
def check_limits(app_configs=None, **kwargs):
    from . import limit_spec

    return _option_errors(
        "LIMITS", lambda backend: limit_spec.check(backend.options.get("LIMITS")), "jobs.E002"
    )


@checks.register(checks.Tags.compatibility)
def check_max_snoozes(app_configs=None, **kwargs):
    from . import outcome

    return _option_errors("MAX_SNOOZES", outcome.max_snoozes_problems, "jobs.E003")


@checks.register(checks.Tags.compatibility)
def check_timing(app_configs=None, **kwargs):
    from . import timing
    from .backend import JobsBackend
    from .compat import task_backends

    return [
        checks.Error(
            problem,
            hint="See HEARTBEAT_SECONDS, LEASE_SECONDS and CANCEL_GRACE_SECONDS in the README.",
            obj=f"TASKS[{backend.alias!r}]['OPTIONS']",
            id="jobs.E006",
        )
        for backend in task_backends.all()
        if isinstance(backend, JobsBackend)
        for problem in timing.problems(
            backend.timing.heartbeat_seconds,
            backend.timing.lease_seconds,
            backend.timing.cancel_grace_seconds,
        )
    ]


@checks.register(checks.Tags.compatibility)
def check_sentry_capture(app_configs=None, **kwargs):
    from . import sentry

    return _option_errors("SENTRY_CAPTURE", sentry.capture_problems, "jobs.E004")


def _option_errors(option: str, problems_of, error_id: str) -> list:
    """An error per problem `problems_of(backend)` finds in `option` of each jobs backend."""
    from .backend import JobsBackend
    from .compat import task_backends

    return [
        checks.Error(
            problem,
            hint=f"See {option} in the README.",
            obj=f"TASKS[{backend.alias!r}]['OPTIONS'][{option!r}]",
            id=error_id,
        )
        for backend in task_backends.all()
        if isinstance(backend, JobsBackend)
        for problem in problems_of(backend)
    ]


@checks.register(checks.Tags.compatibility)
def check_sqlite_transactions(app_configs=None, **kwargs):
    from django.conf import settings

    return sqlite_warnings(settings.DATABASES)


def sqlite_warnings(databases: dict) -> list:
    warnings = []
    for alias, database in databases.items():
        if "sqlite" not in database.get("ENGINE", ""):
            continue
        mode = (database.get("OPTIONS") or {}).get("transaction_mode")
        if str(mode).upper() != "IMMEDIATE":
            warnings.append(
                checks.Warning(
                    f"SQLite database {alias!r} starts transactions DEFERRED: a worker and "
                    "concurrent enqueuers deadlock upgrading their locks and fail with "
                    '"database is locked".',
                    hint=f"Set DATABASES[{alias!r}]['OPTIONS'] = "
                    '{"transaction_mode": "IMMEDIATE", "timeout": 30}. jobsite turns on WAL '
                    "and a 30 s busy timeout by itself.",
                    obj=f"DATABASES[{alias!r}]",
                    id="jobs.W001",
                )
            )
    return warnings
