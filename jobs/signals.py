"""Signals beyond Django's task_enqueued / task_started / task_finished."""

from django.dispatch import Signal

# A failed attempt scheduled another one. Sent with job_id, task_path, attempt (the one that
# failed), delay (seconds until the next), error_type.
job_retry_scheduled = Signal()

# A job became a dead letter. Sent with job_id, task_path, attempt, reason, error_type.
job_dead_lettered = Signal()
