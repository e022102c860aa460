"""The JSON check of job arguments and return values: what it takes, how it names a refusal."""

import enum
import math
from collections import OrderedDict

import pytest

from jobs import payload


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


ACCEPTED = [
    ([], []),
    ((), []),
    ({}, {}),
    (
        [1, -2, 10**30, True, False, None, 1.5, -0.0, "ascii", ""],
        [1, -2, 10**30, True, False, None, 1.5, -0.0, "ascii", ""],
    ),
    (("a tuple", (1, (2,))), ["a tuple", [1, [2]]]),
    (["naïve", "日本語", "emoji 🎉"], ["naïve", "日本語", "emoji 🎉"]),
    ([Colour.RED, Name("n")], [1, "n"]),
    (OrderedDict(b=1, a=[{"x": None}]), {"b": 1, "a": [{"x": None}]}),
    ({"clé": "valeur", "日本": {"deep": [0.25]}}, {"clé": "valeur", "日本": {"deep": [0.25]}}),
]


@pytest.mark.parametrize(("value", "expected"), ACCEPTED, ids=repr)
def test_plain_json_comes_back_as_new_lists_and_dicts_with_the_same_json(value, expected):
    checked = payload.check_json(value, "args")
    assert checked == expected
    assert type(checked) is type(expected)
    assert checked is not value
    assert payload.dumps(checked) == payload.dumps(expected)


def _nested(levels):
    root = inner = []
    for _ in range(levels - 1):
        inner.append([])
        inner = inner[0]
    return root


REFUSED = [
    ("args", ["a\x00b"], ValueError, "args[0]: strings may not contain NUL characters"),
    (
        "args",
        [1, [2, {"k": float("nan")}]],
        ValueError,
        "args[1][1]['k']: nan is not valid JSON (NaN and Infinity are refused)",
    ),
    (
        "kwargs",
        {"a": {"b": [math.inf]}},
        ValueError,
        "kwargs['a']['b'][0]: inf is not valid JSON (NaN and Infinity are refused)",
    ),
    (
        "args",
        [["x", "lone \udc80"]],
        ValueError,
        "args[0][1]: strings must be valid Unicode (this one holds a lone surrogate)",
    ),
    ("kwargs", {"outer": {"k\x00": 1}}, ValueError, "kwargs['outer']: keys may not contain NUL"),
    ("kwargs", {"o": {1: 2}}, TypeError, "kwargs['o']: keys must be strings, not int"),
    (
        "kwargs",
        {"o": [{"lone \udc80": 1}]},
        ValueError,
        "kwargs['o'][0]: strings must be valid Unicode",
    ),
    (
        "args",
        [[1, 10**5000]],
        ValueError,
        "args[0][1]: an integer of more than 4,300 digits is not valid JSON here",
    ),
    (
        "return value",
        {"n": -(10**4300)},
        ValueError,
        "return value['n']: an integer of more than 4,300 digits",
    ),
    ("args", [b"x"], TypeError, "args[0]: bytes is not JSON-serialisable; pass ids, strings"),
    ("kwargs", {"it's": {"s": {1}}}, TypeError, "kwargs[\"it's\"]['s']: set is not JSON"),
    ("return value", object(), TypeError, "return value: object is not JSON-serialisable"),
    (
        "return value",
        {"r": [None, -math.inf]},
        ValueError,
        "return value['r'][1]: -inf is not valid JSON",
    ),
    (
        "kwargs",
        {"d": _nested(payload.MAX_DEPTH)},
        ValueError,
        "kwargs: nested more than 100 levels deep; pass flatter data",
    ),
]


def _case_id(value) -> str:
    try:
        return repr(value)
    except ValueError:  # Python will not write an integer this long as text
        return f"{type(value).__name__} with an integer too long to write"


@pytest.mark.parametrize(("where", "value", "error", "message"), REFUSED, ids=_case_id)
def test_a_refused_value_is_named_by_its_path_from_the_root(where, value, error, message):
    with pytest.raises(error) as raised:
        payload.check_json(value, where)
    assert str(raised.value).startswith(message)


def test_nesting_up_to_the_limit_is_accepted():
    value = {"d": _nested(payload.MAX_DEPTH - 1)}
    assert payload.check_json(value, "kwargs") == value
