"""How the worker reads its executors' messages off the pipe (jobs/pool.py)."""

import os
from multiprocessing import Pipe

from jobs.pool import _framed, _messages


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
    assert [theirs.recv_bytes() for _ in range(3)] == [b"one", b"", b"three"]
