import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_max_is_a_hard_cap_that_jitter_never_pushes_past():
    assert all(DEFAULT.delay(20, random.Random(seed)) == 3600 for seed in range(50))
    assert Exponential(base=15, max=3600).delay(20) == 3600
    near_cap = Exponential(base=3000, multiplier=1, max=3600, jitter_up_ratio=0.5)
    delays = [near_cap.delay(1, random.Random(seed)) for seed in range(200)]
    assert max(delays) == 3600 and min(delays) < 3600


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


def test_jitter_abs_spreads_the_delay_by_seconds_both_ways():
    policy = Fixed(100, jitter_abs=5)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(200)]
    assert all(95 <= d <= 105 for d in delays)
    assert min(delays) < 100 < max(delays)


def test_jitter_abs_never_makes_a_delay_negative():
    policy = Fixed(1, jitter_abs=10)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(200)]
    assert min(delays) == 0 and all(d <= 11 for d in delays)


def test_jitter_up_ratio_only_lengthens_the_delay_up_to_that_fraction():
    policy = Exponential(base=40, jitter_up_ratio=0.25)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(200)]
    assert all(40 <= d <= 50 for d in delays)
    assert max(delays) > 45


def test_policies_without_the_new_shapes_draw_the_same_jitter_as_before():
    rng = random.Random(7)
    expected = 60 + rng.uniform(0, 3)
    assert DEFAULT.delay(3, random.Random(7)) == expected


def test_backoff_setting_takes_every_jitter_shape():
    policy = policy_from_setting(
        {
            "strategy": "linear",
            "base": 10,
            "step": 5,
            "max": 30,
            "jitter_abs": 2,
            "jitter_up_ratio": 0.1,
        }
    )
    assert policy == Linear(base=10, step=5, max=30, jitter_abs=2, jitter_up_ratio=0.1)


def test_backoff_setting_with_an_unknown_key_is_a_clear_error():
    with pytest.raises(ValueError, match="jiter"):
        policy_from_setting({"strategy": "fixed", "delay": 5, "jiter": 1})


@pytest.mark.parametrize(
    "make",
    [
        lambda: Fixed(1, jitter_abs=-1),
        lambda: Fixed(1, jitter_up_ratio=-0.1),
        lambda: Exponential(base=1, jitter_up_ratio=math.inf),
        lambda: Exponential(base=math.nan),
        lambda: Linear(base=1, step=1, max=math.nan),
    ],
)
def test_jitter_shapes_refuse_negative_or_non_finite_values(make):
    with pytest.raises(ValueError, match="finite number >= 0"):
        make()


# Properties over every policy and jitter shape: never negative, never above max.

SECONDS = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
SHAPES = st.fixed_dictionaries(
    {
        "jitter": st.one_of(st.just(0), SECONDS),
        "jitter_ratio": st.floats(min_value=0, max_value=1),
        "jitter_abs": st.one_of(st.just(0), SECONDS),
        "jitter_up_ratio": st.floats(min_value=0, max_value=10),
    }
)
CAP = st.one_of(st.none(), SECONDS)
POLICIES = st.one_of(
    st.tuples(SECONDS, SECONDS, CAP, SHAPES).map(
        lambda t: Linear(base=t[0], step=t[1], max=t[2], **t[3])
    ),
    st.tuples(SECONDS, SHAPES).map(lambda t: Fixed(t[0], **t[1])),
    st.tuples(SECONDS, st.floats(min_value=0, max_value=100), CAP, SHAPES).map(
        lambda t: Exponential(base=t[0], multiplier=t[1], max=t[2], **t[3])
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    policy=POLICIES,
    attempt=st.integers(min_value=1, max_value=10_000),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_no_policy_ever_waits_a_negative_time_or_longer_than_its_max(policy, attempt, seed):
    delay = policy.delay(attempt, random.Random(seed))
    assert math.isfinite(delay)
    assert delay >= 0
    cap = getattr(policy, "max", None)
    if cap is not None:
        assert delay <= cap
    assert next_delay(policy, attempt=attempt, exception=None) <= 10 * 365 * 86400


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
