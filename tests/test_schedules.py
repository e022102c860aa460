"""jobs.schedules: validation, fire-time arithmetic (DST included), firing, pause/resume/trigger."""

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import IntegrityError, transaction
from django.test import override_settings

from jobs import db, schedules
from jobs.compat import task_backends
from jobs.models import Job, Schedule, ScheduleAuditEntry
from jobs.schedules import (
    ScheduleError,
    ScheduleSpec,
    UnknownSchedule,
    fire_times_between,
    firing,
    latest_fire_at_or_before,
    next_fire_after,
    plan,
)
from tests.concurrency import holding_meanwhile

PARIS = ZoneInfo("Europe/Paris")


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def spec(**values):
    return ScheduleSpec(**{"name": "s", "task_path": "tests.tasks.record", **values})


def with_schedules(entries, **options):
    from django.conf import settings

    config = settings.TASKS["default"]
    return override_settings(
        TASKS={
            "default": {
                **config,
                "OPTIONS": {**config["OPTIONS"], "SCHEDULES": entries, **options},
            }
        }
    )


def clear_of_pings(margin=2.5):
    """Wait while a fire time of "ping" (every 30 s) is within `margin` seconds: one falling
    between a test's steps, or within the grace of one, would change what the test sees."""
    while not margin < time.time() % 30 < 30 - margin:
        time.sleep(0.2)


def backend():
    return task_backends["default"]


# --- fire times ------------------------------------------------------------------------------


def test_every_fire_times_are_the_multiples_of_the_interval_since_the_epoch():
    every = spec(every=30)
    moment = utc(2026, 5, 1, 12, 0, 44, 500)
    assert latest_fire_at_or_before(every, moment) == utc(2026, 5, 1, 12, 0, 30)
    assert next_fire_after(every, moment) == utc(2026, 5, 1, 12, 1, 0)
    # An instant that is a fire time is its own latest fire time, and not its next.
    assert latest_fire_at_or_before(every, utc(2026, 5, 1, 12, 1)) == utc(2026, 5, 1, 12, 1)
    assert next_fire_after(every, utc(2026, 5, 1, 12, 1)) == utc(2026, 5, 1, 12, 1, 30)


def test_every_fire_times_between_two_instants_are_counted_and_the_latest_kept():
    due = fire_times_between(spec(every=2), utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 21), keep=3)
    assert due.count == 10
    assert due.recent == [utc(2026, 1, 1, 0, 0, s) for s in (16, 18, 20)]


def test_cron_fire_times_are_in_the_schedule_time_zone():
    nightly = spec(cron="0 3 * * *", timezone="Europe/Paris")
    # 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer.
    assert next_fire_after(nightly, utc(2026, 1, 10, 12)) == utc(2026, 1, 11, 2)
    assert next_fire_after(nightly, utc(2026, 7, 10, 12)) == utc(2026, 7, 11, 1)
    assert latest_fire_at_or_before(nightly, utc(2026, 7, 11, 1)) == utc(2026, 7, 11, 1)


def test_a_cron_time_in_the_spring_forward_gap_fires_once_right_after_the_gap():
    # On 2026-03-29 Paris skips from 02:00 to 03:00; 02:30 does not exist that day.
    at_half_past_two = spec(cron="30 2 * * *", timezone="Europe/Paris")
    due = fire_times_between(at_half_past_two, utc(2026, 3, 27, 12), utc(2026, 3, 30, 12), keep=5)
    local = [t.astimezone(PARIS) for t in due.recent]
    assert [(t.day, t.hour, t.minute) for t in local] == [(28, 2, 30), (29, 3, 0), (30, 2, 30)]


def test_a_fixed_cron_time_in_the_repeated_autumn_hour_fires_once():
    # On 2026-10-25 Paris goes from 03:00 back to 02:00: 02:30 happens twice.
    at_half_past_two = spec(cron="30 2 * * *", timezone="Europe/Paris")
    due = fire_times_between(at_half_past_two, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12), keep=5)
    assert due.recent == [utc(2026, 10, 25, 0, 30)]  # the first 02:30, summer time


