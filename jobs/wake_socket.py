"""A socket pair that wakes a loop waiting in poll(): a byte written to one end makes the other
readable. Both ends are non-blocking, so waking never blocks the waker (a byte already waiting
wakes as well as two) and reading stops once the socket is empty."""

import socket


class WakeSocket:
    def __init__(self):
        self.read_end, self.write_end = socket.socketpair()
        self.read_end.setblocking(False)
        self.write_end.setblocking(False)

    def fileno(self) -> int:
        """Readable once woken."""
        return self.read_end.fileno()

    def wake(self) -> None:
        try:
            self.write_end.send(b"\0")
        except OSError:  # BlockingIOError included: a byte is already waiting, or it is closed
            pass

    def drain(self) -> None:
        """Read every waiting byte: readable again only after the next wake-up."""
        try:
            while self.read_end.recv(512):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.read_end.close()
        self.write_end.close()
