"""Many small objects fetched by one thread over several kept-alive connections at once.

A restore of small files is a request per file. With a thread per request in flight, every
system call of every file (the socket's read and write, the file's open, write and link) hands
Python's GIL to another thread: measured in a restore of 5,000 small files from SeaweedFS on
this machine, a quarter of the client's CPU went to those hand-overs (futex waits and wakes,
context switches). Here one thread keeps `in_flight` requests going on non-blocking sockets
with a selector and hands each body to the caller as it is complete, so the work of one file
is done without a switch.

Only what is plain is done here: a whole object answered 200 with its size (Content-Length),
at most SMALL_BODY bytes, and its MD5 where the ETag is one. Anything else (an error answer, a
chunked or oversized body, bytes that do not match, a broken or silent connection, a header
that cannot be sent) gives the item back to the caller, who fetches it the ordinary way: the
same request once more, with its retries, its errors (not found, changed meanwhile) and s3fs
behind it.
"""

from __future__ import annotations

import errno
import hashlib
import selectors
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .backend import md5_of
from .http1 import MAX_HEAD, Answer, Connection, ProtocolError, parse_head

if TYPE_CHECKING:
    from .s3direct import DirectGet

# The body of an answer this path reads whole, at most (larger objects go the ordinary way).
SMALL_BODY = 1 << 20
RECEIVE = 64 << 10
# How often, at most, the loop looks at `stop` and at silent connections while it waits.
TICK = 0.2


@dataclass
class Wanted:
    """One object to fetch whole: `key` relative to the bucket, `etag` from the listing (sent
    as If-Match), `token` the caller's own."""

    key: str
    etag: str | None
    token: Any = None


@dataclass
class _Slot:
    """A connection and the request it carries."""

    conn: Connection
    reused: bool
    item: Wanted | None = None
    out: memoryview | None = None  # what is still to be sent
    data: bytearray = field(default_factory=bytearray)
    answer: Answer | None = None
    scanned: int = 0  # bytes of `data` searched for the head's end
    made: bool = False  # connected by this loop (else taken from the client's pool)
    connecting: bool = False  # a TCP connect (then a TLS handshake) under way
    handshaking: bool = False
    since: float = 0.0  # when it last made progress


def get_many(client: DirectGet, items: Iterable[Wanted], landed: Callable[[Wanted, bytes], None],
             in_flight: int, stop: Callable[[], bool] | None = None) -> list[Wanted]:
    """Fetch each item whole, at most `in_flight` at once, and call `landed(item, body)` for
    each as it comes (in this thread). Returns the others: no good answer came (see the
    module's docstring), or they were not sent because `stop()` turned true or the client
    rests after refusals; the caller fetches them otherwise (or not at all, when stopped)."""
    pending = deque(items)
    left: list[Wanted] = []
    if client.resting():
        return list(pending)
    loop = _Loop(client, landed, left)
    try:
        loop.run(pending, max(1, in_flight), stop)
    finally:
        loop.close()
    left.extend(pending)
    return left


