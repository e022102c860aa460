"""Flow control: the limits in force, the budgets a job draws on, and their runtime controls.

The limits in force are the LIMITS option (jobs.limit_spec) with the overrides operators set
at runtime (`set_limit`, `clear_limit`; rows of LimitOverride, audited). A job draws on one
budget (a `Bucket`) per limit it is subject to: its queue's, its task's, and that of the first
`key:` entry whose glob matches its limit_key, one budget per distinct key. The claim
(jobs.db.limited) decides with them what it may take; nothing here runs on the claim path of a
database without limits.
"""

import time
from dataclasses import dataclass, field
from datetime import UTC
from functools import cached_property

from django.db import transaction

from .limit_spec import LimitError, LimitSpec, parse, parse_count, parse_name, parse_window

# A worker re-reads the overrides this often (seconds): a change reaches every worker within it.
REFRESH_SECONDS = 2.0
# A job claimed under a rate limit must begin within a slack of its claim (or it is handed back
# unstarted), and its start counts in the budget's window until its slack and a window have
# passed: that is what keeps the rate exact, whenever within its slack it begins (jobs.db.limited).
# Near its limit a budget gives a short slack (a quarter of the window, at most 1 s), so that
# counted starts leave the window soon: a full budget then starts its limit about every
# 1.25 windows. A tenth was tried: on a loaded machine most such jobs missed it between claim
# and begin and were handed back, their starts still counted.
RATE_SLACK_SHARE = 0.25
RATE_SLACK_MAX = 1.0
# While a budget's window, this claim's jobs included, holds at most this share of its rate, the
# slack is a whole window (at most RATE_ROOMY_SLACK_MAX): a start then counts for up to two
# windows, which only a budget this far from its limit can afford.
RATE_ROOMY_SHARE = 0.5
RATE_ROOMY_SLACK_MAX = 30.0
# While it holds at most this share, a claim records its jobs' starts in that budget as one row
# (jobs.db.limited): such starts are neither given back when a job is handed back unstarted nor
# counted from its finish, which only a budget this far from its limit can afford.
RATE_BULK_SHARE = 0.1
# A job whose slack is at least this may wait behind an executor's short jobs (jobs.pool's
# prefetch, a few ms of work) like a job under no limit; one with less is taken only for an
# executor free to begin it at once.
RATE_SLACK_TO_WAIT = 0.5
# A worker waiting for a full rate budget's room claims again at least this much later.
ROOM_WAKE_MIN = 0.02
# A worker's claims read each limit key's first due jobs (the turns between keys) at most
# this often (seconds); the claims between keep claim order past full budgets.
TURNS_EVERY = 0.5
# How many (queue, task, key) combinations a Limits remembers the budgets of.
REMEMBERED = 100_000


def rate_slack(seconds: float, *, roomy: bool = False) -> float:
    """How soon after its claim a job under a rate limit of this window must begin; `roomy`:
    its budget is far from its limit (RATE_ROOMY_SHARE)."""
    if roomy and seconds >= RATE_SLACK_TO_WAIT:
        return min(RATE_ROOMY_SLACK_MAX, seconds)
    return min(RATE_SLACK_MAX, seconds * RATE_SLACK_SHARE)


@dataclass(frozen=True, slots=True, eq=False)
class Bucket:
    """One budget: a limit, and the key drawing on it (the queue or task itself otherwise).

    Compared by identity: a Limits hands out one Bucket per budget.
    """

    spec: LimitSpec
    value: str
    # How the budget is named in the database (rate starts) and in advisory locks.
    id: str = field(init=False)

    def __post_init__(self):
        name = self.spec.name
        object.__setattr__(
            self, "id", f"{name}\x1f{self.value}" if self.spec.kind == "key" else name
        )

    def describe(self) -> str:
        if self.spec.kind == "key":
            return f"{self.spec.name} — {self.value}"
        return self.spec.name


