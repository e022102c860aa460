"""The tasks of bench/reports.py; the bench's workers import them from here."""

import time

from jobs.compat import task


def _work(loops):
    total = 0
    for i in range(loops):
        total += i * i
    return total


@task(takes_context=True)
def steps(context, n, loops, speak):
    """`n` steps of the same work; with `speak`, each reports progress and logs a line.
    Returns the seconds the steps took, measured in the executor: [wall clock, CPU of the
    executor process (its threads included: the writer's work counts)]."""
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(1, n + 1):
        _work(loops)
        if speak:
            context.progress(i, n, f"row {i}")
            context.logger.info("row %d of %d", i, n)
    return [time.perf_counter() - started, time.process_time() - cpu]
