"""The socket pair that wakes a waiting loop."""

import select

from jobs.wake_socket import WakeSocket


def readable(wake: WakeSocket) -> bool:
    return bool(select.select([wake.fileno()], [], [], 0)[0])


def test_a_wake_up_makes_it_readable_until_drained():
    wake = WakeSocket()
    assert not readable(wake)

    wake.wake()
    assert readable(wake)
    wake.drain()

    assert not readable(wake)
    wake.close()


def test_waking_never_blocks_however_often_nobody_reads():
    wake = WakeSocket()
    for _ in range(100_000):  # far beyond a socket buffer
        wake.wake()

    assert readable(wake)
    wake.drain()
    assert not readable(wake)
    wake.close()


def test_waking_or_draining_a_closed_socket_is_harmless():
    wake = WakeSocket()
    wake.close()

    wake.wake()
    wake.drain()
