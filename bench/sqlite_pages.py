"""The pages SQLite writes to its log per enqueue, against the naive insert's.

    .venv/bin/python bench/sqlite_pages.py                # this checkout
    git worktree add --detach /tmp/before <commit>
    .venv/bin/python bench/sqlite_pages.py /tmp/before    # another checkout's code and schema

A commit in WAL mode appends every page the transaction changed to the log, one write per
page, and every thousand pages the log is copied back into the file and both are flushed
(`wal_autocheckpoint`). So an enqueue that commits on its own costs about in proportion to the
pages it changes, and, unlike a time, the count does not move with the machine's load. With the
automatic checkpoint off for the measurement, the log's growth over a run divided by a page's
frame (its page plus a 24-byte header) is the pages written. The database first holds 20,000
jobs (indexes a few levels deep). Not part of the test suite.
"""

import os
import sys
from pathlib import Path

CHECKOUT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(CHECKOUT.resolve()))
os.chdir(CHECKOUT)

from bench.baseline import NAIVE_TABLE, _naive_table  # noqa: E402
from bench.throughput import scratch_database, setup_django  # noqa: E402

FRAME_HEADER = 24


def main():
    setup_django(scratch_database("sqlite"))
    from django.db import connection

    from jobsite.tasks import noop

    path = connection.settings_dict["NAME"] + "-wal"
    noop.enqueue_many([((), {})] * 20_000)
    for _ in range(2_000):
        noop.enqueue()
    with connection.cursor() as cursor:
        (page,) = cursor.execute("PRAGMA page_size").fetchone()
        _naive_table(cursor, "sqlite", temporary=False)  # the table bench/baseline.py times

    def pages(run, count):
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_autocheckpoint = 0")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # ends the statement
            before = os.path.getsize(path)
            run(cursor)
            grown = os.path.getsize(path) - before
            cursor.execute("PRAGMA wal_autocheckpoint = 1000")
        return grown / (page + FRAME_HEADER) / count

    def naive(cursor):
        for _ in range(1_000):
            cursor.execute(f"INSERT INTO {NAIVE_TABLE} (args) VALUES ('[]')")  # autocommit

    def single(cursor):
        for _ in range(1_000):
            noop.enqueue()

    def bulk(cursor):
        noop.enqueue_many([((), {})] * 10_000)

    print(f"{CHECKOUT}: pages written per commit, {page}-byte pages")
    print(f"  naive insert:    {pages(naive, 1_000):6.2f}")
    print(f"  single enqueue:  {pages(single, 1_000):6.2f}")
    print(f"  enqueue_many:    {pages(bulk, 10_000):8.4f} per job (one call of 10,000)")


if __name__ == "__main__":
    main()
