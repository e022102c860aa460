"""Jobs and attempts as JSON, and the one shape of every API error."""

from django.http import JsonResponse

# Page sizes of the job list.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500

# The contract's fields of a job, plus two documented extensions an operator needs to read a
# running job: which worker holds it, and whether a cancel was asked for.
JOB_FIELDS = (
    "id",
    "task_path",
    "args",
    "kwargs",
    "queue_name",
    "priority",
    "state",
    "attempt",
    "max_attempts",
    "run_after",
    "not_after",
    "dedup_key",
    "rerun_of",
    "parent",
    "enqueued_at",
    "started_at",
    "finished_at",
    "error_type",
    "error_message",
    "error_traceback",
    "dead_letter_reason",
    "return_value",
    "worker_id",
    "cancel_requested_at",
)
# Model fields to load for JOB_FIELDS (the foreign keys are read as their ids).
JOB_COLUMNS = tuple(f"{name}_id" if name in ("rerun_of", "parent") else name for name in JOB_FIELDS)


def _time(value):
    return value.isoformat() if value is not None else None


def _id(value):
    return str(value) if value is not None else None


def job_json(job, reruns=()) -> dict:
    """The job; `reruns` are the ids of the runs made from it, newest first."""
    return {
        "id": str(job.id),
        "task_path": job.task_path,
        "args": job.args,
        "kwargs": job.kwargs,
        "queue_name": job.queue_name,
        "priority": job.priority,
        "state": job.state,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_after": _time(job.run_after),
        "not_after": _time(job.not_after),
        "dedup_key": job.dedup_key,
        "rerun_of": _id(job.rerun_of_id),
        "reruns": [str(i) for i in reruns],
        "parent": _id(job.parent_id),
        "enqueued_at": _time(job.enqueued_at),
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "error_type": job.error_type,
        "error_message": job.error_message,
        "error_traceback": job.error_traceback,
        "dead_letter_reason": job.dead_letter_reason,
        "return_value": job.return_value,
        "worker_id": job.worker_id,
        "cancel_requested_at": _time(job.cancel_requested_at),
    }


def attempt_json(attempt) -> dict:
    return {
        "number": attempt.number,
        "worker_id": attempt.worker_id,
        "started_at": _time(attempt.started_at),
        "finished_at": _time(attempt.finished_at),
        "outcome": attempt.outcome,
        "error_type": attempt.error_type,
        "error_message": attempt.error_message,
        "error_traceback": attempt.error_traceback,
    }


def job_detail_json(job, attempts, reruns=()) -> dict:
    return {**job_json(job, reruns), "attempts": [attempt_json(a) for a in attempts]}


def queue_json(status) -> dict:
    """A queue (`dashboard.queries.QueueStatus`): counts per state as numbers."""
    return {
        "name": status.name,
        "paused": status.paused,
        "counts": {state: tally.value for state, tally in status.counts.items()},
        "oldest_due_at": _time(status.oldest_due_at),
    }


class BadRequest(Exception):
    """Input the API refuses (a 400), with what to tell the client."""

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details


def error(status: int, message: str, *, headers=None, **details) -> JsonResponse:
    """Every API error: `{"error": message, ...details}` with its HTTP status."""
    return JsonResponse({"error": message, **details}, status=status, headers=headers)
