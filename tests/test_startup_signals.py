import os
import signal

from jobs import startup_signals


def test_a_signal_during_start_up_is_held_for_the_worker_to_replay():
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        startup_signals.hold()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert startup_signals.release() == [signal.SIGTERM, signal.SIGINT]
        assert startup_signals.release() == []
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
