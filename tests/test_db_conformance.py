"""The same engine cases against every database engine (jobs.db), no mocks.

Each case is parametrised over both engines. A run executes the cases of its own database in
process, and runs this file once more in a subprocess against the other database: SQLite
always, PostgreSQL when DATABASE_URL names it or one answers at 127.0.0.1:5432. So one run,
on either database, exercises both engines.
"""

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobs import db
from jobs.models import Attempt, AuditEntry, CounterDelta, Job, PausedQueue
from jobs.payload import checked_arguments
from jobs.states import FAILED_ATTEMPT, AttemptOutcome, DeadLetterReason, JobState
from tests.conftest import ROOT
from tests.factories import make_job

ENGINES = ["sqlite", "postgresql"]
NESTED = "JOBSITE_CONFORMANCE_OTHER_ENGINE"
LOCAL_POSTGRES = "postgres://postgres@127.0.0.1:5432"
LEASE = 60.0


@pytest.fixture(params=ENGINES)
def engine(request):
    if request.param != connection.vendor:
        pytest.skip(f"the {request.param} engine runs in its own database's process")
    assert db.engine().vendor == request.param
    return db.engine()


def ago(seconds=60):
    return timezone.now() - timedelta(seconds=seconds)


def due_job(**fields):
    # PostgreSQL's now() is the test transaction's start: due means before it.
    fields.setdefault("run_after", ago())
    return make_job(**fields)


def claim(limit=10, queues=None, worker_id="w-conformance"):
    return db.claim(worker_id=worker_id, queues=queues, limit=limit, lease_seconds=LEASE)


def new_row(**fields):
    return {
        "id": uuid.uuid4(),
        "task_path": "tests.tasks.add",
        "backend": "default",
        "args": [1, 2],
        "kwargs": {"x": "y"},
        "queue_name": "default",
        "priority": 0,
        "state": JobState.PENDING,
        "attempt": 0,
        "max_attempts": 3,
        "timeout": None,
        "run_after": None,
        "not_after": None,
        "dedup_key": None,
        "rerun_of_id": None,
        "parent_id": None,
        "enqueued_at": None,
        "backoff": None,
        **fields,
    }


def finished(claimed, state, outcome, **fields):
    return db.Finish(
        job_id=claimed.id,
        lease_id=claimed.lease_id,
        state=state,
        outcome=outcome,
        worker_id="w-conformance",
        started_at=timezone.now(),
        finished_at=timezone.now(),
        **fields,
    )


def counters():
    return CounterDelta.objects.totals()


def counters_but_enqueued():
    """The counters less jobs_enqueued: on PostgreSQL the insert trigger also counts the jobs
    `make_job` stores, on SQLite only the engine's inserts count."""
    totals = counters()
    totals.pop("jobs_enqueued", None)
    return totals


# --- enqueue ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_insert_job_stores_the_row_and_counts_it(engine):
    row = new_row(dedup_key="k-1", priority=5)
    db.insert_job(row)
    job = Job.objects.get(id=row["id"])
    assert (job.args, job.kwargs, job.priority, job.dedup_key) == ([1, 2], {"x": "y"}, 5, "k-1")
    assert job.state == JobState.PENDING and job.finished_at is None
    assert job.run_after is not None and job.enqueued_at is not None
    assert (job.error_type, job.worker_id, job.dead_letter_reason) == ("", "", "")
    assert counters() == {"jobs_enqueued": 1}


@pytest.mark.django_db
def test_a_job_enqueued_already_cancelled_is_finished_at_once(engine):
    row = new_row(state=JobState.CANCELLED, error_type="ParentFailed")
    db.insert_job(row)
    job = Job.objects.get(id=row["id"])
    assert job.state == JobState.CANCELLED and job.finished_at is not None