@pytest.mark.parametrize(
    "cron, zone, fired, second_pass, next_day",
    [
        # Paris, 2026-10-25: 02:30 summer time is 00:30Z; the second 02:00-03:00 is 01:00-02:00Z.
        ("30 2 * * *", "Europe/Paris", utc(2026, 10, 25, 0, 30), 70, utc(2026, 10, 26, 1, 30)),
        ("15,45 1,2 * * *", "Europe/Paris", utc(2026, 10, 25, 0, 45), 70, utc(2026, 10, 26, 0, 15)),
        # New York, 2026-11-01: 01:30 daylight time is 05:30Z; the second 01:xx is 06:xx Z.
        ("30 1 * * *", "America/New_York", utc(2026, 11, 1, 5, 30), 370, utc(2026, 11, 2, 6, 30)),
    ],
)
def test_in_the_second_pass_of_a_repeated_hour_a_fixed_time_is_past_and_next_is_tomorrow(
    cron, zone, fired, second_pass, next_day
):
    schedule = spec(cron=cron, timezone=zone)
    now = utc(*fired.timetuple()[:3]) + timedelta(minutes=second_pass)  # in the second pass
    assert next_fire_after(schedule, now) == next_day
    assert latest_fire_at_or_before(schedule, now) == fired
    # So a tick there has nothing due (once fired in the first pass) and nothing to catch up
    # for a schedule starting or resuming there.
    assert plan(schedule, fired, now, grace=10) is None
    assert fire_times_between(schedule, fired, now + timedelta(hours=2), keep=5).recent == []


def test_an_hourly_cron_fires_in_both_repeated_autumn_hours():
    hourly = spec(cron="0 * * * *", timezone="Europe/Paris")
    due = fire_times_between(hourly, utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 2, 30), keep=10)
    # Local 02:00 (summer time), 02:00 again (winter time), 03:00: one real hour apart each.
    assert due.recent == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)]
    assert [t.astimezone(PARIS).hour for t in due.recent] == [2, 2, 3]


def test_cron_catch_up_counts_every_fire_time_and_keeps_the_latest():
    hourly = spec(cron="0 * * * *")
    due = fire_times_between(hourly, utc(2026, 1, 1, 0, 30), utc(2026, 1, 1, 5, 0), keep=2)
    assert due.count == 5
    assert due.recent == [utc(2026, 1, 1, 4), utc(2026, 1, 1, 5)]


def test_cron_catch_up_over_more_fire_times_than_are_counted_keeps_the_latest():
    minutely = spec(cron="* * * * *")
    due = fire_times_between(minutely, utc(2026, 1, 1), utc(2026, 1, 3), keep=2)
    assert due.count == schedules.MAX_COUNTED
    assert due.recent == [utc(2026, 1, 2, 23, 59), utc(2026, 1, 3)]


# --- missed-fire policies --------------------------------------------------------------------

NOW = utc(2026, 6, 1, 12, 0, 1)
# Down since 11:59:41: fire times 11:59:42 ... 12:00:00 every 2 s, the last one on time.
AFTER = utc(2026, 6, 1, 11, 59, 41)


@pytest.mark.parametrize(
    "missed, fired, missed_count",
    [
        ("latest", [utc(2026, 6, 1, 12)], 9),
        ("skip", [utc(2026, 6, 1, 12)], 9),
        ("all", [AFTER + timedelta(seconds=1 + 2 * i) for i in range(10)], 0),
    ],
)
def test_missed_fire_policies(missed, fired, missed_count):
    decision = plan(spec(every=2, missed=missed), AFTER, NOW, grace=2.5)
    assert decision.fire == fired
    assert decision.missed == missed_count
    assert decision.last_fire_at == utc(2026, 6, 1, 12)


def test_missed_latest_after_an_outage_enqueues_one_job_even_with_several_fires_in_the_grace():
    # Down 16 s with a 10 s grace: five 2-second fire times are within the grace.
    now, after = utc(2026, 6, 1, 12, 0, 0, 500_000), utc(2026, 6, 1, 11, 59, 44)
    decision = plan(spec(every=2, missed="latest"), after, now, grace=10)
    assert decision.fire == [utc(2026, 6, 1, 12)]
    assert decision.missed == 7


