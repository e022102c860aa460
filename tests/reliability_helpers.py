"""Fixtures and tools for the fault-injection tests (tests/test_reliability*.py).

Workers run as real `manage.py worker` processes, each in its own session, so a signal sent to
its process group reaches its executor children too. Nothing here sleeps to synchronise: tests
poll the database or the ledger until a condition holds or a deadline passes.
"""

import os
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.db import connection

import jobs.db  # noqa: F401  (registers SQLite's jobsite_now() before any connection opens)
from jobs.models import Attempt, Job, WorkerNode
from jobs.states import TERMINAL, JobState

# Short leases so that recovery happens within seconds (read by jobsite/settings.py).
HEARTBEAT_SECONDS = 1
LEASE_SECONDS = 3
CANCEL_GRACE_SECONDS = 2


def is_postgres():
    return connection.vendor == "postgresql"


def skip_unless_postgres(needs="pg_terminate_backend"):
    if not is_postgres():
        pytest.skip(f"needs PostgreSQL ({needs})")


def skip_unless_sqlite():
    if is_postgres():
        pytest.skip("SQLite-specific: write-lock contention between processes")


def wait_for(predicate, *, timeout, what, interval=0.05):
    """Poll `predicate` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)  # polling interval, not synchronisation


# --- the ledger: lines the test tasks write ----------------------------------------------------


@dataclass(frozen=True)
class Event:
    name: str  # "start:KEY", "end:KEY", ... or a bare key for the original tasks
    pid: int  # the executor process that ran the task
    at: float  # wall clock
    pgid: int | None  # the process group, i.e. the worker that ran it (reliability tasks only)

    @property
    def kind(self):
        return self.name.split(":", 1)[0] if ":" in self.name else ""

    @property
    def key(self):
        return self.name.split(":", 1)[1] if ":" in self.name else self.name


def read_events(env) -> list[Event]:
    path = Path(env["JOBSITE_TEST_LEDGER"])
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue  # a line cut short by a SIGKILL mid-write
        pgid = int(parts[3]) if len(parts) > 3 else None
        events.append(Event(parts[0], int(parts[1]), float(parts[2]), pgid))
    return events


@dataclass
class Span:
    """One execution of a job's task: from its start line to its end line (None: never ended)."""

    key: str
    pid: int
    pgid: int | None
    start: float
    end: float | None = None


def spans_by_key(events) -> dict[str, list[Span]]:
    """Pair start:/end: lines per (key, executor pid); an executor runs one job at a time."""
    open_spans: dict[tuple[str, int], Span] = {}
    result: dict[str, list[Span]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e.at):
        if e.kind == "start":
            span = Span(e.key, e.pid, e.pgid, e.at)
            open_spans[(e.key, e.pid)] = span
            result[e.key].append(span)
        elif e.kind == "end":
            span = open_spans.pop((e.key, e.pid), None)
            if span is not None:
                span.end = e.at
    return result


def overlapping_pairs(spans: list[Span], *, horizon: float):
    """Pairs of spans of one job that ran at the same time (an unfinished span lasts to horizon)."""
    pairs = []
    ordered = sorted(spans, key=lambda s: s.start)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            a_end = a.end if a.end is not None else horizon
            if b.start < a_end:
                pairs.append((a, b))
    return pairs


# --- database views ----------------------------------------------------------------------------


def states_of(ids) -> dict:
    return dict(Job.objects.filter(id__in=list(ids)).values_list("id", "state"))


def all_terminal(ids):
    states = states_of(ids)
    return len(states) == len(ids) and all(s in TERMINAL for s in states.values())


def attempts_of(job_id) -> list[Attempt]:
    return list(Attempt.objects.filter(job_id=job_id).order_by("number"))


