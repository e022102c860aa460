"""How the worker reads its executors' messages off the pipe (jobs/pool/wire.py)."""

import os
import threading
import time
from multiprocessing import Pipe

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.pool import wire
from jobs.pool.wire import Channel, Inbox, _framed, _messages


def test_messages_read_in_pieces_come_out_whole_and_in_order():
    sent = [b"first", b"", b"x" * 100_000, b"last"]
    ours, theirs = Pipe()
    for message in sent:
        theirs.send_bytes(message)
    theirs.close()
    stream = b""
    while chunk := os.read(ours.fileno(), 1 << 16):
        stream += chunk
    buffer, received = bytearray(), []
    for start in range(0, len(stream), 7):  # any cut: mid-header, mid-message
        buffer += stream[start : start + 7]
        received += _messages(buffer)
    assert received == sent
    assert buffer == bytearray()


def test_an_incomplete_message_stays_for_the_rest():
    buffer = bytearray(b"\x00\x00\x00\x05abc")
    assert _messages(buffer) == []
    buffer += b"de\x00\x00"
    assert _messages(buffer) == [b"abcde"]
    assert buffer == bytearray(b"\x00\x00")


def test_jobs_framed_by_the_worker_are_read_by_the_child_one_by_one():
    ours, theirs = Pipe()
    os.write(ours.fileno(), b"".join(_framed(m) for m in (b"one", b"", b"three")))
    inbox = Inbox(theirs)
    assert [inbox.next() for _ in range(3)] == [b"one", b"", b"three"]


def test_the_child_reads_jobs_written_together_in_one_read(monkeypatch):
    ours, theirs = Pipe()
    os.write(ours.fileno(), b"".join(_framed(b"job %d" % n) for n in range(8)))
    reads, real_read = [], os.read
    monkeypatch.setattr(wire.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    inbox = Inbox(theirs)
    assert [inbox.next() for _ in range(8)] == [b"job %d" % n for n in range(8)]
    assert len(reads) == 1


def test_the_child_waits_for_the_rest_of_a_job_larger_than_the_pipe_and_sees_a_close():
    ours, theirs = Pipe()
    job = bytes(range(256)) * 10_000  # 2.5 MB: many pipe buffers
    writer = threading.Thread(target=ours.send_bytes, args=(job,))
    writer.start()
    inbox = Inbox(theirs)
    assert inbox.next() == job
    writer.join(10)
    os.write(ours.fileno(), _framed(b"cut short")[:-3])
    ours.close()
    with pytest.raises(EOFError):
        inbox.next()


def _echo_child(conn, reply_sizes):
    """An executor's side: read a job (blocking), then write its outcome (blocking)."""
    inbox = Inbox(conn)
    for size in reply_sizes:
        message = inbox.next()
        conn.send_bytes(message[:8] + b"r" * size)
    conn.close()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1, 100, 4_095, 65_536, 70_000, 300_000, 1_100_000]),
            st.sampled_from([0, 1, 100, 65_535, 70_000, 300_000, 1_100_000]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_jobs_and_outcomes_of_any_size_cross_the_pipe_without_either_side_waiting(sizes):
    ours, theirs = Pipe()
    child = threading.Thread(target=_echo_child, args=(theirs, [r for _, r in sizes]))
    child.start()
    channel = Channel(ours)
    for n, (job_size, _) in enumerate(sizes):  # all written ahead, as prefetched jobs are
        channel.queue(n.to_bytes(8, "big") + b"j" * job_size)
    received, deadline = [], time.monotonic() + 30
    while len(received) < len(sizes):
        assert time.monotonic() < deadline, "the pipe wedged"
        assert not channel.closed
        channel.flush()
        if channel.wait(0.05):
            received += channel.read()
    child.join(10)
    assert not channel.unsent
    assert [int.from_bytes(m[:8], "big") for m in received] == list(range(len(sizes)))
    assert [len(m) - 8 for m in received] == [r for _, r in sizes]
    ours.close()


def test_an_attempts_kind_crosses_the_pipe_as_plain_text_and_comes_back_as_its_enum():
    import pickle
    import uuid

    from jobs.outcome import Ran, RanKind, now
    from jobs.pool.wire import _ran_codec

    ran = Ran(uuid.uuid4(), RanKind.CRASHED, error_type="ExecutorCrashed", finished_at=now())
    flat = _ran_codec().flat(ran)
    assert type(flat[1]) is str and flat[1] == "crashed"
    assert b"RanKind" not in pickle.dumps(flat)
    back = _ran_codec().build(pickle.loads(pickle.dumps(flat)))
    assert back == ran
    assert type(back.kind) is RanKind