def test_missed_skip_after_an_outage_enqueues_no_more_than_latest():
    # Down 16 s with a 10 s grace: five 2-second fire times are within the grace, and passed
    # while no worker ran as much as the older ones.
    now, after = utc(2026, 6, 1, 12, 0, 0, 500_000), utc(2026, 6, 1, 11, 59, 44)
    decision = plan(spec(every=2, missed="skip"), after, now, grace=10)
    assert decision.fire == [utc(2026, 6, 1, 12)]
    assert decision.missed == 7
    # The most recent one late too: none.
    minutely = spec(every=60, missed="skip")
    late = plan(minutely, utc(2026, 6, 1, 11, 57), utc(2026, 6, 1, 12, 0, 30), grace=10)
    assert (late.fire, late.missed) == ([], 3)


def test_on_time_fires_a_late_tick_finds_are_each_enqueued():
    decision = plan(spec(every=1, missed="latest"), NOW - timedelta(seconds=3), NOW, grace=10)
    assert decision.fire == [NOW - timedelta(seconds=2), NOW - timedelta(seconds=1), NOW]
    assert decision.missed == 0


def test_missed_all_enqueues_at_most_100_of_the_most_recent_oldest_first():
    decision = plan(spec(every=1, missed="all"), NOW - timedelta(hours=1), NOW, grace=0.5)
    assert len(decision.fire) == schedules.MAX_CATCH_UP + 1  # 100 missed + the on-time one
    assert decision.fire == sorted(decision.fire)
    assert decision.fire[-1] == NOW
    assert decision.missed == 3599 - 100


def test_missed_all_catches_up_100_missed_fire_times_whatever_the_grace_holds():
    decision = plan(spec(every=1, missed="all"), NOW - timedelta(seconds=130), NOW, grace=10)
    late = [t for t in decision.fire if t < NOW - timedelta(seconds=10)]
    assert len(late) == schedules.MAX_CATCH_UP
    assert decision.fire[len(late) :] == [NOW - timedelta(seconds=s) for s in range(10, -1, -1)]
    assert decision.missed == 130 - len(decision.fire)


def test_fire_times_a_worker_was_held_up_for_are_on_time_not_missed():
    held_since = NOW - timedelta(seconds=40)
    every_second = spec(every=1, missed="latest")
    last_fired = held_since - timedelta(seconds=1)
    decision = plan(every_second, last_fired, NOW, 10, held_since)
    assert decision.fire == [held_since + timedelta(seconds=s) for s in range(41)]
    assert decision.missed == 0
    # Without it they are an outage's, which the policy decides for: the latest one only.
    assert plan(every_second, last_fired, NOW, 10).fire == [NOW]


def test_nothing_is_due_before_the_next_fire_time():
    assert plan(spec(every=60), utc(2026, 6, 1, 12), utc(2026, 6, 1, 12, 0, 59), grace=10) is None


# --- the SCHEDULES option --------------------------------------------------------------------


def test_a_valid_schedule_is_parsed_with_its_defaults():
    parsed = schedules.parse(
        "ping", {"task": "tests.tasks.record", "every": 30, "args": ["x"]}, backend()
    )
    assert parsed == ScheduleSpec(
        name="ping", task_path="tests.tasks.record", every=30.0, args=["x"], missed="latest"
    )
    assert parsed.describe() == "Every 30 seconds"


