"""A running job speaks: its progress and log lines, written from the real worker's executor and
read through the API and the console while it runs (jobs.reports, jobs.attempt_log)."""

import signal
import time
import uuid

import pytest
from django.test import Client

from jobs import attempt_log
from jobs.models import Job, LogLine
from jobs.pool.executor import REPORTS_TIMEOUT
from jobs.states import JobState
from tests import tasks
from tests.reliability_helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def job_id(result):
    return uuid.UUID(str(result.id))


def api_job(headers, jid):
    response = Client().get(f"/api/v1/jobs/{jid}", headers=headers)
    assert response.status_code == 200
    return response.json()


def api_logs(headers, jid, attempt=None):
    query = f"?attempt={attempt}" if attempt is not None else ""
    response = Client().get(f"/api/v1/jobs/{jid}/logs{query}", headers=headers)
    assert response.status_code == 200, response.content
    return response.json()


def finished(jid, timeout=30):
    return wait_for(
        lambda: (
            Job.objects.filter(id=jid, state__in=[JobState.SUCCEEDED, JobState.DEAD_LETTER])
            .values_list("state", flat=True)
            .first()
        ),
        timeout=timeout,
        what=f"job {jid} to finish",
    )


def test_progress_read_through_the_api_moves_while_the_job_runs_and_ends_at_its_last_value(
    spawn_worker, reader_headers, tmp_path, operator
):
    jid = job_id(tasks.reports_steps.enqueue(str(tmp_path), 3))
    spawn_worker("--concurrency", "1")
    console = Client()
    console.force_login(operator)
    seen = []
    for step in range(3):
        progress = wait_for(
            lambda step=step: (
                (p := api_job(reader_headers, jid)["progress"]) and p["done"] == step and p
            ),
            timeout=30,
            what=f"progress {step} of 3",
        )
        assert progress["total"] == 3 and progress["message"] == f"step {step}"
        seen.append(progress["done"])
        if step == 1:
            page = console.get(f"/jobs/{jid}/").content.decode()
            assert '<progress class="progress-bar" value="1" max="3"' in page
            assert "1 of 3" in page and "step 1" in page
            assert api_job(reader_headers, jid)["state"] == JobState.RUNNING
        (tmp_path / f"go-{step}").touch()
    assert finished(jid) == JobState.SUCCEEDED
    final = api_job(reader_headers, jid)["progress"]
    assert seen == [0, 1, 2]
    assert (final["done"], final["total"], final["message"]) == (3, 3, "done")
    assert set(final) == {"done", "total", "message", "updated_at"}
    lines = [line["message"] for line in api_logs(reader_headers, jid)["lines"]]
    assert lines == ["at step 0", "at step 1", "at step 2"]


def test_a_retried_job_shows_no_progress_of_its_failed_attempt_while_the_next_one_runs(
    spawn_worker, reader_headers, tmp_path
):
    jid = job_id(tasks.reports_then_fails_once.using(max_attempts=2).enqueue(str(tmp_path)))
    spawn_worker("--concurrency", "1")
    wait_for(lambda: (tmp_path / "second").exists(), timeout=30, what="the second attempt")
    job = api_job(reader_headers, jid)
    assert (job["state"], job["attempt"]) == (JobState.RUNNING, 2)
    assert job["progress"] is None
    (tmp_path / "go").touch()
    assert finished(jid) == JobState.SUCCEEDED
    final = api_job(reader_headers, jid)["progress"]
    assert (final["done"], final["total"], final["message"]) == (1, 1, "second attempt")


def test_every_line_of_a_short_job_is_kept_with_its_attempt_also_when_it_fails(
    spawn_worker, reader_headers
):
    ok = job_id(tasks.logs_lines.enqueue(40))
    failing = job_id(tasks.logs_lines.using(max_attempts=2).enqueue(5, fail=True))
    spawn_worker("--concurrency", "2")
    assert finished(ok) == JobState.SUCCEEDED
    assert finished(failing) == JobState.DEAD_LETTER

    log = api_logs(reader_headers, ok)
    assert log["attempt"] == 1 and log["cut"] == 0 and not log["running"]
    assert [line["message"] for line in log["lines"]] == [f"line {i} of 40" for i in range(1, 41)]
    assert {line["level"] for line in log["lines"]} == {"INFO"}
    for attempt in (1, 2):
        log = api_logs(reader_headers, failing, attempt)
        assert [line["message"] for line in log["lines"]] == [f"line {i} of 5" for i in range(1, 6)]


def test_five_thousand_lines_keep_at_most_a_thousand_the_first_and_the_last_and_mark_the_cut(
    spawn_worker, reader_headers, admin_client
):
    jid = job_id(tasks.logs_lines.enqueue(5000))
    spawn_worker("--concurrency", "1")
    assert finished(jid) == JobState.SUCCEEDED

    assert LogLine.objects.filter(job_id=jid).count() <= attempt_log.MAX_LINES
    log = api_logs(reader_headers, jid)
    messages = [line["message"] for line in log["lines"]]
    assert messages[0] == "line 1 of 5000"
    assert messages[-1] == "line 5000 of 5000"
    cuts = [line for line in log["lines"] if line["level"] == "CUT"]
    assert len(cuts) == 1 and log["cut"] == 5000 - (len(messages) - 1)
    assert cuts[0]["message"] == f"[{log['cut']:,} lines cut]"
    kept = len(messages) - 1
    assert 0 < kept <= attempt_log.MAX_LINES
    # Contiguous on both sides of the cut: the head from line 1, the tail up to the last.
    cut_at = messages.index(cuts[0]["message"])
    assert messages[cut_at - 1] == f"line {cut_at} of 5000"
    assert messages[cut_at + 1] == f"line {cut_at + log['cut'] + 1} of 5000"
    # The job's page shows them, the cut marked.
    page = admin_client.get(f"/jobs/{jid}/")
    assert page.status_code == 200
    assert f"[{log['cut']:,} lines cut]" in page.content.decode()


