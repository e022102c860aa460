"""The worker's pool of executor processes.

Jobs run in child processes so that the worker can stop one that ignores its timeout (or an
operator's cancel) by killing that child alone, and so that a crash in task code never takes
the worker down.

    executor.py    the worker's handle on one child process (Executor), its stop flag
    wire.py        the messages between worker and child: framing, the pipe (Channel), and
                   the flat codecs of a claimed job and of an attempt's outcome
    child.py       the child process itself: its entry point and its watchdog
    dispatcher.py  which executor a claimed job goes to, and the jobs ready to go out
    supervisor.py  starting executors, replacing one that died or had to be stopped, crash
                   back-off, deadlines and cancel graces enforced from outside

Nothing here is imported at package level: an executor imports `child.py` before Django is
set up.
"""