def test_a_cron_schedule_is_described_in_words_with_its_time_zone():
    parsed = schedules.parse(
        "nightly",
        {"task": "tests.tasks.record", "cron": "0 3 * * *", "timezone": "Europe/Paris"},
        backend(),
    )
    assert parsed.describe() == "At 03:00 every day (Europe/Paris)"
    assert schedules.describe_every(60) == "Every minute"
    assert schedules.describe_every(7200) == "Every 2 hours"


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"task": "tests.tasks.nope", "every": 5}, "unknown task 'tests.tasks.nope'"),
        ({"task": "tests.tasks.NO_WAIT", "every": 5}, "is not a task"),
        ({"task": "tests.tasks.record", "cron": "61 * * * *"}, "bad cron expression"),
        ({"task": "tests.tasks.record", "cron": "* * * * * *"}, "cron must be 5 fields"),
        ({"task": "tests.tasks.record", "cron": "0 0 30 2 *"}, "bad cron expression"),
        ({"task": "tests.tasks.record", "every": 5, "timezone": "Mars/Base"}, "unknown timezone"),
        ({"task": "tests.tasks.record", "every": 5, "retries": 3}, "unknown key 'retries'"),
        ({"task": "tests.tasks.record"}, "exactly one of 'cron'"),
        ({"task": "tests.tasks.record", "every": 5, "cron": "* * * * *"}, "exactly one of"),
        ({"task": "tests.tasks.record", "every": 0.5}, "every must be a number of seconds >= 1"),
        ({"task": "tests.tasks.record", "every": "5"}, "every must be a number"),
        ({"task": "tests.tasks.record", "every": 5, "missed": "some"}, "missed must be one of"),
        ({"task": "tests.tasks.record", "every": 5, "priority": 101}, "priority must be"),
        ({"task": "tests.tasks.record", "every": 5, "max_attempts": 0}, "max_attempts must be"),
        ({"task": "tests.tasks.record", "every": 5, "args": [float("nan")]}, "JSON"),
        ({"task": "tests.tasks.record", "every": 5, "args": "abc"}, "not str and dict"),
        ({"task": "tests.tasks.record", "every": 5, "args": {"a": 1}}, "not dict and dict"),
        ({"task": "tests.tasks.record", "every": 5, "kwargs": ["a"]}, "not list and list"),
        ({"task": "tests.tasks.record", "every": 5, "queue_name": ""}, "queue_name must be"),
        ("tests.tasks.record", "must be a dict"),
    ],
)
def test_a_bad_schedule_is_refused_with_a_clear_message(entry, message):
    with pytest.raises(ScheduleError, match="schedule 'bad'") as caught:
        schedules.parse("bad", entry, backend())
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["no/slash", "a\n", "", "-dash-first", "x" * 101])
def test_a_bad_schedule_name_is_refused(name):
    with pytest.raises(ScheduleError, match="schedule name"):
        schedules.parse(name, {"task": "tests.tasks.record", "every": 5}, backend())


def test_every_change_of_an_interval_changes_its_expression_and_the_short_form_stays():
    def expression(every):
        return spec(every=every).expression

    assert expression(30) == "every 30"  # as earlier versions stored it
    assert expression(1_000_000) == "every 1e+06"
    assert expression(1_000_001) == "every 1000001"
    assert expression(100000.2) != expression(100000.4)
    assert schedules.describe_every(1_000_001) == "Every 1,000,001 seconds"
    assert schedules.describe_every(100000.4) == "Every 100000.4 seconds"
    assert schedules.describe_every(2.5) == "Every 2.5 seconds"
    assert schedules.describe_every(1_000_020) == "Every 16,667 minutes"
    assert spec(every=1.0001).every_text == "1.0001"
    assert spec(every=30).every_text == "30"


@pytest.mark.django_db
def test_manage_py_check_reports_each_bad_schedule():
    entries = {
        "good": {"task": "tests.tasks.record", "every": 5},
        "typo": {"task": "tests.tasks.recrod", "every": 5},
        "zone": {"task": "tests.tasks.record", "cron": "0 3 * * *", "timezone": "Paris"},
    }
    with with_schedules(entries), pytest.raises(SystemCheckError) as caught:
        call_command("check")
    text = str(caught.value)
    assert "schedule 'typo': unknown task 'tests.tasks.recrod'" in text
    assert "schedule 'zone': unknown timezone 'Paris'" in text
    assert "'good'" not in text


@pytest.mark.django_db
def test_manage_py_check_passes_with_good_schedules():
    with with_schedules({"ping": {"task": "tests.tasks.record", "every": 5}}):
        call_command("check")


# --- firing against the database -------------------------------------------------------------

PING = {"ping": {"task": "tests.tasks.record", "args": ["ping"], "every": 2}}


@pytest.fixture
def ping():
    with with_schedules(PING, SCHEDULE_GRACE_SECONDS=1000):
        yield schedules.get("ping")


def rewind(name, seconds):
    """As if no worker had run for `seconds`."""
    row = Schedule.objects.get(name=name)
    row.last_fire_at -= timedelta(seconds=seconds)
    row.save()


