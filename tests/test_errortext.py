import traceback

import pytest

from jobs.errortext import describe, for_log


def _inner(value):
    raise ValueError(f"bad value {value}")


def _outer():
    return _inner(
        "spread over",
    )


def _plain():
    _outer()


def _chained():
    try:
        _outer()
    except ValueError as exc:
        raise RuntimeError("wrapped") from exc


def _during_handling():
    try:
        _outer()
    except ValueError:
        {}["missing"]


def _context_suppressed():
    try:
        _outer()
    except ValueError:
        raise LookupError("no such thing") from None


def _group():
    errors = []
    for f in (_plain, _chained):
        try:
            f()
        except Exception as exc:
            errors.append(exc)
    raise ExceptionGroup("several", errors)


def _misspelt_name():
    length = 3  # noqa: F841  (the name the suggestion finds)
    return lenght  # noqa: F821


def _syntax_error():
    compile("x = (1,\n", "<job>", "exec")


def _recursing(depth=10):
    if depth:
        _recursing(depth - 1)
    raise ValueError("at the bottom")


def _raised_by(f):
    try:
        f()
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


def _as_python_prints_it_without_column_positions(exc):
    """Python's own text once every frame's columns are forgotten: no ~~~^^^ markers, and the
    first line of each statement."""
    top = traceback.TracebackException.from_exception(exc)
    pending = [top]
    while pending:
        te = pending.pop()
        for frame in te.stack:
            frame.colno = frame.end_colno = None
        pending += [t for t in (te.__cause__, te.__context__) if t is not None]
        pending += te.exceptions or []
    return "".join(top.format())


@pytest.mark.parametrize(
    "f",
    [
        _plain,
        _chained,
        _during_handling,
        _context_suppressed,
        _group,
        _misspelt_name,
        _syntax_error,
        _recursing,
    ],
)
def test_traceback_is_what_python_prints_without_column_positions(f):
    exc = _raised_by(f)
    assert describe(exc)[2] == _as_python_prints_it_without_column_positions(exc)


def test_the_same_failure_twice_is_described_the_same_twice():
    first, second = describe(_raised_by(_plain))[2], describe(_raised_by(_plain))[2]
    assert first == second == _as_python_prints_it_without_column_positions(_raised_by(_plain))


def test_a_traceback_limit_the_project_sets_is_kept(monkeypatch):
    monkeypatch.setattr("sys.tracebacklimit", 2, raising=False)
    exc = _raised_by(_plain)
    text = describe(exc)[2]
    assert text == _as_python_prints_it_without_column_positions(exc)
    assert text.count("File ") == 2


def test_traceback_keeps_every_frame_and_the_first_line_of_each_statement():
    text = describe(_raised_by(_plain))[2]
    assert [line.split(", in ")[-1] for line in text.splitlines() if "File" in line] == [
        "_raised_by",
        "_plain",
        "_outer",
        "_inner",
    ]
    assert "    return _inner(\n" in text
    assert text.endswith("ValueError: bad value spread over\n")


def test_misspelt_name_keeps_its_suggestion():
    assert "Did you mean: 'length'?" in describe(_raised_by(_misspelt_name))[2]


@pytest.mark.parametrize(
    "raw, logged",
    [
        ("line one\nline two", "line one\\nline two"),
        ("tab\there\r", "tab\\there\\r"),
        ("bell\x07 nul\x00 del\x7f c1\x9b", "bell\\x07 nul\\x00 del\\x7f c1\\x9b"),
        ("sep\u2028para\u2029", "sep\\u2028para\\u2029"),
    ],
)
def test_log_text_escapes_line_breaks_and_control_characters(raw, logged):
    assert for_log(raw) == logged


def test_log_text_without_control_characters_is_left_as_it_is():
    text = "ValueError: bad value 'ünïcode ✓' [x] ^ - \\ \u00a0 \u2027 \u202a"
    assert for_log(text) == text


def test_log_text_escapes_every_control_character_wherever_it_stands():
    for code in [*range(32), *range(0x7F, 0xA0), 0x2028, 0x2029]:
        logged = for_log(f"plain words {chr(code)} more words")
        assert chr(code) not in logged and logged.startswith("plain words \\"), hex(code)
