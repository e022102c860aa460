"""The job and what each of its attempts leaves: the attempt rows and the lines it logged."""

import uuid

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from ..names import QUEUE_NAME_MAX
from ..retry import MAX_ATTEMPTS, MIN_ATTEMPTS
from ..states import (
    ACTIVE,
    CLAIMABLE,
    TERMINAL,
    UNCLAIMABLE,
    WAITING,
    AttemptOutcome,
    DeadLetterReason,
    JobState,
)

TERMINAL_STATES = sorted(TERMINAL)
ACTIVE_STATES = sorted(ACTIVE)


class JobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

    def running(self):
        return self.filter(state=JobState.RUNNING)

    def ready(self, now=None):
        """Claimable now: pending or retrying, due, and not expired."""
        now = now or timezone.now()
        return self.filter(
            state__in=CLAIMABLE, run_after__lte=now, attempt__lt=F("max_attempts")
        ).filter(Q(not_after__isnull=True) | Q(not_after__gt=now))

    def holding_dedup_key(self, key):
        return self.active().filter(dedup_key=key)


def _link_to_job(*, related_name):
    """A link from a job to another one, cleared when that job is deleted (pruned, discarded)."""
    return models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name=related_name,
        db_index=False,
    )


class Job(models.Model):
    """One run of a task. Reruns are new rows linked by `rerun_of`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=100, default="default")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue_name = models.CharField(max_length=QUEUE_NAME_MAX, default="default")
    priority = models.SmallIntegerField(default=0)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    timeout = models.FloatField(null=True, blank=True, help_text="Seconds per attempt.")
    run_after = models.DateTimeField(default=timezone.now)
    not_after = models.DateTimeField(null=True, blank=True)
    dedup_key = models.CharField(max_length=255, null=True, blank=True)
    # A backoff policy given per call (.using(backoff=...)), as jobs.retry.policy_to_json
    # writes it; it applies to every retry of this job. Null: the task's own policy.
    backoff = models.JSONField(null=True, blank=True)
    # The enqueuer's trace context (W3C traceparent/tracestate) when OpenTelemetry traced
    # the enqueue (jobs.tracing); each attempt's span refers to it.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # Indexed below only where set: almost every job has neither, and every state change
    # rewrites each index entry of the row.
    rerun_of = _link_to_job(related_name="reruns")
    parent = _link_to_job(related_name="continuations")
    enqueued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error_type = models.CharField(max_length=255, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    error_traceback = models.TextField(blank=True, default="")
    dead_letter_reason = models.CharField(
        max_length=32, choices=DeadLetterReason.choices, blank=True, default=""
    )
    return_value = models.JSONField(null=True, blank=True)
    # Fencing: who holds the current attempt, and until when (database clock).
    worker_id = models.CharField(max_length=255, blank=True, default="")
    lease_id = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Set on jobs a schedule made: its name, and the fire time (null for a "run now").
    schedule = models.CharField(max_length=100, null=True, blank=True)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    # The budget of the first `key:` limit whose glob matches it is this job's (jobs.limits).
    limit_key = models.CharField(max_length=255, null=True, blank=True)
    # Attempts given back by Snooze: they do not count toward max_attempts, and an attempt
    # row's number is attempt + snoozes (every run keeps its own row).
    snoozes = models.PositiveIntegerField(default=0, db_default=0)
    # Snoozes before the last operator's retry: MAX_SNOOZES counts those after it, so that a
    # job dead-lettered for snoozing too often gets its snoozes back when it is retried.
    snoozes_forgiven = models.PositiveIntegerField(default=0, db_default=0)
    # Attempts handed back because the worker shut down during the last one: each raised
    # max_attempts by one, so the task's own maximum is max_attempts - attempts_given_back.
    attempts_given_back = models.PositiveSmallIntegerField(default=0, db_default=0)
    # The last progress a running attempt reported (jobs.reports): {"done", "total", "message",
    # "updated_at", "attempt"}; null until one is reported.
    progress = models.JSONField(null=True, blank=True)
    # The workflow or batch this job is a node of (jobs.workflows); null for a lone job.
    workflow_id = models.UUIDField(null=True, blank=True)
    # The node's name in its workflow (context.upstream's keys); "" outside a workflow.
    node_name = models.CharField(max_length=100, blank=True, default="")
    # Upstream jobs (Dependency rows) not yet settled; a scheduled job is released at 0.
    waiting_for = models.PositiveIntegerField(default=0)
    # Runs once its upstream jobs ended whichever way, instead of being cancelled by a failure.
    runs_on_upstream_failure = models.BooleanField(default=False)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-enqueued_at", "-id"]
        permissions = [("operate_job", "Can retry, rerun and cancel jobs")]
        constraints = [
            models.CheckConstraint(
                name="job_finished_iff_terminal",
                condition=(
                    Q(state__in=TERMINAL_STATES, finished_at__isnull=False)
                    | (~Q(state__in=TERMINAL_STATES) & Q(finished_at__isnull=True))
                ),
            ),
            models.CheckConstraint(
                name="job_attempt_within_max", condition=Q(attempt__lte=F("max_attempts"))
            ),
            models.CheckConstraint(
                name="job_max_attempts_range",
                condition=Q(max_attempts__gte=MIN_ATTEMPTS, max_attempts__lte=MAX_ATTEMPTS),
            ),
            models.CheckConstraint(
                name="job_priority_range", condition=Q(priority__gte=-100, priority__lte=100)
            ),
            models.CheckConstraint(
                name="job_state_valid", condition=Q(state__in=[s.value for s in JobState])
            ),
            models.CheckConstraint(
                name="job_running_has_lease",
                condition=~Q(state=JobState.RUNNING) | Q(lease_id__isnull=False),
            ),
            models.UniqueConstraint(
                fields=["dedup_key"],
                condition=Q(dedup_key__isnull=False) & ~Q(state__in=TERMINAL_STATES),
                name="job_dedup_key_unique_while_active",
            ),
            # Each fire time of a schedule makes at most one job, ever (with Schedule's guard).
            models.UniqueConstraint(
                fields=["schedule", "scheduled_at"],
                condition=Q(scheduled_at__isnull=False),
                name="job_schedule_fires_once",
            ),
        ]
        indexes = [
            # Claiming: due jobs in priority order, per queue or across all queues. The same
            # rows, said two ways: a claim of named queues says "not unclaimable", which only
            # the queue index's condition follows from, so PostgreSQL can only read it there.
            # Said alike, a read of one queue's priority level could just as well take
            # job_claimable with a filter on the queue, and with stale statistics it does,
            # reading the other queues' due jobs of that level.
            models.Index(
                fields=["queue_name", "-priority", "run_after"],
                condition=~Q(state__in=UNCLAIMABLE),
                name="job_claimable_queue",
            ),
            models.Index(
                fields=["-priority", "run_after"],
                condition=Q(state__in=list(CLAIMABLE)),
                name="job_claimable",
            ),
            # Flow control's turns between limit keys: each key's due jobs in claim order
            # (jobs.db.limited). Jobs without a limit key are not in it.
            models.Index(
                fields=["limit_key", "-priority", "run_after"],
                condition=Q(state__in=list(CLAIMABLE), limit_key__isnull=False),
                name="job_claimable_key",
            ),
            # Recovery: running jobs by lease expiry.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(state=JobState.RUNNING),
                name="job_running_lease",
            ),
            # Expiry of not_after among jobs not yet started.
            models.Index(
                fields=["not_after"],
                condition=Q(not_after__isnull=False, state__in=list(WAITING)),
                name="job_expiry",
            ),
            # Console lists: newest first, optionally by state, queue or task, walked from the
            # end. In ascending order a new job's entry lands on the last page, where SQLite
            # writes fewer pages per insert than at the front (migration 0024). PostgreSQL
            # keeps its descending indexes (the same cost there).
            models.Index(fields=["enqueued_at", "id"], name="job_recent"),
            models.Index(fields=["state", "enqueued_at", "id"], name="job_state_recent"),
            models.Index(fields=["queue_name", "enqueued_at", "id"], name="job_queue_recent"),
            models.Index(fields=["task_path", "enqueued_at", "id"], name="job_task_recent"),
            # Finished jobs only (dead letters, pruning): an unfinished row has no finish time
            # to sort by, and leaving it out spares two index writes per job.
            models.Index(
                fields=["state", "-finished_at"],
                condition=Q(state__in=TERMINAL_STATES),
                name="job_state_finished",
            ),
            models.Index(fields=["parent"], condition=Q(parent__isnull=False), name="job_parent"),
            models.Index(
                fields=["workflow_id"], condition=Q(workflow_id__isnull=False), name="job_workflow"
            ),
            # Dead letters grouped by task and error (the console's dead-letter page).
            models.Index(
                fields=["task_path", "error_type", "-finished_at"],
                condition=Q(state=JobState.DEAD_LETTER),
                name="job_dead_letter_group",
            ),
            models.Index(
                fields=["rerun_of"], condition=Q(rerun_of__isnull=False), name="job_rerun_of"
            ),
            # A schedule's history, newest first (the console's schedules page).
            models.Index(
                fields=["schedule", "-enqueued_at"],
                condition=Q(schedule__isnull=False),
                name="job_schedule_recent",
            ),
        ]

    def __str__(self):
        return f"{self.task_path} [{self.state}] {self.id}"

    @property
    def is_terminal(self):
        return self.state in TERMINAL

    @property
    def lease_lapsed(self) -> bool:
        """Running by its state, but its worker stopped renewing the lease: it runs nowhere any
        more, and the next worker to look recovers it (its attempt recorded as WorkerLost)."""
        return (
            self.state == JobState.RUNNING
            and self.lease_expires_at is not None
            and self.lease_expires_at < timezone.now()
        )

    @property
    def own_max_attempts(self) -> int:
        """max_attempts without the attempts given back at worker shutdowns."""
        return self.max_attempts - self.attempts_given_back


class Listing(models.Model):
    """Where a job stands in the console's lists, written once when it is inserted (PostgreSQL
    only: migration 0023, on the table that also holds the arguments' search text).

    The lists newest first, by queue and by task walk the indexes on this table instead of the
    job row, which every claim and finish rewrites (jobs.listing says which list walks which).
    """

    job = models.OneToOneField(
        Job,
        primary_key=True,
        on_delete=models.DO_NOTHING,  # the job's delete trigger removes the row
        db_constraint=False,
        db_column="job_id",
        related_name="listing",
    )
    enqueued_at = models.DateTimeField()
    queue_name = models.CharField(max_length=QUEUE_NAME_MAX)
    task_path = models.CharField(max_length=255)
    # The arguments' search text (jobs.db.search_sql.ArgumentsJson), kept in step by triggers.
    text = models.TextField()

    class Meta:
        managed = False
        db_table = "jobs_searchtext"

    def __str__(self):
        return f"{self.task_path} in {self.queue_name} at {self.enqueued_at}"


class Attempt(models.Model):
    """One execution of a job. Append-only: written once, when the attempt ends."""

    # Looked up through the (job, number) unique index; no second index on job alone.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=255, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error_type = models.CharField(max_length=255, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    error_traceback = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_unique_per_job"),
        ]
        indexes = [models.Index(fields=["-finished_at"], name="attempt_recent")]

    def __str__(self):
        return f"attempt {self.number} of {self.job_id}: {self.outcome}"

    @property
    def duration(self):
        if self.started_at and self.finished_at:
            return self.finished_at - self.started_at
        return None


class LogLine(models.Model):
    """A line a task logged through `context.logger` during an attempt (see jobs.attempt_log).

    An attempt keeps its first and its last lines; `seq` numbers every line it logged, so a gap
    between two kept lines is where lines were cut, and how many.
    """

    # Looked up through the (job, attempt, seq) unique index; no second index on job alone.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines", db_index=False)
    attempt = models.PositiveIntegerField()
    seq = models.PositiveIntegerField()
    logged_at = models.DateTimeField()
    level = models.CharField(max_length=32)
    message = models.TextField()

    class Meta:
        ordering = ["job", "attempt", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "seq"], name="logline_unique"),
        ]

    def __str__(self):
        return f"{self.job_id} attempt {self.attempt} #{self.seq} {self.level}: {self.message}"
