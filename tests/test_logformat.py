"""`worker --log-format json`: every line a JSON object with the documented keys."""

import json
import logging
import sys

import pytest

from jobs.logformat import EXECUTOR_LINE_BYTES, FIELDS
from tests import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KEYS = {"time", "level", "event", *FIELDS}


def test_every_line_of_a_json_worker_parses_and_carries_the_documented_keys(run_worker):
    ok = tasks.add.enqueue(1, 2).id
    flaky = tasks.flaky.enqueue("json-flaky").id
    doomed = tasks.always_fails.enqueue("json-doomed").id
    proc = run_worker("--log-format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert lines and all(line.keys() >= KEYS for line in lines)
    by_job = {}
    for line in lines:
        by_job.setdefault(line["job_id"], []).append(line)
    assert [x["event"] for x in by_job[str(ok)]] == ["job_succeeded"]
    assert [(x["event"], x["attempt"]) for x in by_job[str(flaky)]] == [
        ("job_retrying", 1),
        ("job_succeeded", 2),
    ]
    assert [x["event"] for x in by_job[str(doomed)]][-1] == "job_dead_lettered"
    dead = by_job[str(doomed)][-1]
    assert (dead["level"], dead["task"], dead["queue"], dead["error_type"]) == (
        "error",
        "tests.tasks.always_fails",
        "default",
        "ValueError",
    )
    assert all(x["duration_ms"] >= 0 for x in by_job[str(doomed)])
    assert lines[0]["event"] == "worker_started" and lines[-1]["event"] == "worker_stopped"


def test_a_tasks_own_log_lines_follow_the_workers_format_and_level(run_worker):
    job = tasks.logs_hostile.enqueue("a line from the task with a\nbreak").id
    proc = run_worker("--log-format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    (line,) = [x for x in lines if "from the task" in x.get("message", "")]  # one line
    assert (line["level"], line["message"]) == ("warning", "a line from the task with a\nbreak")
    # It names its job, as the worker's own lines do.
    assert (line["job_id"], line["task"], line["queue"], line["attempt"]) == (
        str(job),
        "tests.tasks.logs_hostile",
        "default",
        1,
    )

    tasks.logs_hostile.enqueue("a warning under --log-level ERROR")
    quiet = run_worker("--log-level", "ERROR")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "a warning under --log-level ERROR" not in quiet.stderr


def test_big_task_lines_of_executors_logging_at_once_stay_whole_json_lines(run_worker):
    big = "x" * 200_000
    jobs = [tasks.logs_hostile.enqueue(f"big {i} {big}").id for i in range(8)]
    proc = run_worker("--log-format", "json", "--concurrency", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = [line for line in proc.stderr.splitlines() if line.strip()]
    lines = [json.loads(line) for line in raw]  # each one parses: none ran into another
    told = [x for x in lines if x.get("message", "").startswith("big ")]
    assert len(told) == len(jobs)
    assert all(x["cut"] > 190_000 and x["message"].endswith("x") for x in told)
    assert max(len(line.encode()) for line in raw) <= EXECUTOR_LINE_BYTES


def test_lines_of_loggers_the_project_left_unconfigured_come_out_as_json_too(run_worker):
    tasks.logs_elsewhere.enqueue("a library's own warning")
    proc = run_worker("--log-format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    (line,) = [x for x in lines if x["message"] == "a library's own warning"]
    assert (line["level"], line["event"]) == ("warning", "log")


def test_a_console_handler_of_the_project_writes_json_lines_once_json_is_asked_for(capsys):
    from jobs.logformat import use_json

    logger = logging.getLogger("tests.project_console")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    every = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = [h for x in every for h in getattr(x, "handlers", [])] + [logging.lastResort]
    formatters = [(h, h.formatter) for h in handlers if h is not None]
    try:
        use_json()
        logger.warning("Task id=1 state=FAILED")
    finally:
        logger.removeHandler(handler)
        for h, f in formatters:
            h.setFormatter(f)
    line = json.loads(capsys.readouterr().err)
    assert (line["level"], line["message"]) == ("warning", "Task id=1 state=FAILED")


def test_a_log_format_other_than_text_or_json_is_refused(manage):
    proc = manage("worker", "--burst", "--log-format", "xml")
    assert proc.returncode != 0
    assert "invalid choice: 'xml'" in proc.stderr
