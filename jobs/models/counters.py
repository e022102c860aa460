"""Counters: the engine's totals and the jobs per (queue, state)."""

from django.db import models

from ..names import QUEUE_NAME_MAX


class CounterDeltaQuerySet(models.QuerySet):
    def totals(self):
        rows = self.values("name").annotate(total=models.Sum("value"))
        return {row["name"]: row["total"] or 0 for row in rows}


class CounterDelta(models.Model):
    """Increments of the lifetime counters (jobs_enqueued, ...); a counter is its rows' sum.

    On PostgreSQL writers only insert, so counting never contends on a hot row across workers
    and machines. On SQLite, whose writers take turns, they add to the name's newest row
    (`jobs.db.sqlite`). Maintenance folds old rows into one per name
    (`jobs.db.compact_counters`).
    """

    name = models.CharField(max_length=32)
    value = models.BigIntegerField()

    objects = CounterDeltaQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["name"], name="counter_name")]

    def __str__(self):
        return f"{self.name} += {self.value}"


class JobCountDelta(models.Model):
    """Append-only changes of the number of jobs per queue and state (see `jobs.state_counts`).

    Written by database triggers on PostgreSQL, never by Python code.
    """

    queue_name = models.CharField(max_length=QUEUE_NAME_MAX)
    state = models.CharField(max_length=16)
    n = models.BigIntegerField()

    def __str__(self):
        return f"{self.queue_name}/{self.state} {self.n:+}"
