"""A real redis-server for the tests: a free loopback port, its own data directory,
no persistence (``--save "" --appendonly no``), stopped (and its directory removed)
afterwards. Never the system's service.

Faults for the fault-injection tests: ``kill`` (SIGKILL: state gone), ``restart``
(empty, or with ``keep_data`` from the last ``save()``: an RDB dump in the server's
own directory, as a restart of a persistent Redis, or a failover to a replica that
missed the last writes, would come back), ``pause``/``resume`` (SIGSTOP/SIGCONT: a
server that stops answering without closing anything) and ``drop_clients``
(``CLIENT KILL`` from a separate connection: every client connection of a type
dropped at once, scripts on their way included); ``hold_writes`` (``CLIENT PAUSE
WRITE``) keeps the scripts that arrive waiting in Redis, so that they can be dropped
before they run.

As a command, it runs another command beside a fresh server, with the server's URL
in ``PDFPOOL_TEST_REDIS_URL`` (the Makefile's second conformance run)::

    python -m tests.redis_server python -m pytest tests/test_pool_conformance.py
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from django_pdfpool.pool import RedisPool

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
DUMP = "dump.rdb"  # written only by save(); loaded by start() when present


def available() -> bool:
    return os.access(REDIS_SERVER, os.X_OK)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """One redis-server process; ``restart()`` brings it back empty on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.directory: str | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="pdfpool-redis-")
        for _attempt in range(5):  # a port found free may be taken before we bind it
            self.port = self.port or free_port()
            self.process = subprocess.Popen(
                [
                    REDIS_SERVER,
                    "--port", str(self.port),
                    "--bind", "127.0.0.1",
                    "--dir", self.directory,
                    "--save", "",
                    "--appendonly", "no",
                    "--dbfilename", DUMP,
                    "--daemonize", "no",
                    "--logfile", str(Path(self.directory) / "redis.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if self._ready(timeout):
                return self
            self.process.kill()
            self.process.wait()
            self.port = 0
        raise RuntimeError("redis-server did not start")

    def _ready(self, timeout: float) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def kill(self) -> None:
        """Stop the server at once (SIGKILL): connections break, state is gone
        (but for what ``save()`` wrote, which ``start()`` loads)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()  # a stopped (SIGSTOP) process dies of it too
            self.process.wait()
        self.process = None

    def restart(self, keep_data: bool = False) -> None:
        """Kill, then start again on the same port: empty, or with ``keep_data`` as
        the last ``save()`` left it (a ``save()`` is made now if there was none)."""
        dump = Path(self.directory or ".") / DUMP
        if keep_data and not dump.exists():
            self.save()
        self.kill()
        if not keep_data:
            dump.unlink(missing_ok=True)
        self.start()

    def save(self) -> None:
        """Write the dataset to the server's directory (``SAVE``), for ``restart``."""
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10) as client:
            client.save()

    def forget_saved(self) -> None:
        """Remove what ``save()`` wrote: the next ``start()`` is empty."""
        if self.directory is not None:
            (Path(self.directory) / DUMP).unlink(missing_ok=True)

    def pause(self) -> None:
        """SIGSTOP: the server stops answering; connections stay open."""
        assert self.process is not None and self.process.poll() is None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: the server answers again, running what was sent meanwhile."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def drop_clients(self, *types: str) -> int:
        """``CLIENT KILL TYPE t`` for each type (default: normal and pubsub) from a
        connection of its own (not dropped); return how many connections were dropped."""
        dropped = 0
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5) as client:
            for kind in types or ("normal", "pubsub"):
                dropped += int(client.execute_command("CLIENT", "KILL", "TYPE", kind))
        return dropped

    def hold_writes(self, ms: int) -> None:
        """``CLIENT PAUSE ms WRITE``: every script (and PUBLISH) that arrives waits in
        Redis, not run, until ``release_writes()`` or ``ms`` pass; reads go on."""
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5) as client:
            client.execute_command("CLIENT", "PAUSE", str(ms), "WRITE")

    def release_writes(self) -> None:
        """``CLIENT UNPAUSE``."""
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5) as client:
            client.execute_command("CLIENT", "UNPAUSE")

    def blocked(self) -> int:
        """Clients whose command waits in Redis (``blocked_clients``: held scripts)."""
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5) as client:
            return int(client.info("clients")["blocked_clients"])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


LEASE = 1.0  # seconds: short, so that a dead process is reaped within a test's patience


BOOKS = ("stats", "qwait", "runs")  # the cluster's counters and durations: they outlive jobs


def namespace_keys(url: str, namespace: str, *, books: bool = False) -> list[str]:
    """Every key of the namespace, by SCAN (the pool's keys are ``{namespace}:...``),
    but for the cluster's books (kept for days on purpose) unless ``books``."""
    prefix = "{" + namespace + "}:"
    with redis.Redis.from_url(url, decode_responses=True) as client:
        found = sorted(client.scan_iter(match=prefix + "*", count=1000))
    return [key for key in found if books or key.removeprefix(prefix) not in BOOKS]


def pools_in(server: RedisServer, namespace: str) -> tuple[Callable[..., RedisPool], Any]:
    """A factory of pools on ``server`` in ``namespace``, and the list it fills."""
    made: list[RedisPool] = []

    def make(slots: int = 2, queue: int = 4, wait: float | None = 10.0, **options: Any):
        options.setdefault("lease", LEASE)
        pool = RedisPool(slots, queue, wait, url=server.url, namespace=namespace, **options)
        made.append(pool)
        return pool

    return make, made


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if not available():  # like the Redis tests themselves: skipped, and said so
        print("SKIPPED: redis-server is not installed (apt-get install redis-server)")
        return 0
    with RedisServer() as server:
        env = {**os.environ, "PDFPOOL_TEST_REDIS_URL": server.url}
        return subprocess.call(argv, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
