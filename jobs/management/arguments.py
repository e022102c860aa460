"""Argument types the management commands share."""

from argparse import ArgumentTypeError


def whole_number(low: int, high: int | None = None, *, expected: str):
    """An argparse type: a whole number from `low` to `high` (no upper bound when None);
    `expected` says what in the error, e.g. "1 to 100 attempts"."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if number < low or (high is not None and number > high):
            raise ArgumentTypeError(f"expected {expected}, got {number}")
        return number

    return parse