def test_an_async_def_task_reports_progress_and_lines_as_a_sync_one_does(
    spawn_worker, reader_headers
):
    jid = job_id(tasks.async_reports.enqueue(20))
    spawn_worker("--concurrency", "1")
    assert finished(jid) == JobState.SUCCEEDED
    progress = api_job(reader_headers, jid)["progress"]
    assert (progress["done"], progress["total"], progress["message"]) == (20, 20, "async step 20")
    lines = [line["message"] for line in api_logs(reader_headers, jid)["lines"]]
    assert lines == [f"async line {i}" for i in range(1, 21)]


LAST_WORDS = ["first line", "line 2", "line 3", "line 4"]


def _first_line_written_then_go(jid, folder):
    """Once the executor's periodic write has taken the first line, lets the task log the rest:
    the next periodic write is a second away, so whatever stops the job sooner stops it with
    its last lines (and last progress) not yet written."""
    wait_for(
        lambda: LogLine.objects.filter(job_id=jid).exists(),
        timeout=30,
        interval=0.01,
        what="the first line to be written",
    )
    (folder / "go").touch()
    wait_for(lambda: (folder / "hanging").exists(), timeout=30, interval=0.01, what="the rest")


def _kept_to_the_last_word(headers, jid):
    lines = [line["message"] for line in api_logs(headers, jid, 1)["lines"]]
    assert lines == LAST_WORDS
    progress = api_job(headers, jid)["progress"]
    assert (progress["done"], progress["message"]) == (2, "last words")


def test_the_last_lines_of_an_attempt_stopped_at_its_timeout_are_kept(
    spawn_worker, reader_headers, tmp_path
):
    jid = job_id(tasks.logs_then_hangs.using(max_attempts=1, timeout=1.5).enqueue(str(tmp_path)))
    spawn_worker("--concurrency", "1")
    _first_line_written_then_go(jid, tmp_path)
    assert finished(jid) == JobState.DEAD_LETTER
    job = Job.objects.get(id=jid)
    assert job.error_type == "JobTimeout"
    _kept_to_the_last_word(reader_headers, jid)


def test_the_last_lines_of_an_attempt_stopped_by_the_shutdown_timeout_are_kept(
    spawn_worker, reader_headers, tmp_path
):
    jid = job_id(tasks.logs_then_hangs.using(max_attempts=1).enqueue(str(tmp_path)))
    worker = spawn_worker("--concurrency", "1", "--shutdown-timeout", "0.1")
    _first_line_written_then_go(jid, tmp_path)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    assert Job.objects.get(id=jid).state != JobState.RUNNING
    _kept_to_the_last_word(reader_headers, jid)


def test_lines_logged_after_the_early_ask_of_a_shutdown_are_kept_too(
    spawn_worker, reader_headers, tmp_path
):
    # Half a second before the shutdown timeout ends the worker asks its executors to write
    # what they hold (so that one that cannot answer is not waited for after it); what a job
    # logs after that answer is written at the stop itself.
    jid = job_id(tasks.logs_then_hangs.using(max_attempts=1).enqueue(str(tmp_path)))
    worker = spawn_worker("--concurrency", "1", "--shutdown-timeout", "3")
    wait_for(
        lambda: LogLine.objects.filter(job_id=jid).exists(),
        timeout=30,
        interval=0.01,
        what="the first line to be written",
    )
    stop_asked = time.monotonic()
    worker.signal(signal.SIGTERM)
    time.sleep(max(0.0, stop_asked + 3 - REPORTS_TIMEOUT + 0.3 - time.monotonic()))
    (tmp_path / "go").touch()
    assert worker.wait(timeout=30) == 0, worker.output()
    assert (tmp_path / "hanging").exists()
    _kept_to_the_last_word(reader_headers, jid)


def test_an_executor_that_cannot_write_its_last_lines_is_stopped_at_its_timeout_all_the_same(
    spawn_worker,
):
    jid = job_id(tasks.logs_then_freezes.using(max_attempts=1, timeout=1).enqueue())
    worker = spawn_worker("--concurrency", "1")
    assert finished(jid) == JobState.DEAD_LETTER
    job = Job.objects.get(id=jid)
    assert job.error_type == "JobTimeout"
    # Stopped after its timeout and the moment given to write, not waited for any longer
    # (the attempt's own times; the margin is for a loaded machine).
    attempt = job.attempts.get()
    assert (attempt.finished_at - attempt.started_at).total_seconds() < 1 + REPORTS_TIMEOUT + 6
    wait_for(
        lambda: worker.logged(
            f"did not write its jobs' last progress and log lines within {REPORTS_TIMEOUT:g}s"
        ),
        timeout=10,
        what="the worker to say the last lines could not be written",
    )
