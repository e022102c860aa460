"""The one rule for a queue name, wherever one comes in: a task, a call, a schedule, the worker's
--queue, the console and the API."""

from .text import holds_as_is

# The width of the queue columns (jobs.models): a longer name could not be stored.
QUEUE_NAME_MAX = 100


def check_queue_name(name) -> str:
    """Return `name` if it is a usable queue name; raise ValueError saying what is wrong, as
    the end of a sentence the caller starts with the name of the field ("queue_name must be...")."""
    if not isinstance(name, str) or not 0 < len(name) <= QUEUE_NAME_MAX or not holds_as_is(name):
        raise ValueError(
            f"must be 1 to {QUEUE_NAME_MAX} characters without NUL or a lone surrogate, "
            f"not {name!r}"
        )
    return name
