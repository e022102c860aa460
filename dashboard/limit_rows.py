"""The limits as the console and the API show them (jobs.limit_usage), one shape for both."""

from jobs import limits
from jobs.limit_usage import LimitUsage, usage


def window(value):
    """[n, seconds] with whole seconds written as integers."""
    if value is None:
        return None
    n, seconds = value
    return [n, int(seconds) if float(seconds).is_integer() else seconds]


def limit_json(row: LimitUsage) -> dict:
    spec = row.spec
    return {
        "name": spec.name,
        "concurrency": spec.concurrency,
        "rate": window(spec.rate),
        "running": row.running,
        "waiting": row.waiting,
        "source": row.source,
        # Extensions: starts in the current rate window, the circuit breaker, and for a key:
        # limit the keys with jobs running or due and those at their limit.
        "started": row.started,
        "pause_after_failures": window(spec.pause_after_failures),
        "keys": row.keys,
        "keys_full": row.keys_full,
    }


def limit_row(name: str) -> LimitUsage | None:
    return next((row for row in usage() if row.spec.name == name), None)


def taken_first_warning(name: str) -> str | None:
    """What to tell an operator who set the `key:` limit `name` when an earlier key limit
    takes its keys first (the first matching glob applies), so that it would not apply."""
    first = limits.in_force().taken_first_by(name)
    if first is None:
        return None
    return (
        f"{name} may never apply: {first.name} comes first and matches the keys it names (the "
        f"first key limit whose glob matches a job's key applies, those of LIMITS in their "
        f"order, then overrides). Set {first.name} instead, or add {name} to LIMITS before it."
    )
