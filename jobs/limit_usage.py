"""What each limit in force is using now, and what holds a due job: for the console, the API
and the metrics. Counted the way the claim counts (jobs.db.limited), never on its path."""

from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from . import db
from .db.engine import JOB, sql_in
from .db.limited import LimitedClaim
from .limit_spec import LimitSpec
from .limits import Bucket, Limits, in_force
from .states import CLAIMABLE

# Due jobs are counted one by one up to this many per limit; beyond it, "at least".
WAITING_CAP = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitUsage:
    spec: LimitSpec
    # "settings" or "override".
    source: str
    # Its jobs running now (summed over the keys of a `key:` limit).
    running: int
    # Its attempts started within the current rate window (None without a rate).
    started: int | None
    # Due jobs it holds back now (those of its budgets at their limit).
    waiting: int
    # For a `key:` limit: how many distinct keys have jobs running or due, and how many of
    # them are at their limit.
    keys: int = 0
    keys_full: int = 0


def is_full(bucket: Bucket, running: int, started: int | None) -> bool:
    spec = bucket.spec
    if spec.concurrency is not None and running >= spec.concurrency:
        return True
    return spec.rate is not None and started is not None and started >= spec.rate[0]


def _due_count(cursor, column: str, value: str) -> int:
    cursor.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {JOB} WHERE state IN ({sql_in(CLAIMABLE)}) "
        f"AND run_after <= {db.engine().now} AND {column} = %s LIMIT {WAITING_CAP}) AS due",
        [value],
    )
    return cursor.fetchone()[0]


def _per_key(cursor, where: str) -> dict[str, int]:
    cursor.execute(
        f"SELECT limit_key, count(*) FROM {JOB} WHERE {where} AND limit_key IS NOT NULL "
        f"GROUP BY limit_key"
    )
    return dict(cursor.fetchall())


def usage(limits: Limits | None = None) -> list[LimitUsage]:
    """Every limit in force (settings and overrides), by name."""
    limits = limits or in_force()
    engine = db.engine()
    rows = []
    with connection.cursor() as cursor:
        counter = LimitedClaim(engine, cursor, limits, [])
        keyed_running = keyed_due = {}
        if any(s.kind == "key" for s in limits.specs.values()):
            keyed_running = _per_key(cursor, "state = 'running'")
            keyed_due = _per_key(
                cursor, f"state IN ({sql_in(CLAIMABLE)}) AND run_after <= {engine.now}"
            )
        for name in sorted(limits.specs):
            spec = limits.specs[name]
            if spec.kind == "key":
                keys = sorted(
                    k
                    for k in set(keyed_running) | set(keyed_due)
                    if limits.key_spec(k) is spec
                    or (not spec.limits_claims and spec.matches_key(k))
                )
                buckets = [Bucket(spec, k) for k in keys]
                due = {b.id: keyed_due.get(b.value, 0) for b in buckets}
            else:
                buckets = [Bucket(spec, spec.target)]
                column = "queue_name" if spec.kind == "queue" else "task_path"
                due = {buckets[0].id: _due_count(cursor, column, spec.target)}
            running = counter.count_running(buckets) if spec.concurrency else {}
            started = counter.count_starts(buckets) if spec.rate else {}
            if spec.kind == "key" and not spec.concurrency:
                running = {b.id: keyed_running.get(b.value, 0) for b in buckets}
            elif spec.kind != "key" and not spec.concurrency:
                running = {buckets[0].id: _running_count(cursor, spec)}
            full = [b for b in buckets if is_full(b, running.get(b.id, 0), started.get(b.id))]
            rows.append(
                LimitUsage(
                    spec=spec,
                    source=limits.sources.get(name, "settings"),
                    running=sum(running.values()),
                    started=sum(started.values()) if spec.rate else None,
                    waiting=sum(due[b.id] for b in full),
                    keys=len(buckets) if spec.kind == "key" else 0,
                    keys_full=len(full) if spec.kind == "key" else 0,
                )
            )
    return rows


def _running_count(cursor, spec: LimitSpec) -> int:
    column = "queue_name" if spec.kind == "queue" else "task_path"
    cursor.execute(
        f"SELECT count(*) FROM {JOB} WHERE state = 'running' AND {column} = %s", [spec.target]
    )
    return cursor.fetchone()[0]


def holding(job) -> list[str]:
    """Why a due job is not running: one line per limit at its limit, e.g.
    "key:tenant-* — tenant-42: 2 of 2 running". Empty when nothing holds it."""
    if job.state not in CLAIMABLE or job.run_after > timezone.now():
        return []
    limits = in_force()
    buckets = limits.buckets(job.queue_name, job.task_path, job.limit_key)
    if not buckets:
        return []
    lines = []
    with connection.cursor() as cursor:
        counter = LimitedClaim(db.engine(), cursor, limits, [])
        running = counter.count_running(buckets)
        started = counter.count_starts(buckets)
    for b in buckets:
        spec = b.spec
        if spec.concurrency is not None and running[b.id] >= spec.concurrency:
            lines.append(f"{b.describe()}: {running[b.id]} of {spec.concurrency} running")
        if spec.rate is not None and started[b.id] >= spec.rate[0]:
            lines.append(
                f"{b.describe()}: {started[b.id]} of {spec.rate[0]} started "
                f"in the last {spec.rate[1]:g} s"
            )
    return lines
