"""Calls run at the same instant, each on its own thread and database connection (race tests)."""

import threading
from contextlib import contextmanager

from django.db import connection, transaction


def at_once(calls):
    """Run every callable of `calls` together; returns (what they returned, what they raised)."""
    barrier = threading.Barrier(len(calls))
    results, errors = [], []

    def run(call):
        try:
            barrier.wait()
            results.append(call())
        except Exception as exc:  # surfaced to the test, which asserts on it
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


@contextmanager
def holding_meanwhile(hold):
    """Run `hold(holding)` in a transaction on a thread and connection of its own, standing in
    for another process that holds rows (a worker's finish, an action); the with block runs
    once `hold` has set the event `holding` (or failed), and ends once the thread has. Yields
    the list of what the thread raised, complete when the block ends."""
    holding, errors = threading.Event(), []

    def run():
        try:
            with transaction.atomic():
                hold(holding)
        except Exception as exc:  # surfaced to the test, which asserts on it
            errors.append(exc)
        finally:
            holding.set()
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    holding.wait()
    try:
        yield errors
    finally:
        thread.join()
