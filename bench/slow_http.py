"""A local HTTP server answering every GET after a fixed delay (bench/async_jobs.py's peer).

.venv/bin/python bench/slow_http.py --port 8765 --ms 100
"""

import argparse
import asyncio

from aiohttp import web


def app(ms: int) -> web.Application:
    async def slow(request):
        await asyncio.sleep(ms / 1000)
        return web.Response(text="ok")

    application = web.Application()
    application.router.add_get("/", slow)
    return application


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--ms", type=int, default=100)
    args = parser.parse_args()
    web.run_app(app(args.ms), host="127.0.0.1", port=args.port, print=None, backlog=4096)


if __name__ == "__main__":
    main()
