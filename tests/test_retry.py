import random

import pytest

from jobs.retry import (
    Exponential,
    Fixed,
    Linear,
    NoRetry,
    clamp_max_attempts,
    next_delay,
    policy_from_setting,
    resolve_max_attempts,
)

DEFAULT = Exponential(base=15, multiplier=2, max=3600, jitter=3)


@pytest.mark.parametrize(
    ("attempt", "low"),
    [(1, 15), (2, 30), (3, 60), (4, 120), (5, 240), (6, 480), (7, 960), (8, 1920)],
)
def test_default_exponential_waits_15s_doubling_plus_up_to_3s_of_jitter(attempt, low):
    for seed in range(50):
        delay = DEFAULT.delay(attempt, random.Random(seed))
        assert low <= delay <= low + 3


def test_exponential_is_capped_by_max_before_jitter():
    assert DEFAULT.delay(20, random.Random(1)) <= 3600 + 3
    assert Exponential(base=15, max=3600).delay(20) == 3600


def test_exponential_survives_huge_attempt_numbers():
    assert Exponential(base=1, multiplier=10, max=60).delay(10_000) == 60


def test_jitter_is_repeatable_with_a_seeded_random_source():
    assert DEFAULT.delay(3, random.Random(7)) == DEFAULT.delay(3, random.Random(7))


def test_jitter_varies_between_attempts_of_an_unseeded_source():
    delays = {DEFAULT.delay(1) for _ in range(20)}
    assert len(delays) > 1


def test_linear_adds_a_step_per_attempt_up_to_max():
    policy = Linear(base=10, step=5, max=22)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [10, 15, 20, 22]


def test_fixed_waits_the_same_every_time():
    assert [Fixed(7).delay(n) for n in (1, 5, 50)] == [7, 7, 7]


def test_jitter_ratio_spreads_the_delay_both_ways():
    policy = Fixed(100, jitter_ratio=0.1)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(200)]
    assert all(90 <= d <= 110 for d in delays)
    assert min(delays) < 100 < max(delays)


def test_no_retry_stops_at_the_first_failure():
    assert NoRetry().delay(1) is None


@pytest.mark.parametrize("attempt", [0, -1, 1.5, True, "2"])
def test_delay_refuses_attempt_numbers_below_one_or_not_whole(attempt):
    with pytest.raises(ValueError, match="attempt"):
        DEFAULT.delay(attempt)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Exponential(base=-1),
        lambda: Exponential(base=1, jitter=-2),
        lambda: Linear(base=1, step="x"),
        lambda: Fixed(1, jitter_ratio=2),
    ],
)
def test_policies_refuse_negative_or_non_numeric_parameters(make):
    with pytest.raises(ValueError):
        make()


def test_a_custom_callable_gets_the_exception_and_decides():
    seen = []

    def backoff(exception, task_result):
        seen.append((type(exception), task_result))
        return None if isinstance(exception, KeyError) else 4.5

    assert next_delay(backoff, attempt=1, exception=ValueError(), task_result="r") == 4.5
    assert next_delay(backoff, attempt=2, exception=KeyError(), task_result="r") is None
    assert seen == [(ValueError, "r"), (KeyError, "r")]


@pytest.mark.parametrize("answer", [-1, float("nan"), "soon", True])
def test_a_custom_callable_answering_nonsense_stops_retrying(answer):
    assert next_delay(lambda e, r: answer, attempt=1, exception=ValueError()) is None


def test_backoff_setting_builds_the_named_strategy():
    assert (
        policy_from_setting(
            {"strategy": "exponential", "base": 15, "multiplier": 2, "max": 3600, "jitter": 3}
        )
        == DEFAULT
    )
    assert policy_from_setting({"strategy": "fixed", "delay": 5}) == Fixed(5)
    assert policy_from_setting(None) == DEFAULT


def test_backoff_setting_with_an_unknown_strategy_says_which_exist():
    with pytest.raises(ValueError, match="exponential"):
        policy_from_setting({"strategy": "fibonacci"})


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (1, 1),
        (100, 100),
        (5, 5),
        (0, 3),
        (101, 3),
        (-4, 3),
        ("5", 3),
        (2.0, 3),
        (None, 3),
        (True, 3),
    ],
)
def test_max_attempts_is_clamped_to_1_to_100_or_replaced_by_3(value, stored):
    assert clamp_max_attempts(value) == stored


def test_max_attempts_precedence_is_call_then_task_then_option_then_3():
    assert resolve_max_attempts(call=9, task=5, option=4) == 9
    assert resolve_max_attempts(call=None, task=5, option=4) == 5
    assert resolve_max_attempts(call=None, task=None, option=4) == 4
    assert resolve_max_attempts() == 3
    assert resolve_max_attempts(call=500, task=5) == 3
