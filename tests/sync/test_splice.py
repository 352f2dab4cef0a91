"""Bytes from a TCP socket straight into a file (sync/splice.py), and the lean connection's use
of it (http1.Connection.splice_into), over real sockets on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from jupyter_gpu_ws.sync import splice
from jupyter_gpu_ws.sync.http1 import Connection

pytestmark = pytest.mark.skipif(not splice.ENABLED, reason="this system has no splice")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair: (the sender's end, the receiver's end, blocking)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sender = socket.create_connection(listener.getsockname())
        receiver, _ = listener.accept()
    try:
        yield sender, receiver
    finally:
        sender.close()
        receiver.close()


def _send_in_background(sock: socket.socket, data: bytes, then_close: bool = False) -> threading.Thread:
    def send() -> None:
        sock.sendall(data)
        if then_close:
            sock.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_exactly_the_bytes_asked_land_at_their_offset_and_the_next_answer_stays_in_the_socket(
        pair: tuple[socket.socket, socket.socket], tmp_path: Path) -> None:
    sender, receiver = pair
    body = os.urandom(5 * splice.PIPE + 4321)  # more than the pipe holds, odd sized
    after = b"HTTP/1.1 200 OK\r\n"  # a kept-alive connection's next answer
    thread = _send_in_background(sender, body + after)
    offset = 7777
    fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * offset, 0)
        told: list[int] = []
        every = 1 << 20
        assert splice.socket_into_file(receiver.fileno(), fd, offset, len(body), told.append, every) == (len(body), True)
        thread.join(10)
        assert (tmp_path / "out").read_bytes() == b"x" * offset + body
        assert sum(told) == len(body) and max(told) <= every  # told in steps, none larger than asked
        assert len(told) >= len(body) // every
        receiver.settimeout(5)
        assert receiver.recv(100) == after  # not one byte of it was taken
    finally:
        os.close(fd)


def test_a_connection_that_ends_early_gives_what_came_in_large_moves(
        pair: tuple[socket.socket, socket.socket], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sender, receiver = pair
    body = os.urandom(3 * splice.PIPE + 17)
    thread = _send_in_background(sender, body, then_close=True)
    calls: list[int] = []
    real = os.splice

    def counted(*args: object, **kwargs: object) -> int:
        n = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(n)
        return n

    monkeypatch.setattr(os, "splice", counted)
    fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
    try:
        assert splice.socket_into_file(receiver.fileno(), fd, 0, len(body) + 1000, None, 1 << 20) == (len(body), True)
        thread.join(10)
        assert (tmp_path / "out").read_bytes() == body
    finally:
        os.close(fd)
    # Moves as large as the socket has bytes for, not a few bytes at a time: at least a page
    # each on average (in and out), however the sender's writes happened to arrive.
    assert sum(calls) == 2 * len(body) and len(calls) < 2 * len(body) // 4096


def test_a_file_that_takes_no_splice_gets_the_pipes_bytes_and_the_caller_the_rest(
        pair: tuple[socket.socket, socket.socket], tmp_path: Path) -> None:
    """A file opened for appending takes no splice (EINVAL): what is already in the pipe is
    written by read and pwrite, and the rest stays in the socket for the caller."""
    sender, receiver = pair
    body = os.urandom(4 * splice.PIPE)
    thread = _send_in_background(sender, body)
    fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        told: list[int] = []
        written, going = splice.socket_into_file(receiver.fileno(), fd, 0, len(body), told.append, 1 << 20)
        assert not going and 0 < written < len(body) and sum(told) == written
        receiver.settimeout(5)
        rest = b""
        while len(rest) < len(body) - written:
            rest += receiver.recv(1 << 20)
        thread.join(10)
        assert (tmp_path / "out").read_bytes() + rest == body  # nothing lost, nothing twice
    finally:
        os.close(fd)
    # The pipe went back empty: the next move through it carries only its own bytes.
    sender2, receiver2 = socket.socketpair()
    with sender2, receiver2:
        sender2.sendall(b"abc")
        sender2.shutdown(socket.SHUT_WR)
        fd = os.open(tmp_path / "again", os.O_RDWR | os.O_CREAT)
        try:
            assert splice.socket_into_file(receiver2.fileno(), fd, 0, 3, None, 1 << 20) == (3, True)
            assert (tmp_path / "again").read_bytes() == b"abc"
        finally:
            os.close(fd)


def _answering(listener: socket.socket, *pieces: bytes) -> None:
    """Serve one connection from `listener`: read a request, send `pieces` apart (0.2 s
    between them, so that the client receives them apart), then hold the connection open
    until the client closes it."""

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for i, piece in enumerate(pieces):
                if i:
                    time.sleep(0.2)
                conn.sendall(piece)
            conn.recv(1)

    threading.Thread(target=serve, daemon=True).start()


def test_a_stalled_body_is_a_timeout_on_the_connection(tmp_path: Path) -> None:
    """Splicing waits no longer than a read would: the connection's timeout (kept by the
    kernel) ends it with the TimeoutError a read raises, with what came already in the file."""
    body_start = os.urandom(2 * splice.PIPE)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        # The head apart from the body (nothing of the body is held), then part of the body
        # and nothing more.
        _answering(listener, b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n", body_start)
        conn = Connection(f"127.0.0.1:{listener.getsockname()[1]}", None, 0.5)
        fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
        try:
            conn.send("GET", "/big", {})
            answer = conn.answer()
            assert answer.length == 99999999 and conn.held() == 0
            assert conn.sock is not None
            assert struct.unpack("ll", conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)) == (0, 500000)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                conn.splice_into(fd, 0, answer.length, None, 1 << 20)
            assert 0.3 < time.monotonic() - started < 5
            assert (tmp_path / "out").read_bytes() == body_start
        finally:
            os.close(fd)
            conn.close()


def test_a_connection_splices_only_a_plain_socket_once_the_bytes_it_holds_are_read(tmp_path: Path) -> None:
    body = os.urandom(3 * splice.PIPE)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        _answering(listener, f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        conn = Connection(f"127.0.0.1:{listener.getsockname()[1]}", None, 5.0)
        fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
        try:
            conn.send("GET", "/big", {})
            answer = conn.answer()
            written = 0
            if conn.held():  # what came with the head is the connection's to give first
                assert conn.splice_into(fd, 0, len(body), None, 1 << 20) == (0, False)
                buffer = memoryview(bytearray(conn.held()))
                written = conn.readinto(buffer)
                os.pwrite(fd, buffer[:written], 0)
            assert answer.length is not None
            assert conn.splice_into(fd, written, answer.length - written, None, 1 << 20) == (len(body) - written, True)
            assert (tmp_path / "out").read_bytes() == body
        finally:
            os.close(fd)
            conn.close()
