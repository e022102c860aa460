"""Killing an executor together with the processes its jobs started.

A job that runs `subprocess.run(["ffmpeg", ...])` or a multiprocessing pool and is stopped
(its timeout, an operator's cancel, the shutdown timeout) must not leave those processes
working on: the next attempt would run beside them. The executor is frozen first, then each
process below it, parent before children, so that none can start another while the tree is
read; then all are killed. The tree is read through /proc (Linux); elsewhere, and for a
process that left the tree on purpose (a daemon that forked twice), only the executor dies.
"""

import os
import signal
from pathlib import Path


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process descending from it."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    frozen = [pid]
    index = 0
    while index < len(frozen):
        for child in _children(frozen[index]):
            try:
                os.kill(child, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            frozen.append(child)
        index += 1
    for process in frozen:
        try:
            os.kill(process, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _children(pid: int) -> list[int]:
    # A stopped process cannot reap its children: a pid read here is still that child's.
    children: list[int] = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return children
    for thread in threads:
        try:
            children.extend(int(c) for c in (thread / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return children
