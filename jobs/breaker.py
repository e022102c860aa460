"""The circuit breaker: a queue whose attempts keep failing is paused (`pause_after_failures`).

`pause_after_failures: [n, seconds]` on a `queue:` entry of LIMITS pauses that queue — the
same pause as an operator's (jobs.queues), audited as the circuit breaker's — once n of its
attempts failed within the last `seconds` (attempts handed back at a worker's shutdown or
recovered from a vanished worker are not its work's failures, and do not count). Resuming is
an operator's act, and only failures after it count towards the next trip. Workers check after
recording failed attempts of a queue that has a breaker; nothing is read otherwise.
"""

import logging
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import Attempt, AuditEntry, PausedQueue
from .queues import RESUMED
from .states import BREAKER_FAILURE

logger = logging.getLogger("jobs.worker")

PAUSED_BY = "circuit breaker"


def failures_within(queue: str, seconds: float, cap: int) -> int:
    """Failed attempts of `queue` (BREAKER_FAILURE: its tasks raised, timed out, crashed their
    executor or could not run) finished within the last `seconds` and since the queue was
    last resumed, counted up to `cap`: the failures that tripped the breaker before an
    operator's resume do not trip it again."""
    since = timezone.now() - timedelta(seconds=seconds)
    resumed = (
        AuditEntry.objects.filter(action=RESUMED, subject=queue)
        .order_by("-id")
        .values_list("at", flat=True)
        .first()
    )
    if resumed is not None and resumed > since:
        since = resumed
    recent = Attempt.objects.filter(
        finished_at__gte=since, outcome__in=sorted(BREAKER_FAILURE), job__queue_name=queue
    )
    return recent.order_by().values("id")[:cap].count()


def trip(queues, limits) -> list[str]:
    """Pause each of `queues` (which just recorded failed attempts) whose breaker trips."""
    tripped = []
    for queue in sorted(set(queues) & set(limits.breakers)):
        n, seconds = limits.breakers[queue].pause_after_failures
        failed = failures_within(queue, seconds, n)
        if failed < n or PausedQueue.objects.filter(name=queue).exists():
            continue
        outcome = f"paused by the circuit breaker: {failed} failed attempts within {seconds:g} s"
        try:
            with transaction.atomic():
                PausedQueue.objects.create(name=queue, paused_by=PAUSED_BY)
                AuditEntry.record(
                    action="pause queue", source="breaker", outcome=outcome, subject=queue
                )
        except IntegrityError:
            continue  # paused meanwhile, by an operator or another worker's breaker
        logger.warning("queue %s %s; resume it from the console when it is fixed", queue, outcome)
        tripped.append(queue)
    return tripped
