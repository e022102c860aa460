"""Strict JSON for job arguments and return values.

Only what survives a JSON round trip unchanged is accepted, so what runs is what was enqueued.
"""

import json
import math
from collections.abc import Mapping

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
    # Most calls pass a few ids and names: a flat container of plain scalars is checked in one
    # pass, without the walk's per-item paths; that halves the check of a typical call.
    kind = type(value)
    if (kind is list or kind is tuple) and _plain(value):
        return list(value)
    if kind is dict and (
        not value
        or all(type(key) is str for key in value)
        and _plain(value)
        and _plain(value.values())
    ):
        return dict(value)
    return _walk(value, where, 0)


_PLAIN_SCALARS = frozenset((int, bool, type(None)))


def _plain(values) -> bool:
    """True when each of `values` is a scalar of a built-in type that `_walk` accepts as it is."""
    for v in values:
        kind = type(v)
        if kind is str:
            if not v.isascii() or "\x00" in v:
                return False
        elif kind is float:
            if not math.isfinite(v):
                return False
        elif kind not in _PLAIN_SCALARS:
            return False
    return True


# Deeper nesting is refused: the executor, the databases' JSON parsers and the console would
# each need a deep recursion to read it back.
MAX_DEPTH = 100


def _walk(value, path, depth):
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} is not valid JSON (NaN and Infinity are refused)")
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{path}: strings may not contain NUL characters")
        if not value.isascii():
            _check_encodable(value, path)
        return value
    if isinstance(value, list | tuple | Mapping) and depth >= MAX_DEPTH:
        root = path.split("[", 1)[0]
        raise ValueError(f"{root}: nested more than {MAX_DEPTH} levels deep; pass flatter data")
    if isinstance(value, list | tuple):
        return [_walk(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: keys must be strings, not {type(key).__name__}")
            if "\x00" in key:
                raise ValueError(f"{path}: keys may not contain NUL characters")
            if not key.isascii():
                _check_encodable(key, path)
            out[key] = _walk(v, f"{path}[{key!r}]", depth + 1)
        return out
    raise TypeError(
        f"{path}: {type(value).__name__} is not JSON-serialisable; pass ids, strings, numbers, "
        "lists and dicts, and load objects inside the task"
    )


_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _check_encodable(text, path):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{path}: strings must be valid Unicode (this one holds a lone surrogate)"
        ) from None


def dumps(value) -> str:
    if not value and type(value) in _EMPTY:  # most calls pass no kwargs, many no args
        return _EMPTY[type(value)]
    return _encoder.encode(value)


_EMPTY: dict[type, str] = {list: "[]", dict: "{}"}
