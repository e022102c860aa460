"""The persisted state of each schedule, and who paused, resumed or ran it."""

from django.db import models
from django.utils import timezone

from .audit import AuditRecord


class Schedule(models.Model):
    """The persisted state of one schedule of the SCHEDULES option, by name.

    `last_fire_at` only moves forward, by a compare-and-set in the transaction that inserts the
    fire's job: the row, not the job table, remembers which fire times are done, so pruning
    jobs can never make a fire time fire again.
    """

    name = models.CharField(max_length=100, primary_key=True)
    # The fire-time expression last_fire_at belongs to; a changed one restarts from now.
    expression = models.CharField(max_length=255)
    last_fire_at = models.DateTimeField()
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    # Fire times enqueued, and fire times passed over by the missed-fire policy.
    fires = models.PositiveBigIntegerField(default=0)
    missed = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    # Since when a worker has ticked without this schedule in its settings (it was removed);
    # back in them for longer than a moment, it starts over from its next fire time.
    unconfigured_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name}{' (paused)' if self.paused else ''}"


class ScheduleAuditEntry(AuditRecord):
    """Who paused, resumed or ran a schedule now, from the console, the API or Python."""

    schedule = models.CharField(max_length=100)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["schedule", "-at"], name="schedule_audit_recent")]

    def __str__(self):
        return f"{self.username or 'system'} {self.action} {self.schedule}"
