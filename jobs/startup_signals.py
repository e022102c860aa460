"""Hold SIGTERM/SIGINT while the worker process starts up (no Django imports in here).

Starting Django takes a moment; a stop request in that window (systemd stopping a worker that
is just starting) must end the worker cleanly, not kill it mid-import. `manage.py worker` calls
`hold()` first thing; the worker replays what `release()` returns once its own handlers are in.
"""

import signal

_held: list[int] = []


def _remember(signum, frame):
    _held.append(signum)


def hold() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _remember)


def release() -> list[int]:
    held = list(_held)
    _held.clear()
    return held
