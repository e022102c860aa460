"""How fast the console answers with a million jobs in PostgreSQL.

Fills a separate database (default `jobsite_bench_dashboard`) with a million jobs in mixed
states across 5 queues and 12 tasks, dead letters carrying tracebacks, and about as many
attempts; then times each page and the main HTMX fragments server-side through Django's test
client, logged in as an operator (the whole middleware stack: session, auth, CSP).

    .venv/bin/python bench/dashboard.py                 # build the data, then measure
    .venv/bin/python bench/dashboard.py --reuse         # measure again on the data built before
    .venv/bin/python bench/dashboard.py --jobs 200000 --requests 50
    .venv/bin/python bench/dashboard.py --reuse --only "q=" queues   # rows whose label holds a word

`BENCH_POSTGRES` (default postgres://postgres@127.0.0.1:5432) names the server.
Never part of the test run.
"""

import argparse
import os
import secrets
import statistics
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_MS = 50
QUEUES = ["default", "emails", "reports", "billing", "exports"]
TASKS = [
    "send_welcome_email", "build_report", "charge_card", "publish_report", "sync_inventory",
    "resize_image", "index_document", "notify_slack", "expire_sessions", "import_csv",
    "render_invoice", "refresh_cache",
]  # fmt: skip
ERRORS = [
    ("ConnectionError", "SMTP server refused the connection"),
    ("ValueError", "report references a missing column 'revenue_eur'"),
    ("Unrecoverable", "card declined: do not retry"),
    ("TimeoutError", "upstream did not answer within 30 s"),
    ("KeyError", "'customer_id'"),
    ("JobTimeout", "attempt ran past its 300 s timeout"),
]
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/jobs/runner.py", line 212, in run_attempt\n'
    "    result = task.call(*args, **kwargs)\n"
    '  File "/srv/app/app/tasks.py", line 88, in {task}\n'
    "    response = client.send(payload, timeout=30)\n"
    '  File "/srv/app/.venv/lib/python3.13/site-packages/httpx/_client.py", line 1014, in send\n'
    "    raise exc\n"
    "{error}: {message}"
)

# Buckets of 1000: the share of each state.
STATES_SQL = """
    CASE
        WHEN b < 860 THEN 'succeeded'
        WHEN b < 910 THEN 'dead_letter'
        WHEN b < 940 THEN 'cancelled'
        WHEN b < 980 THEN 'pending'
        WHEN b < 995 THEN 'retrying'
        ELSE 'scheduled'
    END
"""


def sql_array(values):
    return "(ARRAY[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "])"


def jobs_sql(states=STATES_SQL, running=32):
    """The fill: `states` is a CASE over b (0-999) naming each row's state, and the `running`
    newest rows are running instead."""
    return f"""
WITH base AS (
    SELECT g, (g::bigint * 7919) %% 1000 AS b, now() - g * interval '600 milliseconds' AS enq
    FROM generate_series(1, %(jobs)s) AS g
), rows AS (
    SELECT g, enq,
           -- As many running jobs as the 8 workers x 4 slots can hold, the newest.
           CASE WHEN g <= {running} THEN 'running' ELSE {states} END AS state,
           {sql_array(TASKS)}[1 + g %% 12] AS task,
           {sql_array(QUEUES)}[1 + (g / 7) %% 5] AS queue,
           1 + (g / 3) %% 6 AS err
    FROM base
)
INSERT INTO jobs_job (
    id, task_path, backend, args, kwargs, queue_name, priority, state, attempt, max_attempts,
    timeout, run_after, not_after, dedup_key, rerun_of_id, parent_id, enqueued_at, started_at,
    finished_at, error_type, error_message, error_traceback, dead_letter_reason, return_value,
    worker_id, lease_id, lease_expires_at, cancel_requested_at, node_name, waiting_for,
    runs_on_upstream_failure
)
SELECT
    gen_random_uuid(), 'app.tasks.' || task, 'default',
    jsonb_build_array(g, 'user-' || (g %% 5000)), jsonb_build_object('source', 'bench'),
    queue, 0, state,
    CASE state WHEN 'succeeded' THEN 1 WHEN 'dead_letter' THEN 3 WHEN 'retrying' THEN 1
               WHEN 'running' THEN 1 ELSE 0 END,
    3, NULL,
    CASE state WHEN 'retrying' THEN now() + interval '30 seconds' ELSE enq END,
    NULL, NULL, NULL, NULL, enq,
    CASE WHEN state IN ('succeeded', 'dead_letter', 'running') THEN enq + interval '1 second' END,
    CASE WHEN state IN ('succeeded', 'dead_letter', 'cancelled')
         THEN enq + interval '2 seconds' END,
    CASE WHEN state IN ('dead_letter', 'retrying') THEN (%(errors)s::text[])[err] ELSE '' END,
    CASE WHEN state IN ('dead_letter', 'retrying')
         THEN (%(messages)s::text[])[err] || ' (job ' || g || ')' ELSE '' END,
    CASE WHEN state = 'dead_letter' THEN (%(tracebacks)s::text[])[err] ELSE '' END,
    CASE WHEN state = 'dead_letter' THEN
        CASE WHEN err = 3 THEN 'unrecoverable' ELSE 'exhausted' END ELSE '' END,
    CASE WHEN state = 'succeeded' THEN jsonb_build_object('ok', true, 'rows', g %% 500) END,
    CASE WHEN state = 'running' THEN 'bench-worker-' || (g %% 8) ELSE '' END,
    CASE WHEN state = 'running' THEN gen_random_uuid() END,
    CASE WHEN state = 'running' THEN now() + interval '60 seconds' END,
    NULL,
    CASE WHEN state = 'running' THEN 'worker-' || (g %% 8) || '.internal' ELSE '' END,
    0, false
FROM rows
"""


