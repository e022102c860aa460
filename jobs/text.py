"""The one rule for text a database column can hold, on both databases.

PostgreSQL refuses NUL in text and JSON, and neither driver can send a lone surrogate (a str
can hold one; UTF-8 cannot). Text a caller gives (a name, a key, a filter) is refused when it
holds either; text a task produces (an error, a log line) is stored with both escaped.
"""


def holds_as_is(text: str) -> bool:
    """Whether both databases can store `text` unchanged."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> str:
    """Text a database column can hold: NUL and lone surrogates shown as escapes, not lost."""
    text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
