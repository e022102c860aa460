"""What workers and operators control at run time: the workers, paused queues, limits."""

from django.db import models
from django.utils import timezone

from ..names import QUEUE_NAME_MAX


class WorkerNodeQuerySet(models.QuerySet):
    def online(self, lease_seconds):
        cutoff = timezone.now() - timezone.timedelta(seconds=lease_seconds)
        return self.filter(stopped_at__isnull=True, last_heartbeat_at__gte=cutoff)


class WorkerNode(models.Model):
    """A running (or recently seen) worker process."""

    id = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, blank=True)
    concurrency = models.PositiveIntegerField(default=1)
    # Coroutines of async def tasks each of its executors runs at once.
    async_concurrency = models.PositiveIntegerField(default=1)
    # At its last heartbeat: executors free for a sync job, and free coroutine slots (an idle
    # executor counts in both); null before its first report.
    free_sync_slots = models.PositiveIntegerField(null=True, blank=True)
    free_async_slots = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    last_heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)
    jobs_processed = models.PositiveBigIntegerField(default=0)

    objects = WorkerNodeQuerySet.as_manager()

    class Meta:
        ordering = ["-last_heartbeat_at"]

    def __str__(self):
        return self.id


class PausedQueue(models.Model):
    """A queue workers claim nothing from until it is resumed (see `jobs.queues`)."""

    name = models.CharField(max_length=QUEUE_NAME_MAX, primary_key=True)
    paused_at = models.DateTimeField(default=timezone.now)
    paused_by = models.CharField(max_length=150, blank=True, default="")

    def __str__(self):
        return f"{self.name} (paused)"


class LimitOverride(models.Model):
    """A limit set at runtime (`jobs.limits.set_limit`): it replaces the concurrency and the
    rate the LIMITS option gives the same name, for every worker, until it is cleared."""

    name = models.CharField(max_length=255, primary_key=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    rate_count = models.PositiveIntegerField(null=True, blank=True)
    rate_seconds = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} (override)"


class LimitStart(models.Model):
    """Attempts claimed under a rate limit: their bucket (the limit's name, and the key for
    a `key:` limit) and `started_at`, the latest moment they may begin (their claim plus the
    slack they were given, jobs.db.limited): `starts` count while that moment is inside the
    window. A row with a `job_id` is that claimed job's one start: handed back unstarted, it
    gives it back (the finish deletes the row). A row without is `starts` jobs of one claim, taken
    while the budget was far from its limit. Rows older than every window are pruned by
    maintenance."""

    id = models.BigAutoField(primary_key=True)
    bucket = models.CharField(max_length=600)
    started_at = models.DateTimeField()
    # No foreign key: a start outlives its job's deletion until pruned.
    job_id = models.UUIDField(null=True, blank=True)
    # A database default as well: a worker of the previous release inserts rows without it.
    starts = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        indexes = [
            models.Index(fields=["bucket", "started_at"], name="limit_start_bucket"),
            models.Index(fields=["job_id"], name="limit_start_job"),
        ]

    def __str__(self):
        return f"{self.bucket} at {self.started_at}"
