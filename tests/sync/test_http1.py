"""The lean HTTP/1.1 connection behind the direct S3 requests (sync/http1.py), against a socket
server that sends exactly the bytes each test scripts, split where a parser goes wrong first."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest

from jupyter_gpu_ws.sync.http1 import MAX_HEAD, Connection, ProtocolError


class Scripted:
    """Accepts one connection; for each request it reads, sends the next answer's pieces (with
    a pause between pieces, so that the client receives them apart), then closes if told."""

    def __init__(self, answers: list[list[bytes]], close_after: bool = False) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answers = answers
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            pending = b""
            for pieces in self.answers:
                while b"\r\n\r\n" not in pending:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                request, _, pending = pending.partition(b"\r\n\r\n")
                self.requests.append(request + b"\r\n\r\n")
                for piece in pieces:
                    conn.sendall(piece)
                    time.sleep(0.005)
            if not self.close_after:
                conn.recv(1)  # keep the connection open until the client closes it

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def script() -> Iterator[list[Scripted]]:
    made: list[Scripted] = []
    yield made
    for server in made:
        server.close()


def serve(made: list[Scripted], *answers: list[bytes], close_after: bool = False) -> Connection:
    server = Scripted(list(answers), close_after)
    made.append(server)
    return Connection(f"127.0.0.1:{server.port}", None, 5.0)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def test_a_head_split_anywhere_is_read_whole_and_the_connection_serves_the_next_answer(script: list[Scripted]) -> None:
    first = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"abc\"\r\nX-Amz-Meta-A: 1\r\nx-amz-meta-a: 2\r\n\r\nhello"
    second = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"
    conn = serve(script, pieces(first, 3), [second])  # the first one arrives three bytes at a time
    conn.send("GET", "/bucket/a", {"host": "s3"})
    answer = conn.answer()
    assert (answer.status, answer.length, answer.will_close) == (200, 5, False)
    assert answer.header("etag") == '"abc"'
    assert answer.header("x-amz-meta-a") == "1, 2"  # a repeated header, joined
    assert conn.read_body(answer, 100) == b"hello"
    conn.send("GET", "/bucket/b", {"host": "s3"})
    answer = conn.answer()
    assert (answer.status, conn.read_body(answer, 100)) == (404, b"not found")
    assert script[0].requests == [b"GET /bucket/a HTTP/1.1\r\nhost: s3\r\n\r\n",
                                  b"GET /bucket/b HTTP/1.1\r\nhost: s3\r\n\r\n"]
    conn.close()


def test_a_chunked_body_is_decoded_and_an_interim_answer_passed_over(script: list[Scripted]) -> None:
    answer_bytes = (b"HTTP/1.1 100 Continue\r\n\r\n"
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n")
    after = b"HTTP/1.1 204 No Content\r\n\r\n"
    conn = serve(script, pieces(answer_bytes, 7), [after])
    conn.send("PUT", "/bucket/a", {"content-length": "3"}, b"abc")
    answer = conn.answer()
    assert answer.status == 200 and answer.chunked
    assert conn.read_body(answer, 100) == b"hello world"
    conn.send("GET", "/bucket/a", {})
    answer = conn.answer()
    assert answer.status == 204 and conn.read_body(answer, 100) == b""  # nothing left over from the chunks
    assert script[0].requests[0] == b"PUT /bucket/a HTTP/1.1\r\ncontent-length: 3\r\n\r\n"
    conn.close()


@pytest.mark.parametrize("head, closes", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\n", True),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", True),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", False),
])
def test_whether_the_connection_serves_again_is_read_from_the_answer(
        script: list[Scripted], head: bytes, closes: bool) -> None:
    conn = serve(script, [head + b"ok"])
    conn.send("GET", "/", {})
    answer = conn.answer()
    assert answer.will_close is closes
    assert conn.read_body(answer, 10) == b"ok"
    conn.close()


def test_a_body_without_a_size_runs_to_the_close(script: list[Scripted]) -> None:
    conn = serve(script, [b"HTTP/1.1 200 OK\r\n\r\n", b"all of ", b"it"], close_after=True)
    conn.send("GET", "/", {})
    answer = conn.answer()
    assert answer.will_close and answer.length is None
    assert conn.read_body(answer, 100) == b"all of it"
    conn.close()


def test_the_body_received_with_the_head_is_read_first_then_the_socket(script: list[Scripted]) -> None:
    body = bytes(range(256)) * 1000
    conn = serve(script, [b"HTTP/1.1 200 OK\r\nContent-Length: 256000\r\n\r\n" + body[:1000], body[1000:]])
    conn.send("GET", "/", {})
    assert conn.answer().length == len(body)
    assert conn.held() == 1000  # what came in the head's packet
    out = bytearray()
    view = memoryview(bytearray(4096))
    while len(out) < len(body):
        n = conn.readinto(view[:min(4096, len(body) - len(out))])
        assert n
        out += view[:n]
    assert bytes(out) == body
    conn.close()


@pytest.mark.parametrize("answer_bytes, says", [
    (b"ICY 200 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header line"),
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n\r\n", "header line"),
    (b"HTTP/1.1 200 OK\r\nName : 1\r\n\r\n", "header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n", "body size"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "body size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "sent as"),
    (b"HTTP/1.1 200 OK\r\nContent-Len", "closed in the middle"),
    (b"", "closed before an answer"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * MAX_HEAD + b"\r\n\r\n", "longer than"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "more than 100 headers"),
])
def test_an_answer_it_does_not_understand_is_a_protocol_error(
        script: list[Scripted], answer_bytes: bytes, says: str) -> None:
    conn = serve(script, [answer_bytes], close_after=True)
    conn.send("GET", "/", {})
    with pytest.raises(ProtocolError, match=says):
        conn.answer()
    conn.close()


@pytest.mark.parametrize("answer_bytes, says", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "5 bytes before the body's end"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + b"x" * 200, "more than 100"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "before the body's end"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not a chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n", "longer than its size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n" + b"x" * 101 + b"\r\n0\r\n\r\n", "larger than 100"),
    (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 200, "larger than 100"),
])
def test_a_body_cut_short_or_too_large_is_a_protocol_error(
        script: list[Scripted], answer_bytes: bytes, says: str) -> None:
    conn = serve(script, [answer_bytes], close_after=True)
    conn.send("GET", "/", {})
    answer = conn.answer()
    with pytest.raises(ProtocolError, match=says):
        conn.read_body(answer, 100)
    conn.close()


def test_a_header_value_with_a_line_break_is_refused_before_anything_is_sent(script: list[Scripted]) -> None:
    conn = serve(script, [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    with pytest.raises(ValueError, match="if-match"):
        conn.send("GET", "/", {"if-match": '"abc"\r\nx-injected: 1'})
    conn.send("GET", "/", {"if-match": '"abc"'})  # the connection is still clean
    assert conn.answer().status == 200
    assert script[0].requests == [b'GET / HTTP/1.1\r\nif-match: "abc"\r\n\r\n']
    conn.close()


def test_a_refused_connection_is_an_os_error_at_the_first_request() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    conn = Connection(f"127.0.0.1:{port}", None, 2.0)  # nothing listens there any more
    with pytest.raises(OSError):
        conn.send("GET", "/", {})
    conn.close()


def test_a_server_that_never_answers_is_a_timeout_after_the_connections_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        conn = Connection(f"127.0.0.1:{port}", None, 0.4)
        outcome: list[BaseException | None] = []

        def ask() -> None:
            try:
                conn.send("GET", "/", {})
                conn.answer()
                outcome.append(None)
            except BaseException as err:  # noqa: BLE001 - what the test looks at
                outcome.append(err)

        started = time.monotonic()
        thread = threading.Thread(target=ask, daemon=True)
        thread.start()
        thread.join(10)
        took = time.monotonic() - started
        conn.close()
    assert outcome and isinstance(outcome[0], TimeoutError), outcome  # not a wait without end
    assert 0.3 < took < 5
    assert conn.sock is not None and conn.sock.gettimeout() is None  # kept by the kernel: no poll per call
