"""A TCP proxy on 127.0.0.1 that adds latency: every chunk is passed on a fixed delay after it
arrived, in each direction, so a request and its answer gain twice the delay.

    python bench/latency_proxy.py TARGET_PORT [--delay-ms 10] [--rate-mbps 0] [--port 0]

Prints `listening <port>` once it accepts connections. Stands in for netem (`tc qdisc … delay`),
which this kernel does not have: the delay holds each chunk back without limiting how many are
on their way, so throughput is what the two ends make of it, only later. Each chunk costs one
timer on the event loop and nothing else (no task or queue per connection), so that the proxy's
own CPU, on a small machine shared with the server and the client, stays out of the way. A side
whose reader lags is paused at the other end (the usual transport flow control). Loopback only.

With `--rate-mbps N`, each proxied connection is also limited to N megabytes (10^6 bytes) per
second in each direction, as object stores cap each connection (S3 serves roughly 100 MB/s per
connection): a chunk is passed on once the bytes before it and itself would have crossed a link
of that rate, then the delay; a connection that gets ahead of its rate by more than RATE_AHEAD
seconds' worth is not read from until it falls back, so the proxy holds little of it. The
connections together are limited only by what the machine can do.
"""

from __future__ import annotations

import argparse
import asyncio

HOST = "127.0.0.1"
# A rate-limited connection is read from while what it sent is at most this long ahead of its rate.
RATE_AHEAD = 0.05


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it receives reaches the other end `delay` later."""

    def __init__(self, delay: float, rate: float = 0.0) -> None:
        self.delay = delay
        self.rate = rate  # bytes per second from this side to the other; 0: no limit
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.loop = asyncio.get_running_loop()
        self.early: list[bytes] = []  # received before the other end was connected
        self.free_at = 0.0  # when the limited link is free for the next chunk
        self.held: set[str] = set()  # why reading from this side is paused: "flow", "rate"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.early.append(data)
            return
        now = self.loop.time()
        if not self.rate:
            self.loop.call_at(now + self.delay, peer.send, data)
            return
        self.free_at = max(self.free_at, now) + len(data) / self.rate
        self.loop.call_at(self.free_at + self.delay, peer.send, data)
        if self.free_at - now > RATE_AHEAD:
            self.hold("rate")
            self.loop.call_at(self.free_at - RATE_AHEAD / 2, self.release, "rate")

    def eof_received(self) -> bool:
        peer = self.peer
        if peer is not None:
            self.loop.call_at(self.passed_on(), peer.end)
        return True  # keep our side open for writing until the other side ends too

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None:
            self.loop.call_at(self.passed_on(), peer.close)

    def passed_on(self) -> float:
        """A moment after all this side has received so far is at the other end (after its rate,
        if any): the event loop does not keep the order of timers due at the same time."""
        return max(self.loop.time(), self.free_at) + self.delay + 0.001

    # -- what the other end hands over, once its delay has passed ----------------------------

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def end(self) -> None:
        if (
            self.transport is not None
            and not self.transport.is_closing()
            and self.transport.can_write_eof()
        ):
            try:
                self.transport.write_eof()
            except OSError:  # this end has gone meanwhile: nothing left to tell it
                self.transport.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- flow control: a full write buffer here pauses the reading at the other end ---------

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.hold("flow")

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.release("flow")

    def hold(self, why: str) -> None:
        if not self.held and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self.held.add(why)

    def release(self, why: str) -> None:
        if why not in self.held:
            return
        self.held.discard(why)
        if not self.held and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


async def serve(target: int, delay: float, port: int = 0, rate: float = 0.0) -> None:
    loop = asyncio.get_running_loop()

    def client_side() -> _Side:
        client = _Side(delay, rate)

        async def connect() -> None:
            try:
                _, server = await loop.create_connection(lambda: _Side(delay, rate), HOST, target)
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
    parser.add_argument(
        "--delay-ms", type=float, default=10.0, help="delay added in each direction"
    )
    parser.add_argument(
        "--rate-mbps",
        type=float,
        default=0.0,
        help="each connection's limit, MB (10^6 bytes) per second in each direction; 0: none",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: any free one)"
    )
    args = parser.parse_args()
    if args.rate_mbps < 0 or args.delay_ms < 0:
        parser.error("--delay-ms and --rate-mbps cannot be negative")
    asyncio.run(serve(args.target, args.delay_ms / 1000, args.port, args.rate_mbps * 1e6))


if __name__ == "__main__":
    main()