JOBS_SQL = jobs_sql()

ATTEMPTS_SQL = """
INSERT INTO jobs_attempt (
    job_id, number, worker_id, started_at, finished_at, outcome, error_type, error_message,
    error_traceback
)
SELECT j.id, n, 'bench-worker-' || (n % 8),
       j.enqueued_at + (n - 1) * interval '20 seconds',
       j.enqueued_at + (n - 1) * interval '20 seconds' + interval '150 milliseconds',
       CASE WHEN j.state = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
       j.error_type, j.error_message, j.error_traceback
FROM jobs_job j CROSS JOIN LATERAL generate_series(1, j.attempt) AS n
WHERE j.state IN ('succeeded', 'dead_letter', 'retrying')
"""


# Not in the migrations: what dead-letter filters by task and error would need to stay flat
# however many dead letters pile up (see bench/README.md).
PROPOSED_INDEX = """
CREATE INDEX IF NOT EXISTS job_dead_letter_group
ON jobs_job (task_path, error_type, finished_at DESC) WHERE state = 'dead_letter'
"""


def recreate_database(server, name):
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def fill_jobs(jobs, sql):
    """Insert `jobs` rows with the fill statement `sql` (see jobs_sql), and their attempts."""
    from django.db import connection

    tracebacks = [
        TRACEBACK.format(task=TASKS[i % len(TASKS)], error=e, message=m)
        for i, (e, m) in enumerate(ERRORS)
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "jobs": jobs,
                "errors": [e for e, _ in ERRORS],
                "messages": [m for _, m in ERRORS],
                "tracebacks": tracebacks,
            },
        )
        cursor.execute(ATTEMPTS_SQL)


def populate(jobs):
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from jobs.models import WorkerNode

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    fill_jobs(jobs, JOBS_SQL)
    now = timezone.now()
    WorkerNode.objects.bulk_create(
        WorkerNode(
            id=f"bench-worker-{i}",
            hostname=f"worker-{i}.internal",
            pid=1000 + i,
            queues=[] if i % 2 else QUEUES[:2],
            concurrency=4,
            started_at=now - timezone.timedelta(hours=6),
            last_heartbeat_at=now,
            jobs_processed=100_000 + i,
        )
        for i in range(8)
    )
    user = User.objects.create_user("bench", password="bench", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="operate_job", content_type__app_label="jobs")
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"filled {jobs:,} jobs in {time.perf_counter() - started:.0f} s")


def pages():
    """(label, path, is_fragment) for every page and the main HTMX fragments."""
    from jobs.models import Job

    dead = Job.objects.filter(state="dead_letter").order_by("-enqueued_at").first()
    running = Job.objects.filter(state="running").order_by("-enqueued_at").first()
    deep = Job.objects.order_by("-enqueued_at", "-id")[500_000]
    # A job's first argument is its serial number: searching a six-digit one finds that job.
    number = deep.args[0]
    from dashboard.pagination import Cursor

    cursor = Cursor(at=deep.enqueued_at, id=deep.id).encode()
    task = "app.tasks.build_report"
    return [
        ("overview", "/", False),
        ("overview fragment", "/", True),
        ("jobs", "/jobs/", False),
        ("jobs fragment (poll)", "/jobs/", True),
        ("jobs state=dead_letter", "/jobs/?state=dead_letter", True),
        ("jobs state=running", "/jobs/?state=running", True),
        ("jobs queue=emails", "/jobs/?queue=emails", True),
        ("jobs task=…", f"/jobs/?task={task}", True),
        ("jobs state+queue+task", f"/jobs/?state=succeeded&queue=billing&task={task}", True),
        ("jobs q=task words", "/jobs/?q=report", True),
        ("jobs q=full id", f"/jobs/?q={dead.id}", True),
        ("jobs q=id prefix", f"/jobs/?q={str(dead.id)[:13]}", True),
        ("jobs page 10,000 (cursor)", f"/jobs/?cursor={cursor}", True),
        ("job detail (dead letter)", f"/jobs/{dead.id}/", False),
        ("job detail fragment (running)", f"/jobs/{running.id}/", True),
        ("dead letters", "/dead-letters/", False),
        ("dead letters fragment", "/dead-letters/", True),
        ("dead letters task+error", f"/dead-letters/?task={task}&error=ValueError", True),
        ("workers", "/workers/", False),
        ("queues", "/queues/", False),
        ("queues fragment (poll)", "/queues/", True),
        ("jobs q=argument number", f"/jobs/?q={number}", True),
        ("jobs q=argument text", "/jobs/?q=user-4242", True),
        ("jobs q=error text", "/jobs/?q=revenue_eur", True),
        ("jobs q=no match", "/jobs/?q=no-such-thing", True),
        ("dead letters q=error text", "/dead-letters/?q=smtp", True),
        ("api jobs q=argument text", "/api/v1/jobs?q=user-4242", False),
        ("api queues", "/api/v1/queues", False),
        ("tasks", "/tasks/", False),
        ("tasks fragment (poll)", "/tasks/", True),
        ("task page", f"/tasks/{task}/", False),
        ("task page fragment (poll)", f"/tasks/{task}/", True),
        ("/metrics", "/metrics", False),
        ("/api/v1/metrics/summary", "/api/v1/metrics/summary", False),
    ]


