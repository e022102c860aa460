"""Error text as it is stored and logged: described safely, capped, escaped.

Nothing in here may raise, whatever a task's exception does in `__str__` or `__repr__`.
"""

import linecache
import re
import sys
import traceback

from .text import storable

# CONTRACT.md section 10.
MAX_MESSAGE = 10_000
MAX_TRACEBACK = 100_000
# Of a cut traceback, the head keeps the outermost frames; the rest of the room goes to the
# tail, which holds the innermost frames and the exception line.
TRACEBACK_HEAD = 20_000
# Job data quoted in one worker log line is cut to this length (the stored text is complete).
MAX_LOGGED = 2_000


def describe(exc: BaseException) -> tuple[str, str, str]:
    """(error type, message, traceback) of an exception, each ready to store."""
    name = error_type(exc)
    message = message_of(exc)
    try:
        text = _format_traceback(exc)
    except BaseException:
        try:
            text = "".join(traceback.format_tb(exc.__traceback__)) + f"{name}: {message}\n"
        except BaseException:
            text = f"{name}: {message}\n"
    return name, cap(storable(message), MAX_MESSAGE), cap_traceback(storable(text))


def error_type(exc: BaseException) -> str:
    """Builtins and the engine's own outcome types (JobTimeout, WorkerLost, ...) go by their
    bare names, as the contract spells them; task exceptions keep their module. Storable: a
    class may be given any module and name, NUL and lone surrogates included."""
    cls = type(exc)
    try:
        module, qualname = str(cls.__module__), str(cls.__qualname__)
    except BaseException:
        return "Exception"
    return storable(qualname if module in ("builtins", "jobs.errors") else f"{module}.{qualname}")


def message_of(exc: BaseException) -> str:
    """str(exc); when that fails, repr(exc); when both fail, "<unprintable Name>"."""
    for render in (str, repr):
        try:
            text = render(exc)
        except BaseException:
            continue
        if isinstance(text, str):
            return text
    try:
        name = type(exc).__name__
    except BaseException:
        name = "exception"
    return f"<unprintable {name}>"


class _PlainStack(traceback.StackSummary):
    """Frames as Python prints them when it has no column positions: the file, the line and
    the first source line of the statement, without the ~~~^^^ markers under it."""

    def format_frame_summary(self, frame, **kwargs):
        return _frame_lines(frame.filename, frame.lineno, frame.name, frame.line)


def _frame_lines(filename, lineno, name, line) -> str:
    filename = "<stdin>" if filename.startswith("<stdin>-") else filename
    text = f'  File "{filename}", line {lineno}, in {name}\n'
    return f"{text}    {line}\n" if line else text


def _format_traceback(exc: BaseException) -> str:
    """The traceback as Python prints it, without the ~~~^^^ markers under each source line.

    Placing those markers re-parses every line's source; it cost more than all the rest of a
    failed attempt, and the file, line and code of each frame are still shown. The raised
    exception's own frames are read without their column positions (finding those walks each
    frame's bytecode up to the failing instruction, the larger part of what was left); a
    NameError keeps them, as its "Did you mean" looks in the traceback's last frame.
    """
    name_error = isinstance(exc, NameError)
    if name_error:
        top = traceback.TracebackException.from_exception(exc)
    else:
        top = traceback.TracebackException(type(exc), exc, None)
    lone = top.__cause__ is None and top.__context__ is None and top.exceptions is None
    frames = _frames_text(exc.__traceback__) if lone and not name_error else None
    if frames is None and not name_error:
        top.stack = traceback.StackSummary.extract(traceback.walk_tb(exc.__traceback__))
    if lone:
        # One exception alone, as most failures are: the text format() gives, without its
        # pass of every piece through textwrap.indent (an empty indent here), which took a
        # quarter of a failed attempt's time.
        if frames is None:
            frames = "".join(_PlainStack(top.stack).format())
        head = f"Traceback (most recent call last):\n{frames}" if frames else ""
        return head + "".join(top.format_exception_only())
    pending, seen = [top], set()
    while pending:
        te = pending.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = _PlainStack(te.stack)
        pending += [t for t in (te.__cause__, te.__context__) if t is not None]
        pending += te.exceptions or []
    return "".join(top.format())


# (code, line number) -> that frame's lines in a traceback. A process's code does not change
# under it, so each frame is put into words once: StackSummary.extract looks up every file's
# modification time and every source line again on each failure, two thirds of the time a
# failed attempt spent on its text.
_FRAME_TEXTS: dict = {}
_FRAME_TEXTS_KEPT = 4096


def _frames_text(tb) -> str | None:
    """The frames of `tb` as _PlainStack writes them; None where that needs more than one
    line per frame (a recursion's repeated frames, which Python folds) or a limit is set."""
    if getattr(sys, "tracebacklimit", None) is not None:
        return None
    texts, last = [], None
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        where = (code.co_filename, lineno, code.co_name)
        if where == last:
            return None
        last = where
        text = _FRAME_TEXTS.get((code, lineno))
        if text is None:
            text = _frame_text(frame, code, lineno)
            if len(_FRAME_TEXTS) >= _FRAME_TEXTS_KEPT:
                _FRAME_TEXTS.clear()
            _FRAME_TEXTS[code, lineno] = text
        texts.append(text)
    return "".join(texts)


def _frame_text(frame, code, lineno) -> str:
    filename = code.co_filename
    linecache.lazycache(filename, frame.f_globals)
    linecache.checkcache(filename)
    line = linecache.getline(filename, lineno).strip() if lineno is not None else None
    return _frame_lines(filename, lineno, code.co_name, line)


def _mark(removed: int) -> str:
    return f"… [cut: {removed:,} characters]"


def cap(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters; else its start and a mark saying how much went."""
    if len(text) <= limit:
        return text
    keep = limit - len(_mark(len(text)))
    return text[:keep] + _mark(len(text) - keep)


def cap_traceback(text: str, limit: int = MAX_TRACEBACK) -> str:
    """A traceback within `limit` characters: its head and its tail, the cut marked between."""
    if len(text) <= limit:
        return text
    mark = f"\n{_mark(len(text))}\n"
    head = min(TRACEBACK_HEAD, limit // 4)
    tail = limit - head - len(mark)
    return text[:head] + f"\n{_mark(len(text) - head - tail)}\n" + text[-tail:]


_ESCAPES = {i: f"\\x{i:02x}" for i in [*range(32), *range(0x7F, 0xA0)]}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
# Most text holds none of them, and translate() looks every character up in the dict: a search
# first costs a tenth of that (a worker logs each failed attempt's task and error through here).
_NEEDS_ESCAPE = re.compile("[" + "".join(re.escape(chr(c)) for c in _ESCAPES) + "]")


def for_log(value, limit: int = MAX_LOGGED) -> str:
    """Job data (a task path, a message, an id) as it may appear in one log line: control
    characters and line breaks escaped, so one event stays one line; cut to `limit`."""
    try:
        text = value if isinstance(value, str) else str(value)
    except BaseException:
        text = "<unprintable>"
    text = cap(text, limit)
    return text.translate(_ESCAPES) if _NEEDS_ESCAPE.search(text) else text
