"""One kept-alive HTTP/1.1 connection for the store's small requests: a request sent in one
write, the answer's status line and headers read by a lean parser.

`http.client` parses each answer's headers through the `email` package's feed parser and
builds a file object per answer: measured in a restore of small files, about a third of the
client's CPU went there, more than signing, the file system and the bytes themselves. What an
S3 GET or PUT needs from an answer is its status and a few headers, so that is all this reads:
the head whole (at most MAX_HEAD bytes, lines ending CRLF), then the body by its
Content-Length, chunked, or up to the close. Anything else is a ProtocolError, which callers
treat as "no good answer" and send the request another way.
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from . import splice

# An answer's status line and headers together, at most (http.client allows 100 headers of 64 KiB).
MAX_HEAD = 64 << 10
MAX_HEADERS = 100
# Bytes asked of the socket at once while reading a head or a body.
RECEIVE = 64 << 10


class ProtocolError(OSError):
    """An answer this client does not understand, or a connection closed before its end."""


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case; repeats joined by ", "
    length: int | None = None  # the body's size where the answer says it
    chunked: bool = False
    will_close: bool = False  # the connection serves no other request after this answer

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


class Connection:
    """A connection to `netloc` ("host", "host:port", "[v6]:port"), TLS where `context` is
    given; `timeout` for every read and write, and for the connect unless `connect_timeout`
    is given (a store that drops connection attempts is found out sooner than one that is slow
    to answer)."""

    def __init__(self, netloc: str, context: ssl.SSLContext | None = None, timeout: float = 60.0,
                 connect_timeout: float | None = None) -> None:
        parts = urlsplit(f"//{netloc}")
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if context is not None else 80)
        self._context = context
        self._timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        self.sock: socket.socket | None = None  # connected by the first request
        self._held = bytearray()  # bytes received beyond what has been read

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), self.connect_timeout)
        try:
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._host)
            self.adopt(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    @property
    def address(self) -> tuple[str, int]:
        return self._host, self._port

    @property
    def context(self) -> ssl.SSLContext | None:
        return self._context

    def adopt(self, sock: socket.socket) -> None:
        """Serve requests on `sock`, connected (TLS where the connection has a context) by the
        caller or by the first request: blocking, with the connection's timeout."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._context is None and hasattr(socket, "SO_RCVTIMEO"):
            # The same timeout kept by the kernel: a Python socket with a timeout polls before
            # every read and write, two system calls more per request. A read or write that
            # times out fails with EAGAIN (see _timed_out).
            whole = int(self._timeout)
            limit = struct.pack("ll", whole, int((self._timeout - whole) * 1e6))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
        self.sock = sock
        self.blocking()

    def blocking(self) -> None:
        """Blocking again with the connection's timeout, after a spell without (`adopt` made it)."""
        assert self.sock is not None
        kernel = self._context is None and hasattr(socket, "SO_RCVTIMEO")
        self.sock.settimeout(None if kernel else self._timeout)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()

    def send(self, method: str, target: str, headers: dict[str, str], body: bytes = b"") -> None:
        """The request line, `headers` and `body` in one write (a header value with a line break
        is a ValueError: it would end the header early)."""
        data = request(method, target, headers)
        sock = self.sock or self._connect()
        try:
            sock.sendall(data + body if body else data)
        except BlockingIOError:
            raise _timed_out() from None

    def answer(self) -> Answer:
        """The next answer's status and headers (an interim 1xx answer is passed over); its body
        is read next, by `read_body` or `readinto`. ProtocolError where the connection closed
        before a whole head or the head is not HTTP/1.x as this client reads it."""
        while True:
            answer = self._head()
            if not 100 <= answer.status < 200 or answer.status == 101:
                return answer

    def _recv(self, size: int) -> bytes:
        assert self.sock is not None, "read before a request"
        try:
            return self.sock.recv(size)
        except BlockingIOError:
            raise _timed_out() from None

    def _head(self) -> Answer:
        held = self._held
        start = 0
        while True:
            end = held.find(b"\r\n\r\n", max(0, start - 3))
            if end >= 0:
                break
            if len(held) > MAX_HEAD:
                raise ProtocolError(f"an answer's head longer than {MAX_HEAD} bytes")
            start = len(held)
            chunk = self._recv(RECEIVE)
            if not chunk:
                raise ProtocolError("the connection closed before an answer" if not held
                                    else "the connection closed in the middle of an answer's head")
            held += chunk
        answer = parse_head(held, end)
        del held[:end + 4]
        return answer

    def held(self) -> int:
        """How many bytes of the body have been received already (read them with `readinto`)."""
        return len(self._held)

    def readinto(self, view: memoryview) -> int:
        """Up to len(view) bytes of the body: those already received first, then one read of the
        socket. 0: the connection closed."""
        if self._held:
            n = min(len(view), len(self._held))
            view[:n] = self._held[:n]
            del self._held[:n]
            return n
        assert self.sock is not None, "read before a request"
        try:
            return self.sock.recv_into(view, len(view))
        except BlockingIOError:
            raise _timed_out() from None

    def splice_into(self, fd: int, offset: int, count: int, told: Callable[[int], None] | None,
                    every: int) -> tuple[int, bool]:
        """Up to `count` bytes of the body from the socket straight into `fd` at `offset`
        (sync/splice.py), once the bytes already received are read: the bytes written, and
        whether splicing went on to the end or the connection's end; (n, False): the rest is
        for `readinto`. Only on a plain TCP socket whose timeout the kernel keeps."""
        if self._held or self._context is not None or self.sock is None or self.sock.gettimeout() is not None:
            return 0, False
        try:
            return splice.socket_into_file(self.sock.fileno(), fd, offset, count, told, every)
        except BlockingIOError:
            raise _timed_out() from None

    def read_body(self, answer: Answer, limit: int) -> bytes:
        """The whole body of `answer`, at most `limit` bytes (ProtocolError beyond, or when the
        connection closes before its end)."""
        if answer.chunked:
            return self._chunked(limit)
        if answer.length is None:
            while len(self._held) <= limit:
                chunk = self._recv(RECEIVE)
                if not chunk:
                    body = bytes(self._held)
                    self._held.clear()
                    return body
                self._held += chunk
            raise ProtocolError(f"a body larger than {limit} bytes")
        if answer.length > limit:
            raise ProtocolError(f"a body of {answer.length} bytes, more than {limit}")
        return self._exactly(answer.length)

    def _exactly(self, size: int) -> bytes:
        held = self._held
        while len(held) < size:
            chunk = self._recv(max(RECEIVE, size - len(held)))
            if not chunk:
                raise ProtocolError(f"the connection closed {size - len(held)} bytes before the body's end")
            held += chunk
        if len(held) == size:
            body = bytes(held)
            held.clear()
            return body
        body = bytes(held[:size])
        del held[:size]
        return body

    def _line(self) -> str:
        held = self._held
        while (end := held.find(b"\r\n")) < 0:
            if len(held) > 4096:
                raise ProtocolError("a chunk's size line longer than 4096 bytes")
            chunk = self._recv(RECEIVE)
            if not chunk:
                raise ProtocolError("the connection closed in the middle of a chunked body")
            held += chunk
        line = held[:end].decode("latin-1")
        del held[:end + 2]
        return line

    def _chunked(self, limit: int) -> bytes:
        body = bytearray()
        while True:
            size_text = self._line().partition(";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"not a chunk size: {size_text[:40]!r}") from None
            if size < 0 or len(body) + size > limit:
                raise ProtocolError(f"a body larger than {limit} bytes")
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return bytes(body)
            body += self._exactly(size)
            if self._line():
                raise ProtocolError("a chunk longer than its size")


def _timed_out() -> TimeoutError:
    """What a read or write that ran past the kernel's timeout (EAGAIN on a blocking socket)
    raises: the TimeoutError a socket with a Python timeout would."""
    return TimeoutError("timed out")


def request(method: str, target: str, headers: dict[str, str]) -> bytes:
    """A request's line and headers as sent (ValueError: a header value with a line break,
    which would end the head early)."""
    lines = [f"{method} {target} HTTP/1.1\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise ValueError(f"a line break in the value of {name}")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def parse_head(data: bytes | bytearray, end: int) -> Answer:
    """The answer whose status line and headers are data[:end] (data[end:end + 4] is the blank
    line that ends them). ProtocolError where it is not HTTP/1.x as this client reads it."""
    if end > MAX_HEAD:
        raise ProtocolError(f"an answer's head longer than {MAX_HEAD} bytes")
    lines = data[:end].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit() or rest[3:4] not in ("", " "):
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    if len(lines) - 1 > MAX_HEADERS:
        raise ProtocolError(f"more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise ProtocolError(f"not a header line: {line[:80]!r}")
        name = name.lower()
        value = value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    answer = Answer(int(code), headers)
    connection = {token.strip().lower() for token in headers.get("connection", "").split(",")}
    answer.will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if answer.status in (204, 304) or 100 <= answer.status < 200:
        answer.length = 0
    elif "transfer-encoding" in headers:
        if headers["transfer-encoding"].lower() != "chunked":
            raise ProtocolError(f"a body sent as {headers['transfer-encoding']!r}")
        answer.chunked = True
    elif "content-length" in headers:
        sizes = {size.strip() for size in headers["content-length"].split(",")}
        size = sizes.pop()
        if sizes or not size.isdigit():
            raise ProtocolError(f"not a body size: {headers['content-length'][:40]!r}")
        answer.length = int(size)
    else:
        answer.will_close = True  # the body runs to the close
    return answer
