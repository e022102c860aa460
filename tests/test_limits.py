"""Flow control at claim time (jobs.limits, jobs.db.limited), in process, on the test's database.

The real-worker cases (exactness across workers, reading a ledger) are in
tests/test_limits_workers.py.
"""

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from jobs import db
from jobs.limit_spec import LimitError
from jobs.limit_usage import usage
from jobs.limits import LimitsCache, clear_limit, in_force, set_limit
from jobs.models import AuditEntry, Job, LimitOverride, LimitStart
from jobs.outcome import Outcome
from jobs.states import JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def with_limits(limits, **options):
    config = settings.TASKS["default"]
    return override_settings(
        TASKS={"default": {**config, "OPTIONS": {**config["OPTIONS"], "LIMITS": limits, **options}}}
    )


def due(n, **fields):
    fields.setdefault("run_after", timezone.now() - timedelta(minutes=5))
    return [make_job(**fields) for _ in range(n)]


def claim(limit=50, queues=None):
    return db.claim(
        worker_id="w-limits", queues=queues, limit=limit, lease_seconds=60, limits=LimitsCache()
    )


def running(**filters):
    return Job.objects.filter(state=JobState.RUNNING, **filters).count()


def test_a_queue_at_its_concurrency_has_its_held_jobs_stay_due_without_using_an_attempt():
    jobs = due(5, queue_name="emails")
    with with_limits({"queue:emails": {"concurrency": 2}}):
        first = claim()
        again = claim()
    assert len(first) == 2
    assert again == []
    held = Job.objects.filter(id__in=[j.id for j in jobs]).exclude(state=JobState.RUNNING)
    assert {(j.state, j.attempt) for j in held} == {(JobState.PENDING, 0)}
    assert held.count() == 3


def test_a_finished_job_frees_its_slot_for_the_next_claim():
    due(3, queue_name="emails")
    with with_limits({"queue:emails": {"concurrency": 1}}):
        (one,) = claim()
        db.finish(
            [
                db.Finish(
                    job_id=one.id,
                    lease_id=one.lease_id,
                    state=JobState.SUCCEEDED,
                    outcome="succeeded",
                )
            ]
        )
        (two,) = claim()
    assert two.id != one.id
    assert running(queue_name="emails") == 1


def test_jobs_under_no_full_limit_are_claimed_past_a_held_backlog():
    due(30, queue_name="emails")
    others = due(3, queue_name="reports", run_after=timezone.now() - timedelta(minutes=1))
    with with_limits({"queue:emails": {"concurrency": 2}}):
        claimed = claim(limit=10)
    ids = {c.id for c in claimed}
    assert {j.id for j in others} <= ids
    assert len(claimed) == 5


def test_each_limit_key_has_its_own_budget_and_a_big_backlog_does_not_hide_the_others():
    big = due(100, task_path="tests.tasks.record", limit_key="tenant-big")
    small = due(
        4,
        task_path="tests.tasks.record",
        limit_key="tenant-small",
        run_after=timezone.now() - timedelta(minutes=1),
    )
    with with_limits({"key:tenant-*": {"concurrency": 2}}):
        claimed = claim(limit=10)
    ids = {c.id for c in claimed}
    assert len(ids & {j.id for j in big}) == 2
    assert len(ids & {j.id for j in small}) == 2


def test_a_task_limit_holds_across_queues():
    due(3, task_path="tests.tasks.record", queue_name="a")
    due(3, task_path="tests.tasks.record", queue_name="b")
    with with_limits({"task:tests.tasks.record": {"concurrency": 4}}):
        assert len(claim()) == 4
        assert claim() == []


def test_a_job_takes_room_in_every_limit_it_is_subject_to():
    due(4, queue_name="emails", limit_key="tenant-1")
    due(4, queue_name="emails", limit_key="tenant-2")
    limits = {"queue:emails": {"concurrency": 3}, "key:tenant-*": {"concurrency": 1}}
    with with_limits(limits):
        claimed = claim()
    assert len(claimed) == 2
    assert {j.limit_key for j in Job.objects.filter(state=JobState.RUNNING)} == {
        "tenant-1",
        "tenant-2",
    }


