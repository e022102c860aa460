"""Writing what an attempt reports: buffered until written, fenced by the attempt's lease, gone
with its job, served by the API and shown escaped by the console (jobs.reports)."""

import uuid

import pytest
from django.test import Client

from jobs import reports
from jobs.actions import discard_job
from jobs.maintenance import prune_jobs
from jobs.models import Job, LogLine
from jobs.reports import AttemptReport, InlineWriter, LiveWriter
from jobs.states import JobState
from tests.factories import make_job

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def live_writer():
    """An executor's writer whose timer never fires during the test: writes happen when an
    attempt ends, or when the test flushes."""
    writer = LiveWriter(interval=3600)
    yield writer
    writer.close()  # its own connection must not outlive the test database


def report_for(job, writer, lease_id=None):
    return AttemptReport(job.id, lease_id or job.lease_id, job.attempt, writer=writer)


@pytest.mark.django_db(transaction=True)
def test_reports_wait_in_the_executor_and_the_last_progress_and_every_line_land_at_the_end(
    live_writer,
):
    job = make_job(JobState.RUNNING)
    report = report_for(job, live_writer)
    for i in range(1, 10_001):
        report.progress(i, 10_000, f"row {i}")
    for i in range(1, 51):
        report.logger.info("row %d", i)
    job.refresh_from_db()
    assert job.progress is None and not LogLine.objects.filter(job=job).exists()

    report.close()
    job.refresh_from_db()
    assert (job.progress["done"], job.progress["total"], job.progress["message"]) == (
        10_000,
        10_000,
        "row 10000",
    )
    lines = LogLine.objects.filter(job=job).order_by("seq")
    assert [line.message for line in lines] == [f"row {i}" for i in range(1, 51)]
    report.progress(1, 2)  # after the end: dropped
    report.logger.info("late")
    assert LogLine.objects.filter(job=job).count() == 50


@pytest.mark.django_db(transaction=True)
def test_a_write_from_a_lease_that_was_taken_over_changes_nothing(live_writer):
    job = make_job(JobState.RUNNING)
    writer = live_writer
    stale = report_for(job, writer)
    stale.progress(1, 10, "first")
    stale.logger.info("kept: the lease still held")
    writer.flush(stale)

    Job.objects.filter(id=job.id).update(lease_id=uuid.uuid4(), attempt=2)  # taken over
    stale.progress(9, 10, "from the stale executor")
    stale.logger.info("never kept")
    stale.close()
    assert stale.take() is None  # what it still held was dropped, not tried again and again
    job.refresh_from_db()
    assert job.progress["message"] == "first"
    assert list(LogLine.objects.filter(job=job).values_list("message", flat=True)) == [
        "kept: the lease still held"
    ]

    unknown = report_for(make_job(JobState.RUNNING), writer, lease_id=uuid.uuid4())
    unknown.progress(1)
    unknown.close()
    assert not Job.objects.filter(progress__isnull=False).exclude(id=job.id).exists()


@pytest.mark.django_db
def test_outside_an_executor_the_report_is_written_in_the_callers_transaction_at_the_end():
    job = make_job(JobState.RUNNING)
    report = report_for(job, InlineWriter())
    report.progress(2.5, None, "half-way-ish")
    report.logger.warning("careful")
    report.close()
    job.refresh_from_db()
    assert (job.progress["done"], job.progress["total"]) == (2.5, None)
    assert LogLine.objects.get(job=job).level == "WARNING"


@pytest.mark.django_db
def test_bad_progress_is_refused_at_the_call_with_a_clear_error():
    report = report_for(make_job(JobState.RUNNING), InlineWriter())
    with pytest.raises(TypeError, match="done must be a number"):
        report.progress("3")
    with pytest.raises(TypeError, match="done must be a number"):
        report.progress(True)
    with pytest.raises(ValueError, match="total must be a finite number"):
        report.progress(1, float("nan"))
    with pytest.raises(ValueError, match="done must be a finite number >= 0, at most 1.8e"):
        report.progress(10**5000)
    with pytest.raises(ValueError, match="total must be a finite number >= 0, at most 1.8e"):
        report.progress(1, -(10**5000))
    with pytest.raises(TypeError, match="message must be a str"):
        report.progress(1, 2, b"bytes")
    value = reports.progress_value(reports.checked_progress(1, 2, "m" * 5000), attempt=1)
    assert len(value["message"]) < 1100


@pytest.mark.django_db
def test_log_lines_go_with_their_job_when_it_is_discarded_or_pruned():
    from datetime import timedelta

    from django.utils import timezone

    old = timezone.now() - timedelta(days=60)
    discarded, pruned = make_job(JobState.SUCCEEDED), make_job(JobState.SUCCEEDED, finished_at=old)
    for job in (discarded, pruned):
        LogLine.objects.create(job=job, attempt=1, seq=1, logged_at=old, level="INFO", message="x")
    discard_job(discarded.id)
    prune_jobs(timedelta(days=30))
    assert not LogLine.objects.exists()


