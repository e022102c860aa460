"""The tasks framework this install runs on: `django.tasks` (Django >= 6.0) or the backport.

Django 5.2 LTS has no `django.tasks`; the `django-tasks` package backports it with the same
`TASKS` setting, `@task` decorator and backend interface under `django_tasks`. Every engine and
console import of the framework goes through this module, so the rest of the code is written
once against Django's names.
"""

import logging
import sys

try:
    from django.tasks import (
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django < 6.0: the backport.
    from importlib.util import find_spec

    if find_spec("django_tasks") is None:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "jobsite on Django 5.2 needs the django-tasks backport (Django 6 has it built in): "
            'pip install "jobsite[django52]" "Django>=5.2,<6.0"'
        ) from None
    from django_tasks import (  # type: ignore[no-redef]
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import Task, TaskError  # type: ignore[no-redef]
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[no-redef]

    class _NoEmptyTraceback(logging.Filter):
        """The backport logs a failed task with `logger.exception`, and jobsite sends
        task_finished outside the except block (one event, one line: the engine logs the
        error itself), so with no exception at hand it printed "NoneType: None" on a line of
        its own. Django 6 passes the exception only when there is one."""

        def filter(self, record):
            if record.exc_info and record.exc_info[0] is None:
                record.exc_info = None
            return True

    logging.getLogger("django_tasks").addFilter(_NoEmptyTraceback())


def reaches_anyone(signal, sender, level) -> bool:
    """Whether sending `signal` would do anything: a receiver of the project's listens, or the
    framework's own log receiver does and its logger would write at `level`.

    Most projects have only the framework's receivers, logging at DEBUG or INFO to a logger set
    to WARNING, and at ERROR for a failed task to handlers that drop it (`writes`): for them
    the executors skip the TaskResult and the two signals per attempt, and an enqueue skips its
    task_enqueued.
    """
    sync, asynchronous = signal._live_receivers(sender)
    for receiver in (*sync, *asynchronous):
        module = getattr(receiver, "__module__", None)
        if module not in FRAMEWORK_SIGNALS or not receiver.__name__.startswith("log_"):
            return True
        if writes(sys.modules[module].logger, level):
            return True
    return False


def writes(logger: logging.Logger, level: int) -> bool:
    """Whether a record at `level` from `logger` would be written anywhere: the walk of
    `Logger.handle` and `callHandlers`, without making the record.

    A project left with Django's default logging and DEBUG off sends an ERROR record of a
    failed task to two handlers that drop it (the console's, for DEBUG only, and the mail to
    ADMINS, of whom there are none): the record, the signal and the TaskResult before it took
    a quarter of each failed attempt's time. Only Django's own filters and mail handler are
    known to drop a record: any other filter or handler (subclasses included) counts as
    writing it, and so does every record where a library has replaced the record's making or
    the walk itself, on the logger or its class (sentry_sdk's logging integration sends records
    to Sentry from `callHandlers`).
    """
    if logger.disabled or not logger.isEnabledFor(level):
        return False
    if logger.filters or not _standard_walk(logger):
        return True
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level and not _drops(handler):
                return True
        current = current.parent if current.propagate else None  # type: ignore[assignment]
    if not found:
        last = logging.lastResort
        return last is not None and level >= last.level
    return False


def _standard_walk(logger: logging.Logger) -> bool:
    """Are the record's making and its walk to the handlers Python's own, on this logger and
    its class alike (a replaced one may do anything with the record)?"""
    steps = (logger.makeRecord, logger.handle, logger.callHandlers)
    return logging.getLogRecordFactory() is logging.LogRecord and all(
        getattr(getattr(step, "__func__", step), "__module__", None) == "logging" for step in steps
    )


def _drops(handler: logging.Handler) -> bool:
    """Whether `handler` surely drops every record, by Django's settings alone (filters run in
    order: one not known here may act on the record before a known one drops it)."""
    from django.conf import settings
    from django.utils.log import AdminEmailHandler, RequireDebugFalse, RequireDebugTrue

    for found in handler.filters:
        if type(found) is RequireDebugTrue:
            if not settings.DEBUG:
                return True
        elif type(found) is RequireDebugFalse:
            if settings.DEBUG:
                return True
        else:
            return False
    # AdminEmailHandler.emit returns at once in this case.
    return (
        type(handler) is AdminEmailHandler
        and not settings.ADMINS
        and handler.send_mail.__func__ is AdminEmailHandler.send_mail  # type: ignore[attr-defined]
    )


# The framework's signals modules: Django's, and the backport's (Django 5.2).
FRAMEWORK_SIGNALS = frozenset({"django.tasks.signals", "django_tasks.signals"})


__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "reaches_anyone",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
