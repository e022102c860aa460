"""Workflows and batches: graphs of jobs enqueued in one transaction (CONTRACT section 13).

A node is a job; an edge is a `Dependency` row, the same "run after" a continuation uses. A
node waits `scheduled` with `waiting_for` = its unsettled upstream nodes; the finish that settles
the last one releases it (jobs.db). A batch is a workflow whose callbacks are two more nodes
after every member: `on_success` (cancelled by any failure) and `on_finish` (runs whatever
happens), so each runs exactly once by the same guarded update. Upstream nodes settle a node
when they succeed, or, for a node added with `on_upstream_failure="run"`, when they end at all.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, F, Max, Min, Q
from django.utils import timezone

from . import db
from .compat import Task
from .db.engine import BATCH_CALLBACKS, UPSTREAM_FAILED
from .models import AuditEntry, Dependency, Job
from .models import Workflow as WorkflowRecord
from .states import TERMINAL, WAITING, JobState
from .tasks import load_task

ON_UPSTREAM_FAILURE = ("cancel", "run")
ON_SUCCESS, ON_FINISH = BATCH_CALLBACKS


class Node:
    """One job of a workflow, not yet enqueued; `job_id` is set by the enqueue."""

    __slots__ = ("after", "args", "job_id", "kwargs", "name", "runs_on_failure", "task", "workflow")

    def __init__(self, workflow, task, args, kwargs, *, name, after, runs_on_failure):
        self.workflow = workflow
        self.task = task
        self.args = args
        self.kwargs = kwargs
        self.name = name
        self.after = after
        self.runs_on_failure = runs_on_failure
        self.job_id = None

    def __repr__(self):
        return f"<Node {self.name}>"


class Workflow:
    """Nodes added with `add(task, *args, after=[...], **kwargs)`, enqueued together."""

    kind = WorkflowRecord.Kind.WORKFLOW

    def __init__(self, name: str):
        if not isinstance(name, str) or not 0 < len(name) <= 255:
            raise ValueError("a workflow's name must be a string of 1 to 255 characters")
        self.name = name
        self.nodes: list[Node] = []
        self.id: uuid.UUID | None = None
        self._names: set[str] = set()

    def add(self, task, *args, after=(), name=None, on_upstream_failure="cancel", **kwargs):
        """A node running `task(*args, **kwargs)` once every node of `after` succeeded."""
        if not isinstance(task, Task):
            raise ValueError(f"unknown task {task!r}: add a task (decorate it with @task)")
        if getattr(task, "after", None) is not None:
            raise ValueError("a node waits through after=[...] of add(), not .using(after=)")
        if on_upstream_failure not in ON_UPSTREAM_FAILURE:
            raise ValueError(f"on_upstream_failure must be one of {ON_UPSTREAM_FAILURE}")
        after = tuple(after) if isinstance(after, list | tuple) else (after,)
        for upstream in after:
            if not isinstance(upstream, Node) or upstream.workflow is not self:
                raise ValueError(f"after= takes nodes of this workflow, not {upstream!r}")
        node = Node(
            self,
            task,
            args,
            kwargs,
            name=self._node_name(task, name),
            after=tuple(dict.fromkeys(after)),
            runs_on_failure=on_upstream_failure == "run",
        )
        self.nodes.append(node)
        return node

    def _node_name(self, task, name):
        if name is not None:
            if not isinstance(name, str) or not 0 < len(name) <= 100 or name.startswith("batch."):
                raise ValueError(f"a node's name is 1 to 100 characters, not {name!r}")
            if name in self._names:
                raise ValueError(f"this workflow already has a node named {name!r}")
            self._names.add(name)
            return name
        base = getattr(task, "name", None) or task.module_path.rsplit(".", 1)[-1]
        base = base[:90]
        candidate, n = base, 1
        while candidate in self._names:
            n += 1
            candidate = f"{base}-{n}"
        self._names.add(candidate)
        return candidate

    def enqueue(self) -> str:
        """Check the graph, then store every node and edge in one transaction; the id."""
        if self.id is not None:
            raise ValueError("this workflow was already enqueued")
        nodes = self._all_nodes()
        _check_acyclic(nodes)
        checked: set[int] = set()
        rows = [_row(node, checked) for node in nodes]
        workflow_id = uuid.uuid4()
        for row in rows:
            row["workflow_id"] = workflow_id
            if row["node_name"] in BATCH_CALLBACKS:
                row["kwargs"] = {"batch_id": str(workflow_id), "counts": {}}
        edges = [(n.job_id, u.job_id) for n in nodes for u in n.after]
        with transaction.atomic():
            WorkflowRecord.objects.create(
                id=workflow_id, name=self.name, kind=self.kind, nodes=len(rows)
            )
            db.insert_jobs(rows)
            db.link(edges)
        self.id = workflow_id
        self._run_eagerly(nodes)
        return str(workflow_id)

    def _all_nodes(self) -> list[Node]:
        if not self.nodes:
            raise ValueError("a workflow needs at least one node")
        return list(self.nodes)

    def _run_eagerly(self, nodes):
        backend = nodes[0].task.get_backend()
        if not getattr(backend, "eager", False):
            return
        from .eager import run_inline

        while True:
            due = list(
                Job.objects.filter(workflow_id=self.id, state=JobState.PENDING).values_list(
                    "id", flat=True
                )
            )
            if not due:
                return
            for job_id in due:
                run_inline(job_id, backend=backend)


class Batch(Workflow):
    """Independent jobs; `on_success` runs once when all succeeded, `on_finish` once when all
    ended, each called with `batch_id` and `counts` (jobs per state) as keyword arguments."""

    kind = WorkflowRecord.Kind.BATCH

    def __init__(self, name: str, on_success=None, on_finish=None):
        super().__init__(name)
        for callback in (on_success, on_finish):
            if callback is not None and not isinstance(callback, Task):
                raise ValueError(f"unknown task {callback!r}: callbacks are tasks")
        self.on_success = on_success
        self.on_finish = on_finish

    def add(self, task, *args, **kwargs):
        if "after" in kwargs:
            raise ValueError("a batch's jobs wait for nothing; use a Workflow for after=")
        return super().add(task, *args, **kwargs)

    def _all_nodes(self) -> list[Node]:
        members = list(self.nodes)
        callbacks = []
        for task, name, mode in (
            (self.on_success, ON_SUCCESS, False),
            (self.on_finish, ON_FINISH, True),
        ):
            if task is not None:
                # Given the batch's counts when released (jobs.db.give_batch_counts).
                kwargs = {"batch_id": "", "counts": {}}
                callbacks.append(
                    Node(self, task, (), kwargs, name=name, after=members, runs_on_failure=mode)
                )
        if not members and not callbacks:
            raise ValueError("a batch needs at least one job or callback")
        return members + callbacks


def _row(node: Node, checked: set) -> dict:
    """The node's job row; each distinct task is checked once (`checked`: their ids)."""
    task = node.task
    backend = task.get_backend()
    if id(task) not in checked:
        try:
            load_task(task.module_path)
        except (ImportError, TypeError) as e:
            raise ValueError(f"unknown task {task.module_path!r}: {e}") from None
        backend.validate_task(task)
        checked.add(id(task))
    row = backend.job_row(task, node.args, node.kwargs)
    node.job_id = row["id"]
    row["node_name"] = node.name
    row["runs_on_upstream_failure"] = node.runs_on_failure
    row["waiting_for"] = len(node.after)
    if node.after:
        row["state"] = JobState.SCHEDULED
    return row


