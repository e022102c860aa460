from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from jobs import limit_spec, logformat, outcome, schedules, sentry
from jobs.backend_options import DEFAULT_ASYNC_CONCURRENCY, MAX_ASYNC_CONCURRENCY
from jobs.checks import database_problems
from jobs.compat import task_backends
from jobs.logs import LEVELS, configure_worker_logging
from jobs.management.arguments import seconds, whole_number
from jobs.management.database import ChecksExplained, database_errors_explained
from jobs.names import check_queue_name
from jobs.schema import SchemaNotReady
from jobs.timing import DEFAULTS
from jobs.worker import Worker, WorkerConfig

positive_int = whole_number(1)
# Executor processes one worker runs at most: past this, more workers serve better.
MAX_CONCURRENCY = 1_000


class Command(ChecksExplained, BaseCommand):
    help = "Run a worker: claim due jobs from the database and run them, with retries."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            default=[],
            metavar="NAME",
            help="only this queue (repeat for more); default all",
        )
        parser.add_argument(
            "--concurrency",
            type=whole_number(1, MAX_CONCURRENCY, what="a number of executors"),
            default=2,
            metavar="N",
            help="jobs run at once, each in its own process (default 2; at most "
            f"{MAX_CONCURRENCY:,}: run more workers for more)",
        )
        parser.add_argument(
            "--async-concurrency",
            type=whole_number(1, MAX_ASYNC_CONCURRENCY),
            default=None,
            metavar="N",
            help="coroutines of async def tasks each process runs at once "
            '(default OPTIONS["ASYNC_CONCURRENCY"], else 10)',
        )
        parser.add_argument(
            "--burst", action="store_true", help="exit once no job is due and none is running"
        )
        parser.add_argument(
            "--max-jobs",
            type=positive_int,
            metavar="N",
            help="exit after claiming N jobs and finishing them",
        )
        parser.add_argument(
            "--worker-id",
            default=None,
            metavar="ID",
            help="name shown in the console (default host-pid-random)",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=seconds,
            default=30.0,
            metavar="SECONDS",
            help="on SIGTERM/SIGINT, how long running jobs get (default 30)",
        )
        parser.add_argument("--backend", default="default", help="the TASKS alias to serve")
        parser.add_argument(
            "--log-level",
            choices=LEVELS,
            type=str.upper,
            default=None,
            help="how much the worker logs (default INFO, or what LOGGING sets for 'jobs')",
        )
        parser.add_argument(
            "--log-format",
            choices=["text", "json"],
            default="text",
            help="json: one JSON object per line, every finished attempt included",
        )

    def handle(self, *args, **options):
        try:
            backend = task_backends[options["backend"]]
        except Exception as e:
            raise CommandError(f"unknown task backend {options['backend']!r}: {e}") from None
        try:
            sentry.capture_mode(getattr(backend, "options", {}))
        except ValueError as e:
            raise CommandError(str(e)) from None
        problems = (
            [problem for problem, *_ in database_problems(settings)]
            + list(getattr(backend, "option_problems", ()))
            + list(getattr(backend, "timing_problems", ()))
            + schedules.check(backend)
            + limit_spec.check(backend.options.get("LIMITS"))
            + outcome.max_snoozes_problems(backend)
        )
        if problems:
            raise CommandError("; ".join(problems))
        for queue in options["queues"]:
            try:
                check_queue_name(queue)
            except ValueError as e:
                raise CommandError(f"--queue {e}") from None
        worker_id = options["worker_id"]
        if worker_id is not None and not 0 < len(worker_id) <= 200:
            raise CommandError("--worker-id must be 1 to 200 characters")
        timing = getattr(backend, "timing", DEFAULTS)
        async_concurrency = options["async_concurrency"]
        if async_concurrency is None:
            async_concurrency = getattr(backend, "async_concurrency", DEFAULT_ASYNC_CONCURRENCY)
        try:
            config = WorkerConfig(
                queues=options["queues"],
                concurrency=options["concurrency"],
                async_concurrency=async_concurrency,
                burst=options["burst"],
                max_jobs=options["max_jobs"],
                worker_id=worker_id,
                shutdown_timeout=options["shutdown_timeout"],
                heartbeat_seconds=timing.heartbeat_seconds,
                lease_seconds=timing.lease_seconds,
                cancel_grace=timing.cancel_grace_seconds,
                log_format=options["log_format"],
            )
        except ValueError as e:
            raise CommandError(str(e)) from None
        if connection.vendor == "sqlite":
            # A SQLite file that cannot be opened is a setting to fix, not an outage to wait
            # out (the system checks open it first on some Django versions, not on others).
            with database_errors_explained():
                connection.ensure_connection()
        configure_worker_logging(options["log_level"])
        if options["log_format"] == "json":
            logformat.use_json()
        try:
            code = Worker(config, backend_alias=options["backend"]).run()
        except (SchemaNotReady, ImproperlyConfigured) as e:
            raise CommandError(str(e)) from None
        if code:
            raise SystemExit(code)
