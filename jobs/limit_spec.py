"""The LIMITS option: what each entry says, read and checked.

An entry is named `queue:NAME`, `task:DOTTED.PATH` or `key:GLOB` and holds any of
`concurrency` (n), `rate` ([n, seconds]) and, on a queue, `pause_after_failures`
([n, seconds]). Reading an entry never touches the database; `check` reports every problem of
an option, each naming its entry, for `manage.py check` and the worker's start.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from .text import holds_as_is

KINDS = ("queue", "task", "key")
FIELDS = ("concurrency", "rate", "pause_after_failures")
MAX_NAME = 255
# The columns runtime overrides are stored in hold 32-bit counts on every database.
MAX_COUNT = 2_147_483_647
# A window is subtracted from the current time at every claim and breaker check; a year keeps
# that far inside the calendar (a 1e11 s window overflowed it and stopped every worker).
MAX_WINDOW_SECONDS = 365 * 24 * 3600


class LimitError(ValueError):
    """A LIMITS entry (or a runtime override) that says something impossible."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitSpec:
    # The entry's name as written: "queue:emails", "task:myapp.tasks.call", "key:tenant-*".
    name: str
    # "queue", "task" or "key".
    kind: str
    # The queue name, the task path, or the glob limit keys are matched against.
    target: str
    # At most this many of its jobs running at once (None: no such limit).
    concurrency: int | None = None
    # At most rate[0] attempts started within any rate[1] seconds (None: no such limit).
    rate: tuple[int, float] | None = None
    # The queue pauses when this many of its attempts fail within this many seconds.
    pause_after_failures: tuple[int, float] | None = None

    @property
    def limits_claims(self) -> bool:
        """Does this entry decide what a claim may take?"""
        return self.concurrency is not None or self.rate is not None

    def matches_key(self, key: str | None) -> bool:
        return key is not None and fnmatchcase(key, self.target)


def parse_name(name) -> tuple[str, str]:
    """(kind, target) of a limit's name; LimitError when it is not `queue:`, `task:`, `key:`."""
    if not isinstance(name, str) or ":" not in name:
        raise LimitError(
            f"limit {name!r}: a limit is named queue:NAME, task:DOTTED.PATH or key:GLOB"
        )
    kind, target = name.split(":", 1)
    if kind not in KINDS:
        raise LimitError(f"limit {name!r}: unknown prefix {kind!r} (queue:, task: or key:)")
    if not target or len(name) > MAX_NAME or not holds_as_is(name):
        raise LimitError(
            f"limit {name!r}: the name after {kind}: must be 1-{MAX_NAME} characters, "
            "without NUL or a lone surrogate"
        )
    return kind, target


def parse_count(name: str, field: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise LimitError(
            f"limit {name!r}: {field} must be a whole number from 1 to {MAX_COUNT:,}, not {value!r}"
        )
    return value


def parse_window(name: str, field: str, value) -> tuple[int, float]:
    """[n, seconds] as (n, seconds)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise LimitError(f"limit {name!r}: {field} must be [n, seconds], not {value!r}")
    n, seconds = value
    n = parse_count(name, f"{field}'s n", n)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise LimitError(f"limit {name!r}: {field}'s seconds must be a number > 0, not {seconds!r}")
    if seconds > MAX_WINDOW_SECONDS:
        raise LimitError(
            f"limit {name!r}: {field}'s seconds must be at most {MAX_WINDOW_SECONDS:,} "
            f"(a year), not {seconds!r}"
        )
    return n, float(seconds)


def parse(name, entry) -> LimitSpec:
    """One LIMITS entry; LimitError naming it when it is malformed."""
    kind, target = parse_name(name)
    if not isinstance(entry, Mapping):
        raise LimitError(f"limit {name!r}: expected a dict of {', '.join(FIELDS)}")
    unknown = sorted(str(k) for k in entry if k not in FIELDS)
    if unknown:
        raise LimitError(
            f"limit {name!r}: unknown key {', '.join(unknown)} (allowed: {', '.join(FIELDS)})"
        )
    if not entry:
        raise LimitError(f"limit {name!r}: says nothing (give {', '.join(FIELDS)})")
    concurrency = entry.get("concurrency")
    rate = entry.get("rate")
    breaker = entry.get("pause_after_failures")
    if breaker is not None and kind != "queue":
        raise LimitError(f"limit {name!r}: pause_after_failures applies to queue: entries only")
    return LimitSpec(
        name=name,
        kind=kind,
        target=target,
        concurrency=None if concurrency is None else parse_count(name, "concurrency", concurrency),
        rate=None if rate is None else parse_window(name, "rate", rate),
        pause_after_failures=(
            None if breaker is None else parse_window(name, "pause_after_failures", breaker)
        ),
    )


def parse_all(option) -> dict[str, LimitSpec]:
    """The whole LIMITS option by name; LimitError at its first problem."""
    if option is None:
        return {}
    if not isinstance(option, Mapping):
        raise LimitError("LIMITS must be a dict of limit name -> entry")
    return {name: parse(name, entry) for name, entry in option.items()}


def check(option) -> list[str]:
    """Every problem of a LIMITS option, one message per entry."""
    if option is None:
        return []
    if not isinstance(option, Mapping):
        return ["LIMITS must be a dict of limit name -> entry"]
    problems = []
    for name, entry in option.items():
        try:
            parse(name, entry)
        except LimitError as e:
            problems.append(str(e))
    return problems