def test_the_first_matching_key_glob_decides_the_budget():
    due(3, limit_key="vip-1")
    limits = {"key:vip-*": {"concurrency": 3}, "key:*": {"concurrency": 1}}
    with with_limits(limits):
        assert len(claim()) == 3


def test_a_rate_limit_counts_the_starts_within_its_window():
    due(8, queue_name="api")
    with with_limits({"queue:api": {"rate": [3, 60]}}):
        assert len(claim()) == 3
        assert claim() == []
    assert LimitStart.objects.filter(bucket="queue:api").count() == 3


def test_a_rate_limited_job_handed_back_unstarted_gives_its_start_back():
    due(4, queue_name="api")
    with with_limits({"queue:api": {"rate": [3, 60]}}):
        first, *kept = claim()
        assert claim() == []
        db.finish([Outcome.released(first, "w-limits")])
        (again,) = claim()
    assert LimitStart.objects.filter(bucket="queue:api").count() == 3
    assert again.id not in {c.id for c in kept}


def test_a_rate_limited_job_that_ran_counts_its_start_from_its_finish_not_its_latest_moment():
    due(2, queue_name="api")
    with with_limits({"queue:api": {"rate": [3, 60]}}):
        ran, waiting = claim()
        db.finish(
            [
                db.Finish(
                    job_id=ran.id,
                    lease_id=ran.lease_id,
                    state=JobState.SUCCEEDED,
                    outcome="succeeded",
                )
            ]
        )
    finished = timezone.now()
    moments = dict(LimitStart.objects.values_list("job_id", "started_at"))
    assert moments[ran.id] <= finished < moments[waiting.id]


def test_starts_older_than_the_window_no_longer_count():
    due(4, queue_name="api")
    LimitStart.objects.create(
        bucket="queue:api", started_at=timezone.now() - timedelta(seconds=120)
    )
    with with_limits({"queue:api": {"rate": [3, 60]}}):
        assert len(claim()) == 3


def test_without_limits_the_claim_takes_everything_due():
    due(5, queue_name="emails", limit_key="tenant-1")
    with with_limits({}):
        assert len(claim()) == 5
    assert not LimitStart.objects.exists()


def test_named_queues_are_claimed_under_their_limits():
    due(4, queue_name="a")
    due(4, queue_name="b")
    due(4, queue_name="c")
    with with_limits({"queue:a": {"concurrency": 1}}):
        claimed = claim(queues=["a", "b"])
    assert sorted(c.queue_name for c in claimed) == ["a", "b", "b", "b", "b"]


def test_an_override_replaces_the_setting_until_it_is_cleared():
    due(6, queue_name="emails")
    with with_limits({"queue:emails": {"concurrency": 1}}):
        set_limit("queue:emails", concurrency=3)
        assert in_force().sources["queue:emails"] == "override"
        assert len(claim()) == 3
        assert clear_limit("queue:emails")
        assert in_force().specs["queue:emails"].concurrency == 1
        assert not clear_limit("queue:emails")
    audited = AuditEntry.objects.filter(subject="queue:emails")
    actions = list(audited.values_list("action", flat=True))
    assert sorted(actions) == ["clear limit", "set limit"]


def test_an_override_refuses_impossible_values_and_stores_nothing():
    for bad in (
        {"concurrency": 0},
        {"rate": [5]},
        {"rate": [5, -1]},
        {"concurrency": "2"},
        {"concurrency": 10**10},
        {"rate": [1, 1e11]},
    ):
        with pytest.raises(LimitError):
            set_limit("queue:emails", **bad)
    with pytest.raises(LimitError):
        set_limit("bucket:emails", concurrency=2)
    assert not AuditEntry.objects.exists()


