"""Workflows and batches: graphs of jobs enqueued in one transaction (CONTRACT section 13).

A node is a job; an edge is a `Dependency` row, the same "run after" a continuation uses. A
node waits `scheduled` with `waiting_for` = its unsettled upstream nodes; the finish that settles
the last one releases it (jobs.db). A batch is a workflow whose callbacks are two more nodes
after every member: `on_success` (cancelled by any failure) and `on_finish` (runs whatever
happens), so each runs exactly once by the same guarded update. Upstream nodes settle a node
when they succeed, or, for a node added with `on_upstream_failure="run"`, when they end at all.

    enqueue.py  building a workflow or batch and enqueuing its nodes
    actions.py  cancel, retry the failed nodes, re-arm a node
    reading.py  upstream values for a running node, summaries, the graph
"""

from .actions import after_others, cancel, edges_below, failed_upstream, rearm, retry_failed
from .enqueue import ON_FINISH, ON_SUCCESS, ON_UPSTREAM_FAILURE, Batch, Node, Workflow
from .reading import (
    FINISHED,
    Graph,
    Summary,
    first_needing,
    graph,
    needed_after,
    state_of,
    summaries,
    upstream_values,
)

__all__ = [
    "FINISHED",
    "ON_FINISH",
    "ON_SUCCESS",
    "ON_UPSTREAM_FAILURE",
    "Batch",
    "Graph",
    "Node",
    "Summary",
    "Workflow",
    "after_others",
    "cancel",
    "edges_below",
    "failed_upstream",
    "graph",
    "rearm",
    "retry_failed",
    "state_of",
    "summaries",
    "first_needing",
    "needed_after",
    "upstream_values",
]
