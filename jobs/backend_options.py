"""A jobs backend's plain OPTIONS, read once: each bad value is a sentence, not an exception.

`manage.py check` reports the sentences (jobs.E005; jobs.E006 for the timing options) and the
worker refuses to start on them; meanwhile every other process runs on the defaults, so a typo
in settings never turns each page and each enqueue into a traceback. LIMITS, SCHEDULES,
MAX_SNOOZES and SENTRY_CAPTURE have checks of their own (jobs.checks).
"""

from dataclasses import dataclass

from . import retry
from .timing import Timing
from .timing import problems as timing_problems_of

DEFAULT_ASYNC_CONCURRENCY = 10
MAX_ASYNC_CONCURRENCY = 10_000

# Every key an OPTIONS dict may hold; any other is most likely a typo (jobs.W002).
KNOWN = frozenset(
    {
        "ASYNC_CONCURRENCY",
        "BACKOFF",
        "CANCEL_GRACE_SECONDS",
        "EAGER",
        "HEARTBEAT_SECONDS",
        "LEASE_SECONDS",
        "LIMITS",
        "LISTEN_DATABASE_URL",
        "MAX_ATTEMPTS",
        "MAX_SNOOZES",
        "SCHEDULES",
        "SCHEDULE_GRACE_SECONDS",
        "SENTRY_CAPTURE",
        "SENTRY_CRONS",
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    backoff: retry.Policy
    timing: Timing
    eager: bool
    sentry_crons: bool
    async_concurrency: int
    # What is wrong, each in a sentence naming the option; the defaults stand in meanwhile.
    problems: tuple[str, ...] = ()
    # The same for the timing options (jobs.E006).
    timing_problems: tuple[str, ...] = ()
    # Keys no option has.
    unknown: tuple[str, ...] = ()


def read(options) -> Options:
    problems: list[str] = []
    if not isinstance(options, dict):
        problems.append(f"OPTIONS must be a dict, not {type(options).__name__}")
        options = {}
    try:
        backoff = retry.policy_from_setting(options.get("BACKOFF"))
    except ValueError as e:
        problems.append(str(e))
        backoff = retry.policy_from_setting(None)
    try:
        timing = Timing.from_options(options)
        timing_problems = timing_problems_of(
            timing.heartbeat_seconds, timing.lease_seconds, timing.cancel_grace_seconds
        )
    except ValueError as e:
        timing_problems = [str(e)]
    if timing_problems:
        timing = Timing()
    listen = options.get("LISTEN_DATABASE_URL")
    if listen not in (None, ""):  # both mean none: the worker listens on its own connection
        problems.extend(_listen_url_problems(listen))
    eager = _yes_or_no(options, "EAGER", problems)
    sentry_crons = _yes_or_no(options, "SENTRY_CRONS", problems)
    async_concurrency = options.get("ASYNC_CONCURRENCY", DEFAULT_ASYNC_CONCURRENCY)
    if type(async_concurrency) is not int or not 1 <= async_concurrency <= MAX_ASYNC_CONCURRENCY:
        problems.append(
            f"ASYNC_CONCURRENCY must be a whole number from 1 to {MAX_ASYNC_CONCURRENCY:,}, "
            f"not {async_concurrency!r}"
        )
        async_concurrency = DEFAULT_ASYNC_CONCURRENCY
    return Options(
        backoff=backoff,
        timing=timing,
        eager=eager,
        sentry_crons=sentry_crons,
        async_concurrency=async_concurrency,
        problems=tuple(problems),
        timing_problems=tuple(timing_problems),
        unknown=tuple(sorted(str(key) for key in options if key not in KNOWN)),
    )


def _yes_or_no(options, name, problems) -> bool:
    value = options.get(name, False)
    if isinstance(value, bool):
        return value
    # bool("0") is True: a string from the environment would turn the option on (EAGER: every
    # job run in the request).
    problems.append(f"{name} must be True or False, not {value!r}")
    return False


def _listen_url_problems(url) -> list[str]:
    """What makes LISTEN_DATABASE_URL unusable before any connection is tried (the worker
    checks the rest, the server and the pooler, when it starts)."""
    if not isinstance(url, str) or not url.strip():  # blank: a value that is not a URL
        return [f"LISTEN_DATABASE_URL must be a PostgreSQL connection URL, not {url!r}"]
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # a SQLite-only install: the worker says psycopg is missing
        return []
    try:
        conninfo_to_dict(url)
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return [
            "LISTEN_DATABASE_URL is not a PostgreSQL connection URL such as "
            f"postgres://user@host:5432/name ({reason})"
        ]
    return []