def test_an_override_stored_with_a_window_now_refused_is_left_out_and_breaks_nothing():
    from jobs.limits import prune_starts

    LimitOverride.objects.create(name="key:t-*", rate_count=1, rate_seconds=1e11)
    LimitOverride.objects.create(name="queue:emails", concurrency=2)
    limits = in_force()
    assert "key:t-*" not in limits.specs
    assert limits.specs["queue:emails"].concurrency == 2
    assert prune_starts() == 0
    due(1, limit_key="t-1")
    assert len(claim()) == 1


def test_limit_keys_take_turns_when_no_limit_is_reached():
    old = timezone.now() - timedelta(minutes=10)
    big = due(60, limit_key="tenant-big", run_after=old)
    small = due(5, limit_key="tenant-small")
    with with_limits({"key:tenant-*": {"concurrency": 1000}}):
        claimed = claim(limit=8)
    ids = {c.id for c in claimed}
    assert len(ids & {j.id for j in small}) == 4
    assert len(ids & {j.id for j in big}) == 4


@pytest.mark.parametrize(
    "limits", [{}, {"queue:other": {"concurrency": 5}}], ids=["no limits", "a queue limit only"]
)
def test_limit_keys_take_turns_without_a_key_limit_in_force(limits):
    old = timezone.now() - timedelta(minutes=10)
    big = due(60, limit_key="tenant-big", run_after=old)
    small = due(5, limit_key="tenant-small")
    with with_limits(limits):
        claimed = claim(limit=8)
    ids = {c.id for c in claimed}
    assert len(ids & {j.id for j in small}) == 4
    assert len(ids & {j.id for j in big}) == 4


def test_without_keyed_jobs_and_limits_a_claim_stays_one_statement(django_assert_max_num_queries):
    due(5)
    cache = LimitsCache()
    cache.current()  # the limits and whether keyed jobs wait: read once per refresh
    with django_assert_max_num_queries(1):
        assert len(claim_with(cache)) == 5


@pytest.mark.parametrize(
    "declared", [{"key:tenant-*": {"concurrency": 1000}}, {}], ids=["a key limit", "no limit"]
)
def test_claims_of_one_job_each_take_turns_between_keys_from_claim_to_claim(monkeypatch, declared):
    # A worker whose executors are all busy claims one job at a time: the key with the oldest
    # job took every claim, so a newer key waited behind its whole backlog.
    monkeypatch.setattr("jobs.limits.TURNS_EVERY", 0.0)
    due(50, limit_key="tenant-big", run_after=timezone.now() - timedelta(minutes=10))
    due(3, limit_key="tenant-new")
    # One worker's, kept from claim to claim, and reading the limits again before each (as it
    # does every few seconds): the turns go on round where they were.
    limits = LimitsCache(refresh_seconds=0.0)
    keys = []
    with with_limits(declared):
        for _ in range(6):
            [claimed] = db.claim(
                worker_id="w-limits", queues=None, limit=1, lease_seconds=60, limits=limits
            )
            keys.append(claimed.limit_key)
    assert keys == ["tenant-big", "tenant-new"] * 3


def test_a_key_gets_its_turn_among_keys_enqueued_together_in_one_transaction(monkeypatch):
    # PostgreSQL gives every job of one transaction the same due time: the key served longest
    # ago must still come first in its round, not after the rest by the tie.
    monkeypatch.setattr("jobs.limits.TURNS_EVERY", 0.0)
    same = timezone.now() - timedelta(minutes=10)
    for k in range(20):
        due(3, limit_key=f"busy-{k:02}", run_after=same)
    due(1, limit_key="a-late", run_after=same + timedelta(seconds=1))
    cache = LimitsCache(refresh_seconds=0.0)
    with with_limits({}):
        taken = [c.limit_key for _ in range(3) for c in claim_with(cache, limit=10)]
    assert "a-late" in taken


def test_keys_past_the_first_two_hundred_get_their_turns_too(monkeypatch):
    monkeypatch.setattr("jobs.limits.TURNS_EVERY", 0.0)
    old = timezone.now() - timedelta(minutes=10)
    for k in range(250):
        due(2, limit_key=f"k{k:03}", run_after=old)
    due(1, limit_key="zz-last")
    cache = LimitsCache(refresh_seconds=0.0)
    with with_limits({"key:*": {"concurrency": 1000}}):
        taken = [c.limit_key for _ in range(4) for c in claim_with(cache, limit=60)]
    assert "zz-last" in taken


