"""The tasks of bench/reports.py; the bench's workers import them from here."""

import logging
import time

from jobs.compat import task

# What logging a line costs anywhere: a logger that keeps every level and drops every line.
plain = logging.getLogger("bench.plain")
plain.setLevel(logging.DEBUG)
plain.propagate = False
plain.addHandler(logging.NullHandler())


def _work(loops):
    total = 0
    for i in range(loops):
        total += i * i
    return total


@task(takes_context=True)
def steps(context, n, loops, mode):
    """`n` steps of the same work. `mode` "speaking": each step reports progress and logs a
    line through context.logger; "plain": each logs a line through a plain logger that drops
    it (what any logging costs); "silent": neither. Returns the seconds the steps took,
    measured in the executor: [wall clock, CPU of the executor process (its threads included:
    the writer's work counts)]."""
    started, cpu = time.perf_counter(), time.process_time()
    if mode == "speaking":
        for i in range(1, n + 1):
            _work(loops)
            context.progress(i, n, f"row {i}")
            context.logger.info("row %d of %d", i, n)
    elif mode == "plain":
        for i in range(1, n + 1):
            _work(loops)
            plain.info("row %d of %d", i, n)
    else:
        for _ in range(n):
            _work(loops)
    return [time.perf_counter() - started, time.process_time() - cpu]
