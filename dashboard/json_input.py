"""JSON text from clients (API bodies, the edit-and-rerun form), read strictly."""

import json
import math

from jobs.payload import MAX_INT_DIGITS


class RepeatedKey(ValueError):
    """An object names one key twice: which of its values was meant cannot be told."""


class UnfitNumber(ValueError):
    """A number no job may carry: an integer longer than jobs.payload.MAX_INT_DIGITS, or a
    decimal beyond the largest float (it would read as infinity)."""


def _integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise UnfitNumber(
            f"an integer of {digits:,} digits is longer than the {MAX_INT_DIGITS:,} a job's "
            "arguments may hold: send it as a string"
        )
    return int(text)


def _decimal(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise UnfitNumber(
            f"the number {shown} is beyond the largest a job's arguments may hold: send it "
            "as a string"
        )
    return value


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
    """json.loads, refusing an object that repeats a key (RepeatedKey) and a number a job may
    not hold (UnfitNumber); both are ValueErrors."""
    return json.loads(text, object_pairs_hook=_object, parse_int=_integer, parse_float=_decimal)