@pytest.mark.django_db
def test_insert_job_batch_stores_every_call_with_its_arguments(engine):
    template = new_row(backoff={"strategy": "fixed", "delay": 1})
    calls = [(uuid.uuid4(), [i, "tab\there"], {"n": i, "q": "back\\slash"}) for i in range(3)]
    db.insert_job_batch(template, ((i, *checked_arguments(a, k)[2:]) for i, a, k in calls))
    for job_id, args, kwargs in calls:
        job = Job.objects.get(id=job_id)
        assert (job.args, job.kwargs) == (args, kwargs)
        assert job.backoff == {"strategy": "fixed", "delay": 1}
    assert counters() == {"jobs_enqueued": 3}


@pytest.mark.django_db
def test_insert_job_batch_stores_nothing_when_its_calls_fail_midway(engine):
    def calls():
        for i in range(2500):  # past the first chunk on both engines
            yield uuid.uuid4(), json.dumps([i]), "{}"
        raise ValueError("a bad call")

    with pytest.raises(ValueError, match="a bad call"):
        db.insert_job_batch(new_row(), calls())
    assert not Job.objects.exists() and counters() == {}
    db.insert_job_batch(new_row(), ((uuid.uuid4(), "[1]", "{}") for _ in range(3)))
    assert Job.objects.count() == 3 and counters() == {"jobs_enqueued": 3}


# --- claim -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_claim_takes_the_highest_priority_then_the_oldest_due(engine):
    low = due_job(priority=0, run_after=ago(300))
    high = due_job(priority=10)
    older = due_job(priority=0, run_after=ago(600))
    claimed = claim(limit=2)
    assert [c.id for c in claimed] == [high.id, older.id]
    assert claim(limit=5)[0].id == low.id


@pytest.mark.django_db
def test_a_claim_hands_back_its_jobs_in_claim_order_whatever_order_the_rows_come_back(engine):
    # The worker sends a claim's jobs to executors in the order given: a sync job held back
    # for must not come after the coroutines claimed with it. Stored newest-due first, under
    # random ids, so that neither the table's nor the primary key's order is the claim's.
    jobs = [due_job(priority=p, run_after=ago(60 + i)) for i in range(30) for p in (0, 5)]
    claimed = claim(limit=60)
    in_claim_order = sorted(jobs, key=lambda j: (-j.priority, j.run_after))
    assert [c.id for c in claimed] == [j.id for j in in_claim_order]


@pytest.mark.django_db
def test_claim_marks_the_job_running_with_a_fresh_lease(engine):
    job = due_job(args=[3, 4], kwargs={"a": 1})
    (c,) = claim()
    assert (c.id, c.attempt, c.task_path) == (job.id, 1, "tests.tasks.add")
    assert (json.loads(c.args_json), json.loads(c.kwargs_json)) == ([3, 4], {"a": 1})
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.lease_id == c.lease_id
    assert job.worker_id == "w-conformance" and job.lease_expires_at is not None


@pytest.mark.django_db
def test_claim_leaves_jobs_not_due_exhausted_expired_or_not_claimable(engine):
    make_job(run_after=timezone.now() + timedelta(hours=1))
    due_job(attempt=3, max_attempts=3)
    due_job(not_after=ago(30))
    due_job(state=JobState.SCHEDULED)
    make_job(state=JobState.DEAD_LETTER)
    assert claim() == []


@pytest.mark.django_db
def test_claim_takes_only_the_queues_asked_for_and_never_a_paused_one(engine):
    emails = due_job(queue_name="emails")
    due_job(queue_name="reports")
    due_job(queue_name="paused")
    PausedQueue.objects.create(name="paused")
    assert [c.id for c in claim(queues=["emails", "paused"])] == [emails.id]
    assert [c.queue_name for c in claim()] == ["reports"]


