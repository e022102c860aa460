"""An executor process: its entry point, and the watchdog that ends it when it must not go on.

Through the slots of a shared status array the child shows which jobs it has started and
since when (jobs.executor_loop): deadlines are enforced from outside, and after a crash the
worker knows which jobs were running (failed attempts) and which it never started.
"""

import multiprocessing
import os
import signal
import threading
import time
from multiprocessing import forkserver
from typing import Any

from ..executor_loop import REPORTS_ASKED, REPORTS_WRITTEN, ExecutorLoop, lease_holds
from .wire import _dumps, _job_codec, _ran_codec

# How often the child checks that its worker is alive and its job's lease still holds.
WATCH_INTERVAL = 0.05
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# The exit code of a child that stopped itself because a job's lease lapsed: its jobs were
# lost with the lease (jobs.pool.supervisor), not crashed.
LEASE_LAPSED = 75


def _die_with_parent(fork_server_pid: int | None = None) -> int:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG).

    An executor that outlived its worker would run on while another worker recovers its jobs:
    the same job twice at the same time. The parent is the fork server, which exits as soon as
    the worker is gone (once no process holds the worker's end of its "alive" pipe: the
    executor closes its copy here). Returns the parent's pid for the fallback check.
    `fork_server_pid`: the fork server the worker asked, which must be the parent: one killed
    between the fork and this check left this process to init (or a subreaper) already.
    """
    # The fork server's own state, private to multiprocessing: no public way closes it.
    server: Any = forkserver._forkserver
    alive = server._forkserver_alive_fd
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None
        server._forkserver_address = None
    parent = fork_server_pid or os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the watchdog's parent check still applies
    if os.getppid() != parent:
        os._exit(70)  # the fork server or the worker died before the kernel was told
    return parent


def child_main(
    conn,
    status,
    taking,
    stop_flag,
    worker_id,
    settings_module,
    logging_setup=None,
    fork_server_pid=None,
):
    """Entry point of an executor process; `logging_setup`: `jobs.logs.worker_logging()` of
    its worker, whose level and format its lines follow."""
    # The worker decides when its children stop; a Ctrl-C or a SIGTERM sent to the whole
    # process group must not kill a job half-way. The signals were blocked since birth.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # Started as a daemon, so that the worker's exit ends it whatever happens; but a task may
    # start processes of its own with multiprocessing (a pool), which refuses that in a
    # daemon. The worker ends them with the executor all the same (process_tree.kill_tree).
    multiprocessing.current_process().daemon = False
    parent = _die_with_parent(fork_server_pid)
    if settings_module:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django
    from django.apps import apps

    if not apps.ready:  # the fork server could not set Django up; the error shows here
        django.setup()
    from django.db import connections

    from ..logs import log_like_the_worker
    from ..reports import start_live_writer, write_all_now
    from ..task_connections import tidy

    if logging_setup is not None:
        log_like_the_worker(logging_setup)

    start_live_writer()
    executor = ExecutorLoop(
        conn,
        status,
        taking,
        stop_flag,
        worker_id,
        codecs=(_job_codec(), _ran_codec()),
        dumps=_dumps,
        tidy=tidy,
    )

    def answer(asked):
        status[REPORTS_WRITTEN] = asked

    def watchdog():
        answered = 0.0
        while True:
            time.sleep(WATCH_INTERVAL)
            asked = status[REPORTS_ASKED]
            if asked > answered:
                # The worker is about to stop this process: its jobs' last lines are written
                # first, on the writer's thread (this one must go on watching meanwhile).
                answered = asked
                write_all_now(lambda asked=asked: answer(asked))
            if os.getppid() != parent:
                os._exit(70)  # the worker (or its fork server) is gone; others recover its jobs
            for running in list(executor.running.values()):
                if not lease_holds(running, status):
                    # The worker stalled and could not renew: another worker may recover this
                    # job any moment, and it must not run in two places at once.
                    os._exit(LEASE_LAPSED)
            executor.watch_loop()

    threading.Thread(target=watchdog, name="executor-watchdog", daemon=True).start()
    try:
        executor.serve()
    except (BrokenPipeError, EOFError, OSError):
        return  # the worker is gone
    finally:
        connections.close_all()
