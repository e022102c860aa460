"""Property tests for issue 4: transactional enqueue across nested atomic blocks, and the retry
policies' bounds (jobs.retry)."""

import math
import random
import uuid

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import retry
from jobs.errors import DuplicateJob
from jobs.models import Job
from jobs.retry import Exponential, Fixed, Linear, NoRetry
from tests import tasks

# --- transactional enqueue ---------------------------------------------------------------------


class Rollback(Exception):
    """Raised to leave an atomic block by rolling it back."""


# A program is a list of statements run at top level (autocommit). A statement is an enqueue
# (a leaf) or an atomic block that commits, raises, or calls set_rollback(True), holding more.
LEAVES = st.sampled_from(["enqueue", "enqueue_many", "dedup", "duplicate"])
ENDINGS = st.sampled_from(["commit", "raise", "set_rollback"])
TREES = st.recursive(
    LEAVES, lambda children: st.tuples(ENDINGS, st.lists(children, max_size=4)), max_leaves=14
)
PROGRAMS = st.lists(TREES, min_size=1, max_size=4)


class Run:
    def __init__(self):
        self.enqueued = set()  # every job id handed out
        self.expected = set()  # ids whose every enclosing block committed
        self.kept_keys, self.dropped_keys = set(), set()

    def leaf(self, kind, survives):
        made = []  # (id, dedup_key)
        if kind == "enqueue":
            made.append((tasks.add.enqueue(1, 2).id, None))
        elif kind == "enqueue_many":
            ids = tasks.add.enqueue_many([((1, 2), {}), ((3, 4), {}), ((5, 6), {})])
            made += [(i, None) for i in ids]
        else:
            key = f"prop-{uuid.uuid4().hex}"
            made.append((tasks.add.using(dedup_key=key).enqueue(1, 2).id, key))
            if kind == "duplicate":
                # A refused duplicate must not spoil the transaction it happened in.
                with pytest.raises(DuplicateJob):
                    tasks.add.using(dedup_key=key).enqueue(3, 4)
        for job_id, key in made:
            job_id = uuid.UUID(str(job_id))
            self.enqueued.add(job_id)
            if survives:
                self.expected.add(job_id)
            if key:
                (self.kept_keys if survives else self.dropped_keys).add(key)

    def node(self, node, survives=True):
        if isinstance(node, str):
            self.leaf(node, survives)
            return
        ending, children = node
        try:
            with transaction.atomic():
                for child in children:
                    self.node(child, survives and ending == "commit")
                if ending == "raise":
                    raise Rollback
                if ending == "set_rollback":
                    transaction.set_rollback(True)
        except Rollback:
            pass


@pytest.mark.django_db(transaction=True)
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=PROGRAMS)
def test_jobs_exist_exactly_when_every_enclosing_atomic_block_committed(program):
    run = Run()
    for statement in program:
        run.node(statement)
    assert not connection.in_atomic_block
    existing = set(Job.objects.filter(id__in=run.enqueued).values_list("id", flat=True))
    assert existing == run.expected
    # A rolled-back job leaves its dedup key free; a committed one holds it.
    for key in run.dropped_keys:
        tasks.add.using(dedup_key=key).enqueue(0, 0)
    for key in run.kept_keys:
        with pytest.raises(DuplicateJob):
            tasks.add.using(dedup_key=key).enqueue(0, 0)


# --- retry policies ----------------------------------------------------------------------------

ATTEMPTS = st.integers(min_value=1, max_value=100)
SEEDS = st.integers(min_value=0, max_value=2**32)
AMOUNTS = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
CAPS = st.one_of(st.none(), st.floats(min_value=0, max_value=1e7, allow_nan=False))
JITTERS = st.one_of(st.just(0.0), st.floats(min_value=0, max_value=100, allow_nan=False))
PROPERTY = settings(max_examples=50, deadline=None)


def exponential_base(base, multiplier, cap, attempt):
    try:
        raw = base * multiplier ** (attempt - 1)
    except OverflowError:
        raw = math.inf
    raw = min(raw, retry.MAX_DELAY)  # "never", in a unit the databases can store (finding #4)
    return raw if cap is None else min(raw, cap)


def within(value, low, high):
    slack = 1e-9 * max(1.0, abs(high)) if math.isfinite(high) else 0
    return low - slack <= value <= high + slack


