"""Argument types shared by the engine's management commands.

Each returns a callable for argparse's `type=`: a malformed value becomes a one-line usage error
that says what was expected, never a traceback.
"""

import argparse
import math


def whole_number(low: int, high: int | None = None, *, what: str = "a number"):
    """A whole number in [low, high] (no upper bound when high is None)."""

    def parse(value):
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if number < low or (high is not None and number > high):
            wanted = f"from {low} to {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"expected {what} {wanted}, got {number}")
        return number

    return parse


def seconds(value):
    """A finite number of seconds >= 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not number >= 0 or math.isinf(number):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {value!r}")
    return number
