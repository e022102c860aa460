"""How a worker is set up: its options (WorkerConfig), checked, and its default id."""

import os
import socket
import uuid
from dataclasses import dataclass, field

from . import timing
from .timing import DEFAULTS as DEFAULT_TIMING


@dataclass(kw_only=True)
class WorkerConfig:
    queues: list[str] = field(default_factory=list)  # [] = every queue
    concurrency: int = 2
    # Coroutines of async def tasks each executor runs at once (OPTIONS["ASYNC_CONCURRENCY"]).
    async_concurrency: int = 10
    burst: bool = False
    max_jobs: int | None = None
    worker_id: str | None = None
    shutdown_timeout: float = 30.0
    heartbeat_seconds: float = DEFAULT_TIMING.heartbeat_seconds
    lease_seconds: float = DEFAULT_TIMING.lease_seconds
    poll_interval: float | None = None  # seconds between polls; default by database
    # A cancelled running job gets this long to return by itself.
    cancel_grace: float = DEFAULT_TIMING.cancel_grace_seconds
    batch_size: int = 500
    # "json": every finished attempt is logged (successes at INFO), as jobs.logformat writes.
    log_format: str = "text"

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.async_concurrency < 1:
            raise ValueError("async-concurrency must be at least 1")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("max-jobs must be at least 1")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown-timeout must be >= 0")
        found = timing.problems(self.heartbeat_seconds, self.lease_seconds, self.cancel_grace)
        if found:
            raise ValueError("; ".join(found))


def default_worker_id():
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