class Limits:
    """The limits in force at one moment, by name."""

    def __init__(self, specs: dict[str, LimitSpec], sources: dict[str, str] | None = None):
        self.specs = specs
        # "settings" or "override", by name.
        self.sources = sources or dict.fromkeys(specs, "settings")
        claiming = [s for s in specs.values() if s.limits_claims]
        self.queues = {s.target: s for s in claiming if s.kind == "queue"}
        self.tasks = {s.target: s for s in claiming if s.kind == "task"}
        self.keys = tuple(s for s in claiming if s.kind == "key")
        self._key_specs: dict[str, LimitSpec | None] = {}
        self._buckets: dict[tuple, tuple[Bucket, ...]] = {}
        self._budgets: dict[str, Bucket] = {}
        self._turns_at = 0.0
        # Do pending or retrying jobs carry limit keys while no key: limit is in force? Their
        # keys take turns all the same (set by LimitsCache, which looks when it re-reads).
        self.keyed_waiting = False
        # Which claim of this worker last took a job of each limit key (jobs.db.limited's
        # turns go to the keys served longest ago first), and how many claims took any.
        self.served: dict[str, int] = {}
        self.claims_served = 0
        # Where the next turns' read of the keys starts (after the last key the previous one
        # read, when it read as many keys as a claim may; "" from the first).
        self.keys_from = ""
        # When (time.monotonic()) a rate budget the last claim found full has room again.
        self.rate_room_at = float("inf")
        # Did the last claim leave every budget it drew on at most half full (jobs.db.limited:
        # the next claim may then claim first and count after)?
        self.claims_roomy = False
        self.count_first_until = 0.0

    @cached_property
    def limits_claims(self) -> bool:
        """Does any limit decide what a claim may take?"""
        return bool(self.queues or self.tasks or self.keys)

    @cached_property
    def breakers(self) -> dict[str, LimitSpec]:
        """Queues with a circuit breaker, by queue name."""
        return {s.target: s for s in self.specs.values() if s.pause_after_failures}

    @cached_property
    def longest_window(self) -> float:
        """The longest rate window in force (0 without one), slack included."""
        return max(
            (s.rate[1] + rate_slack(s.rate[1]) for s in self.specs.values() if s.rate),
            default=0.0,
        )

    def taken_first_by(self, name: str) -> LimitSpec | None:
        """The `key:` limit that comes before the `key:` limit `name` and matches its glob
        as a key (`key:tenant-*` before `key:tenant-vip*`): the keys `name` is meant for go to
        that one, the first matching glob. None when there is none (or `name` is no key
        limit)."""
        spec = self.specs.get(name)
        if spec is None or spec.kind != "key" or spec not in self.keys:
            return None
        earlier = self.keys[: self.keys.index(spec)]
        return next((s for s in earlier if s.matches_key(spec.target)), None)

    def key_spec(self, key: str | None) -> LimitSpec | None:
        """The first `key:` limit whose glob matches `key`."""
        if key is None or not self.keys:
            return None
        try:
            return self._key_specs[key]
        except KeyError:
            found = next((s for s in self.keys if s.matches_key(key)), None)
            if len(self._key_specs) < 100_000:
                self._key_specs[key] = found
            return found

    def buckets(self, queue: str, task: str, key: str | None) -> tuple[Bucket, ...]:
        """The budgets a job of this queue, task and limit key draws on."""
        try:
            return self._buckets[queue, task, key]
        except KeyError:
            pass
        found: list[Bucket] = []
        for spec, value in (
            (self.queues.get(queue), queue),
            (self.tasks.get(task), task),
            (self.key_spec(key), key or ""),  # no key, no key spec
        ):
            if spec is not None:
                bucket = Bucket(spec, value)
                found.append(self._budgets.setdefault(bucket.id, bucket))
        buckets = tuple(found)
        if len(self._buckets) < REMEMBERED:
            self._buckets[queue, task, key] = buckets
        return buckets

    def rate_room_after(self, oldest, seconds: float) -> None:
        """A claim found a rate budget full: its oldest counted start (the stored moment, as
        the database returned it) leaves the window `seconds` after that moment."""
        from django.utils import timezone
        from django.utils.dateparse import parse_datetime

        if isinstance(oldest, str):
            oldest = parse_datetime(oldest)
        if oldest is None:
            return
        if timezone.is_naive(oldest):
            oldest = timezone.make_aware(oldest, UTC)
        left = (oldest - timezone.now()).total_seconds() + seconds
        # At least a little later: a clock apart from the database's never makes a busy loop.
        at = time.monotonic() + max(ROOM_WAKE_MIN, left)
        self.rate_room_at = min(self.rate_room_at, at)

    def took_keys(self, keys) -> None:
        """A claim took jobs of these limit keys: they wait for the others' turns next."""
        keys = [k for k in keys if k is not None]
        if not keys:
            return
        self.claims_served += 1
        if len(self.served) >= REMEMBERED:
            self.served.clear()
        for key in keys:
            self.served[key] = self.claims_served

    @property
    def shape_claims(self) -> bool:
        """Does a claim need this worker's view of the limits (budgets, or keys' turns)? If not,
        it is the one plain statement (db.Engine.claim_within)."""
        return self.limits_claims or self.takes_turns

    @property
    def takes_turns(self) -> bool:
        """Do limit keys take turns in claims (a key: limit is in force, or keyed jobs wait)?"""
        return bool(self.keys) or self.keyed_waiting

    def turns_pending(self) -> bool:
        """Would turns_due say yes now (without taking the turn)?"""
        return self.takes_turns and time.monotonic() >= self._turns_at

    def turns_due(self) -> bool:
        """Should this claim read each key's first jobs (at most every TURNS_EVERY)?"""
        if not self.takes_turns:
            return False
        now = time.monotonic()
        if now < self._turns_at:
            return False
        self._turns_at = now + TURNS_EVERY
        return True