def test_turns_keep_priority_first():
    due(5, limit_key="tenant-a", priority=10)
    low = due(5, limit_key="tenant-b")
    with with_limits({"key:tenant-*": {"concurrency": 1000}}):
        claimed = claim(limit=5)
    assert not {c.id for c in claimed} & {j.id for j in low}


def test_maintenance_forgets_starts_older_than_every_window():
    from jobs.limits import prune_starts

    now = timezone.now()
    LimitStart.objects.create(bucket="queue:api", started_at=now - timedelta(seconds=30))
    LimitStart.objects.create(bucket="queue:api", started_at=now - timedelta(seconds=300))
    LimitStart.objects.create(bucket="queue:slow", started_at=now - timedelta(seconds=300))
    with with_limits({"queue:api": {"rate": [5, 10]}}):
        assert prune_starts() == 2
    with with_limits({"queue:api": {"rate": [5, 3600]}}):
        LimitStart.objects.create(bucket="queue:api", started_at=now - timedelta(seconds=300))
        assert prune_starts() == 0


def test_the_breaker_pauses_a_queue_once_enough_of_its_attempts_failed_within_the_window():
    from jobs import breaker, queues
    from jobs.models import Attempt

    limits_config = {"queue:hooks": {"pause_after_failures": [2, 60]}}
    now = timezone.now()
    for i, ago in enumerate((5, 500)):
        job = make_job(JobState.DEAD_LETTER, queue_name="hooks")
        Attempt.objects.create(
            job=job, number=1, outcome="failed", finished_at=now - timedelta(seconds=ago + i)
        )
    with with_limits(limits_config):
        assert breaker.trip({"hooks", "other"}, in_force()) == []
        job = make_job(JobState.DEAD_LETTER, queue_name="hooks")
        Attempt.objects.create(job=job, number=1, outcome="failed", finished_at=now)
        assert breaker.trip({"hooks"}, in_force()) == ["hooks"]
        assert breaker.trip({"hooks"}, in_force()) == []
    assert queues.paused()["hooks"].paused_by == "circuit breaker"


def test_the_breaker_does_not_count_attempts_handed_back_at_shutdown_or_lost_with_a_worker():
    from jobs import breaker, queues
    from jobs.models import Attempt

    def attempt(outcome):
        job = make_job(JobState.PENDING, queue_name="hooks")
        Attempt.objects.create(job=job, number=1, outcome=outcome, finished_at=timezone.now())

    with with_limits({"queue:hooks": {"pause_after_failures": [2, 60]}}):
        # A rolling restart and a worker that vanished: the queue's work did not fail.
        for outcome in ("interrupted", "interrupted", "lost", "lost", "cancelled", "snoozed"):
            attempt(outcome)
        assert breaker.trip({"hooks"}, in_force()) == []
        attempt("failed")
        assert breaker.trip({"hooks"}, in_force()) == []
        attempt("poison")
        assert breaker.trip({"hooks"}, in_force()) == ["hooks"]
    assert queues.paused()["hooks"].paused_by == "circuit breaker"


def test_the_breaker_counts_only_failures_after_an_operator_resumed_the_queue():
    from jobs import breaker, queues
    from jobs.models import Attempt

    def fail_once():
        job = make_job(JobState.DEAD_LETTER, queue_name="hooks")
        Attempt.objects.create(job=job, number=1, outcome="failed", finished_at=timezone.now())

    with with_limits({"queue:hooks": {"pause_after_failures": [2, 60]}}):
        fail_once()
        fail_once()
        assert breaker.trip({"hooks"}, in_force()) == ["hooks"]
        assert queues.resume("hooks")
        fail_once()
        assert breaker.trip({"hooks"}, in_force()) == []
        fail_once()
        assert breaker.trip({"hooks"}, in_force()) == ["hooks"]