@pytest.mark.django_db
@pytest.mark.parametrize("queues", [["emails", "reports"], ["reports", "billing", "emails"]])
def test_claim_of_several_queues_takes_their_due_jobs_in_priority_then_due_order(engine, queues):
    older, newer = ago(120), ago(60)
    jobs = {
        "emails high": due_job(queue_name="emails", priority=5, run_after=newer),
        "reports high": due_job(queue_name="reports", priority=5, run_after=older),
        "emails low older": due_job(queue_name="emails", priority=0, run_after=older),
        "reports low": due_job(queue_name="reports", priority=0, run_after=newer),
        "emails low newer": due_job(queue_name="emails", priority=0, run_after=ago(30)),
    }
    due_job(queue_name="other", priority=9)
    order = {job.id: name for name, job in jobs.items()}

    first = {order[c.id] for c in claim(limit=3, queues=queues)}
    rest = {order[c.id] for c in claim(limit=3, queues=queues)}

    assert first == {"reports high", "emails high", "emails low older"}
    assert rest == {"emails low newer", "reports low"}
    assert claim(queues=queues) == []


@pytest.mark.django_db
def test_claim_of_a_queue_named_twice_claims_each_job_once(engine):
    jobs = {due_job(queue_name="emails").id for _ in range(3)}
    assert sorted(c.id for c in claim(limit=3, queues=["emails", "emails"])) == sorted(jobs)


@pytest.mark.django_db
def test_claim_one_claims_that_job_only_when_claimable(engine):
    job = due_job()
    other = due_job()
    c = db.claim_one(job.id, worker_id="eager", lease_seconds=LEASE)
    assert c.id == job.id and c.attempt == 1
    assert db.claim_one(job.id, worker_id="eager", lease_seconds=LEASE) is None
    assert Job.objects.get(id=other.id).state == JobState.PENDING


# --- finish ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_finish_success_records_the_attempt_the_result_and_the_counter(engine):
    due_job()
    (c,) = claim()
    applied = db.finish(
        [finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED, return_json='{"ok": 1}')]
    )
    assert [a.job_id for a in applied] == [c.id]
    job = Job.objects.get(id=c.id)
    assert job.state == JobState.SUCCEEDED and job.return_value == {"ok": 1}
    assert job.finished_at is not None and job.lease_id is None
    assert list(Attempt.objects.filter(job=job).values_list("number", "outcome")) == [
        (1, AttemptOutcome.SUCCEEDED)
    ]
    assert counters_but_enqueued() == {"jobs_succeeded": 1}


@pytest.mark.django_db
def test_an_attempt_keeps_its_own_times_to_the_microsecond(engine):
    due_job()
    (c,) = claim()
    india = timezone.get_fixed_timezone(330)
    began = timezone.datetime(2026, 11, 28, 11, 4, 3, 999_999, tzinfo=india)
    ended = began + timedelta(microseconds=1)
    db.finish(
        [
            db.Finish(
                job_id=c.id,
                lease_id=c.lease_id,
                state=JobState.SUCCEEDED,
                outcome=AttemptOutcome.SUCCEEDED,
                worker_id="w-conformance",
                started_at=began,
                finished_at=ended,
            )
        ]
    )
    attempt = Attempt.objects.get(job_id=c.id)
    assert (attempt.started_at, attempt.finished_at) == (began, ended)
    assert attempt.finished_at - attempt.started_at == timedelta(microseconds=1)


@pytest.mark.django_db
def test_finish_retry_schedules_the_next_attempt_after_the_delay(engine):
    due_job()
    (c,) = claim()
    db.finish(
        [
            finished(
                c,
                JobState.RETRYING,
                AttemptOutcome.FAILED,
                delay=3600,
                error_type="ValueError",
                error_message="boom",
            )
        ]
    )
    job = Job.objects.get(id=c.id)
    assert job.state == JobState.RETRYING and job.finished_at is None
    assert job.run_after > timezone.now() + timedelta(seconds=3000)
    assert (job.error_type, job.error_message) == ("ValueError", "boom")
    attempt = Attempt.objects.get(job=job)
    assert (attempt.outcome, attempt.error_type) == (AttemptOutcome.FAILED, "ValueError")
    assert counters_but_enqueued() == {"jobs_failed": 1, "jobs_requeued": 1}