def _check_acyclic(nodes: list[Node]) -> None:
    """Every node's upstream nodes are in the workflow, and no node waits for itself."""
    known = {id(n) for n in nodes}
    for node in nodes:
        for upstream in node.after:
            if id(upstream) not in known:
                raise ValueError(f"node {node.name!r} is after {upstream!r}, of another workflow")
    done: set[int] = set()
    visiting: set[int] = set()
    for start in nodes:
        stack = [(start, iter(start.after))]
        if id(start) in done:
            continue
        visiting.add(id(start))
        while stack:
            node, upstreams = stack[-1]
            upstream = next(upstreams, None)
            if upstream is None:
                stack.pop()
                visiting.discard(id(node))
                done.add(id(node))
            elif id(upstream) in visiting:
                raise ValueError(f"the workflow has a cycle through node {upstream.name!r}")
            elif id(upstream) not in done:
                visiting.add(id(upstream))
                stack.append((upstream, iter(upstream.after)))


# --- running nodes -------------------------------------------------------------------------


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


# --- operator actions --------------------------------------------------------------------------


def _unsettled(job: Job, upstreams) -> int:
    """How many of `upstreams` (their states) have yet to settle `job`."""
    if job.runs_on_upstream_failure:
        return sum(1 for s in upstreams if s not in TERMINAL)
    return sum(1 for s in upstreams if s != JobState.SUCCEEDED)


def _upstream_states(job_id) -> list[str]:
    # Locked in id order: a finish settling this job either committed before (its state is
    # read here) or waits, and then finds the job waiting again.
    ids = Dependency.objects.filter(downstream_id=job_id).values_list("upstream_id", flat=True)
    rows = Job.objects.filter(id__in=list(ids)).order_by("id")
    if db.engine().locks_rows:
        rows = rows.select_for_update()
    return [r.state for r in rows.only("id", "state")]


