"""An HTTPS proxy on 127.0.0.1 in front of an S3 server (SeaweedFS) that fails in one chosen way
at a time, switched while it runs through a control port: `GET /mode/<name>`.

Modes: `pass` forwards; `stall` reads each request and answers nothing until the mode changes;
`reset` reads it and resets the connection (RST, SO_LINGER 0); `503` answers S3's SlowDown;
`412` refuses every conditional PUT (If-Match, If-None-Match) with PreconditionFailed and
forwards the rest; `bucket-missing` answers NoSuchBucket; `credentials` forwards with the
request's signature altered, so that the S3 server itself refuses it (SignatureDoesNotMatch);
`untrusted-ca` and `self-signed-ca` give new connections a certificate signed by a CA the
client does not trust, or a CA certificate used as the server's own (and forward).

Every switch closes the connections open at that moment: an S3 client keeps its connections
alive, and a fault must meet its next request, not the one after a reconnection.
"""

from __future__ import annotations

import _socket
import contextlib
import http.client
import re
import socket
import ssl
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback import HOST, TLSFiles

MODES = (
    "pass",
    "stall",
    "reset",
    "503",
    "412",
    "bucket-missing",
    "credentials",
    "untrusted-ca",
    "self-signed-ca",
)


def _context(files: TLSFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert_file, files.key_file)
    return context


def _xml_error(code: str, message: str, **more: str) -> bytes:
    """An error as S3 answers one."""
    fields = "".join(f"<{name}>{value}</{name}>" for name, value in more.items())
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>{fields}</Error>"
    ).encode()


class FaultProxy:
    """The proxy (`url`, HTTPS) and its control port (`control_url`); `close()` stops both."""

    def __init__(
        self, target_port: int, trusted: TLSFiles, untrusted: TLSFiles, self_signed: TLSFiles
    ) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self._changed = threading.Condition()
        self._contexts = {
            "untrusted-ca": _context(untrusted),
            "self-signed-ca": _context(self_signed),
        }
        self._trusted = _context(trusted)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        self._server = _ProxyServer(self)
        self._control = ThreadingHTTPServer((HOST, 0), _Control)
        self._control.proxy = self  # type: ignore[attr-defined]
        for server in (self._server, self._control):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self._server.server_port}"

    @property
    def control_url(self) -> str:
        return f"http://{HOST}:{self._control.server_port}"

    def switch(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"no such mode: {mode}")
        with self._changed:
            self.mode = mode
            self._changed.notify_all()
        with self._open_lock:
            connections, self._open = list(self._open), set()
        for conn in connections:
            # The plain socket's shutdown, under the TLS layer that a handler thread may be in.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(conn, socket.SHUT_RDWR)

    def context_now(self) -> ssl.SSLContext:
        return self._contexts.get(self.mode, self._trusted)

    def wait_while(self, mode: str) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.mode != mode)

    def opened(self, conn: socket.socket) -> None:
        with self._open_lock:
            self._open.add(conn)

    def closed(self, conn: socket.socket) -> None:
        with self._open_lock:
            self._open.discard(conn)

    def close(self) -> None:
        for server in (self._server, self._control):
            server.shutdown()
            server.server_close()
        self.switch("pass")


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__((HOST, 0), _Forward)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        # The certificate of the mode at the connection's start; the handshake is made in the
        # connection's own thread, on its first read.
        wrapped = self.proxy.context_now().wrap_socket(
            conn, server_side=True, do_handshake_on_connect=False
        )
        self.proxy.opened(wrapped)
        return wrapped, address

    def shutdown_request(self, request: Any) -> None:
        self.proxy.closed(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a refused certificate, a connection closed by a switch: what the tests cause


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    server: _ProxyServer

    def log_message(self, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.request.do_handshake()  # raises where the client refuses the certificate

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self._body()
        mode = proxy.mode
        if mode == "stall":
            proxy.wait_while("stall")  # the switch closes this connection meanwhile
            self.close_connection = True
        elif mode == "reset":
            # Closed at once with a zero linger: an RST, not a FIN. (The C-level close: the
            # Python one waits for the handler's reader and writer to be closed first.)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            _socket.socket.close(self.connection)
            self.close_connection = True
        elif mode == "503":
            self._answer(503, _xml_error("SlowDown", "Please reduce your request rate."))
        elif mode == "bucket-missing":
            bucket = self.path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
            message = "The specified bucket does not exist"
            self._answer(404, _xml_error("NoSuchBucket", message, BucketName=bucket))
        elif (
            mode == "412"
            and self.command == "PUT"
            and ("If-Match" in self.headers or "If-None-Match" in self.headers)
        ):
            self._answer(
                412,
                _xml_error(
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                ),
            )
        else:
            self._forward(body, mode == "credentials")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, body: bytes, spoil_signature: bool) -> None:
        upstream = http.client.HTTPConnection(HOST, self.server.proxy.target_port, timeout=60)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() == "transfer-encoding":
                    continue
                if name.lower() == "authorization" and spoil_signature:
                    # One hex digit of the signature changed: the server finds it does not match.
                    value = re.sub(
                        r"Signature=([0-9a-f]*)([0-9a-f])",
                        lambda m: f"Signature={m.group(1)}{'0' if m.group(2) != '0' else '1'}",
                        value,
                    )
                upstream.putheader(name, value)
            if "Content-Length" not in self.headers:
                upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            # Its own Server and Date, and the framing of this connection, not the upstream's.
            if name.lower() not in (
                "transfer-encoding",
                "connection",
                "content-length",
                "server",
                "date",
            ):
                self.send_header(name, value)
        if response.status not in (204, 304):
            # A HEAD's answer states the object's length, with no body.
            length = response.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class _Control(BaseHTTPRequestHandler):
    """`GET /mode/<name>` switches (200, or 404 for an unknown mode); `GET /mode` tells."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
        name = self.path.removeprefix("/mode").strip("/")
        status = 200
        if name:
            try:
                proxy.switch(name)
            except ValueError:
                status = 404
        body = (proxy.mode if status == 200 else f"no such mode: {name}").encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
