"""Building a workflow or a batch and enqueuing its nodes in one transaction."""

import uuid

from django.db import transaction

from .. import db, tracing
from ..backend import refusing_held_dedup_keys
from ..compat import Task
from ..db.sql import BATCH_CALLBACKS
from ..models import Job
from ..models import Workflow as WorkflowRecord
from ..states import JobState
from ..tasks import load_task

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
        self._next_number: dict[str, int] = {}  # base name -> the number its next node tries

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
        # Numbering resumes where this base's last default name stopped: linear in the adds,
        # and the loop only steps over names taken otherwise (explicit, or another base's).
        n = self._next_number.get(base, 1)
        candidate = base if n == 1 else f"{base}-{n}"
        while candidate in self._names:
            n += 1
            candidate = f"{base}-{n}"
        self._next_number[base] = n + 1
        self._names.add(candidate)
        return candidate

    def enqueue(self) -> str:
        """Check the graph, then store every node and edge in one transaction; the id."""
        if self.id is not None:
            if WorkflowRecord.objects.filter(id=self.id).exists():
                raise ValueError("this workflow was already enqueued")
            self.id = None  # the transaction that stored it was rolled back: nothing is left
        nodes = self._all_nodes()
        _check_acyclic(nodes)
        _check_dedup_keys(nodes)
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
            with (
                tracing.enqueue_rows_span(
                    rows,
                    name=f"enqueue {self.kind} {self.name}",
                    attributes={"jobsite.workflow_id": str(workflow_id)},
                ),
                refusing_held_dedup_keys(row["dedup_key"] for row in rows),
            ):
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
        from ..eager import run_inline

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


def _check_dedup_keys(nodes: list[Node]) -> None:
    """At most one job holds a dedup_key: two nodes of one workflow cannot share one."""
    seen: dict[str, Node] = {}
    for node in nodes:
        key = getattr(node.task, "dedup_key", None)
        if key is None:
            continue
        if key in seen:
            raise ValueError(
                f"nodes {seen[key].name!r} and {node.name!r} share dedup_key {key!r}: "
                "at most one unfinished job holds a key"
            )
        seen[key] = node


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
