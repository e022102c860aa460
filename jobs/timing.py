"""The worker's timing options (`HEARTBEAT_SECONDS`, `LEASE_SECONDS`, `CANCEL_GRACE_SECONDS`)
and their defaults: the one place the engine and the console read them from."""

import math
from dataclasses import dataclass

# The longest each may be, in seconds: a crashed worker's jobs wait out a lease before another
# worker recovers them, and past a day nobody would wait (PostgreSQL's session timeouts the
# worker derives from them end at about 24 days, too).
MAX_SECONDS = 86_400.0
# The shortest heartbeat: each one renews leases and does maintenance, so a shorter one would
# keep an idle worker busy for nothing.
MIN_HEARTBEAT_SECONDS = 0.1


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    # How often does a worker renew its node and its running jobs' leases?
    heartbeat_seconds: float = 10.0
    # How long may a running job go unrenewed before another worker recovers it?
    lease_seconds: float = 60.0
    # How long does a cancelled running job get to return by itself before it is stopped?
    cancel_grace_seconds: float = 10.0

    @classmethod
    def from_options(cls, options: dict) -> "Timing":
        """The timing a backend's OPTIONS give, the defaults where they say nothing.

        ValueError naming the option for a value that is not a number."""
        values = {}
        for name in ("heartbeat_seconds", "lease_seconds", "cancel_grace_seconds"):
            option = name.upper()
            value = options.get(option)
            if value is None:
                continue
            try:
                if isinstance(value, bool):
                    raise TypeError
                values[name] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{option} must be a number of seconds, not {value!r}") from None
        return cls(**values)


DEFAULTS = Timing()


def problems(heartbeat: float, lease: float, cancel_grace: float) -> list[str]:
    """What is wrong with these timing options, each in a sentence (none: they are fine)."""
    found = []
    for option, value, least in (
        ("HEARTBEAT_SECONDS", heartbeat, "above 0"),
        ("LEASE_SECONDS", lease, "above 0"),
        ("CANCEL_GRACE_SECONDS", cancel_grace, "0 or more"),
    ):
        low = value < 0 or (value == 0 and least == "above 0")
        if not math.isfinite(value) or low or value > MAX_SECONDS:
            found.append(
                f"{option} must be a number of seconds {least} and at most {MAX_SECONDS:,.0f} "
                f"(a day), not {value!r}"
            )
    if not found and heartbeat < MIN_HEARTBEAT_SECONDS:
        found.append(
            f"HEARTBEAT_SECONDS must be at least {MIN_HEARTBEAT_SECONDS:g}, not {heartbeat!r}: "
            "every heartbeat renews leases and does maintenance"
        )
    if not found and lease <= heartbeat:
        found.append(
            f"LEASE_SECONDS ({lease:g}) must be longer than HEARTBEAT_SECONDS ({heartbeat:g}): "
            "a lease is renewed every heartbeat, and must outlast the wait for the next one"
        )
    return found


def configured(alias: str = "default") -> Timing:
    """The timing of the backend `alias` (the defaults for a backend that is not this one)."""
    from .compat import task_backends

    return getattr(task_backends[alias], "timing", DEFAULTS)