@pytest.mark.django_db
def test_the_logs_endpoint_refuses_what_it_cannot_answer(reader_headers):
    client = Client(headers=reader_headers)
    never_started = make_job(JobState.PENDING)
    ran = make_job(JobState.SUCCEEDED)
    assert client.get(f"/api/v1/jobs/{uuid.uuid4()}/logs").status_code == 404
    assert client.get("/api/v1/jobs/not-an-id/logs").status_code == 404
    assert client.get(f"/api/v1/jobs/{never_started.id}/logs").status_code == 404
    response = client.get(f"/api/v1/jobs/{ran.id}/logs?attempt=2")
    assert response.status_code == 404 and response.json()["attempts"] == 1
    for bad in ("0", "00", "0x1", "-1", "one", "1&attempt=1", "٣"):
        assert client.get(f"/api/v1/jobs/{ran.id}/logs?attempt={bad}").status_code == 400, bad
    for beyond in ("99999999999", "1" + "0" * 5000):  # positive, but no such attempt
        response = client.get(f"/api/v1/jobs/{ran.id}/logs?attempt={beyond}")
        assert response.status_code == 404 and response.json()["attempts"] == 1
    assert client.get(f"/api/v1/jobs/{ran.id}/logs?at=1").status_code == 400
    body = client.get(f"/api/v1/jobs/{ran.id}/logs?attempt=1").json()
    assert body == {"job_id": str(ran.id), "attempt": 1, "running": False, "cut": 0, "lines": []}
    assert client.get(f"/api/v1/jobs/{ran.id}").json()["progress"] is None


@pytest.mark.django_db
def test_the_console_escapes_hostile_progress_and_log_text(operator):
    job = make_job(JobState.RUNNING)
    report = report_for(job, InlineWriter())
    report.progress(1, 2, HOSTILE)
    report.logger.error(HOSTILE)
    report.close()
    client = Client()
    client.force_login(operator)
    for url in (f"/jobs/{job.id}/", "/jobs/", "/workers/"):
        page = client.get(url).content.decode()
        assert HOSTILE not in page and "<script>alert" not in page, url
    page = client.get(f"/jobs/{job.id}/").content.decode()
    assert page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") == 2
    assert 'class="progress-mini"' in client.get("/jobs/").content.decode()


@pytest.mark.django_db
def test_in_eager_mode_progress_and_lines_are_written_as_the_inline_attempt_ends():
    from django.test import override_settings

    from tests import tasks
    from tests.test_backend import EAGER

    with override_settings(TASKS=EAGER):
        result = tasks.logs_lines.enqueue(3)
        hostile = tasks.logs_hostile.enqueue("eager <b>")
    assert list(LogLine.objects.filter(job_id=result.id).values_list("seq", "message")) == [
        (1, "line 1 of 3"),
        (2, "line 2 of 3"),
        (3, "line 3 of 3"),
    ]
    job = Job.objects.get(id=hostile.id)
    assert (job.state, job.progress["message"]) == (JobState.SUCCEEDED, "eager <b>")


@pytest.mark.django_db(transaction=True)
def test_any_text_a_task_logs_is_stored_as_it_can_be(live_writer):
    job = make_job(JobState.RUNNING)
    report = report_for(job, live_writer)
    report.logger.info("naïve ✓ 'quoted' \"double\" nul:\x00 lone:\ud800 $[0] %s")
    report.logger.log(35, "a level of its own")
    report.close()
    lines = list(LogLine.objects.filter(job=job).order_by("seq").values_list("level", "message"))
    assert lines == [
        ("INFO", "naïve ✓ 'quoted' \"double\" nul:\\x00 lone:\\ud800 $[0] %s"),
        ("Level 35", "a level of its own"),
    ]


@pytest.mark.django_db
def test_lines_go_on_to_the_task_logger_as_before_where_its_level_lets_them(caplog):
    import logging

    report = report_for(make_job(JobState.RUNNING), InlineWriter())
    with caplog.at_level(logging.WARNING, logger="jobs.task"):
        report.logger.info("kept only")
        report.logger.warning("kept and passed on %s", "too")
        try:
            raise ValueError("boom")
        except ValueError:
            report.logger.exception("failed")
    report.close()
    passed = [(r.name, r.getMessage(), r.funcName) for r in caplog.records]
    here = "test_lines_go_on_to_the_task_logger_as_before_where_its_level_lets_them"
    assert passed == [("jobs.task", "kept and passed on too", here), ("jobs.task", "failed", here)]
    kept = list(LogLine.objects.order_by("seq").values_list("level", "message"))
    assert kept[:2] == [("INFO", "kept only"), ("WARNING", "kept and passed on too")]
    assert kept[2][0] == "ERROR" and kept[2][1].startswith("failed\nTraceback")
    assert "ValueError: boom" in kept[2][1]


@pytest.mark.django_db(transaction=True)
def test_writes_that_keep_failing_are_logged_once_in_a_line_until_one_succeeds(
    live_writer, monkeypatch, caplog
):
    job = make_job(JobState.RUNNING)
    report = report_for(job, live_writer)
    written = reports.db_reports.write_on

    def refused(conn, write):
        raise OSError("connection refused\nwith details on a second line")

    monkeypatch.setattr(reports.db_reports, "write_on", refused)
    with caplog.at_level("DEBUG", logger="jobs.reports"):
        for step in range(1, 6):  # a second's flush each, through an outage
            report.progress(step, 10)
            live_writer.flush(report)
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and warnings[0].exc_info is None
        assert "(connection refused)" in warnings[0].getMessage()

        monkeypatch.setattr(reports.db_reports, "write_on", written)
        report.progress(6, 10)
        live_writer.flush(report)
    assert "written again" in caplog.records[-1].getMessage()
    job.refresh_from_db()
    assert job.progress["done"] == 6
