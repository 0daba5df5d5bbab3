"""TCP proxies to a redis-server for the tests: one call on its way held (a slow link), or
its reply lost with its connection."""

from __future__ import annotations

import contextlib
import socket
import threading


class _Proxy:
    """A TCP proxy to Redis on a port of its own; ``_serve`` pumps each connection."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.marker: bytes | None = None
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
            self._serve(client, server)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


class HoldingProxy(_Proxy):
    """Holds the first request carrying ``marker`` (once set), and everything after it on
    that connection, until ``released`` is set."""

    def __init__(self, port: int) -> None:
        self.held, self.released = threading.Event(), threading.Event()
        super().__init__(port)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
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
        super().close()


class ReplyCutter(_Proxy):
    """Forwards the first request carrying ``marker`` (once set), then closes that
    connection instead of forwarding the reply: the command ran, its reply is lost."""

    def __init__(self, port: int) -> None:
        self.cut = threading.Event()
        super().__init__(port)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
        doomed = threading.Event()  # this connection's reply is not to be forwarded
        threading.Thread(target=self._pump, args=(client, server, doomed, True)).start()
        threading.Thread(target=self._pump, args=(server, client, doomed, False)).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, doomed: threading.Event, asking: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if asking and self.marker and self.marker in data and not self.cut.is_set():
                    self.cut.set()
                    doomed.set()
                if doomed.is_set() and not asking:
                    break
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
