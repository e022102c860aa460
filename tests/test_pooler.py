"""Workers and enqueues through a real PgBouncer in transaction mode (a pool of 2 sessions)."""

import json
import subprocess
import sys
from itertools import pairwise

import pytest
from django.db import connection

from jobs.db import pooler
from jobs.models import Job
from jobs.states import JobState
from tests import pgbouncer, tasks
from tests.conftest import ROOT, database_url
from tests.reliability_helpers import read_events, spans_by_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def through_pgbouncer(tmp_path):
    """The tests' database URL through a PgBouncer of its own (transaction mode, 2 sessions)."""
    yield from _pgbouncer(tmp_path)


@pytest.fixture
def through_round_robin_pgbouncer(tmp_path):
    """The same, handing out its least recently used session first (server_round_robin)."""
    yield from _pgbouncer(tmp_path, extra="server_round_robin = 1")


def _pgbouncer(tmp_path, extra=""):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (PgBouncer pools PostgreSQL sessions)")
    if pgbouncer.BINARY is None:
        pytest.skip("needs the pgbouncer binary (apt-get install pgbouncer)")
    s = connection.settings_dict
    directory = tmp_path / "pgbouncer"
    directory.mkdir()
    process, port = pgbouncer.start(
        directory,
        host=s.get("HOST") or "127.0.0.1",
        port=int(s.get("PORT") or 5432),
        user=s.get("USER") or "postgres",
        pool_size=2,
        extra=extra,
    )
    yield f"postgres://{s.get('USER') or 'postgres'}@127.0.0.1:{port}/{s['NAME']}"
    pgbouncer.stop(process)


def direct_url():
    """The tests' database URL, when it is direct (the PgBouncer leg runs the suite through one)."""
    if pooler.is_pooled(connection):
        pytest.skip("the suite itself runs through a pooler: no direct URL to compare with")
    return database_url()