def test_a_job_under_a_rate_limit_far_from_it_may_begin_within_a_window_and_near_it_at_once():
    due(5, queue_name="api")
    due(1, queue_name="free")
    with with_limits({"queue:api": {"rate": [5, 2]}}):
        claimed = claim()
    slacks = sorted(c.rate_slack for c in claimed)
    # Two starts fit in half the limit (a whole window's slack); the other three get a quarter.
    assert slacks == [0.0, 0.5, 0.5, 0.5, 2.0, 2.0]


def test_only_jobs_with_a_slack_too_short_to_wait_count_against_the_free_executors():
    due(8, queue_name="api")
    with with_limits({"queue:api": {"rate": [8, 1]}}):
        claimed = db.claim(
            worker_id="w-limits",
            queues=None,
            limit=50,
            lease_seconds=60,
            limits=LimitsCache(),
            can_begin=1,
        )
    assert sorted(c.rate_slack for c in claimed) == [0.25, 1.0, 1.0, 1.0, 1.0]


def small_claim(limit=2, can_begin=None):
    return db.claim(
        worker_id="w-limits",
        queues=None,
        limit=limit,
        lease_seconds=60,
        limits=LimitsCache(),
        can_begin=can_begin,
    )


def test_a_budget_already_full_does_not_hide_the_jobs_behind_its_backlog_from_a_small_claim():
    # The claim reads a few more due jobs than it may take; all of them the full budget's,
    # it came back empty while the unlimited jobs behind them waited.
    due(30, queue_name="api", run_after=timezone.now() - timedelta(minutes=10))
    free = due(5, queue_name="free")
    with with_limits({"queue:api": {"rate": [5, 2]}}):
        assert [c.queue_name for c in small_claim(limit=5)] == ["api"] * 5
        claimed = small_claim()
    assert [c.queue_name for c in claimed] == ["free", "free"]
    assert {c.id for c in claimed} <= {j.id for j in free}


def test_jobs_that_must_begin_at_once_with_no_executor_free_do_not_hide_the_jobs_behind():
    # Near its rate, a budget gives its jobs a slack too short to wait behind others; with no
    # executor free to begin one, they are passed over and the claim reads past them.
    due(30, queue_name="api", run_after=timezone.now() - timedelta(minutes=10))
    due(5, queue_name="free")
    with with_limits({"queue:api": {"rate": [8, 1]}}):
        assert len(small_claim(limit=5)) == 5
        claimed = small_claim(can_begin=0)
        assert [c.queue_name for c in claimed] == ["free", "free"]
        # With an executor free, the next one of them is taken to begin at once.
        claimed = small_claim(can_begin=1)
    assert sorted(c.queue_name for c in claimed) == ["api", "free"]
    assert [c.rate_slack for c in claimed if c.queue_name == "api"] == [0.25]


def test_a_start_counts_in_its_window_until_a_window_after_its_latest_moment():
    due(6, queue_name="api")
    with with_limits({"queue:api": {"rate": [4, 10]}}):
        assert len(claim()) == 4
        assert claim() == []
        # As if the window and the short slacks had passed, but not the long slacks.
        LimitStart.objects.update(started_at=timezone.now() - timedelta(seconds=10.5))
        long = LimitStart.objects.order_by("id")[:2].values_list("id", flat=True)
        LimitStart.objects.filter(id__in=list(long)).update(
            started_at=timezone.now() - timedelta(seconds=5)
        )
        assert len(claim()) == 2


def test_a_claim_finding_a_rate_budget_full_says_when_it_has_room_again():
    import time

    due(3, queue_name="api")
    cache = LimitsCache()
    with with_limits({"queue:api": {"rate": [2, 30]}}):
        claimed = db.claim(
            worker_id="w-limits", queues=None, limit=50, lease_seconds=60, limits=cache
        )
        assert len(claimed) == 2 and cache.room_at() == float("inf")
        before = time.monotonic()
        assert (
            db.claim(worker_id="w-limits", queues=None, limit=50, lease_seconds=60, limits=cache)
            == []
        )
    # The first start had a whole window's slack (30 s), the second a quarter (capped at 1 s):
    # the second's latest moment leaves the window first, 31 s after its claim.
    assert before + 29 < cache.room_at() < time.monotonic() + 31.5


