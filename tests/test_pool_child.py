"""jobs.pool.child: an executor never runs on without the fork server that forked it."""

import os

from jobs.pool.child import _die_with_parent


def run_forked(check) -> int:
    """Fork; the child runs `check` and exits 0 if it returns. Returns the child's status."""
    pid = os.fork()
    if pid == 0:
        try:
            check()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_an_executor_whose_parent_is_its_fork_server_goes_on():
    parent = os.getpid()
    assert run_forked(lambda: _die_with_parent(parent)) == 0


def test_an_executor_whose_fork_server_died_before_it_could_check_exits_at_once():
    # Left to init (or a subreaper) by a fork server killed right after the fork: its parent is
    # no longer the fork server the worker asked for, so it must not run a job on its own.
    not_the_parent = os.getpid() + 1_000_000
    assert run_forked(lambda: _die_with_parent(not_the_parent)) == 70