def worker(env, *args, timeout=120):
    return subprocess.run(
        [sys.executable, "manage.py", "worker", "--burst", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def two_burst_workers(env) -> list[str]:
    """Run two burst workers side by side until they exit; each one's stderr."""
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "worker", "--burst", "--concurrency", "2"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return [err for _, err in outputs]


def test_the_engine_finds_sessions_shared_through_pgbouncer_and_not_directly(through_pgbouncer):
    assert pooler.sessions_are_shared(through_pgbouncer)
    assert not pooler.sessions_are_shared(direct_url())


def test_the_engine_finds_sessions_shared_through_a_pgbouncer_handing_them_out_in_turn(
    through_round_robin_pgbouncer,
):
    import psycopg

    # Both of its sessions open and idle: two clients taking turns then get them in turn, and
    # only one client's statements in a row show the sharing. The probe's repeated statement
    # is never prepared either (a prepared one would be missing from the other session).
    url = through_round_robin_pgbouncer
    with psycopg.connect(url) as one, psycopg.connect(url) as two:
        pids = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (one, two)}
    assert len(pids) == 2  # the two transactions overlapped: two sessions
    for _ in range(3):
        assert pooler.sessions_are_shared(url)


def test_two_workers_through_the_pooler_run_every_job_once_and_poll(
    through_pgbouncer, subprocess_env, ledger
):
    ids = [tasks.record.enqueue(f"job-{n}").id for n in range(40)]
    env = {**subprocess_env, "DATABASE_URL": through_pgbouncer}
    for err in two_burst_workers(env):
        assert "transaction-mode pooler: polling for new jobs" in err
    assert set(Job.objects.filter(id__in=ids).values_list("state", flat=True)) == {
        JobState.SUCCEEDED
    }
    assert sorted(key for key, _, _ in ledger()) == sorted(f"job-{n}" for n in range(40))


def test_two_workers_under_limits_through_the_pooler_run_every_job_once_within_them(
    through_pgbouncer, subprocess_env, ledger
):
    # Far from the limits, claims count after claiming (a savepoint in the finish's
    # transaction); the key's concurrency of 1 makes the others count first.
    ids = [
        tasks.record.using(limit_key=f"tenant-{n % 4}").enqueue(f"job-{n}").id for n in range(60)
    ]
    narrow = tasks.ledger_span.using(limit_key="narrow")
    ids += [narrow.enqueue(f"narrow-{n}", 0.05).id for n in range(6)]
    limits = {
        "queue:default": {"concurrency": 1000, "rate": [100000, 1]},
        "key:narrow": {"concurrency": 1},
        "key:tenant-*": {"concurrency": 1000},
    }
    env = {
        **subprocess_env,
        "DATABASE_URL": through_pgbouncer,
        "JOBSITE_LIMITS": json.dumps(limits),
    }
    two_burst_workers(env)
    assert set(Job.objects.filter(id__in=ids).values_list("state", flat=True)) == {
        JobState.SUCCEEDED
    }
    assert sorted(key for key, _, _ in ledger() if key.startswith("job-")) == sorted(
        f"job-{n}" for n in range(60)
    )
    # What ran, as the executors timed it (a claim's started_at is its transaction's start).
    runs = sorted(
        (span for key, found in spans_by_key(read_events(env)).items() for span in found),
        key=lambda span: span.start,
    )
    assert sorted(span.key for span in runs) == [f"narrow-{n}" for n in range(6)]
    assert all(a.end is not None and a.end <= b.start for a, b in pairwise(runs))


def test_an_enqueue_through_the_pooler_prepares_nothing(through_pgbouncer, subprocess_env):
    env = {**subprocess_env, "DATABASE_URL": through_pgbouncer}
    script = (
        "import django; django.setup()\n"
        "from tests import tasks\n"
        "for n in range(20): tasks.add.enqueue(n, 1)\n"
        "tasks.add.enqueue_many([((n, 2), {}) for n in range(20)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    proc = worker(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.SUCCEEDED}


def test_a_listen_url_through_the_pooler_stops_the_worker_at_start_saying_why(
    through_pgbouncer, subprocess_env
):
    env = {
        **subprocess_env,
        "DATABASE_URL": through_pgbouncer,
        "JOBSITE_LISTEN_DATABASE_URL": through_pgbouncer,
    }
    proc = worker(env)
    assert proc.returncode != 0
    assert "LISTEN_DATABASE_URL goes through a transaction-mode pooler" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_listen_url_that_does_not_answer_yet_makes_the_worker_poll_not_stop(subprocess_env):
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN_DATABASE_URL is a PostgreSQL option")
    result = tasks.add.enqueue(1, 2)
    # Nothing listens on port 1: refused at once, as a server not started yet is.
    env = {**subprocess_env, "JOBSITE_LISTEN_DATABASE_URL": "postgres://postgres@127.0.0.1:1/x"}
    proc = worker(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LISTEN_DATABASE_URL does not answer" in proc.stderr
    assert "polling for new jobs until it does" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert Job.objects.get(id=result.id).state == JobState.SUCCEEDED


def test_a_listen_url_that_is_not_a_url_stops_the_worker_saying_so(subprocess_env):
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN_DATABASE_URL is a PostgreSQL option")
    proc = worker({**subprocess_env, "JOBSITE_LISTEN_DATABASE_URL": "not a url"})
    assert proc.returncode != 0
    # Refused by the system checks before it starts, as `manage.py check` reports it.
    assert "(jobs.E005) LISTEN_DATABASE_URL is not a PostgreSQL connection URL" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_with_a_direct_listen_url_the_worker_behind_the_pooler_is_woken_not_polling(
    through_pgbouncer, subprocess_env
):
    result = tasks.add.enqueue(1, 2)
    env = {
        **subprocess_env,
        "DATABASE_URL": through_pgbouncer,
        "JOBSITE_LISTEN_DATABASE_URL": direct_url(),
    }
    proc = worker(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "polling" not in proc.stderr
    assert Job.objects.get(id=result.id).state == JobState.SUCCEEDED