@pytest.mark.django_db
def test_an_attempt_given_back_at_shutdown_keeps_the_tasks_own_maximum_visible(engine):
    due_job(attempt=2, max_attempts=3)
    (c,) = claim()
    interrupted = finished(
        c, JobState.RETRYING, AttemptOutcome.INTERRUPTED, delay=0, raise_max_attempts=True
    )
    db.finish([interrupted])
    job = Job.objects.get(id=c.id)
    assert (job.attempt, job.max_attempts, job.attempts_given_back) == (3, 4, 1)
    assert job.own_max_attempts == 3


@pytest.mark.django_db
def test_a_retry_without_giving_back_leaves_the_maximum_alone(engine):
    due_job(max_attempts=3)
    (c,) = claim()
    db.finish([finished(c, JobState.RETRYING, AttemptOutcome.FAILED, delay=0)])
    job = Job.objects.get(id=c.id)
    assert (job.max_attempts, job.attempts_given_back, job.own_max_attempts) == (3, 0, 3)


@pytest.mark.django_db
def test_finish_dead_letters_and_cancels_the_continuations(engine):
    parent = due_job(attempt=2, max_attempts=3)
    child = make_job(state=JobState.SCHEDULED, parent=parent)
    grandchild = make_job(state=JobState.SCHEDULED, parent=child)
    (c,) = claim()
    db.finish(
        [
            finished(
                c,
                JobState.DEAD_LETTER,
                AttemptOutcome.FAILED,
                reason=DeadLetterReason.EXHAUSTED,
                error_type="ValueError",
            )
        ]
    )
    job = Job.objects.get(id=parent.id)
    assert job.state == JobState.DEAD_LETTER
    assert job.dead_letter_reason == DeadLetterReason.EXHAUSTED
    assert Attempt.objects.get(job=job).number == 3
    for continuation in (child, grandchild):
        continuation.refresh_from_db()
        assert continuation.state == JobState.CANCELLED
        assert continuation.error_type == "ParentFailed"
        (entry,) = AuditEntry.objects.filter(job=continuation)
        assert (entry.action, entry.source, entry.username, entry.task_path) == (
            "cancel",
            "workflow",
            "",
            continuation.task_path,
        )
        assert entry.outcome == "job cancelled: a job it runs after did not succeed"
        assert abs((entry.at - timezone.now()).total_seconds()) < 60
    assert counters_but_enqueued() == {
        "jobs_failed": 1,
        "jobs_dead_lettered": 1,
        "jobs_cancelled": 2,
    }


@pytest.mark.django_db
def test_a_success_releases_the_continuations(engine):
    parent = due_job()
    child = make_job(state=JobState.SCHEDULED, parent=parent, run_after=ago(3600))
    (c,) = claim()
    db.finish([finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)])
    child.refresh_from_db()
    assert child.state == JobState.PENDING
    assert child.run_after > ago(3000)


@pytest.mark.django_db
def test_a_finish_with_a_lease_taken_over_changes_nothing(engine):
    due_job()
    (c,) = claim()
    stale = finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)
    stale.lease_id = uuid.uuid4()
    assert db.finish([stale]) == []
    assert Job.objects.get(id=c.id).state == JobState.RUNNING
    assert not Attempt.objects.exists()
    assert counters_but_enqueued() == {}


@pytest.mark.django_db
def test_a_batch_of_outcomes_changes_exactly_the_jobs_whose_lease_holds(engine):
    for _ in range(5):
        due_job()
    claimed = claim()
    batch = [finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED) for c in claimed[:3]]
    batch[1].lease_id = uuid.uuid4()
    applied = db.finish(batch)
    assert {a.job_id for a in applied} == {claimed[0].id, claimed[2].id}
    states = dict(Job.objects.values_list("id", "state"))
    assert [states[c.id] for c in claimed] == [
        JobState.SUCCEEDED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
        JobState.RUNNING,
        JobState.RUNNING,
    ]
    assert sorted(Attempt.objects.values_list("job_id", "number")) == sorted(
        [(claimed[0].id, 1), (claimed[2].id, 1)]
    )
    assert counters_but_enqueued() == {"jobs_succeeded": 2}


