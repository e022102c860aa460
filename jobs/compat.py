"""The tasks framework this install runs on: `django.tasks` (Django >= 6.0) or the backport.

Django 5.2 LTS has no `django.tasks`; the `django-tasks` package backports it with the same
`TASKS` setting, `@task` decorator and backend interface under `django_tasks`. Every engine and
console import of the framework goes through this module, so the rest of the code is written
once against Django's names.
"""

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


def reaches_anyone(signal, sender, level) -> bool:
    """Whether sending `signal` would do anything: a receiver of the project's listens, or the
    framework's own log receiver does and its logger would write at `level`.

    Most projects have only the framework's receivers, logging at DEBUG or INFO to a logger set
    to WARNING: for them the executors skip the TaskResult and the two signals per attempt, and
    an enqueue skips its task_enqueued.
    """
    sync, asynchronous = signal._live_receivers(sender)
    for receiver in (*sync, *asynchronous):
        module = getattr(receiver, "__module__", None)
        if module not in FRAMEWORK_SIGNALS or not receiver.__name__.startswith("log_"):
            return True
        if sys.modules[module].logger.isEnabledFor(level):
            return True
    return False


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
