"""The job lifecycle tables and the querysets holding every ORM query the engine runs.

The hot paths that need one hand-written statement per vendor (claim, finish, heartbeat,
recover) live in `jobs.db`; everything else is a named queryset method here. One module per
part:

    job.py       the job, its attempts and the lines they logged
    workflow.py  workflows (and batches) and the edges of which job runs after which
    audit.py     who did what to a job or a queue
    schedule.py  each schedule's persisted state and its audit trail
    control.py   workers, paused queues, limit overrides and starts
    counters.py  the engine's counters and the jobs per (queue, state)
"""

from .audit import AuditEntry, AuditRecord
from .control import LimitOverride, LimitStart, PausedQueue, WorkerNode, WorkerNodeQuerySet
from .counters import CounterDelta, CounterDeltaQuerySet, JobCountDelta
from .job import ACTIVE_STATES, TERMINAL_STATES, Attempt, Job, JobQuerySet, Listing, LogLine
from .schedule import Schedule, ScheduleAuditEntry
from .workflow import Dependency, Workflow

__all__ = [
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "Attempt",
    "AuditEntry",
    "AuditRecord",
    "CounterDelta",
    "CounterDeltaQuerySet",
    "Dependency",
    "Job",
    "JobCountDelta",
    "JobQuerySet",
    "LimitOverride",
    "LimitStart",
    "Listing",
    "LogLine",
    "PausedQueue",
    "Schedule",
    "ScheduleAuditEntry",
    "WorkerNode",
    "WorkerNodeQuerySet",
    "Workflow",
]