def rearm(job_id) -> list[uuid.UUID]:
    """`job_id` was put back in line (a retry): the graph around it waits again.

    The job itself waits if its upstream jobs have not all settled it; jobs that had counted it
    settled count it again; jobs its failure cancelled wait again, and so on downstream.
    Called in the retry's transaction. Returns the ids of the jobs made to wait again.
    """
    job = Job.objects.filter(id=job_id).only("id", "runs_on_upstream_failure").first()
    if (
        job is None
        or not Dependency.objects.filter(Q(downstream_id=job_id) | Q(upstream_id=job_id)).exists()
    ):
        return []
    waiting = _unsettled(job, _upstream_states(job_id))
    if waiting:
        Job.objects.filter(id=job_id, state=JobState.PENDING).update(
            state=JobState.SCHEDULED, waiting_for=waiting
        )
    after = Dependency.objects.filter(upstream_id=job_id).values_list("downstream_id", flat=True)
    Job.objects.filter(
        id__in=list(after), state=JobState.SCHEDULED, runs_on_upstream_failure=True
    ).update(waiting_for=F("waiting_for") + 1)
    rearmed = []
    frontier = [job_id]
    while frontier:
        downstream = Dependency.objects.filter(upstream_id__in=frontier).values_list(
            "downstream_id", flat=True
        )
        candidates = Job.objects.filter(
            id__in=list(downstream), state=JobState.CANCELLED, error_type=UPSTREAM_FAILED
        ).only("id", "runs_on_upstream_failure")
        frontier = []
        for candidate in candidates.order_by("id"):
            waiting = _unsettled(candidate, _upstream_states(candidate.id))
            changed = Job.objects.filter(
                id=candidate.id, state=JobState.CANCELLED, error_type=UPSTREAM_FAILED
            ).update(
                state=JobState.SCHEDULED if waiting else JobState.PENDING,
                waiting_for=waiting,
                finished_at=None,
                run_after=timezone.now(),
                error_type="",
                error_message="",
            )
            if changed:
                frontier.append(candidate.id)
        rearmed += frontier
    return rearmed


def cancel(workflow_id, *, user=None, source="python") -> int:
    """Cancel every unfinished node of a workflow (running ones are asked to stop); the number
    of nodes cancelled or asked to stop. The audit records it under the workflow's id."""
    workflow_id = _workflow_id(workflow_id)
    if workflow_id is None:
        return 0
    now = timezone.now()
    with transaction.atomic():
        nodes = Job.objects.filter(workflow_id=workflow_id)
        if db.engine().locks_rows:
            # In id order, as finishes lock the jobs they release (jobs.db).
            list(nodes.filter(state__in=WAITING).order_by("id").select_for_update().values("id"))
        waiting = list(nodes.filter(state__in=WAITING).values_list("id", flat=True))
        cancelled = Job.objects.filter(id__in=waiting, state__in=WAITING).update(
            state=JobState.CANCELLED,
            finished_at=now,
            error_type="Cancelled",
            error_message="cancelled with its workflow",
            cancel_requested_at=now,
        )
        stopping = nodes.filter(state=JobState.RUNNING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
        if cancelled:
            db.add_counters({"jobs_cancelled": cancelled})
            db.cancel_continuations(waiting)
        AuditEntry.objects.create(
            user=user if getattr(user, "pk", None) else None,
            username=user.get_username() if getattr(user, "pk", None) else "",
            action="cancel workflow",
            source=source,
            outcome=f"{cancelled} cancelled, {stopping} asked to stop",
            subject=str(workflow_id),
            detail={"cancelled": cancelled, "stopping": stopping},
        )
    return cancelled + stopping


def retry_failed(workflow_id, *, user=None, source="python") -> int:
    """Retry every node that failed or was cancelled on its own (nodes cancelled because an
    upstream node failed wait again through their upstream node's retry)."""
    from .actions import retry_job

    workflow_id = _workflow_id(workflow_id)
    if workflow_id is None:
        return 0
    failed = (
        Job.objects.filter(
            workflow_id=workflow_id, state__in=[JobState.DEAD_LETTER, JobState.CANCELLED]
        )
        .exclude(error_type=UPSTREAM_FAILED)
        .order_by("enqueued_at", "id")
        .values_list("id", flat=True)
    )
    return sum(1 for job_id in list(failed) if retry_job(job_id, user=user, source=source).changed)


def _workflow_id(value):
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        return None


# --- reading --------------------------------------------------------------------------------


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
        return state_of(self.counts)

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
    result = []
    for record in records:
        tally = counts.get(record.id, {})
        timing = times.get(record.id, {})
        ended = state_of(tally) in FINISHED
        result.append(
            Summary(
                record=record,
                counts=tally,
                started_at=timing.get("started"),
                finished_at=timing.get("finished") if ended else None,
            )
        )
    return result


def state_of(counts: dict) -> str:
    """A workflow's state from its nodes' counts: pending until a node starts, running until
    every node has ended, then succeeded, failed (a node dead-lettered) or cancelled."""
    total = sum(counts.values())
    ended = sum(counts.get(s, 0) for s in TERMINAL)
    if total == 0:
        return "empty"
    if ended < total:
        return "running" if counts.get(JobState.RUNNING) or ended else "pending"
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
        node.after = sorted(after[node.id], key=str)
        node.layer = depth(node.id)
        while len(layers) <= node.layer:
            layers.append([])
        layers[node.layer].append(node)
    return Graph(nodes=nodes, layers=layers)
