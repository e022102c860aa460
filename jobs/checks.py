"""Django system checks of the jobs app: `manage.py check` reports a bad SCHEDULES option and
SQLite settings under which a worker and enqueuers would fail with "database is locked"."""

from django.core import checks


@checks.register(checks.Tags.compatibility)
def check_schedules(app_configs=None, **kwargs):
    from . import schedules
    from .backend import JobsBackend
    from .compat import task_backends

    errors = []
    for backend in task_backends.all():
        if not isinstance(backend, JobsBackend):
            continue
        for problem in schedules.check(backend):
            errors.append(
                checks.Error(
                    problem,
                    hint="See SCHEDULES in the README.",
                    obj=f"TASKS[{backend.alias!r}]['OPTIONS']['SCHEDULES']",
                    id="jobs.E001",
                )
            )
    return errors


@checks.register(checks.Tags.compatibility)
def check_limits(app_configs=None, **kwargs):
    from . import limit_spec
    from .backend import JobsBackend
    from .compat import task_backends

    errors = []
    for backend in task_backends.all():
        if not isinstance(backend, JobsBackend):
            continue
        for problem in limit_spec.check(backend.options.get("LIMITS")):
            errors.append(
                checks.Error(
                    problem,
                    hint="See LIMITS in the README.",
                    obj=f"TASKS[{backend.alias!r}]['OPTIONS']['LIMITS']",
                    id="jobs.E002",
                )
            )
    return errors


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