def declared(backend_alias: str = "default") -> dict[str, LimitSpec]:
    """The LIMITS option of a backend, read (the check refused malformed entries at start)."""
    from .compat import task_backends

    try:
        options = task_backends[backend_alias].options
    except Exception:
        return {}
    option = options.get("LIMITS") or {}
    specs = {}
    for name, entry in option.items():
        try:
            specs[name] = parse(name, entry)
        except LimitError:
            continue  # reported by `manage.py check`; the worker refuses to start on it
    return specs


def spec_with_override(name: str, base: LimitSpec | None, override) -> LimitSpec:
    """The limit an override stored in the database makes; LimitError when its values are
    ones `set_limit` refuses now (stored by an earlier version)."""
    kind, target = parse_name(name)
    rate = None
    if override.rate_count is not None and override.rate_seconds is not None:
        rate = (override.rate_count, override.rate_seconds)
    concurrency, rate = checked_values(name, override.concurrency, rate)
    return LimitSpec(
        name=name,
        kind=kind,
        target=target,
        concurrency=concurrency,
        rate=rate,
        pause_after_failures=base.pause_after_failures if base else None,
    )


def in_force(backend_alias: str = "default") -> Limits:
    """The limits in force now: the option, with the overrides stored in the database."""
    from .models import LimitOverride

    specs = declared(backend_alias)
    sources = dict.fromkeys(specs, "settings")
    for override in LimitOverride.objects.all():
        try:
            specs[override.name] = spec_with_override(
                override.name, specs.get(override.name), override
            )
        except LimitError:
            continue
        sources[override.name] = "override"
    return Limits(specs, sources)


class LimitsCache:
    """A worker's view of the limits in force, re-read every REFRESH_SECONDS."""

    def __init__(self, backend_alias: str = "default", refresh_seconds: float = REFRESH_SECONDS):
        self.backend_alias = backend_alias
        self.refresh_seconds = refresh_seconds
        self.limits: Limits | None = None
        self.read_at = 0.0

    def room_at(self) -> float:
        """When (time.monotonic()) a rate budget the last claim found full has room again
        (inf: none was)."""
        return self.limits.rate_room_at if self.limits is not None else float("inf")

    def current(self) -> Limits:
        now = time.monotonic()
        if self.limits is None or now - self.read_at >= self.refresh_seconds:
            fresh = in_force(self.backend_alias)
            if not fresh.keys:
                from . import db

                fresh.keyed_waiting = db.engine().keyed_jobs_waiting()
            if self.limits is not None:
                # The turns between keys go on round where they were.
                fresh.served, fresh.claims_served = self.limits.served, self.limits.claims_served
                fresh.keys_from = self.limits.keys_from
            self.limits = fresh
            self.read_at = now
        return self.limits


def prune_starts() -> int:
    """Forget rate-limit starts older than every window in force (at least a minute)."""
    from datetime import timedelta

    from django.utils import timezone

    from .models import LimitStart

    keep = max(in_force().longest_window, 60.0)
    cutoff = timezone.now() - timedelta(seconds=keep)
    deleted, _ = LimitStart.objects.filter(started_at__lt=cutoff).delete()
    return deleted


# --- runtime controls --------------------------------------------------------------------------


def _username(user) -> str:
    return user.get_username() if getattr(user, "pk", None) else ""


def _audit(name, action, outcome, detail, *, user=None, source="python"):
    from .models import AuditEntry

    AuditEntry.record(
        user=user, action=action, outcome=outcome, source=source, subject=name, detail=detail
    )


def checked_values(name, concurrency, rate) -> tuple[int | None, tuple[int, float] | None]:
    """The values of an override, checked as the LIMITS option's are; LimitError otherwise."""
    parse_name(name)
    if concurrency is not None:
        concurrency = parse_count(name, "concurrency", concurrency)
    if rate is not None:
        rate = parse_window(name, "rate", rate)
    return concurrency, rate


def set_limit(name: str, *, concurrency=None, rate=None, user=None, source="python") -> LimitSpec:
    """Override limit `name` for every worker until `clear_limit(name)`: its concurrency and
    rate become these (None: none of that kind). Stored in the database and audited."""
    from . import db
    from .models import LimitOverride

    concurrency, rate = checked_values(name, concurrency, rate)
    with transaction.atomic():
        LimitOverride.objects.update_or_create(
            name=name,
            defaults={
                "concurrency": concurrency,
                "rate_count": rate[0] if rate else None,
                "rate_seconds": rate[1] if rate else None,
                "updated_by": _username(user),
            },
        )
        detail = {"concurrency": concurrency, "rate": list(rate) if rate else None}
        _audit(name, "set limit", "limit overridden", detail, user=user, source=source)
    db.notify_workers()
    return in_force().specs[name]


def clear_limit(name: str, *, user=None, source="python") -> bool:
    """Remove the override of limit `name` (the LIMITS option applies again); False when it
    had none."""
    from . import db
    from .models import LimitOverride

    parse_name(name)
    with transaction.atomic():
        deleted, _ = LimitOverride.objects.filter(name=name).delete()
        if deleted:
            _audit(name, "clear limit", "override cleared", {}, user=user, source=source)
    if deleted:
        db.notify_workers()
    return bool(deleted)