@pytest.mark.django_db
def test_a_new_schedule_starts_counting_from_now(ping):
    assert schedules.tick().fired == []
    row = Schedule.objects.get(name="ping")
    assert row.last_fire_at <= schedules.database_now()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_each_due_fire_time_becomes_exactly_one_job(ping):
    schedules.tick()
    before = Schedule.objects.get(name="ping").last_fire_at
    rewind("ping", 6)
    fired = schedules.tick().fired
    assert [f.schedule for f in fired] == ["ping"]
    jobs = list(Job.objects.order_by("scheduled_at"))
    assert [j.scheduled_at for j in jobs][:3] == [before - timedelta(seconds=s) for s in (4, 2, 0)]
    assert all(j.schedule == "ping" and j.task_path == "tests.tasks.record" for j in jobs)
    assert all(j.args == ["ping"] for j in jobs)
    # Ticking again, from any number of workers, adds nothing for those fire times.
    schedules.tick()
    scheduled = list(Job.objects.values_list("scheduled_at", flat=True))
    assert len(scheduled) == len(set(scheduled))


@pytest.mark.django_db
def test_a_worker_with_a_stale_view_of_the_schedule_fires_nothing(ping):
    schedules.tick()
    rewind("ping", 4)
    stale = Schedule.objects.get(name="ping")
    decision = plan(ping, stale.last_fire_at, schedules.database_now(), 1000)
    assert firing.fire(ping, stale, decision, backend()) is True
    # A second worker that read the same row before the first one fired loses the race.
    assert firing.fire(ping, stale, decision, backend()) is False
    assert Job.objects.count() == len(decision.fire)


@pytest.mark.django_db
def test_a_schedule_set_back_by_hand_enqueues_no_fire_time_twice(ping):
    schedules.tick()
    rewind("ping", 4)
    assert schedules.tick().fired
    enqueued = Job.objects.count()
    rewind("ping", 4)  # an operator moves last_fire_at back over fire times that had their jobs
    assert schedules.tick().fired == []
    assert Job.objects.count() == enqueued


@pytest.mark.django_db
def test_the_database_refuses_a_second_job_for_one_fire_time():
    moment = utc(2026, 1, 1)
    Job.objects.create(task_path="tests.tasks.record", schedule="ping", scheduled_at=moment)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(task_path="tests.tasks.record", schedule="ping", scheduled_at=moment)
    # Runs made by hand (no fire time) are not limited.
    for _ in range(2):
        Job.objects.create(task_path="tests.tasks.record", schedule="ping", scheduled_at=None)


@pytest.mark.django_db
def test_pruned_jobs_never_let_a_fire_time_fire_again(ping):
    schedules.tick()
    rewind("ping", 4)
    schedules.tick()
    fired = set(Job.objects.values_list("scheduled_at", flat=True))
    assert fired
    Job.objects.all().delete()
    schedules.tick()
    assert not set(Job.objects.values_list("scheduled_at", flat=True)) & fired


@pytest.mark.django_db
def test_a_changed_expression_restarts_the_schedule_without_catching_up(ping):
    schedules.tick()
    rewind("ping", 3600)
    Schedule.objects.filter(name="ping").update(expression="every 5")
    schedules.tick()
    assert not Job.objects.exists()
    assert Schedule.objects.get(name="ping").expression == "every 2"


@pytest.mark.django_db
def test_the_fire_counters_are_kept_per_schedule():
    with with_schedules(PING, SCHEDULE_GRACE_SECONDS=1):
        schedules.tick()
        rewind("ping", 20)
        schedules.tick()
    row = Schedule.objects.get(name="ping")
    assert row.fires == Job.objects.count() >= 1
    assert row.missed >= 8
    assert row.fires + row.missed >= 10


# --- pause, resume, run now ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_paused_schedule_fires_nothing_and_resuming_back_fills_nothing(ping):
    schedules.tick()
    assert schedules.pause("ping") is True
    assert schedules.pause("ping") is False
    rewind("ping", 60)
    assert schedules.tick().fired == []
    assert not Job.objects.exists()
    assert schedules.resume("ping") is True
    assert schedules.resume("ping") is False
    schedules.tick()
    assert not Job.objects.filter(scheduled_at__lt=schedules.database_now() - timedelta(seconds=2))
    actions = list(ScheduleAuditEntry.objects.order_by("at", "id").values_list("action", "outcome"))
    assert actions == [
        ("pause", "schedule paused"),
        ("pause", "schedule already paused"),
        ("resume", "schedule resumed"),
        ("resume", "schedule was not paused"),
    ]


