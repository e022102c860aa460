"""The JSON check of arguments and return values: the flat fast path agrees with the full walk."""

import enum
import math

import pytest

from jobs import payload


class Colour(enum.IntEnum):
    RED = 1


PLAIN = [
    [],
    (),
    {},
    [1, -2, 10**30, True, False, None, 1.5, -0.0, "ascii", ""],
    ("a tuple", 7),
    ["naïve", "日本語", "emoji 🎉"],
    [Colour.RED],
    {"id": 42, "name": "x", "ok": True, "ratio": 0.25, "none": None},
    {"clé": "valeur", "日本": 1},
]

REFUSED = [
    ["a\x00b"],
    [float("nan")],
    [math.inf],
    [-math.inf],
    ["lone \udc80 surrogate"],
    [b"bytes"],
    [object()],
    [{1, 2}],
    {"key": "a\x00b"},
    {"k\x00ey": 1},
    {1: "int key"},
    {"lone \udc80": 1},
    {"v": float("nan")},
]


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_flat_plain_values_come_back_as_the_full_walk_returns_them(value):
    checked = payload.check_json(value, "args")
    walked = payload._walk(value, "args", 0)
    assert checked == walked
    assert type(checked) is type(walked)
    assert checked is not value
    assert payload.dumps(checked) == payload.dumps(walked)


@pytest.mark.parametrize("value", REFUSED, ids=repr)
def test_flat_bad_values_are_refused_as_the_full_walk_refuses_them(value):
    with pytest.raises((TypeError, ValueError)) as walked:
        payload._walk(value, "args", 0)
    with pytest.raises(walked.type) as checked:
        payload.check_json(value, "args")
    assert str(checked.value) == str(walked.value)
