"""A worker's row in WorkerNode: what the console shows of it (its room, its heartbeat)."""

import os
import socket

from django.utils import timezone

from .models import WorkerNode


def live_namesake(worker_id: str, lease_seconds: float) -> WorkerNode | None:
    """The row of a running worker that has this id already (its heartbeat within a lease):
    two workers given one id show in the console, and count as online, as one."""
    return WorkerNode.objects.online(lease_seconds).filter(id=worker_id).first()


def register(worker_id: str, config, free_slots: dict):
    """The worker starts: its row, new or reused."""
    WorkerNode.objects.update_or_create(
        id=worker_id,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(config.queues),
            "concurrency": config.concurrency,
            "async_concurrency": config.async_concurrency,
            **free_slots,
            "started_at": timezone.now(),
            "last_heartbeat_at": timezone.now(),
            "stopped_at": None,
        },
    )


def beat(worker_id: str, processed: int, free_slots: dict):
    WorkerNode.objects.filter(id=worker_id).update(
        last_heartbeat_at=timezone.now(), jobs_processed=processed, **free_slots
    )


def stopped(worker_id: str, processed: int):
    WorkerNode.objects.filter(id=worker_id).update(
        stopped_at=timezone.now(), last_heartbeat_at=timezone.now(), jobs_processed=processed
    )
