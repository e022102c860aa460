"""A task that calls os.fork(): its child must never come back into the executor.

A child that returns or raises out of the task would go on as a second copy of the executor,
reading the worker's pipe beside the real one and answering for its jobs: the two would split
messages between them and the job would wait, running, forever. The child ends where the
task's code ends instead, as a forked Python program would (status 0 if it returned, a
SystemExit's status, else a traceback and status 1). Children that exec or end by themselves
(subprocess, multiprocessing) never get here.
"""

import os
import sys
import traceback

# The executor's process id, once it serves; None where tasks run in the calling process.
_owner: int | None = None
# Set in every child os.fork() makes (Python's at-fork hook): until then the process id need
# not be asked for, a system call that cost a no-op job's executor several per cent of its time.
_forked = False


def _mark_forked() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_mark_forked)


def owned_here() -> None:
    """This process runs tasks for a worker: a process forked from it must not."""
    global _owner, _forked
    _owner = os.getpid()
    _forked = False  # the fork that made this executor


def leave_if_forked(exc: BaseException | None = None) -> None:
    """End this process now if it is a child a task forked (the task's code just ended in it,
    raising `exc` or returning)."""
    if not _forked or _owner is None or os.getpid() == _owner:
        return
    status = 0
    if isinstance(exc, SystemExit):  # as Python ends on one: its code, or its text and 1
        if isinstance(exc.code, int):
            status = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
            status = 1
    elif exc is not None:
        traceback.print_exception(exc)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)
