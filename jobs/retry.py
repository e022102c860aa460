"""Backoff policies: pure functions of the attempt number and a random source.

No clock and no database in here. `delay(attempt, rng)` is the number of seconds to wait after
failed attempt `attempt` (1, 2, ...); pass a seeded `random.Random` for repeatable jitter.

Jitter shapes, each off at 0 and combinable: `jitter` adds uniform(0, jitter) seconds,
`jitter_abs` adds uniform(-jitter_abs, +jitter_abs) seconds, then `jitter_ratio` moves the
delay by up to ± that fraction and `jitter_up_ratio` lengthens it by up to that fraction.
`max` is a hard cap applied last: no delay is ever above it, nor below 0.
"""

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_MAX_ATTEMPTS = 3
# Any longer is "never" for a queue, and the databases' date arithmetic agrees.
MAX_DELAY = 10 * 365 * 86400.0
MIN_ATTEMPTS, MAX_ATTEMPTS = 1, 100


def _check_non_negative(**values):
    for name, value in values.items():
        if value is None and name == "max":
            continue  # no cap
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")


def _check_attempt(attempt: int):
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a whole number >= 1, not {attempt!r}")


@dataclass(frozen=True, kw_only=True)
class _Policy:
    jitter: float = 0  # + uniform(0, jitter) seconds
    jitter_ratio: float = 0  # ± up to this fraction of the delay
    jitter_abs: float = 0  # ± uniform(-jitter_abs, +jitter_abs) seconds
    jitter_up_ratio: float = 0  # + up to this fraction of the delay (0.25: up to +25 %)

    def _set(self, **values):
        for name, value in values.items():
            object.__setattr__(self, name, value)
        _check_non_negative(**values)
        if self.jitter_ratio > 1:
            raise ValueError(f"jitter_ratio must be between 0 and 1, not {self.jitter_ratio!r}")

    def base_delay(self, attempt: int) -> float:
        raise NotImplementedError

    def cap(self) -> float | None:
        return None

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        _check_attempt(attempt)
        draw = rng.uniform if rng is not None else random.uniform
        # Only the shapes in use draw from rng, so a seeded source repeats across versions.
        delay = self.base_delay(attempt)
        if self.jitter:
            delay += draw(0, self.jitter)
        if self.jitter_abs:
            delay += draw(-self.jitter_abs, self.jitter_abs)
        if self.jitter_ratio:
            delay += delay * draw(-self.jitter_ratio, self.jitter_ratio)
        if self.jitter_up_ratio:
            delay += delay * draw(0, self.jitter_up_ratio)
        cap = self.cap()
        return max(0.0, delay if cap is None else min(delay, cap))


def _jitters(jitter, jitter_ratio, jitter_abs, jitter_up_ratio) -> dict:
    return {
        "jitter": jitter,
        "jitter_ratio": jitter_ratio,
        "jitter_abs": jitter_abs,
        "jitter_up_ratio": jitter_up_ratio,
    }


@dataclass(frozen=True, kw_only=True)
class _Capped(_Policy):
    """A policy whose delay grows with the attempt, up to `max`."""

    max: float | None = None

    def cap(self):
        return self.max

    def growing_delay(self, attempt: int) -> float:
        raise NotImplementedError

    def base_delay(self, attempt):
        delay = self.growing_delay(attempt)
        return delay if self.max is None else min(delay, self.max)


@dataclass(frozen=True, kw_only=True)
class Exponential(_Capped):
    """min(base * multiplier**(n-1), max) + uniform(0, jitter), never above max."""

    base: float
    multiplier: float = 2

    def __init__(
        self,
        base,
        multiplier=2,
        max=None,
        jitter=0,
        jitter_ratio=0,
        *,
        jitter_abs=0,
        jitter_up_ratio=0,
    ):
        jitters = _jitters(jitter, jitter_ratio, jitter_abs, jitter_up_ratio)
        self._set(base=base, multiplier=multiplier, max=max, **jitters)

    def growing_delay(self, attempt):
        try:
            delay = float(self.base) * float(self.multiplier) ** (attempt - 1)
        except OverflowError:
            delay = MAX_DELAY
        return min(delay, MAX_DELAY)


@dataclass(frozen=True, kw_only=True)
class Linear(_Capped):
    """min(base + step * (n-1), max) + uniform(0, jitter), never above max."""

    base: float
    step: float

    def __init__(
        self, base, step, max=None, jitter=0, jitter_ratio=0, *, jitter_abs=0, jitter_up_ratio=0
    ):
        jitters = _jitters(jitter, jitter_ratio, jitter_abs, jitter_up_ratio)
        self._set(base=base, step=step, max=max, **jitters)

    def growing_delay(self, attempt):
        return self.base + self.step * (attempt - 1)


