"""Calls run at the same instant, each on its own thread and database connection (race tests)."""

import threading

from django.db import connection


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