@PROPERTY
@given(
    base=AMOUNTS,
    multiplier=st.floats(min_value=0, max_value=10, allow_nan=False),
    cap=CAPS,
    jitter=JITTERS,
    attempt=ATTEMPTS,
    seed=SEEDS,
)
def test_exponential_delay_is_capped_base_plus_at_most_jitter(
    base, multiplier, cap, jitter, attempt, seed
):
    policy = Exponential(base=base, multiplier=multiplier, max=cap, jitter=jitter)
    low = exponential_base(base, multiplier, cap, attempt)
    assert within(policy.delay(attempt, random.Random(seed)), low, low + jitter)


@PROPERTY
@given(base=AMOUNTS, step=AMOUNTS, cap=CAPS, jitter=JITTERS, attempt=ATTEMPTS, seed=SEEDS)
def test_linear_delay_is_capped_base_plus_steps_plus_at_most_jitter(
    base, step, cap, jitter, attempt, seed
):
    policy = Linear(base=base, step=step, max=cap, jitter=jitter)
    raw = base + step * (attempt - 1)
    low = raw if cap is None else min(raw, cap)
    assert within(policy.delay(attempt, random.Random(seed)), low, low + jitter)


@PROPERTY
@given(delay=AMOUNTS, jitter=JITTERS, attempt=ATTEMPTS, seed=SEEDS)
def test_fixed_delay_is_the_delay_plus_at_most_jitter(delay, jitter, attempt, seed):
    policy = Fixed(delay, jitter=jitter)
    assert within(policy.delay(attempt, random.Random(seed)), delay, delay + jitter)


@PROPERTY
@given(
    base=AMOUNTS,
    jitter=JITTERS,
    ratio=st.floats(min_value=0, max_value=1, allow_nan=False),
    attempt=ATTEMPTS,
    seed=SEEDS,
)
def test_jitter_ratio_stays_within_its_fraction(base, jitter, ratio, attempt, seed):
    policy = Exponential(base=base, max=3600, jitter=jitter, jitter_ratio=ratio)
    low = exponential_base(base, 2, 3600, attempt)
    value = policy.delay(attempt, random.Random(seed))
    assert within(value, max(0.0, low * (1 - ratio)), (low + jitter) * (1 + ratio))


POLICIES_WITHOUT_JITTER = st.one_of(
    st.builds(
        Exponential,
        base=AMOUNTS,
        multiplier=st.floats(min_value=1, max_value=10, allow_nan=False),
        max=CAPS,
    ),
    st.builds(Linear, base=AMOUNTS, step=AMOUNTS, max=CAPS),
    st.builds(Fixed, AMOUNTS),
)


@PROPERTY
@given(policy=POLICIES_WITHOUT_JITTER)
def test_delays_without_jitter_never_decrease_with_the_attempt(policy):
    delays = [policy.delay(n) for n in range(1, 101)]
    assert all(a <= b for a, b in zip(delays, delays[1:], strict=False)), delays


@PROPERTY
@given(attempt=ATTEMPTS, seed=SEEDS)
def test_no_retry_always_stops(attempt, seed):
    assert NoRetry().delay(attempt, random.Random(seed)) is None
    assert retry.next_delay(NoRetry(), attempt=attempt, exception=ValueError()) is None


@PROPERTY
@given(
    value=st.one_of(
        st.integers(),
        st.floats(allow_nan=True),
        st.booleans(),
        st.none(),
        st.text(max_size=5),
        st.decimals(allow_nan=False),
    )
)
def test_clamped_max_attempts_is_always_between_1_and_100(value):
    clamped = retry.clamp_max_attempts(value)
    assert type(clamped) is int and 1 <= clamped <= 100
    if type(value) is int and 1 <= value <= 100:
        assert clamped == value


@PROPERTY
@given(policy=POLICIES_WITHOUT_JITTER, attempt=ATTEMPTS)
def test_policy_delays_are_clamped_like_custom_backoff_delays(policy, attempt):
    # Policies are clamped to 10 years like custom callables: unbounded delays grew past what
    # the databases can add to now() (RELIABILITY_FINDINGS.md #4).
    delay = retry.next_delay(policy, attempt=attempt, exception=ValueError())
    assert isinstance(delay, float) and 0 <= delay <= 10 * 365 * 86400
