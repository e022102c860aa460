"""A real PgBouncer in transaction mode in front of the tests' PostgreSQL, for one test module.

Debian's `pgbouncer` package; where no binary exists the tests using it are skipped with a
message, as the browser tests are without Chromium. `.ci/run` starts its own for a whole leg.
"""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

BINARY = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(directory: Path, *, host: str, port: int, user: str, pool_size: int = 4, extra=""):
    """Start PgBouncer (transaction mode) forwarding every database to host:port; returns
    (process, its port). `extra`: more lines of its [pgbouncer] section."""
    listen = free_port()
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={host} port={port}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/users.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits,options
{extra}
"""
    )
    command = [BINARY, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(directory, "postgres")
        for f in directory.iterdir():
            shutil.chown(f, "postgres")
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"pgbouncer exited: {process.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
            return process, listen
        except OSError:
            time.sleep(0.1)
    process.kill()
    pytest.fail("pgbouncer did not listen within 10 s")


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