def test_a_budget_far_from_its_rate_records_a_claims_starts_in_one_row():
    due(30, queue_name="api")
    with with_limits({"queue:api": {"rate": [1000, 60]}}):
        assert len(claim()) == 30
        rows = list(LimitStart.objects.values_list("bucket", "job_id", "starts"))
        assert rows == [("queue:api", None, 30)]
        # The row counts as its 30 starts.
        (api,) = usage()
        assert api.started == 30


def test_near_its_rate_a_budget_records_each_start_with_its_job():
    due(5, queue_name="api")
    with with_limits({"queue:api": {"rate": [10, 60]}}):
        claimed = claim()
    # The first start fits in a tenth of the limit: a row of its own kind; the rest, a row each.
    rows = sorted(LimitStart.objects.values_list("job_id", "starts"), key=lambda r: r[0] is None)
    assert [starts for _, starts in rows] == [1, 1, 1, 1, 1]
    assert sum(job_id is None for job_id, _ in rows) == 1
    assert {job_id for job_id, _ in rows if job_id} < {c.id for c in claimed}


def test_bulk_starts_still_hold_a_budget_to_its_rate():
    due(40, queue_name="api")
    with with_limits({"queue:api": {"rate": [20, 60]}}):
        first = claim(limit=2)
        rest = claim()
    assert len(first) == 2
    assert len(rest) == 18
    assert sum(LimitStart.objects.values_list("starts", flat=True)) == 20


def claim_with(cache, limit=50):
    return db.claim(worker_id="w-limits", queues=None, limit=limit, lease_seconds=60, limits=cache)


def test_after_a_roomy_claim_the_next_claims_first_and_counts_after(monkeypatch):
    from jobs.db.limited import LimitedClaim

    due(10, queue_name="api", limit_key="tenant-1")
    cache = LimitsCache()
    limits = {
        "queue:api": {"concurrency": 100, "rate": [1000, 60]},
        "key:tenant-*": {"concurrency": 50},
    }
    with with_limits(limits):
        assert len(claim_with(cache, limit=3)) == 3
        assert cache.current().claims_roomy
        monkeypatch.setattr(LimitedClaim, "pick", None)  # the careful claim is not asked
        second = claim_with(cache, limit=4)
        assert len(second) == 4
        assert cache.current().claims_roomy
    assert all(c.rate_slack == 30.0 for c in second)
    # Counted after claiming, the starts are recorded all the same: 7 in all.
    assert sum(LimitStart.objects.values_list("starts", flat=True)) == 7


def test_a_claim_counted_after_that_passes_half_a_budget_is_undone_and_decided_by_counting():
    due(10, queue_name="api")
    cache = LimitsCache()
    with with_limits({"queue:api": {"concurrency": 8}}):
        assert len(claim_with(cache, limit=2)) == 2
        assert cache.current().claims_roomy
        # Claimed first, the next 8 would make 10 running of 8: undone, then counted first.
        second = claim_with(cache, limit=8)
        assert len(second) == 6
        assert not cache.current().claims_roomy
    assert running(queue_name="api") == 8
    assert Job.objects.filter(queue_name="api", state=JobState.PENDING, attempt=0).count() == 2


def test_turns_between_keys_are_never_skipped_by_a_claim_counted_after():
    due(6, limit_key="big", priority=0)
    due(1, limit_key="small", priority=0)
    cache = LimitsCache()
    with with_limits({"key:*": {"concurrency": 100}}):
        cache.current().claims_roomy = True
        first = claim_with(cache, limit=2)
    # The turns were due (the first claim of this worker): one job of each key.
    assert sorted(c.limit_key for c in first) == ["big", "small"]
