"""Django system checks of the jobs app: `manage.py check` reports a bad SCHEDULES option."""

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
