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

    python -m tests.support.redis_server python -m pytest tests/test_pool_conformance.py
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

from django_pdfpool.admission import RedisPool

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_SENTINEL = shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"
DUMP = "dump.rdb"  # written only by save(); loaded by start() when present


def available() -> bool:
    return os.access(REDIS_SERVER, os.X_OK)


def sentinel_available() -> bool:
    return os.access(REDIS_SENTINEL, os.X_OK)


def self_signed(directory: str | Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files in ``directory``),
    made with ``cryptography``: the server's certificate and the clients' CA at once."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pdfpool test redis")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = Path(directory) / "redis.crt", Path(directory) / "redis.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """One redis-server process; ``restart()`` brings it back empty on the same port.
    ``tls``: serve TLS only, with a self-signed certificate (``url`` is then ``rediss://``,
    naming the certificate as the clients' CA); ``options``: more redis-server options."""

    def __init__(self, *, tls: bool = False, options: tuple[str, ...] = ()) -> None:
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.directory: str | None = None
        self.tls, self.options = tls, options
        self.certificate: Path | None = None

    @property
    def url(self) -> str:
        if self.tls:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.certificate}"
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: Any) -> redis.Redis:
        """A client of the test's own (TLS when the server is)."""
        return redis.Redis.from_url(self.url, **options)

    def _listen(self) -> list[str]:
        if not self.tls:
            return ["--port", str(self.port)]
        assert self.directory is not None
        if self.certificate is None:
            self.certificate, self.key = self_signed(self.directory)
        return [
            "--port", "0",
            "--tls-port", str(self.port),
            "--tls-cert-file", str(self.certificate),
            "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.certificate),
            "--tls-auth-clients", "no",
        ]  # fmt: skip

    def start(self, timeout: float = 10.0) -> RedisServer:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="pdfpool-redis-")
        for _attempt in range(5):  # a port found free may be taken before we bind it
            self.port = self.port or free_port()
            self.process = subprocess.Popen(
                [
                    REDIS_SERVER,
                    *self._listen(),
                    "--bind", "127.0.0.1",
                    "--dir", self.directory,
                    "--save", "",
                    "--appendonly", "no",
                    "--dbfilename", DUMP,
                    "--daemonize", "no",
                    "--logfile", str(Path(self.directory) / "redis.log"),
                    *self.options,
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
            if self._pong():
                return True
            time.sleep(0.02)
        return False

    def _pong(self) -> bool:
        """Whether the server answers PING (over TLS when it serves TLS)."""
        try:
            if self.tls:
                with self.client(socket_timeout=0.5, socket_connect_timeout=0.5) as client:
                    return bool(client.ping())
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except (OSError, redis.RedisError):
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
        with self.client(socket_timeout=10) as client:
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
        with self.client(socket_timeout=5) as client:
            for kind in types or ("normal", "pubsub"):
                dropped += int(client.execute_command("CLIENT", "KILL", "TYPE", kind))
        return dropped

    def hold_writes(self, ms: int) -> None:
        """``CLIENT PAUSE ms WRITE``: every script (and PUBLISH) that arrives waits in
        Redis, not run, until ``release_writes()`` or ``ms`` pass; reads go on."""
        with self.client(socket_timeout=5) as client:
            client.execute_command("CLIENT", "PAUSE", str(ms), "WRITE")

    def release_writes(self) -> None:
        """``CLIENT UNPAUSE``."""
        with self.client(socket_timeout=5) as client:
            client.execute_command("CLIENT", "UNPAUSE")

    def blocked(self) -> int:
        """Clients whose command waits in Redis (``blocked_clients``: held scripts)."""
        with self.client(socket_timeout=5) as client:
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


class SentinelSet:
    """A primary, a replica of it and one redis-sentinel watching them (quorum 1, a
    primary is down after ``down_after`` ms): real failover on loopback. ``service`` is
    the primary's name; ``url`` the pool's URL (its host is the service name)."""

    service = "pdfpool-primary"

    def __init__(self, down_after: int = 500) -> None:
        self.primary = RedisServer()
        self.replica: RedisServer | None = None
        self.down_after = down_after
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.directory = tempfile.mkdtemp(prefix="pdfpool-sentinel-")

    @property
    def url(self) -> str:
        return f"redis://{self.service}/0"

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.port)]

    def start(self, timeout: float = 15.0) -> SentinelSet:
        self.primary.start()
        self.replica = RedisServer(
            options=("--replicaof", "127.0.0.1", str(self.primary.port))
        ).start()
        self.port = free_port()
        config = Path(self.directory) / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} {self.down_after}\n"
            f"sentinel failover-timeout {self.service} 3000\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        self.process = subprocess.Popen(
            [REDIS_SENTINEL, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while not self._sees_the_replica():
            assert self.process.poll() is None, "redis-sentinel exited"
            assert time.monotonic() < deadline, "redis-sentinel did not find the replica"
            time.sleep(0.05)
        return self

    def ask(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=2
        )

    def _sees_the_replica(self) -> bool:
        try:
            with self.ask() as sentinel:
                replicas = sentinel.sentinel_slaves(self.service)
        except (OSError, redis.RedisError):
            return False
        return any(
            not {"s_down", "disconnected"} & set(r.get("flags", "").split(",")) for r in replicas
        ) and bool(replicas)

    def primary_port(self) -> int:
        """The port of the primary the Sentinel names now."""
        with self.ask() as sentinel:
            return int(sentinel.sentinel_get_master_addr_by_name(self.service)[1])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(5)
        self.process = None
        for server in (self.primary, self.replica):
            if server is not None:
                server.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


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
