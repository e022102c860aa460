"""Eager mode: run a job inline, through the same claim, retry decision and bookkeeping as the
worker, without waiting out the backoff. For users' own test suites (OPTIONS["EAGER"])."""

from . import db
from .outcome import announce, decide
from .runner import run_attempt
from .states import JobState

EAGER_WORKER_ID = "eager"


def run_inline(job_id, *, backend) -> None:
    while True:
        claimed = db.claim_one(
            job_id, worker_id=EAGER_WORKER_ID, lease_seconds=backend.lease_seconds
        )
        if claimed is None:
            return
        ran = run_attempt(claimed, worker_id=EAGER_WORKER_ID)
        finished = decide(claimed, ran, worker_id=EAGER_WORKER_ID)
        for applied in db.finish([finished]):
            announce(applied, claimed)
        if finished.state != JobState.RETRYING:
            return
