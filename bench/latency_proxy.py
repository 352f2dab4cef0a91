"""A TCP proxy on 127.0.0.1 that adds latency: every chunk is passed on a fixed delay after it
arrived, in each direction, so a request and its answer gain twice the delay.

    python bench/latency_proxy.py TARGET_PORT [--delay-ms 10] [--port 0]

Prints `listening <port>` once it accepts connections. Stands in for netem (`tc qdisc … delay`),
which this kernel does not have: the delay holds each chunk back without limiting how many are
on their way, so throughput is what the two ends make of it, only later. Each chunk costs one
timer on the event loop and nothing else (no task or queue per connection), so that the proxy's
own CPU, on a small machine shared with the server and the client, stays out of the way. A side
whose reader lags is paused at the other end (the usual transport flow control). Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio

HOST = "127.0.0.1"


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it receives reaches the other end `delay` later."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.loop = asyncio.get_running_loop()
        self.early: list[bytes] = []  # received before the other end was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.early.append(data)
            return
        self.loop.call_at(self.loop.time() + self.delay, peer.send, data)

    def eof_received(self) -> bool:
        peer = self.peer
        if peer is not None:
            self.loop.call_at(self.loop.time() + self.delay, peer.end)
        return True  # keep our side open for writing until the other side ends too

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None:
            self.loop.call_at(self.loop.time() + self.delay, peer.close)

    # -- what the other end hands over, once its delay has passed ----------------------------

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def end(self) -> None:
        if self.transport is not None and not self.transport.is_closing() and self.transport.can_write_eof():
            self.transport.write_eof()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- flow control: a full write buffer here pauses the reading at the other end ---------

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve(target: int, delay: float, port: int = 0) -> None:
    loop = asyncio.get_running_loop()

    def client_side() -> _Side:
        client = _Side(delay)

        async def connect() -> None:
            try:
                _, server = await loop.create_connection(lambda: _Side(delay), HOST, target)
            except OSError:
                client.close()
                return
            assert isinstance(server, _Side)
            if client.transport is None or client.transport.is_closing():
                server.close()  # the client left while we connected
                return
            client.peer, server.peer = server, client
            for data in client.early:
                client.data_received(data)
            client.early = []

        loop.create_task(connect())
        return client

    server = await loop.create_server(client_side, HOST, port, backlog=1024)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=int, help="the port on 127.0.0.1 to pass connections to")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="delay added in each direction")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: any free one)")
    args = parser.parse_args()
    asyncio.run(serve(args.target, args.delay_ms / 1000, args.port))


if __name__ == "__main__":
    main()
