"""JSON text from clients (API bodies, the edit-and-rerun form), read strictly."""

import json


class RepeatedKey(ValueError):
    """An object names one key twice: which of its values was meant cannot be told."""


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
    """json.loads, refusing an object that repeats a key (RepeatedKey, a ValueError)."""
    return json.loads(text, object_pairs_hook=_object)
