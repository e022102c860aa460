"""The worker's log lines (jobs.worker_log)."""

import logging

import pytest

from jobs.worker_log import WorkerLog
from tests import tasks
from tests.factories import make_claimed


def test_a_claim_line_counts_attempts_against_the_jobs_own_maximum(caplog):
    claimed = make_claimed(attempt=2, max_attempts=4)
    claimed.attempts_given_back = 1  # one attempt given back at a shutdown raised the maximum
    with caplog.at_level(logging.INFO, logger="jobs.worker"):
        WorkerLog("text").claims([claimed])
    assert f"(job {claimed.id}, attempt 2/3, 1 given back at shutdown)" in caplog.text


def test_a_claim_line_without_attempts_given_back_says_only_the_attempt(caplog):
    claimed = make_claimed(attempt=1, max_attempts=3)
    with caplog.at_level(logging.INFO, logger="jobs.worker"):
        WorkerLog("text").claims([claimed])
    assert f"(job {claimed.id}, attempt 1/3)" in caplog.text


def test_claims_not_logged_yet_are_written_before_the_worker_stops(caplog):
    log = WorkerLog("text")
    with caplog.at_level(logging.INFO, logger="jobs.worker"):
        log.claims([make_claimed()])  # written at once
        log.claims([make_claimed() for _ in range(9)])  # within the second: summed up later
        assert "claimed 9 jobs" not in caplog.text
        log.flush_claims()
        log.flush_claims()  # nothing more to write
    assert caplog.text.count("claimed 9 jobs") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_burst_worker_logs_every_claim_before_it_says_the_burst_is_done(run_worker):
    tasks.add.enqueue_many([((i, 1), {}) for i in range(60)])
    proc = run_worker("--concurrency", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    done = next(i for i, line in enumerate(lines) if "burst done" in line)
    claimed = [i for i, line in enumerate(lines) if " claimed " in line]
    assert claimed and max(claimed) < done


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_tasks_own_line_quoting_job_data_stays_one_plain_line(run_worker):
    forged = "hello\n2026-11-30 03:00:00 ERROR   job 1 dead-lettered\x1b[2J"
    tasks.logs_hostile.enqueue(forged)
    proc = run_worker()
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if "hello" in line]
    assert line.endswith("hello\\n2026-11-30 03:00:00 ERROR   job 1 dead-lettered\\x1b[2J")
    assert "\x1b" not in proc.stderr
    assert not any(line.startswith("2026-11-30 03:00:00") for line in proc.stderr.splitlines())