def assert_attempt_history_consistent(job_ids):
    """Numbers 1..attempt without gaps or duplicates; exactly one attempt per number."""
    for job in Job.objects.filter(id__in=list(job_ids)):
        numbers = [a.number for a in attempts_of(job.id)]
        assert numbers == list(range(1, len(numbers) + 1)), (job.id, numbers)
        assert len(numbers) == job.attempt + job.snoozes, (job.id, job.state, job.attempt, numbers)


def assert_nothing_running():
    running = list(Job.objects.running().values_list("id", "worker_id"))
    assert running == [], f"jobs left running: {running}"


def assert_node_stopped(worker_id):
    node = WorkerNode.objects.get(id=worker_id)
    assert node.stopped_at is not None, f"worker {worker_id} has no stopped_at"


def worker_connections_sql():
    return (
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobsite' "
        "AND datname = current_database() AND pid <> pg_backend_pid()"
    )


def another_session(dbname=None, **options):
    """A psycopg connection of its own to this PostgreSQL server (the test database unless
    `dbname` names another), beside Django's."""
    import psycopg

    params = connection.settings_dict
    return psycopg.connect(
        host=params["HOST"] or None,
        port=params["PORT"] or None,
        user=params["USER"] or None,
        password=params["PASSWORD"] or None,
        dbname=dbname or params["NAME"],
        **options,
    )


def terminate_worker_connections() -> int:
    """pg_terminate_backend on every jobsite connection to this database but the test's own."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_terminate_backend(pid) FROM ({worker_connections_sql()}) w")
        return sum(1 for (ok,) in cursor.fetchall() if ok)


# --- worker processes --------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """A `manage.py worker` in its own session, its output read continuously (a full pipe
    would block the worker and make it miss heartbeats)."""

    proc: object
    worker_id: str
    lines: list = field(default_factory=list)

    def __post_init__(self):
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        return "\n".join(self.lines)

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def signal_group(self, sig):
        os.killpg(self.proc.pid, sig)

    def kill_group(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def wait(self, timeout):
        """The exit status, waiting up to `timeout` seconds (None if still running)."""
        try:
            return self.proc.wait(timeout)
        except Exception:
            return None

    def logged(self, text):
        return any(text in line for line in self.lines)

    def group_members(self) -> set[int]:
        """Pids in this worker's process group (the worker and its executors)."""
        members = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == self.proc.pid:  # field 5 of stat: pgrp
                members.add(int(entry.name))
        return members


@pytest.fixture
def fast_leases(subprocess_env):
    """Workers started by this test renew every 1 s and lose a lease after 3 s."""
    subprocess_env["JOBSITE_HEARTBEAT_SECONDS"] = str(HEARTBEAT_SECONDS)
    subprocess_env["JOBSITE_LEASE_SECONDS"] = str(LEASE_SECONDS)
    subprocess_env["JOBSITE_CANCEL_GRACE_SECONDS"] = str(CANCEL_GRACE_SECONDS)
    subprocess_env.setdefault("JOBSITE_LOG_LEVEL", "INFO")
    return subprocess_env


@pytest.fixture
def spawn_worker(start_worker):
    """Start a worker named `worker_id`; returns a WorkerProcess."""
    counter = iter(range(1, 1000))

    def spawn(*args, worker_id=None):
        worker_id = worker_id or f"rel-{os.getpid()}-{next(counter)}"
        proc = start_worker("--worker-id", worker_id, *args)
        return WorkerProcess(proc, worker_id)

    return spawn


def wait_started(worker: WorkerProcess, timeout=30):
    """Until the worker has registered itself (its WorkerNode row exists)."""
    wait_for(
        lambda: (
            WorkerNode.objects.filter(id=worker.worker_id, stopped_at__isnull=True).exists()
            or not worker.alive()
        ),
        timeout=timeout,
        what=f"worker {worker.worker_id} to start",
    )
    assert worker.alive(), f"worker exited early:\n{worker.output()}"


def running_on(job_id, worker_id=None):
    job = Job.objects.filter(id=job_id).first()
    if job is None or job.state != JobState.RUNNING:
        return False
    return worker_id is None or job.worker_id == worker_id
