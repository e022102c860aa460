"""Whether the console should warn that due jobs wait with no worker alive to run them."""

from dataclasses import dataclass

from django.utils import timezone

from jobs.models import Job, WorkerNode
from jobs.states import CLAIMABLE

from .counts import Tally, tally
from .worker_rows import lease_seconds

# Enough to say "many"; the banner is no place for a slow count.
DUE_CAP = 1_000


@dataclass(frozen=True, kw_only=True, slots=True)
class NoWorkerAlert:
    due: Tally


def no_worker_alert(now=None) -> NoWorkerAlert | None:
    """The alert while no worker is online and jobs are due, else None.

    The worker check comes first: with a worker online (the usual case) the job table is not read.
    """
    if WorkerNode.objects.online(lease_seconds()).exists():
        return None
    due = Job.objects.filter(state__in=CLAIMABLE, run_after__lte=now or timezone.now())
    if not due.exists():
        return None
    return NoWorkerAlert(due=tally(due, DUE_CAP))
