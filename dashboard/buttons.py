"""Which action buttons a job shows: the states come from `jobs.actions`, never restated here."""

from dataclasses import dataclass

from jobs.actions import CANCELLABLE, DISCARDABLE, RETRYABLE, due_later
from jobs.states import TERMINAL, JobState

from .permissions import can_operate


@dataclass(frozen=True, kw_only=True, slots=True)
class Button:
    action: str
    label: str
    url_name: str
    # The question asked before acting; empty for actions that act at once.
    confirm: str = ""
    # What the confirming button says, beside "Go back": what it does, not just a verb.
    confirm_label: str = ""


RETRY = Button(action="retry", label="Retry", url_name="dashboard:retry")
RERUN = Button(
    action="rerun",
    label="Rerun",
    url_name="dashboard:rerun",
    confirm="Rerun this job? A new run with the same arguments is enqueued.",
    confirm_label="Rerun job",
)
CANCEL = Button(
    action="cancel",
    label="Cancel",
    url_name="dashboard:cancel",
    confirm="Cancel this job? It will not run again unless someone retries it.",
    confirm_label="Cancel job",
)
DISCARD = Button(
    action="discard",
    label="Discard",
    url_name="dashboard:discard",
    confirm="Discard this job and its attempts? This cannot be undone.",
    confirm_label="Discard job",
)
RUN_NOW = Button(action="run-now", label="Run now", url_name="dashboard:run_now")


def job_buttons(job, user) -> list[Button]:
    """The actions `user` may take on `job` in its current state, in display order."""
    return state_buttons(job) if can_operate(user) else []


def state_buttons(job) -> list[Button]:
    """The actions `job` offers in its current state to someone who may act on jobs."""
    buttons = []
    if due_later(job):
        buttons.append(RUN_NOW)
    if job.state in RETRYABLE:
        buttons.append(RETRY)
    if job.state in TERMINAL:
        buttons.append(RERUN)
    # A running job can be asked to stop once; after that its worker is on it.
    if job.state in CANCELLABLE or (
        job.state == JobState.RUNNING and job.cancel_requested_at is None
    ):
        buttons.append(CANCEL)
    if job.state in DISCARDABLE:
        buttons.append(DISCARD)
    return buttons