@dataclass(frozen=True, kw_only=True)
class Fixed(_Policy):
    """The same delay after every failed attempt, + uniform(0, jitter)."""

    delay_seconds: float

    def __init__(self, delay, jitter=0, jitter_ratio=0, *, jitter_abs=0, jitter_up_ratio=0):
        _check_non_negative(delay=delay)
        jitters = _jitters(jitter, jitter_ratio, jitter_abs, jitter_up_ratio)
        self._set(delay_seconds=delay, **jitters)

    def base_delay(self, attempt):
        return self.delay_seconds


@dataclass(frozen=True)
class NoRetry:
    """The first failure dead-letters the job."""

    def delay(self, attempt: int, rng: random.Random | None = None) -> None:
        _check_attempt(attempt)
        return None


Policy = Exponential | Linear | Fixed | NoRetry
# A custom backoff: (exception, task_result) -> seconds, or None to stop retrying.
BackoffCallable = Callable[[BaseException, Any], float | None]

_STRATEGIES = {"exponential": Exponential, "linear": Linear, "fixed": Fixed, "none": NoRetry}


def policy_from_setting(setting: Mapping | None) -> Policy:
    """Build the default policy from OPTIONS["BACKOFF"] (a dict with a "strategy" key)."""
    if not setting:
        return Exponential(base=15, multiplier=2, max=3600, jitter=3)
    if not isinstance(setting, Mapping):
        raise ValueError(
            'BACKOFF must be a dict such as {"strategy": "exponential", "base": 15}, '
            f"not {setting!r}"
        )
    options = dict(setting)
    strategy = options.pop("strategy", "exponential")
    if not isinstance(strategy, str):
        raise ValueError(f"BACKOFF strategy must be one of {sorted(_STRATEGIES)}, not {strategy!r}")
    strategy = strategy.lower()
    try:
        cls = _STRATEGIES[strategy]
    except KeyError:
        raise ValueError(
            f"BACKOFF strategy {strategy!r} is unknown; use one of {sorted(_STRATEGIES)}"
        ) from None
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"BACKOFF for strategy {strategy!r}: {exc}") from None


def policy_to_json(policy) -> dict:
    """A policy as a JSON object that `policy_from_json` turns back into an equal policy.

    TypeError for anything else (a custom callable cannot be stored).
    """
    name = next((n for n, cls in _STRATEGIES.items() if type(policy) is cls), None)
    if name is None:
        raise TypeError(f"{policy!r} is not a jobs.retry policy")
    values = {f.name: getattr(policy, f.name) for f in fields(policy)}
    if "delay_seconds" in values:
        values["delay"] = values.pop("delay_seconds")  # Fixed(delay=...)
    return {"strategy": name, **values}


def policy_from_json(value: Mapping) -> Policy:
    """The policy `policy_to_json` stored (the same shape as OPTIONS["BACKOFF"])."""
    return policy_from_setting(value) if value else policy_from_setting({"strategy": "none"})


def is_backoff(value) -> bool:
    return hasattr(value, "delay") or (callable(value) and not isinstance(value, type))


def next_delay(
    backoff,
    *,
    attempt: int,
    exception: BaseException | None,
    task_result=None,
    rng: random.Random | None = None,
) -> float | None:
    """Seconds until the next attempt after failed attempt `attempt`, or None to stop.

    Policies get the attempt number; a custom callable gets (exception, task_result).
    Anything that is not a finite number >= 0 from a callable stops retrying.
    """
    if hasattr(backoff, "delay"):
        value = backoff.delay(attempt, rng)
        return None if value is None else min(float(value), MAX_DELAY)
    value = backoff(exception, task_result)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return min(float(value), MAX_DELAY)


def clamp_max_attempts(value) -> int:
    """The stored max_attempts: 1-100; anything else (wrong type, out of range) becomes 3."""
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_MAX_ATTEMPTS
    if MIN_ATTEMPTS <= value <= MAX_ATTEMPTS:
        return value
    return DEFAULT_MAX_ATTEMPTS


def resolve_max_attempts(*, call=None, task=None, option=None) -> int:
    """Precedence: per call (.using) > per task (@task) > OPTIONS["MAX_ATTEMPTS"] > 3."""
    for value in (call, task, option):
        if value is not None:
            return clamp_max_attempts(value)
    return DEFAULT_MAX_ATTEMPTS
