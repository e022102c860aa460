"""`manage.py enqueue dotted.task.path [ARGS...]`: enqueue one job from a shell or a runbook."""

import argparse
import json
import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.backend import JobTask, load_task
from jobs.compat import InvalidTask
from jobs.errors import DuplicateJob
from jobs.management.arguments import whole_number
from jobs.management.database import ChecksExplained, database_errors_explained
from jobs.retry import MAX_ATTEMPTS, MIN_ATTEMPTS

# Exit status for anything wrong with what was asked (as argparse uses for bad options).
USAGE_ERROR = 2
RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
INTEGER = re.compile(r"-?\d+")


def json_or_text(value):
    """An argument as JSON when it parses as JSON (42, true, null, [1], {"a": 1}), else text."""
    try:
        return json.loads(value)
    except ValueError:
        if INTEGER.fullmatch(value.strip()):
            # Python's own limit on an integer's digits: a number, too long to take as one.
            raise argparse.ArgumentTypeError(
                f"{value[:20]}... is a number of {len(value.strip()):,} digits, more than a "
                "job argument may hold; give it as a JSON string ('\"123...\"') to pass text"
            ) from None
        return value


def json_object(value):
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--kwargs is not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(
            f"--kwargs must be a JSON object like '{{\"user_id\": 42}}', not {value!r}"
        )
    return parsed


def moment(value):
    """ISO 8601 (naive = the project's time zone) or relative to now: +30s, +5m, +2h, +1d."""
    relative = RELATIVE.match(value.strip())
    if relative:
        amount, unit = relative.groups()
        try:
            return timezone.now() + timedelta(seconds=float(amount) * UNIT_SECONDS[unit])
        except OverflowError:
            raise argparse.ArgumentTypeError(
                f"--run-after {value} is too far ahead (past the year 9999)"
            ) from None
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"--run-after takes an ISO 8601 date-time (2026-01-31T09:00:00+00:00) or a delay "
            f"like +30s, +5m, +2h, +1d; not {value!r}"
        )
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


attempts = whole_number(MIN_ATTEMPTS, MAX_ATTEMPTS, what="attempts")
priority = whole_number(-100, 100, what="a priority")


class Command(ChecksExplained, BaseCommand):
    help = (
        "Enqueue one job of the task at TASK_PATH and print its id on the last line. Each ARG "
        "is read as JSON when it parses (42, true, null, [1, 2], '\"42\"' for the text 42), "
        "otherwise taken as text."
    )

    def add_arguments(self, parser):
        parser.add_argument("task_path", metavar="TASK_PATH", help="e.g. myapp.tasks.send_email")
        parser.add_argument("task_args", nargs="*", type=json_or_text, metavar="ARG")
        parser.add_argument(
            "--kwargs", type=json_object, default={}, metavar="JSON", help="keyword arguments"
        )
        parser.add_argument("--queue", default=None, metavar="Q", help="queue name")
        parser.add_argument(
            "--run-after",
            type=moment,
            default=None,
            metavar="WHEN",
            help="not before: ISO 8601, or +30s / +5m / +2h / +1d from now",
        )
        parser.add_argument("--priority", type=priority, default=None, metavar="N")
        parser.add_argument("--max-attempts", type=attempts, default=None, metavar="N")

    def handle(
        self, *_, task_path, task_args, kwargs, queue, run_after, priority, max_attempts, **__
    ):
        with database_errors_explained(migrated=True):
            self._enqueue(task_path, task_args, kwargs, queue, run_after, priority, max_attempts)

    def _enqueue(self, task_path, task_args, kwargs, queue, run_after, priority, max_attempts):
        try:
            task = load_task(task_path)
        except (ImportError, TypeError) as e:
            raise CommandError(f"unknown task {task_path!r}: {e}", returncode=USAGE_ERROR) from None
        options = {"queue_name": queue, "run_after": run_after, "priority": priority}
        if max_attempts is not None:
            if not isinstance(task, JobTask):
                raise CommandError(
                    f"{task_path} is not served by the jobs backend; --max-attempts needs it",
                    returncode=USAGE_ERROR,
                )
            options["max_attempts"] = max_attempts
        try:
            with transaction.atomic():
                result = task.using(**options).enqueue(*task_args, **kwargs)
        except (InvalidTask, DuplicateJob, TypeError, ValueError) as e:
            raise CommandError(f"not enqueued: {e}", returncode=USAGE_ERROR) from None
        when = f"at {result.task.run_after.isoformat()}" if result.task.run_after else "now"
        self.stdout.write(
            f"Enqueued {task_path} on queue {result.task.queue_name!r}, due {when}. Job id:"
        )
        self.stdout.write(str(result.id))
