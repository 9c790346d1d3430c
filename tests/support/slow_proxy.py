"""A TCP proxy that holds what a client sends for a while before passing it on: a slow broker, for the tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType


class SlowProxy:
    """Listens on a free local port and forwards to `target`; every chunk from the client waits `delay` seconds
    (in order) before it goes on, so every round trip through it takes at least that long. Replies pass at once."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []

    def __enter__(self) -> SlowProxy:
        threading.Thread(target=self._accept, daemon=True, name="slow-proxy").start()
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._closed.set()
        for sock in [self._listener, *self._sockets]:
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, self.delay), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, 0.0), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, delay: float) -> None:
        try:
            while chunk := src.recv(65536):
                if delay:
                    time.sleep(delay)  # the point of this proxy: the broker is slow
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
