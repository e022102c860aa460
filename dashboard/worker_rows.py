"""What the workers page and the overview show of the workers: their status, free slots and
the jobs they run."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from jobs import timing
from jobs.models import Job, WorkerNode

MAX_RUNNING_SHOWN = 500
RUNNING_SHOWN_PER_WORKER = 10


def lease_seconds() -> float:
    return timing.configured().lease_seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerCounts:
    online: int
    # Not stopped, but silent for longer than the lease: presumed dead.
    lost: int


def worker_counts() -> WorkerCounts:
    online = WorkerNode.objects.online(lease_seconds()).count()
    unstopped = WorkerNode.objects.filter(stopped_at__isnull=True).count()
    return WorkerCounts(online=online, lost=unstopped - online)


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRow:
    node: WorkerNode
    # "online", "lost" (no heartbeat within the lease) or "stopped".
    status: str
    heartbeat_age: timedelta
    running: list  # the first RUNNING_SHOWN_PER_WORKER of its running jobs
    running_count: int = 0
    # Free executors for a sync job and free coroutine slots at its last heartbeat (None:
    # not reported), each with the worker's total.
    free_sync: int | None = None
    sync_total: int = 0
    free_async: int | None = None
    async_total: int = 0

    @property
    def running_more(self) -> int:
        return self.running_count - len(self.running)


# What the workers page shows of each running job (its progress bar included).
RUNNING_COLUMNS = "id task_path queue_name worker_id started_at attempt state progress"


def worker_rows(now: datetime, *, recent: timedelta = timedelta(hours=24)) -> list[WorkerRow]:
    lease = timedelta(seconds=lease_seconds())
    nodes = list(
        WorkerNode.objects.filter(
            Q(stopped_at__isnull=True) | Q(stopped_at__gte=now - recent)
        ).order_by("stopped_at", "-last_heartbeat_at")[:200]
    )
    running: dict[str, list] = {}
    jobs = (
        Job.objects.running()
        .filter(worker_id__in=[n.id for n in nodes])
        .only(*RUNNING_COLUMNS.split())
        .order_by("started_at")[:MAX_RUNNING_SHOWN]
    )
    for job in jobs:
        running.setdefault(job.worker_id, []).append(job)
    rows = []
    for node in nodes:
        status = _worker_status(node, now, lease)
        rows.append(
            WorkerRow(
                node=node,
                status=status,
                heartbeat_age=now - node.last_heartbeat_at,
                running=running.get(node.id, [])[:RUNNING_SHOWN_PER_WORKER],
                running_count=len(running.get(node.id, [])),
                **_slots(node, status),
            )
        )
    return rows


def _slots(node: WorkerNode, status: str) -> dict:
    if status != "online":
        return {}  # a worker stopped or lost has no free slot to offer
    return {
        "free_sync": node.free_sync_slots,
        "sync_total": node.concurrency,
        "free_async": node.free_async_slots,
        "async_total": node.concurrency * node.async_concurrency,
    }


def _worker_status(node: WorkerNode, now: datetime, lease: timedelta) -> str:
    if node.stopped_at:
        return "stopped"
    return "online" if now - node.last_heartbeat_at <= lease else "lost"
