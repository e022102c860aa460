"""Strict JSON for job arguments and return values.

Only what survives a JSON round trip unchanged is accepted, so what runs is what was enqueued.
"""

import json
import math
from collections.abc import Mapping

from .text import holds_as_is

# A job's arguments (args and kwargs together) and its return value are each at most this many
# bytes of JSON text. They travel through the database, the worker and an executor's pipe, and
# the console shows them: large data belongs in storage, with its key passed instead.
MAX_BYTES = 1_048_576


def check_arguments(args, kwargs) -> tuple[list, dict]:
    """Raise TypeError/ValueError unless `args` and `kwargs` are plain JSON within MAX_BYTES;
    return them normalised (a list and a dict)."""
    args, kwargs, _, _ = checked_arguments(args, kwargs)
    return args, kwargs


def checked_arguments(args, kwargs) -> tuple[list, dict, str, str]:
    """`check_arguments`, also returning the two JSON texts the database stores (`dumps`)."""
    args = check_json(list(args), "args")
    kwargs = check_json(dict(kwargs), "kwargs")
    args_json, kwargs_json = dumps(args), dumps(kwargs)
    check_size(len(args_json) + len(kwargs_json), "args and kwargs")
    return args, kwargs, args_json, kwargs_json


def check_size(size: int, what: str):
    if size > MAX_BYTES:
        raise ValueError(
            f"{what} take {size:,} bytes as JSON, over the limit of {MAX_BYTES:,} (1 MiB): "
            "store large data elsewhere (a file, a row) and pass its key"
        )


def check_json(value, where="arguments"):
    """Raise TypeError/ValueError unless `value` is plain JSON; return it normalised.

    Tuples become lists (as in Django's own task backends). Refused: objects, sets, bytes,
    non-string keys, NaN/Infinity, strings holding NUL or a lone surrogate (neither can be
    stored as JSON text in PostgreSQL), and nesting deeper than MAX_DEPTH.
    """
    return _walk(value, where, 0)


# Deeper nesting is refused: the executor, the databases' JSON parsers and the console would
# each need a deep recursion to read it back.
MAX_DEPTH = 100


def _walk(value, where, depth):
    """Check `value` and return it normalised. `where` names it for an error message: the root's
    name, or a (parent's where, index or key) pair. Most arguments are fine, so the path is
    spelled out only when an error is raised."""
    kind = _KINDS.get(type(value)) or _kind_of(value)
    if kind is str:
        _check_text(value, where, "strings")
        return value
    if kind is int:
        if value is not None and not -_TOO_LONG < value < _TOO_LONG:
            raise ValueError(
                f"{_path(where)}: an integer of more than {MAX_INT_DIGITS:,} digits is not valid "
                "JSON here; pass it as a string"
            )
        return value
    if kind is float:
        if not math.isfinite(value):
            raise ValueError(
                f"{_path(where)}: {value!r} is not valid JSON (NaN and Infinity are refused)"
            )
        return value
    if kind is list:
        if depth >= MAX_DEPTH:
            _too_deep(where)
        depth += 1
        return [_walk(v, (where, i), depth) for i, v in enumerate(value)]
    if kind is dict:
        if depth >= MAX_DEPTH:
            _too_deep(where)
        depth += 1
        out = {}
        for key, v in value.items():
            if type(key) is not str and not isinstance(key, str):
                raise TypeError(f"{_path(where)}: keys must be strings, not {type(key).__name__}")
            _check_text(key, where, "keys")
            out[key] = _walk(v, (where, key), depth)
        return out
    raise TypeError(
        f"{_path(where)}: {type(value).__name__} is not JSON-serialisable; pass ids, strings, "
        "numbers, lists and dicts, and load objects inside the task"
    )


# Python writes no longer integer as text (sys.get_int_max_str_digits), and another process
# reading the job back may not be told otherwise.
MAX_INT_DIGITS = 4300
_TOO_LONG = 10**MAX_INT_DIGITS

# What `_walk` does with a value, by its type: check a string, take an int, bool or None as it
# is, check a float, walk a list or tuple (into a list), walk a mapping (into a dict).
_KINDS: dict[type, type] = {
    str: str,
    int: int,
    bool: int,
    type(None): int,
    float: float,
    list: list,
    tuple: list,
    dict: dict,
}


def _kind_of(value) -> type | None:
    """The kind of a value of any other type: a subclass of a JSON type is walked as its base."""
    for base, kind in ((str, str), (int, int), (float, float), (list | tuple, list)):
        if isinstance(value, base):
            return kind
    return dict if isinstance(value, Mapping) else None


def _check_text(text, where, what):
    if holds_as_is(text):
        return
    if "\x00" in text:
        raise ValueError(f"{_path(where)}: {what} may not contain NUL characters")
    raise ValueError(
        f"{_path(where)}: strings must be valid Unicode (this one holds a lone surrogate)"
    )


def _too_deep(where):
    while type(where) is tuple:
        where = where[0]
    raise ValueError(f"{where}: nested more than {MAX_DEPTH} levels deep; pass flatter data")


def _path(where) -> str:
    """`args[1]['key']` for (("args", 1), "key")."""
    keys = []
    while type(where) is tuple:
        where, key = where
        keys.append(f"[{key!r}]")
    return where + "".join(reversed(keys))


_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(value) -> str:
    if not value and type(value) in _EMPTY:  # most calls pass no kwargs, many no args
        return _EMPTY[type(value)]
    return _encoder.encode(value)


_EMPTY: dict[type, str] = {list: "[]", dict: "{}"}
