"""What a worker logs of its claims and of how each attempt ended."""

import logging
import time

from . import logformat
from .errortext import for_log
from .states import AttemptOutcome, JobState

# Under the worker's name (a project's LOGGING may name `jobs.worker`: these lines reach its
# handlers and take its level), in a logger of their own so that Sentry's logging integration
# can leave them out: jobsite sends the failures they tell of itself, tagged (jobs.sentry).
JOB_LINES = "jobs.worker.jobs"
logger = logging.getLogger(JOB_LINES)

# The level each outcome is logged at. A job handed back unstarted is routine while running
# (a prefetched job found no free executor), notable (INFO) only when a stopping worker hands
# its claims back.
FINISH_LOG_LEVELS = {
    JobState.SUCCEEDED: logging.DEBUG,
    JobState.RETRYING: logging.WARNING,
    JobState.DEAD_LETTER: logging.ERROR,
    JobState.CANCELLED: logging.WARNING,
    JobState.PENDING: logging.DEBUG,
}


class WorkerLog:
    def __init__(self, log_format: str):
        # "json": every finished attempt is logged (successes at INFO), as jobs.logformat writes.
        self.json = log_format == "json"
        self.unlogged_claims = 0
        self.last_claim_log = 0.0

    def claims(self, claimed):
        """One line per claim, or one summary a second when claims come thick and fast."""
        self.unlogged_claims += len(claimed)
        if self.unlogged_claims and time.monotonic() - self.last_claim_log >= 1.0:
            self._write_claims(claimed)

    def flush_claims(self):
        """Write the claims not logged yet (the worker begins to stop: they come before)."""
        if self.unlogged_claims:
            self._write_claims([])

    def _write_claims(self, claimed):
        if self.unlogged_claims == 1 and claimed:
            c = claimed[0]
            given_back = c.attempts_given_back
            logger.info(
                "claimed %s (job %s, attempt %d/%d%s)",
                for_log(c.task_path),
                c.id,
                c.attempt,
                c.max_attempts - given_back,
                f", {given_back} given back at shutdown" if given_back else "",
            )
        else:
            n = self.unlogged_claims
            logger.info("claimed %d job%s", n, "" if n == 1 else "s")
        self.unlogged_claims, self.last_claim_log = 0, time.monotonic()

    def finish(self, f, claimed, *, stopping: bool):
        level = FINISH_LOG_LEVELS.get(f.state, logging.DEBUG)
        if f.state == JobState.PENDING and stopping:
            level = logging.INFO
        if f.state == JobState.SUCCEEDED and self.json:
            level = logging.INFO
        if f.state == JobState.RETRYING and f.outcome == AttemptOutcome.INTERRUPTED:
            # Given back at shutdown: routine, not a failure.
            level = logging.INFO
        if not logger.isEnabledFor(level):
            return  # the usual success: nothing to escape or format
        path = for_log(claimed.task_path) if claimed else "?"
        attempt = f"{claimed.attempt}/{claimed.max_attempts}" if claimed else "?"
        error = for_log(f"{f.error_type}: {f.error_message}".strip(": "))
        extra = logformat.finish_fields(f, claimed)
        # Each outcome says what it is; the job and its task lead every line.
        details: tuple
        if f.state == JobState.SUCCEEDED:
            message, details = "job %s (%s) succeeded on attempt %s", (attempt,)
        elif f.state == JobState.RETRYING and f.outcome == AttemptOutcome.INTERRUPTED:
            message = (
                "job %s (%s) interrupted by the worker's shutdown on attempt %s; back in line, "
                "the attempt given back"
            )
            details = (attempt,)
        elif f.state == JobState.RETRYING:
            message = "job %s (%s) failed attempt %s: %s; retrying in %.1fs"
            details = (attempt, error, f.delay)
        elif f.state == JobState.DEAD_LETTER:
            message = "job %s (%s) dead-lettered (%s) after attempt %s: %s"
            details = (f.reason, attempt, error)
        elif f.state == JobState.CANCELLED:
            message, details = "job %s (%s) cancelled while running", ()
        elif f.state == JobState.PENDING and f.snoozed:
            message, details = "job %s (%s) snoozed for %.1fs", (f.delay,)
        elif f.state == JobState.PENDING:
            message, details = "job %s (%s) handed back unstarted", ()
        else:
            return
        logger.log(level, message, f.job_id, path, *details, extra=extra)
