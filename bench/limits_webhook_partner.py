"""The webhook scenario's partner (bench/limits_webhook.py): an HTTP server on 127.0.0.1 that
answers in 20 ms, and 429 when a tenant has 2 requests in flight or 20 answered within the
last second; and the client both systems' jobs call it with. Standard library only: the
pgqueuer side imports this module in its own venv.

    python bench/limits_webhook_partner.py --port 8790 --log /tmp/requests.log

Each request is logged as one line: arrival (time.time()), tenant, job, status.
"""

import argparse
import asyncio
import collections
import signal
import time
from urllib.parse import parse_qs, urlsplit

ANSWER_SECONDS = 0.02
IN_FLIGHT = 2
PER_SECOND = 20


class TooManyRequests(Exception):
    """The partner answered 429."""


async def deliver(port: int, tenant: str, job: int) -> None:
    """GET the partner for one job of `tenant`; TooManyRequests on a 429."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /hook?t={tenant}&j={job} HTTP/1.0\r\n\r\n".encode())
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        await reader.read()
    finally:
        writer.close()
    if status == 429:
        raise TooManyRequests(f"{tenant} job {job}")
    if status != 200:
        raise RuntimeError(f"partner answered {status}")


class Partner:
    def __init__(self, log):
        self.log = log
        self.in_flight = collections.Counter()
        self.answered = collections.defaultdict(collections.deque)

    async def handle(self, reader, writer):
        line = await reader.readline()
        if not line.strip():  # a probe: connected, asked nothing
            writer.close()
            return
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        arrived, now = time.time(), time.monotonic()
        query = parse_qs(urlsplit(line.split()[1].decode()).query)
        tenant, job = query["t"][0], query["j"][0]
        recent = self.answered[tenant]
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        if self.in_flight[tenant] >= IN_FLIGHT or len(recent) >= PER_SECOND:
            status = 429
        else:
            status = 200
            recent.append(now)
            self.in_flight[tenant] += 1
            try:
                await asyncio.sleep(ANSWER_SECONDS)
            finally:
                self.in_flight[tenant] -= 1
        self.log.write(f"{arrived:.6f} {tenant} {job} {status}\n")
        self.log.flush()
        writer.write(b"HTTP/1.0 %d X\r\nContent-Length: 0\r\n\r\n" % status)
        await writer.drain()
        writer.close()


async def serve(port: int, log_path: str) -> None:
    with open(log_path, "w") as log:
        partner = Partner(log)
        server = await asyncio.start_server(partner.handle, "127.0.0.1", port, backlog=4096)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()


def read_log(log_path: str) -> list[tuple[float, str, int, int]]:
    """(arrival, tenant, job, status) of every request the partner answered."""
    with open(log_path) as log:
        return [
            (float(at), tenant, int(job), int(status))
            for at, tenant, job, status in (line.split() for line in log if line.strip())
        ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.log))


if __name__ == "__main__":
    main()
