"""The worker's timing options (`HEARTBEAT_SECONDS`, `LEASE_SECONDS`, `CANCEL_GRACE_SECONDS`)
and their defaults: the one place the engine and the console read them from."""

from dataclasses import dataclass


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
        """The timing a backend's OPTIONS give, the defaults where they say nothing."""
        given = {
            "heartbeat_seconds": options.get("HEARTBEAT_SECONDS"),
            "lease_seconds": options.get("LEASE_SECONDS"),
            "cancel_grace_seconds": options.get("CANCEL_GRACE_SECONDS"),
        }
        return cls(**{name: float(value) for name, value in given.items() if value is not None})


DEFAULTS = Timing()


def configured(alias: str = "default") -> Timing:
    """The timing of the backend `alias` (the defaults for a backend that is not this one)."""
    from .compat import task_backends

    return getattr(task_backends[alias], "timing", DEFAULTS)
