"""The tasks framework this install runs on: `django.tasks` (Django >= 6.0) or the backport.

Django 5.2 LTS has no `django.tasks`; the `django-tasks` package backports it with the same
`TASKS` setting, `@task` decorator and backend interface under `django_tasks`. Every engine and
console import of the framework goes through this module, so the rest of the code is written
once against Django's names.
"""

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
    from django_tasks import (
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started


__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
