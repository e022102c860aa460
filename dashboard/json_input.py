"""JSON text from clients (API bodies, the edit-and-rerun form), read strictly."""

import json

from jobs.payload import MAX_INT_DIGITS


class RepeatedKey(ValueError):
    """An object names one key twice: which of its values was meant cannot be told."""


class LongInteger(ValueError):
    """A number too long for an integer a job may carry (jobs.payload.MAX_INT_DIGITS)."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise LongInteger(
            f"an integer of {len(text.lstrip('-')):,} digits, more than the {MAX_INT_DIGITS:,} "
            "a job's arguments may hold: send it as a string"
        )
    return int(text)


def _object(pairs: list) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                shown = key if len(key) <= 60 else key[:60] + "…"
                raise RepeatedKey(f"the key {shown!r} appears twice in one object")
            seen.add(key)
    return value


def loads(text):
    """json.loads, refusing an object that repeats a key (RepeatedKey) and an integer longer
    than a job may hold (LongInteger); both are ValueErrors."""
    return json.loads(text, object_pairs_hook=_object, parse_int=_integer)
