"""A workflow (or batch) and the edges of which job runs after which."""

import uuid

from django.db import models
from django.utils import timezone

from .job import Job


class Workflow(models.Model):
    """A graph of jobs enqueued together (jobs.workflows): a workflow, or a batch with callbacks.

    Its progress and state are read from its jobs; the row keeps what the jobs cannot say.
    """

    class Kind(models.TextChoices):
        # Nodes with their own `after` lists.
        WORKFLOW = "workflow", "Workflow"
        # Independent jobs, with on_success / on_finish callback nodes after all of them.
        BATCH = "batch", "Batch"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.WORKFLOW)
    created_at = models.DateTimeField(default=timezone.now)
    nodes = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.kind} {self.name} {self.id}"


class Dependency(models.Model):
    """`downstream` runs after `upstream`: a workflow's edge, or a continuation's parent.

    The one home of "run after": a finish settles the edges of the jobs that ended, in its own
    transaction, decrementing each downstream job's `waiting_for` (jobs.db).
    """

    downstream = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="upstream_edges", db_index=False
    )
    upstream = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="downstream_edges", db_index=False
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["downstream", "upstream"], name="dependency_once"),
        ]
        indexes = [models.Index(fields=["upstream"], name="dependency_upstream")]

    def __str__(self):
        return f"{self.downstream_id} after {self.upstream_id}"
