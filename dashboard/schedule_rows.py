"""What the schedules page and the API show of each schedule: its state and its recent runs."""

from dataclasses import dataclass

from django.db.models import F

from jobs import schedules
from jobs.models import Job
from jobs.states import JobState

# Runs shown per schedule on the page.
RECENT_RUNS = 5
FAILED = (JobState.DEAD_LETTER, JobState.CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRow:
    state: schedules.ScheduleState
    # Newest first: fire times and runs made by hand ("run now").
    recent: list[Job]

    @property
    def name(self) -> str:
        return self.state.spec.name

    @property
    def last_job(self) -> Job | None:
        return self.recent[0] if self.recent else None

    @property
    def failed_recently(self) -> int:
        """How many of the recent runs ended as dead letters or cancelled."""
        return sum(1 for job in self.recent if job.state in FAILED)


def recent_runs(name: str, limit: int = RECENT_RUNS) -> list[Job]:
    # One catch-up enqueues its fire times in one transaction (one enqueued_at on PostgreSQL):
    # among those the latest fire time is the newest run.
    newest = ("-enqueued_at", F("scheduled_at").desc(nulls_first=True), "-id")
    return list(Job.objects.filter(schedule=name).order_by(*newest)[:limit])


def schedule_rows(limit: int = RECENT_RUNS) -> list[ScheduleRow]:
    return [
        ScheduleRow(state=state, recent=recent_runs(state.spec.name, limit))
        for state in schedules.states()
    ]


def schedule_row(name: str) -> ScheduleRow:
    """UnknownSchedule when `name` is not configured."""
    return ScheduleRow(state=schedules.state(name), recent=recent_runs(name))


def unusable(exc) -> str:
    """What the console and the API say while the SCHEDULES setting cannot be read."""
    return (
        f"The SCHEDULES setting has a problem (workers refuse to start on it): {exc}. "
        "`python manage.py check` lists every problem (jobs.E001)."
    )