@pytest.mark.django_db
def test_a_cancel_requested_while_running_wins_over_success(engine):
    due_job()
    (c,) = claim()
    Job.objects.filter(id=c.id).update(cancel_requested_at=timezone.now())
    (applied,) = db.finish([finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)])
    assert (applied.state, applied.outcome) == (JobState.CANCELLED, AttemptOutcome.CANCELLED)
    job = Job.objects.get(id=c.id)
    assert job.state == JobState.CANCELLED and job.error_type == "JobCancelled"
    attempt = Attempt.objects.get(job=job)
    assert attempt.outcome == AttemptOutcome.CANCELLED
    # The attempt returned, without an error of its own: it says why it ended, as its job.
    assert (attempt.error_type, attempt.error_message) == (
        "JobCancelled",
        "cancelled by an operator",
    )
    assert counters_but_enqueued() == {"jobs_cancelled": 1}


@pytest.mark.django_db
def test_a_cancel_requested_while_running_wins_over_a_dead_letter_the_worker_decided(engine):
    due_job()
    (c,) = claim()
    Job.objects.filter(id=c.id).update(cancel_requested_at=timezone.now())
    ended = finished(c, JobState.DEAD_LETTER, AttemptOutcome.FAILED)
    (applied,) = db.finish([ended])
    assert (applied.state, applied.outcome) == (JobState.CANCELLED, AttemptOutcome.CANCELLED)
    job = Job.objects.get(id=c.id)
    assert (job.state, job.dead_letter_reason) == (JobState.CANCELLED, "")
    assert Attempt.objects.get(job=job).outcome == AttemptOutcome.CANCELLED
    assert counters_but_enqueued() == {"jobs_cancelled": 1}


@pytest.mark.django_db
def test_a_cancelled_job_keeps_no_return_value_from_its_last_attempt(engine):
    due_job()
    (c,) = claim()
    Job.objects.filter(id=c.id).update(cancel_requested_at=timezone.now())
    db.finish([finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)])
    job = Job.objects.get(id=c.id)
    assert (job.state, job.return_value) == (JobState.CANCELLED, None)


@pytest.mark.django_db
def test_a_job_released_unstarted_goes_back_as_it_was(engine):
    due_job()
    (c,) = claim()
    db.finish([finished(c, JobState.PENDING, None)])
    job = Job.objects.get(id=c.id)
    assert (job.state, job.attempt, job.started_at, job.lease_id, job.worker_id) == (
        JobState.PENDING,
        0,
        None,
        None,
        "",  # no worker holds it: the console must not name one
    )
    assert not Attempt.objects.exists()
    assert counters_but_enqueued() == {}


@pytest.mark.django_db
def test_every_failed_attempt_outcome_counts_as_failed(engine):
    for _ in FAILED_ATTEMPT:
        due_job()
    claimed = claim()
    outcomes = sorted(FAILED_ATTEMPT)
    db.finish(
        [
            finished(c, JobState.RETRYING, outcome, delay=60)
            for c, outcome in zip(claimed, outcomes, strict=True)
        ]
    )
    assert counters_but_enqueued() == {
        "jobs_failed": len(FAILED_ATTEMPT),
        "jobs_requeued": len(FAILED_ATTEMPT),
        "jobs_recovered": 1,  # the lost one
    }


@pytest.mark.django_db
def test_finish_and_claim_records_and_claims_in_one_go(engine):
    due_job()
    (c,) = claim()
    nxt = due_job()
    applied, claimed = db.finish_and_claim(
        [finished(c, JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)],
        worker_id="w-conformance",
        queues=None,
        limit=5,
        lease_seconds=LEASE,
    )
    assert [a.job_id for a in applied] == [c.id]
    assert [x.id for x in claimed] == [nxt.id]


