"""Pruning old finished jobs: only what was asked for, in batches, counters untouched."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from jobs import db
from jobs.maintenance import prune_jobs
from jobs.models import Attempt, AuditEntry, CounterDelta, Job
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def old(state, days=10, **fields):
    return make_job(state, finished_at=timezone.now() - days * DAY, **fields)


def prune(*args):
    out = StringIO()
    call_command("prune_jobs", *args, stdout=out)
    return out.getvalue()


def remaining():
    return set(Job.objects.values_list("id", flat=True))


def test_old_succeeded_and_cancelled_jobs_are_deleted_by_default():
    doomed = [old(JobState.SUCCEEDED), old(JobState.CANCELLED)]
    dead = old(JobState.DEAD_LETTER)

    out = prune("--older-than", "7d")

    assert remaining() == {dead.id}
    assert "Deleted 2 cancelled, succeeded jobs" in out
    assert not Job.objects.filter(id__in=[j.id for j in doomed]).exists()


def test_recent_finished_jobs_are_kept():
    recent = [old(JobState.SUCCEEDED, days=1), old(JobState.CANCELLED, days=6)]
    old(JobState.SUCCEEDED, days=8)

    prune("--older-than", "1w")

    assert remaining() == {j.id for j in recent}


def test_unfinished_jobs_are_never_deleted_even_if_enqueued_long_ago():
    long_ago = timezone.now() - 30 * DAY
    active = [
        make_job(state, enqueued_at=long_ago, run_after=long_ago)
        for state in (JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING, JobState.RUNNING)
    ]

    prune("--older-than", "1d", "--state", "succeeded,cancelled,dead_letter")

    assert remaining() == {j.id for j in active}


def test_dead_letters_are_deleted_only_when_named():
    dead = old(JobState.DEAD_LETTER)
    succeeded = old(JobState.SUCCEEDED)

    prune("--older-than", "7d", "--state", "succeeded")
    kept = remaining()
    prune("--older-than", "7d", "--state", "dead_letter")

    assert kept == {dead.id}
    assert remaining() == set()
    assert succeeded.id not in kept


@pytest.mark.parametrize("states", ["running", "pending,succeeded", "retrying", "scheduled"])
def test_unfinished_states_are_refused_with_a_clear_error(states):
    job = old(JobState.SUCCEEDED)

    with pytest.raises(CommandError, match="refusing to prune .* only finished jobs"):
        prune("--older-than", "7d", "--state", states)

    assert remaining() == {job.id}


def test_an_unknown_state_is_refused():
    with pytest.raises(CommandError, match="unknown state finished"):
        prune("--older-than", "7d", "--state", "finished")


@pytest.mark.parametrize("age", ["7", "d", "7y", "-7d", "1.5h", "", "7 days"])
def test_an_unreadable_age_is_refused(age):
    with pytest.raises(CommandError, match="older-than"):
        prune("--older-than", age)


@pytest.mark.parametrize("age", ["999999d", "999999w"])
def test_an_age_reaching_back_before_the_calendar_is_refused_and_deletes_nothing(age):
    job = old(JobState.SUCCEEDED)
    with pytest.raises(CommandError, match="reaches back before the year 1"):
        prune("--older-than", age)
    assert remaining() == {job.id}


@pytest.mark.parametrize("states", ["", " , "])
def test_an_empty_state_list_is_refused_not_taken_for_the_default(states):
    job = old(JobState.SUCCEEDED)
    with pytest.raises(CommandError, match="names no state"):
        prune("--older-than", "0s", "--state", states)
    assert remaining() == {job.id}


@pytest.mark.parametrize(
    ("age", "kept_days"), [("30m", []), ("12h", []), ("2d", [1]), ("2w", [1, 5, 13])]
)
def test_ages_in_minutes_hours_days_and_weeks(age, kept_days):
    jobs = {days: old(JobState.SUCCEEDED, days=days) for days in (1, 5, 13, 20)}

    prune("--older-than", age)

    assert remaining() == {jobs[d].id for d in kept_days}


def test_dry_run_deletes_nothing_and_says_how_many_would_go():
    jobs = [old(JobState.SUCCEEDED) for _ in range(3)]

    out = prune("--older-than", "7d", "--dry-run")

    assert remaining() == {j.id for j in jobs}
    assert "Would delete 3" in out


def test_attempts_and_audit_entries_go_with_their_job():
    job = old(JobState.SUCCEEDED)
    keep = old(JobState.SUCCEEDED, days=1)
    for j in (job, keep):
        j.attempts.create(number=1, outcome="succeeded")
        AuditEntry.objects.create(job=j, action="rerun")

    prune("--older-than", "7d")

    assert set(Attempt.objects.values_list("job_id", flat=True)) == {keep.id}
    assert set(AuditEntry.objects.values_list("job_id", flat=True)) == {keep.id}


def test_reruns_and_continuations_of_a_pruned_job_survive_unlinked():
    original = old(JobState.SUCCEEDED)
    rerun = make_job(JobState.PENDING, rerun_of=original)
    child = make_job(JobState.PENDING, parent=original)

    prune("--older-than", "7d")

    assert remaining() == {rerun.id, child.id}
    assert Job.objects.get(id=rerun.id).rerun_of_id is None
    assert Job.objects.get(id=child.id).parent_id is None


def test_pruning_works_in_batches_and_reports_progress():
    for _ in range(7):
        old(JobState.SUCCEEDED)
    calls = []

    result = prune_jobs(timedelta(days=7), batch_size=3, progress=lambda *a: calls.append(a))

    assert calls == [(3, 7), (6, 7), (7, 7)]
    assert (result.matched, result.deleted) == (7, 7)
    assert remaining() == set()


def test_the_command_prints_progress_per_batch():
    for _ in range(5):
        old(JobState.CANCELLED)

    out = prune("--older-than", "7d", "--batch-size", "2")

    assert out.splitlines()[:3] == ["deleted 2 of 5", "deleted 4 of 5", "deleted 5 of 5"]


def test_lifetime_counters_do_not_drop_when_jobs_are_pruned():
    db.add_counters({"jobs_enqueued": 4, "jobs_succeeded": 3, "jobs_cancelled": 1})
    for _ in range(3):
        old(JobState.SUCCEEDED)
    before = CounterDelta.objects.totals()

    prune("--older-than", "7d")

    assert remaining() == set()
    assert CounterDelta.objects.totals() == before


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_another_writer_gets_the_lock_between_batches():
    import sqlite3
    import threading

    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's one write lock; PostgreSQL locks rows")
    for _ in range(10):
        old(JobState.SUCCEEDED)
    events = []

    def another_writer():
        # Another process's write (a web enqueue) arriving while the prune runs.
        other = sqlite3.connect(connection.settings_dict["NAME"], timeout=30)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE jobs_counterdelta SET value = value WHERE 0")
            other.commit()
            events.append("the other writer")
        finally:
            other.close()

    writer = threading.Thread(target=another_writer)

    def progress(deleted, matched):
        events.append(deleted)
        if deleted == 1:
            writer.start()

    prune_jobs(timedelta(days=7), batch_size=1, progress=progress)
    writer.join()

    # It wrote in the first pause, not after the prune had taken every batch.
    assert events.index("the other writer") < events.index(5), events
