import pytest

from jobs import db
from jobs.models import CounterDelta
from tests.concurrency import at_once


@pytest.mark.django_db(transaction=True)
def test_concurrent_counter_compactions_keep_every_count():
    for _ in range(5):
        db.add_counters({"jobs_enqueued": 2, "jobs_succeeded": 1})
    expected = CounterDelta.objects.totals()
    _, errors = at_once([db.compact_counters] * 6)
    assert not [e for e in errors if "locked" not in str(e)]
    assert CounterDelta.objects.totals() == expected == {"jobs_enqueued": 10, "jobs_succeeded": 5}
    assert CounterDelta.objects.count() <= 5 * 2


@pytest.mark.django_db
def test_compacting_folds_the_increments_into_one_row_per_name():
    for _ in range(3):
        db.add_counters({"jobs_failed": 1, "jobs_requeued": 2})
    db.compact_counters()
    assert CounterDelta.objects.count() == 2
    assert CounterDelta.objects.totals() == {"jobs_failed": 3, "jobs_requeued": 6}
