"""Django system checks of the jobs app: `manage.py check` reports bad SCHEDULES, LIMITS,
MAX_SNOOZES, timing (HEARTBEAT_SECONDS, LEASE_SECONDS, CANCEL_GRACE_SECONDS), BACKOFF, EAGER,
ASYNC_CONCURRENCY and SENTRY_CAPTURE options, unknown options, and database settings the
engine cannot work under: SQLite settings under which a worker and enqueuers would fail with
"database is locked", USE_TZ off, a SQLite database in a time zone other than UTC, and job
tables routed away from the default database."""

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
        for problem in backend.timing_problems
    ]


# The README section describing an option, where it is not "Defining and enqueuing tasks".
_README_SECTIONS = {
    "ASYNC_CONCURRENCY": "Many `async def` jobs at once",
    "EAGER": "Testing your own tasks",
    "LISTEN_DATABASE_URL": "PgBouncer and other transaction-mode poolers",
    "SENTRY_CRONS": "Sentry",
}


def _option_hint(problem: str) -> str:
    option = problem.split(" ", 1)[0]
    section = _README_SECTIONS.get(option, "Defining and enqueuing tasks")
    return f'See the option in the README\'s "{section}".'


@checks.register(checks.Tags.compatibility)
def check_plain_options(app_configs=None, **kwargs):
    from .backend import JobsBackend
    from .backend_options import KNOWN
    from .compat import task_backends

    found = []
    for backend in task_backends.all():
        if not isinstance(backend, JobsBackend):
            continue
        where = f"TASKS[{backend.alias!r}]['OPTIONS']"
        found += [
            checks.Error(
                problem,
                hint=_option_hint(problem),
                obj=where,
                id="jobs.E005",
            )
            for problem in backend.option_problems
        ]
        found += [
            checks.Warning(
                f"{where} has an option {key!r} that jobsite does not know: it is ignored.",
                hint=f"Known options: {', '.join(sorted(KNOWN))}.",
                obj=where,
                id="jobs.W002",
            )
            for key in backend.unknown_options
        ]
    return found


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
def check_database_settings(app_configs=None, **kwargs):
    from django.conf import settings

    return [
        checks.Error(problem, hint=hint, obj=obj, id=error_id)
        for problem, hint, obj, error_id in database_problems(settings)
    ]


def database_problems(settings, job_alias: str | None = None) -> list[tuple[str, str, str, str]]:
    """(problem, hint, object, check id) for each setting the engine cannot work under: time
    zones other than its own (its statements write and compare aware UTC moments: leases,
    retries, schedules), and job tables routed away from the default database (its statements
    go to Django's default connection). `job_alias`: where the routers send jobs (asked when
    None)."""
    from django.db import DEFAULT_DB_ALIAS, router

    from .models import Job

    found = []
    job_alias = job_alias or router.db_for_write(Job)
    if job_alias != DEFAULT_DB_ALIAS:
        found.append(
            (
                f"DATABASE_ROUTERS send the jobs app to the database {job_alias!r}: jobsite's "
                f"tables must be on the {DEFAULT_DB_ALIAS!r} database, which its engine uses.",
                "Route the jobs and dashboard apps to the default database (return None for "
                "them from the router).",
                "settings.DATABASE_ROUTERS",
                "jobs.E009",
            )
        )
    elif not router.allow_migrate_model(DEFAULT_DB_ALIAS, Job):
        found.append(
            (
                "DATABASE_ROUTERS keep jobsite's tables out of the "
                f"{DEFAULT_DB_ALIAS!r} database (allow_migrate is False for the jobs app): "
                "migrate would record its migrations without creating the tables, and every "
                "statement would fail with 'no such table'.",
                "Let allow_migrate return None (or True) for the jobs and dashboard apps on "
                "the default database, then run migrate.",
                "settings.DATABASE_ROUTERS",
                "jobs.E009",
            )
        )
    if not settings.USE_TZ:
        found.append(
            (
                "jobsite needs USE_TZ = True (Django's default): leases, retries and schedules "
                "are aware moments in UTC, and naive local times cannot be compared with them.",
                "Set USE_TZ = True. Django's time zone documentation says how a project moves "
                "its own naive datetimes.",
                "settings.USE_TZ",
                "jobs.E007",
            )
        )
    database = settings.DATABASES.get(DEFAULT_DB_ALIAS, {})
    zone = database.get("TIME_ZONE")
    if "sqlite" in database.get("ENGINE", "") and not _is_utc(zone):
        found.append(
            (
                f"DATABASES[{DEFAULT_DB_ALIAS!r}]['TIME_ZONE'] is {zone!r}: jobsite's statements "
                "store times on SQLite in UTC, so times Django stores in that zone would be "
                "hours off (a retried job would wait out the offset).",
                f"Remove DATABASES[{DEFAULT_DB_ALIAS!r}]['TIME_ZONE'] or set it to 'UTC'.",
                f"DATABASES[{DEFAULT_DB_ALIAS!r}]",
                "jobs.E008",
            )
        )
    return found


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


def _is_utc(zone) -> bool:
    """No zone, or one always at UTC's time (UTC, Etc/UTC, Zulu, ...)."""
    if zone is None:
        return True
    import zoneinfo
    from datetime import UTC, datetime, timedelta

    try:
        tz = zoneinfo.ZoneInfo(zone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return False
    moments = [datetime(year, month, 1, tzinfo=UTC) for year in (2000, 2026) for month in (1, 7)]
    return all(moment.astimezone(tz).utcoffset() == timedelta(0) for moment in moments)
