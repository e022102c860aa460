"""How a stop signal reaches the worker's loop: its handler runs, and the loop's wait wakes.

The signal module writes a byte to a socket the loop also waits on (set_wakeup_fd), so a
signal never waits for the loop's timeout.
"""

import signal
from multiprocessing.connection import wait

from .wake_socket import WakeSocket

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalPipe:
    def __init__(self):
        self.socket = WakeSocket()
        self.previous = {}  # signal -> the handler before ours, put back by `restore`

    def fileno(self) -> int:
        return self.socket.fileno()

    def install(self, handler):
        signal.set_wakeup_fd(self.socket.write_end.fileno(), warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self.previous[sig] = signal.signal(sig, handler)

    def restore(self):
        signal.set_wakeup_fd(-1)
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def drain(self):
        self.socket.drain()

    def sleep(self, seconds):
        """Wait `seconds`, or less if a signal comes."""
        if wait([self.socket.read_end], seconds):
            self.drain()