def record(statements, execute, sql, params, many, context):
    statements.append(sql)
    return execute(sql, params, many, context)


def measure(requests, only=()):
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username="bench"))
    rows = []
    for label, path, fragment in pages():
        if only and not any(word in label for word in only):
            continue
        headers = {"HX-Request": "true"} if fragment else {}
        for _ in range(3):  # warm caches and connections
            response = client.get(path, headers=headers)
            assert response.status_code == 200, (path, response.status_code)
        statements = []
        with connection.execute_wrapper(partial(record, statements)):
            client.get(path, headers=headers)
        samples, cpu = [], []
        for _ in range(requests):
            started, cpu_started = time.perf_counter(), time.process_time()
            client.get(path, headers=headers)
            samples.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - cpu_started) * 1000)
        p50 = statistics.median(samples)
        p95 = statistics.quantiles(samples, n=100, method="inclusive")[94]
        # This process's CPU per request (Python: views, ORM, templates; not PostgreSQL's side):
        # steadier than the wall clock on a machine shared with other work.
        cpu50 = statistics.median(cpu)
        rows.append((label, p50, p95, len(statements), cpu50))
        print(
            f"{label:34} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  {len(statements):3} queries"
            f"  cpu p50 {cpu50:6.1f} ms"
        )
    return rows


def markdown(rows, jobs, requests, args):
    connections = "persistent connections" if args.persistent else "a new connection per request"
    index = ", with the proposed dead-letter index" if args.proposed_index else ""
    lines = [
        f"{jobs:,} jobs, {requests} requests each, PostgreSQL, {connections}{index}; server-side "
        "(test client, logged-in operator, full middleware).",
        "",
        "| page | p50 ms | p95 ms | queries | Python CPU p50 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, p50, p95, queries, cpu50 in rows:
        flag = "" if p95 <= TARGET_MS else " ⚠"
        lines.append(f"| {label} | {p50:.1f} | {p95:.1f}{flag} | {queries} | {cpu50:.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--database", default="jobsite_bench_dashboard")
    parser.add_argument("--reuse", action="store_true", help="measure the data built before")
    parser.add_argument(
        "--persistent",
        action="store_true",
        help="keep database connections between requests (CONN_MAX_AGE=60)",
    )
    parser.add_argument(
        "--proposed-index",
        action="store_true",
        help="add the partial index proposed for dead-letter filters before measuring",
    )
    parser.add_argument(
        "--only", nargs="+", default=(), help="measure only the rows whose label holds a word"
    )
    args = parser.parse_args()

    server = os.environ.get("BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432").rstrip("/")
    os.environ["DATABASE_URL"] = f"{server}/{args.database}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "jobsite.settings"
    # The settings refuse to load without a key; the workers started here inherit this one.
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    if not args.reuse:
        recreate_database(server, args.database)

    import django

    django.setup()
    from django.db import connection
    from django.test.utils import override_settings

    if not args.reuse:
        populate(args.jobs)
    if args.proposed_index:
        with connection.cursor() as cursor:
            cursor.execute(PROPOSED_INDEX)
            cursor.execute("ANALYZE jobs_job")
    if args.persistent:
        connection.settings_dict["CONN_MAX_AGE"] = 60
    # The pages need static URLs, not a collectstatic manifest.
    static = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    with override_settings(STORAGES={"staticfiles": static, "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage"}}):  # fmt: skip
        rows = measure(args.requests, args.only)
    print()
    print(markdown(rows, args.jobs, args.requests, args))
    worst = max(row[2] for row in rows)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nworst p95 {worst:.1f} ms (target {TARGET_MS} ms)")
    print(f"load average {load} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
