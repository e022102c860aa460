"""What the worker tells the optional integrations: attempts whose outcomes were written
(OpenTelemetry spans, jobs.tracing; Sentry events, jobs.sentry) and schedule fires (Sentry
cron check-ins).

An integration that fails is logged and skipped: it never costs a job or the worker.
"""

import logging

from . import sentry, tracing

logger = logging.getLogger(__name__)


def attempts_settled(settled, backend) -> None:
    """`settled`: (Finish, Claimed or None) pairs whose outcome took effect."""
    if not settled:
        return
    for integration, report in (
        ("OpenTelemetry", tracing.record_attempts),
        ("Sentry", lambda s: sentry.capture_failures(s, backend.options)),
    ):
        try:
            report(settled)
        except Exception as e:
            logger.warning("%s: could not report %d attempt(s): %r", integration, len(settled), e)


def schedules_fired(fired, backend) -> None:
    """`fired`: what a schedule tick enqueued (schedules.Fired)."""
    try:
        sentry.schedules_fired(fired, backend)
    except Exception as e:
        logger.warning("Sentry: could not send %d check-in(s): %r", len(fired), e)
