import time
import uuid

from jobs.ids import _own_uuid7, new_job_id


def test_a_new_job_id_is_a_version_7_uuid():
    job_id = new_job_id()
    assert (job_id.version, job_id.variant) == (7, uuid.RFC_4122)


def test_the_fallback_is_a_version_7_uuid_starting_with_the_time_in_milliseconds():
    before = time.time_ns() // 1_000_000
    job_id = _own_uuid7()
    after = time.time_ns() // 1_000_000
    assert (job_id.version, job_id.variant) == (7, uuid.RFC_4122)
    assert before <= job_id.int >> 80 <= after


def test_ids_made_a_millisecond_apart_sort_in_the_order_they_were_made():
    first = new_job_id()
    time.sleep(0.002)
    assert first < new_job_id()


def test_ids_made_in_the_same_millisecond_still_differ():
    assert len({_own_uuid7() for _ in range(10_000)}) == 10_000
