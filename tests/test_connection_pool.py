"""Django's own connection pool (OPTIONS["pool"], JOBSITE_DB_POOL) in the web process and the
worker, each a real process of its own."""

import subprocess
import sys

import pytest
from django.db import connection

from jobs.models import Job
from jobs.states import JobState
from tests.conftest import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# A web process: requests through the project's WSGI application (request signals and all),
# each enqueueing a job, then a page; the connection goes back to the pool after each.
WEB = """
import django, io, sys
django.setup()
from wsgiref.util import setup_testing_defaults
from django.db import connection
from jobsite.wsgi import application
from tests import tasks
assert connection.settings_dict["OPTIONS"]["pool"], "no pool configured"
for n in range(5):
    tasks.add.enqueue(n, 100)
    environ = {"PATH_INFO": "/login/", "HTTP_HOST": "127.0.0.1"}
    setup_testing_defaults(environ)
    statuses = []
    body = application(environ, lambda status, headers: statuses.append(status))
    b"".join(body); body.close()
    assert statuses == ["200 OK"], statuses
assert connection.pool is not None
print("web ok")
"""


@pytest.fixture
def pooled_env(subprocess_env):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (Django's pool is psycopg_pool)")
    return {**subprocess_env, "JOBSITE_DB_POOL": "3", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}


def test_the_web_process_and_the_worker_run_on_djangos_pool(pooled_env):
    web = subprocess.run(
        [sys.executable, "-c", WEB], cwd=ROOT, env=pooled_env, capture_output=True, text=True
    )
    assert web.returncode == 0, web.stderr[-3000:]
    worker = subprocess.run(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", "2"],
        cwd=ROOT,
        env=pooled_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert sorted(Job.objects.values_list("state", "return_value")) == [
        (JobState.SUCCEEDED, n + 100) for n in range(5)
    ]
