"""A TCP proxy on 127.0.0.1 in front of a store server that can be told to stall: while
`stalled`, it accepts connections and reads requests but passes nothing on and answers
nothing, as a store behind a broken link or an overloaded gateway does."""

from __future__ import annotations

import contextlib
import socket
import threading


class StallProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.stalled = threading.Event()
        self._listening = socket.create_server(("127.0.0.1", 0))
        self._listening.settimeout(0.2)
        self.port = self._listening.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self._listening.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listening.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                data = source.recv(65536)
                if not data:
                    break
                while self.stalled.is_set() and not self._stop.is_set():
                    self._stop.wait(0.05)  # held: nothing passes while stalled
                sink.sendall(data)
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
