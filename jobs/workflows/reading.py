"""Reading workflows: what a node's upstream nodes returned, the lists' summaries, the graph."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Exists, Max, Min, OuterRef, Q
from django.utils import timezone

from ..models import Attempt, Dependency, Job
from ..models import Workflow as WorkflowRecord
from ..states import TERMINAL, JobState


def upstream_values(job_id) -> dict:
    """What `context.upstream` holds: upstream node name -> its return value (None unless it
    succeeded). A continuation's parent is named by its task's name."""
    rows = Job.objects.filter(downstream_edges__downstream_id=job_id).values_list(
        "node_name", "task_path", "state", "return_value"
    )
    return {
        (name or path.rsplit(".", 1)[-1]): (value if state == JobState.SUCCEEDED else None)
        for name, path, state, value in rows
    }


def needed_after(*, outside_its_workflow: bool = False) -> Exists:
    """Does a job that runs after this one still need it? (An expression over the job's id.)

    A continuation or a job outside this job's workflow needs it until it has succeeded: its
    edge to this job gives it this job's value and re-arms it when this job is retried. A node
    of the same workflow needs it while it exists, succeeded or not: rerun, it reads this
    job's value as it did. A finished job so needed is kept (discard, prune) until that job
    succeeded or is gone. `outside_its_workflow`: the nodes of its own workflow do not count
    (a prune takes a workflow whole, or none of it)."""
    if outside_its_workflow:
        edges = Dependency.objects.filter(upstream_id=OuterRef("id"))
        return Exists(
            edges.exclude(_same_workflow(OuterRef("workflow_id"))).exclude(
                downstream__state=JobState.SUCCEEDED
            )
        )
    return Exists(_needing(OuterRef("id"), OuterRef("workflow_id")))


def first_needing(job: Job):
    """(id, state) of a job after `job` that still needs it (needed_after), or None."""
    edges = _needing(job.id, job.workflow_id).order_by("downstream_id")
    return edges.values_list("downstream_id", "downstream__state").first()


def _needing(upstream, workflow_id):
    """The edges from `upstream` (of workflow `workflow_id`) to the jobs that still need it."""
    not_yet = ~Q(downstream__state=JobState.SUCCEEDED)
    return Dependency.objects.filter(not_yet | _same_workflow(workflow_id), upstream_id=upstream)


def _same_workflow(workflow_id) -> Q:
    return Q(downstream__workflow_id__isnull=False) & Q(downstream__workflow_id=workflow_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """A workflow or batch as lists show it: its nodes' counts per state and its timing."""

    record: WorkflowRecord
    counts: dict
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def done(self) -> int:
        return sum(n for s, n in self.counts.items() if s in TERMINAL)

    @property
    def state(self) -> str:
        return state_of(self.counts, started=self.started_at is not None)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None:
            return None
        return (self.finished_at or timezone.now()) - self.started_at


def summaries(records) -> list[Summary]:
    """Each workflow of `records` with its counts (two grouped reads over the page's ids)."""
    records = list(records)
    ids = [r.id for r in records]
    counts: dict = {}
    for row in (
        Job.objects.filter(workflow_id__in=ids)
        .values("workflow_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts.setdefault(row["workflow_id"], {})[row["state"]] = row["n"]
    times = {
        row["workflow_id"]: row
        for row in Job.objects.filter(workflow_id__in=ids)
        .values("workflow_id")
        .annotate(started=Min("started_at"), finished=Max("finished_at"))
        .order_by()
    }
    # A claim sets a job's started_at anew: the start of a node's first attempt, retried
    # since, is kept only in its attempt rows.
    first_attempts = dict(
        Attempt.objects.filter(
            job__workflow_id__in=ids, job__attempt__gt=1, started_at__isnull=False
        )
        .values("job__workflow_id")
        .annotate(started=Min("started_at"))
        .values_list("job__workflow_id", "started")
        .order_by()
    )
    result = []
    for record in records:
        tally = counts.get(record.id, {})
        timing: Mapping = times.get(record.id, {})
        ended = state_of(tally) in FINISHED
        result.append(
            Summary(
                record=record,
                counts=tally,
                started_at=_earliest(timing.get("started"), first_attempts.get(record.id)),
                finished_at=timing.get("finished") if ended else None,
            )
        )
    return result


def _earliest(*moments):
    known = [m for m in moments if m is not None]
    return min(known) if known else None


def state_of(counts: dict, *, started: bool = False) -> str:
    """A workflow's state from its nodes' counts: pending until a node starts, running until
    every node has ended, then succeeded, failed (a node dead-lettered) or cancelled.

    `started`: a node has started (it may be waiting again now: snoozed, or in a retry's
    backoff, and the workflow is under way all the same)."""
    total = sum(counts.values())
    ended = sum(counts.get(s, 0) for s in TERMINAL)
    if total == 0:
        return "empty"
    if ended < total:
        under_way = started or ended or counts.get(JobState.RUNNING)
        under_way = under_way or counts.get(JobState.RETRYING)
        return "running" if under_way else "pending"
    if counts.get(JobState.DEAD_LETTER):
        return "failed"
    if counts.get(JobState.CANCELLED):
        return "cancelled"
    return "succeeded"


FINISHED = ("succeeded", "failed", "cancelled", "empty")


@dataclass(frozen=True, slots=True, kw_only=True)
class Graph:
    """A workflow's nodes with their upstream ids, in layers: a node's layer is one more than
    its deepest upstream node's (roots are layer 0)."""

    nodes: list  # Job rows, each with `.after` (upstream job ids) and `.layer`
    layers: list  # [[Job, ...], ...]


def graph(workflow_id, columns=None) -> Graph:
    jobs = Job.objects.filter(workflow_id=workflow_id).order_by("enqueued_at", "id")
    if columns:
        jobs = jobs.only(*columns)
    nodes = list(jobs)
    after: dict = {n.id: [] for n in nodes}
    for down, up in Dependency.objects.filter(downstream_id__in=list(after)).values_list(
        "downstream_id", "upstream_id"
    ):
        after[down].append(up)
    layer: dict = {}
    by_id = {n.id: n for n in nodes}

    def depth(job_id):
        # Iterative: a 1,000-deep chain must not hit the recursion limit.
        stack = [job_id]
        while stack:
            current = stack[-1]
            pending = [u for u in after[current] if u in by_id and u not in layer]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            ups = [layer[u] for u in after[current] if u in by_id]
            layer[current] = 1 + max(ups) if ups else 0
        return layer[job_id]

    layers: list = []
    for node in nodes:
        at = depth(node.id)
        # Read by the graph's template beside the row's own fields.
        node.after = sorted(after[node.id], key=str)  # type: ignore[attr-defined]
        node.layer = at  # type: ignore[attr-defined]
        while len(layers) <= at:
            layers.append([])
        layers[at].append(node)
    return Graph(nodes=nodes, layers=layers)