# --- leases, expiry, orphans, counters --------------------------------------------------------


@pytest.mark.django_db
def test_renewing_extends_only_the_leases_still_held(engine):
    due_job()
    due_job()
    first, second = sorted(claim(), key=lambda c: c.id)
    held = db.renew_leases([(first.id, first.lease_id), (second.id, uuid.uuid4())], LEASE)
    assert held == {first.id}
    assert db.renew_leases([], LEASE) == set()


@pytest.mark.django_db
def test_expired_leases_are_found_with_their_claim(engine):
    job = due_job(backoff={"strategy": "fixed", "delay": 5})
    due_job()
    (lost,) = [c for c in claim() if c.id == job.id]
    Job.objects.filter(id=lost.id).update(lease_expires_at=ago(5))
    (expired,) = db.expired_leases(lock=True)
    assert (expired.id, expired.lease_id, expired.attempt) == (lost.id, lost.lease_id, 1)
    assert expired.backoff == {"strategy": "fixed", "delay": 5}
    recovered = finished(expired.as_claimed(), JobState.RETRYING, AttemptOutcome.LOST, delay=1)
    recovered.only_if_expired = True
    assert len(db.finish([recovered])) == 1
    assert counters()["jobs_recovered"] == 1


@pytest.mark.django_db
def test_not_after_expiry_cancels_waiting_jobs_and_their_continuations(engine):
    late = make_job(not_after=ago(10))
    child = make_job(state=JobState.SCHEDULED, parent=late)
    on_time = make_job(not_after=timezone.now() + timedelta(hours=1))
    assert db.expire_not_after() == [late.id]
    late.refresh_from_db()
    child.refresh_from_db()
    assert (late.state, late.error_type) == (JobState.CANCELLED, "Expired")
    assert child.state == JobState.CANCELLED
    assert Job.objects.get(id=on_time.id).state == JobState.PENDING
    assert counters_but_enqueued() == {"jobs_cancelled": 2}


@pytest.mark.django_db
def test_orphaned_continuations_follow_their_finished_parent(engine):
    done = make_job(state=JobState.SUCCEEDED)
    failed = make_job(state=JobState.DEAD_LETTER)
    released = make_job(state=JobState.SCHEDULED, parent=done)
    cancelled = make_job(state=JobState.SCHEDULED, parent=failed)
    assert db.settle_orphaned_continuations() == 2
    assert Job.objects.get(id=released.id).state == JobState.PENDING
    assert Job.objects.get(id=cancelled.id).state == JobState.CANCELLED


@pytest.mark.django_db
def test_compaction_keeps_the_totals_in_one_row_per_name(engine):
    for _ in range(3):
        db.add_counters({"jobs_enqueued": 2, "jobs_failed": 1, "jobs_requeued": 0})
    db.compact_counters()
    assert CounterDelta.objects.count() == 2
    assert counters() == {"jobs_enqueued": 6, "jobs_failed": 3}


# --- the other engine ------------------------------------------------------------------------


def other_database_url() -> str | None:
    """The other database for the subprocess run, or None when none is reachable."""
    if connection.vendor == "postgresql":
        return ""  # the test settings' SQLite
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        import psycopg

        try:
            psycopg.connect(f"{LOCAL_POSTGRES}/postgres", connect_timeout=3).close()
        except psycopg.OperationalError:
            return None
        url = f"{LOCAL_POSTGRES}/jobsite_conformance_{os.getpid()}"
    return url


@pytest.mark.skipif(bool(os.environ.get(NESTED)), reason="this is the other engine's run")
def test_every_case_passes_on_the_other_engine():
    url = other_database_url()
    if url is None:
        pytest.skip("no PostgreSQL reachable at DATABASE_URL or 127.0.0.1:5432")
    env = {**os.environ, NESTED: "1", "DATABASE_URL": url}
    if not url:
        del env["DATABASE_URL"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