@pytest.mark.django_db
def test_run_now_makes_exactly_one_job_without_a_fire_time(ping, django_user_model):
    user = django_user_model.objects.create_user("ops", is_staff=True)
    job = schedules.trigger("ping", user=user, source="api")
    assert Job.objects.count() == 1
    assert (job.schedule, job.scheduled_at, job.args) == ("ping", None, ["ping"])
    entry = ScheduleAuditEntry.objects.get()
    assert (entry.action, entry.username, entry.source, entry.result_job_id) == (
        "trigger",
        "ops",
        "api",
        job.id,
    )


@pytest.mark.django_db
def test_a_schedule_job_takes_the_schedule_options_over_the_task_options():
    entry = {
        "task": "tests.tasks.ignores_timeout",
        "every": 60,
        "args": ["k"],
        "queue_name": "reports",
        "priority": 7,
        "max_attempts": 9,
    }
    with with_schedules({"opts": entry}):
        job = schedules.trigger("opts")
    job.refresh_from_db()
    assert (job.queue_name, job.priority, job.max_attempts, job.timeout) == ("reports", 7, 9, 1.0)


@pytest.mark.django_db
def test_unknown_schedule_names_are_refused(ping):
    for action in (schedules.pause, schedules.resume, schedules.trigger):
        with pytest.raises(UnknownSchedule):
            action("nope")


@pytest.mark.django_db
def test_states_list_each_schedule_with_its_next_fire_time(ping):
    schedules.tick()
    (state,) = schedules.states()
    assert state.spec.name == "ping" and not state.paused
    assert state.next_fire_at > schedules.database_now() - timedelta(seconds=1)
    schedules.pause("ping")
    assert schedules.state("ping").paused and schedules.state("ping").next_fire_at is None


@pytest.mark.django_db
def test_the_next_tick_is_due_at_the_next_fire_time_and_at_most_a_second_away():
    with with_schedules({"slow": {"task": "tests.tasks.record", "every": 3600}}):
        assert schedules.tick().next_in == schedules.TICK_SECONDS
    with with_schedules({"fast": {"task": "tests.tasks.record", "every": 1}}):
        schedules.tick()
        assert 0 < schedules.tick().next_in <= 1 + schedules.TICK_MARGIN
        schedules.pause("fast")
        assert schedules.tick().next_in == schedules.TICK_SECONDS


def stalled_firing(name, seconds):
    """For holding_meanwhile: another worker stalled (a pause, a frozen VM) for `seconds` inside
    its fire of schedule `name`, holding the schedule's row."""

    def stalled(holding):
        Schedule.objects.select_for_update().get(name=name)
        holding.set()
        time.sleep(seconds)

    return stalled


@pytest.mark.django_db(transaction=True)
def test_a_worker_stalled_while_firing_a_schedule_holds_up_no_other_workers_tick():
    if not db.engine().locks_rows:
        pytest.skip("PostgreSQL: SQLite takes one write at a time, whatever the rows")
    entries = {**PING, "pong": {"task": "tests.tasks.record", "args": ["pong"], "every": 2}}
    with with_schedules(entries, SCHEDULE_GRACE_SECONDS=1000):
        schedules.tick()
        rewind("ping", 4)
        rewind("pong", 4)

        with holding_meanwhile(stalled_firing("ping", 3)) as errors:
            started = time.monotonic()
            fired = schedules.tick().fired
            waited = time.monotonic() - started
            assert [f.schedule for f in fired] == ["pong"]
            assert waited < 2.5  # it did not wait for the stalled one's transaction to end
        assert errors == []
        # Once that worker is gone, "ping" fires its fire times, once each.
        assert "ping" in [f.schedule for f in schedules.tick().fired]
        scheduled = list(Job.objects.values_list("schedule", "scheduled_at"))
        assert len(scheduled) == len(set(scheduled))


