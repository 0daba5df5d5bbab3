"""A TCP proxy to a redis-server for the tests: one call on its way, held (a slow link)."""

from __future__ import annotations

import contextlib
import socket
import threading


class HoldingProxy:
    """A TCP proxy to Redis that holds the first request carrying ``marker`` (once set),
    and everything after it on that connection, until ``released`` is set."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.marker: bytes | None = None
        self.held, self.released = threading.Event(), threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client = self.listener.accept()[0]
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:  # Redis is down: so is this connection
                client.close()
                continue
            self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.marker and self.marker in data and not self.held.is_set():
                    self.held.set()
                    self.released.wait()
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.released.set()
        self.listener.close()
        for sock in self.sockets:
            sock.close()
