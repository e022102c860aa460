"""Which of an attempt's log lines are kept: the first and the last, within 1,000 lines and
256 KB, the cut found from the gap in their numbers (jobs.attempt_log)."""

import pytest

from jobs import attempt_log
from jobs.attempt_log import MAX_BYTES, MAX_LINE_CHARS, MAX_LINES, Cut, Keeper, clean_text
from jobs.models import LogLine
from jobs.states import JobState
from tests.factories import make_job


class Table:
    """The log table of one attempt as a dict seq -> line: what the writes leave behind."""

    def __init__(self):
        self.rows = {}

    def apply(self, batch):
        for line in batch.lines:
            self.rows[line.seq] = line
        if batch.delete_below is not None:
            for seq in [s for s in self.rows if batch.head_end < s < batch.delete_below]:
                del self.rows[seq]


def log(keeper, table, count, *, flush_every=None, text="line {}"):
    for i in range(1, count + 1):
        keeper.add(float(i), "INFO", text.format(i))
        if flush_every and i % flush_every == 0:
            batch = keeper.batch()
            table.apply(batch)
            keeper.written(batch)
    batch = keeper.batch()
    table.apply(batch)
    keeper.written(batch)


def test_a_short_attempt_keeps_every_line_in_order():
    keeper, table = Keeper(), Table()
    log(keeper, table, 40, flush_every=7)
    assert [table.rows[s].message for s in sorted(table.rows)] == [
        f"line {i}" for i in range(1, 41)
    ]


@pytest.mark.parametrize("flush_every", [None, 1, 97, 1000])
def test_five_thousand_lines_keep_the_first_and_the_last_thousand_at_most(flush_every):
    keeper, table = Keeper(), Table()
    log(keeper, table, 5000, flush_every=flush_every)
    kept = sorted(table.rows)
    assert len(kept) == MAX_LINES
    assert kept[:500] == list(range(1, 501))
    assert kept[500:] == list(range(4501, 5001))


def test_big_lines_are_bounded_by_bytes_and_a_huge_one_is_cut_with_the_cut_said():
    keeper, table = Keeper(), Table()
    log(keeper, table, 300, flush_every=13, text="{} " + "x" * 4000)
    assert sum(len(line.message) for line in table.rows.values()) <= MAX_BYTES
    kept = sorted(table.rows)
    assert kept[0] == 1 and kept[-1] == 300 and len(kept) < 300

    keeper = Keeper()
    keeper.add(1.0, "INFO", "y" * (MAX_LINE_CHARS + 10))
    (line,) = keeper.batch().lines
    assert line.message.endswith(" … [10 characters cut]")


def test_text_either_database_refuses_is_made_storable():
    assert clean_text("a\x00b", 100) == "a\\x00b"
    assert clean_text("lone \ud800 surrogate", 100) == "lone \\ud800 surrogate"


def test_lines_written_while_the_database_was_away_are_still_bounded():
    keeper = Keeper()
    for i in range(1, 20_001):
        keeper.add(float(i), "INFO", f"line {i}")
    batch = keeper.batch()
    assert len(batch.lines) == MAX_LINES
    assert batch.lines[0].seq == 1 and batch.lines[-1].seq == 20_000


@pytest.mark.django_db
def test_reading_back_marks_the_cut_with_how_many_lines_it_took():
    job = make_job(JobState.SUCCEEDED)
    for seq in [1, 2, 3, 998, 999]:
        LogLine.objects.create(
            job=job, attempt=1, seq=seq, logged_at=job.enqueued_at, level="INFO", message=str(seq)
        )
    read = attempt_log.read(job.id, 1)
    assert read.cut == 994 and read.lines == 5
    assert [e.lines if isinstance(e, Cut) else e.message for e in read.entries] == [
        "1",
        "2",
        "3",
        994,
        "998",
        "999",
    ]
    assert attempt_log.read_all(job.id)[1] == read