@pytest.mark.django_db(transaction=True)
def test_fire_times_due_while_a_stalled_worker_held_the_schedule_are_each_enqueued_after():
    if not db.engine().locks_rows:
        pytest.skip("PostgreSQL: SQLite takes one write at a time, whatever the rows")
    fast = {"fast": {"task": "tests.tasks.record", "args": ["fast"], "every": 1}}
    with with_schedules(fast, SCHEDULE_GRACE_SECONDS=1):
        schedules.tick()
        before = Job.objects.filter(schedule="fast").count()

        # Another worker stalls inside its fire of "fast" for longer than the grace.
        with holding_meanwhile(stalled_firing("fast", 4)) as errors:
            held_since = schedules.database_now()
            while schedules.database_now() < held_since + timedelta(seconds=3.5):
                assert schedules.tick().fired == []  # held up, it waits for nothing
                time.sleep(0.2)
        assert errors == []
        schedules.tick()
    fired = sorted(Job.objects.filter(schedule="fast").values_list("scheduled_at", flat=True))[
        before:
    ]
    # Every fire time from the stall on has its job: none passed as missed.
    assert len(fired) >= 4
    assert all(b - a == timedelta(seconds=1) for a, b in zip(fired, fired[1:], strict=False))
    assert Schedule.objects.get(name="fast").missed == 0


@pytest.mark.django_db
def test_a_schedule_removed_from_the_settings_and_added_again_starts_over_without_catching_up():
    catch_all = {"ping": {**PING["ping"], "missed": "all"}}
    with with_schedules(catch_all, SCHEDULE_GRACE_SECONDS=1000):
        schedules.tick()
    with with_schedules({}):  # deployed without it: the workers run on
        schedules.tick()
    row = Schedule.objects.get(name="ping")
    assert row.unconfigured_since is not None
    # An hour later it is added back: the hour's fire times were never missed.
    hour = timedelta(hours=1)
    Schedule.objects.filter(name="ping").update(
        unconfigured_since=row.unconfigured_since - hour, last_fire_at=row.last_fire_at - hour
    )
    with with_schedules(catch_all, SCHEDULE_GRACE_SECONDS=1000):
        assert schedules.tick().fired == []
        row = Schedule.objects.get(name="ping")
        assert row.unconfigured_since is None
        assert row.last_fire_at >= schedules.database_now() - timedelta(seconds=2)
        assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_schedule_missing_a_moment_in_a_rolling_deploy_fires_on_as_before(ping):
    schedules.tick()
    rewind("ping", 4)
    with with_schedules({}):  # a worker of the other deploy, without it, notes it gone
        schedules.tick()
    assert Schedule.objects.get(name="ping").unconfigured_since is not None
    assert [f.schedule for f in schedules.tick().fired] == ["ping"]
    # Cleared, so that it is not taken for one added back once the moment is past.
    assert Schedule.objects.get(name="ping").unconfigured_since is None


@pytest.mark.django_db
def test_a_schedule_of_another_backend_is_not_noted_gone():
    from django.conf import settings

    default = settings.TASKS["default"]
    with with_schedules(PING):
        schedules.tick()
    # This worker's backend has no schedule; the project's other backend has "ping".
    two = {
        "default": {**default, "OPTIONS": {**default["OPTIONS"], "SCHEDULES": {}}},
        "other": {**default, "OPTIONS": {**default["OPTIONS"], "SCHEDULES": PING}},
    }
    with override_settings(TASKS=two):
        schedules.tick()
        assert Schedule.objects.get(name="ping").unconfigured_since is None
    with with_schedules({}):  # gone from every backend: noted
        schedules.tick()
        assert Schedule.objects.get(name="ping").unconfigured_since is not None


@pytest.mark.django_db
def test_a_tick_with_nothing_due_reads_the_schedule_table_once():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    hourly = {"hourly": {"task": "tests.tasks.record", "args": ["h"], "every": 3600}}
    with with_schedules({**hourly, "pong": {**PING["ping"], "args": ["pong"]}}):
        schedules.tick()  # creates both rows
    # "pong" is gone from the settings: the same tick notes it.
    with with_schedules(hourly), CaptureQueriesContext(connection) as queries:
        assert schedules.tick().fired == []
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT") and "schedule" in q["sql"]]
    assert len(reads) == 1, reads
    assert Schedule.objects.get(name="pong").unconfigured_since is not None
    assert Schedule.objects.get(name="hourly").unconfigured_since is None