class _Loop:
    def __init__(self, client: DirectGet, landed: Callable[[Wanted, bytes], None], left: list[Wanted]) -> None:
        self.client = client
        self.landed = landed
        self.left = left
        self.selector = selectors.DefaultSelector()
        self.slots: dict[int, _Slot] = {}  # by file descriptor
        self.idle: list[_Slot] = []  # connected, between requests
        self.timeout = client._timeout
        self.done: list[tuple[Wanted, bytes]] = []  # landed, for `landed` once the events are seen to
        self._address: list[Any] | None = None

    # -- the loop ------------------------------------------------------------------------------

    def run(self, pending: deque[Wanted], in_flight: int, stop: Callable[[], bool] | None) -> None:
        while pending or self.slots:
            if stop is not None and stop():
                return  # what is in flight is given back by close()
            while pending and len(self.slots) < in_flight:
                if self.client.resting():
                    return
                item = pending.popleft()
                if not self._start(item):
                    self.left.append(item)
            if not self.slots:
                continue
            ready = self.selector.select(TICK)
            now = time.monotonic()
            for key, _ in ready:
                slot = self.slots.get(key.fd)
                if slot is not None and key.fileobj is slot.conn.sock:  # not a new one on a reused number
                    slot.since = now
                    self._step(slot)
            done, self.done = self.done, []
            for item, body in done:
                self.landed(item, body)
            for slot in [s for s in self.slots.values()
                         if now - s.since > (s.conn.connect_timeout if s.connecting else self.timeout)]:
                self._give_back(slot, again=False)  # silent for the connection's whole timeout

    def close(self) -> None:
        for slot in list(self.slots.values()):
            self._give_back(slot, again=False)
        for slot in self.idle:
            self._keep(slot)
        self.idle.clear()
        self.selector.close()

    # -- one request ---------------------------------------------------------------------------

    def _start(self, item: Wanted) -> bool:
        """Send the request for `item` on an idle or new connection (False: it cannot be sent)."""
        try:
            head = self.client.request_for(item.key, item.etag)
        except ValueError:  # a header that cannot be sent (an ETag with a line break)
            return False
        if self.idle:
            slot = self.idle.pop()
            sock = slot.conn.sock
            assert sock is not None
            self.slots[sock.fileno()] = slot
            self.selector.register(sock, selectors.EVENT_WRITE)
        else:
            slot = self._open()
            if slot is None:
                return False
        slot.item, slot.out = item, memoryview(head)
        slot.data, slot.answer, slot.scanned = bytearray(), None, 0
        slot.since = time.monotonic()
        self.client.requests += 1
        if not slot.connecting:
            try:
                self._send(slot)
            except OSError:  # a kept-alive connection the server reset meanwhile
                self._give_back(slot)
        return True

    def _open(self) -> _Slot | None:
        """A kept-alive connection of the client's, or a new one connecting (non-blocking)."""
        conn, reused = self.client._connection()
        if conn.sock is not None:
            sock = conn.sock
            sock.setblocking(False)
            slot = _Slot(conn, reused)
        else:
            try:
                sock = self._socket(conn)
            except OSError:
                return None
            slot = _Slot(conn, False, made=True, connecting=True)
        self.slots[sock.fileno()] = slot
        self.selector.register(sock, selectors.EVENT_WRITE if slot.connecting else selectors.EVENT_READ)
        return slot

    def _socket(self, conn: Connection) -> socket.socket:
        if self._address is None:
            host, port = conn.address
            self._address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = self._address[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        err = sock.connect_ex(address)
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            raise OSError(err, "connect")
        conn.sock = sock
        return sock

    def _step(self, slot: _Slot) -> None:
        try:
            if slot.connecting:
                self._connected(slot)
            elif slot.handshaking:
                self._handshake(slot)
            elif slot.out is not None:
                self._send(slot)
            else:
                self._receive(slot)
        except (OSError, ProtocolError):
            self._give_back(slot)

    def _connected(self, slot: _Slot) -> None:
        sock = slot.conn.sock
        assert sock is not None
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, "connect")
        slot.connecting = False
        context = slot.conn.context
        if context is not None:
            fd = sock.fileno()
            self.selector.unregister(sock)
            del self.slots[fd]
            wrapped = context.wrap_socket(sock, server_hostname=slot.conn.address[0], do_handshake_on_connect=False)
            slot.conn.sock = wrapped
            self.slots[wrapped.fileno()] = slot
            self.selector.register(wrapped, selectors.EVENT_READ | selectors.EVENT_WRITE)
            slot.handshaking = True
            self._handshake(slot)
        else:
            self._send(slot)

    def _handshake(self, slot: _Slot) -> None:
        sock = slot.conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self.selector.modify(sock, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self.selector.modify(sock, selectors.EVENT_WRITE)
            return
        slot.handshaking = False
        self._send(slot)

    def _send(self, slot: _Slot) -> None:
        sock = slot.conn.sock
        assert sock is not None and slot.out is not None
        try:
            n = sock.send(slot.out)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            n = 0
        slot.out = slot.out[n:] if n < len(slot.out) else None
        self.selector.modify(sock, selectors.EVENT_WRITE if slot.out is not None else selectors.EVENT_READ)

    def _receive(self, slot: _Slot) -> None:
        sock = slot.conn.sock
        assert sock is not None
        while True:
            try:
                chunk = sock.recv(RECEIVE)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            except ssl.SSLWantWriteError:
                return
            if not chunk:
                raise ProtocolError("closed")  # a kept-alive connection the server had closed, or cut
            slot.data += chunk
            if self._answered(slot):
                return
            if not isinstance(sock, ssl.SSLSocket) or not sock.pending():
                return

    def _answered(self, slot: _Slot) -> bool:
        """Whether the slot's answer is complete (and then dealt with)."""
        data = slot.data
        if slot.answer is None:
            end = data.find(b"\r\n\r\n", max(0, slot.scanned - 3))
            if end < 0:
                slot.scanned = len(data)
                if len(data) > MAX_HEAD:
                    raise ProtocolError("head too long")
                return False
            answer = parse_head(data, end)
            del data[:end + 4]
            slot.scanned = 0
            if 100 <= answer.status < 200:
                return self._answered(slot) if data else False  # an interim answer: the next one follows
            if answer.chunked or answer.length is None or answer.length > SMALL_BODY:
                raise ProtocolError("not a body this path reads")
            slot.answer = answer
        answer = slot.answer
        assert answer.length is not None
        if len(data) < answer.length:
            return False
        if len(data) > answer.length:
            raise ProtocolError("more bytes than the answer's body")
        self._landed(slot, answer, bytes(data))
        return True

    def _landed(self, slot: _Slot, answer: Answer, body: bytes) -> None:
        item = slot.item
        assert item is not None
        slot.item, slot.answer, slot.data = None, None, bytearray()
        self._after(slot, answer)
        client = self.client
        tag = md5_of(answer.header("etag"))
        if answer.status != 200 or (tag is not None and hashlib.md5(body).hexdigest() != tag):
            if answer.status == 403:
                client.forget_credentials()
            if answer.status not in (404, 412):
                client._refused(answer.status)
            self.left.append(item)  # the ordinary GET says what it is (gone, changed, another region)
            return
        client.fetched += 1
        client._accepted()
        self.done.append((item, body))

    def _after(self, slot: _Slot, answer: Answer) -> None:
        """The connection after a whole answer: idle for the next request, or closed."""
        sock = slot.conn.sock
        assert sock is not None
        self.selector.unregister(sock)
        del self.slots[sock.fileno()]
        if answer.will_close:
            slot.conn.close()
        else:
            slot.reused = True
            self.idle.append(slot)

    def _give_back(self, slot: _Slot, again: bool = True) -> None:
        """A connection that failed, went silent or is stopped: closed; its item goes back to
        the caller (or, `again`, when a kept-alive connection turned out closed, is sent on
        another)."""
        sock = slot.conn.sock
        if sock is not None:
            fd = sock.fileno()
            if fd in self.slots:
                self.selector.unregister(sock)
                del self.slots[fd]
        slot.conn.close()
        item, slot.item = slot.item, None
        if item is None:
            return
        if again and slot.reused and slot.answer is None and not slot.data and self._start(item):
            return  # a kept-alive connection the server had closed meanwhile: sent again on another
        self.left.append(item)

    def _keep(self, slot: _Slot) -> None:
        """An idle connection back to the client's pool, blocking again."""
        conn = slot.conn
        assert conn.sock is not None
        try:
            if slot.made:
                conn.adopt(conn.sock)  # its options, once
            else:
                conn.blocking()
        except OSError:
            conn.close()
            return
        self.client._release(conn)
