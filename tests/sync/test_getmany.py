"""Many small objects from one thread over several connections (sync/getmany.py), against a
stand-in store whose answer depends on the key: whole bodies, refusals, bodies this path does
not read, a server that goes silent or closes kept-alive connections; over HTTP and TLS."""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from jupyter_gpu_ws.sync.getmany import SMALL_BODY, Wanted
from jupyter_gpu_ws.sync.s3direct import Credentials, DirectGet
from tests.sync.test_s3direct import _self_signed


def body_of(key: str) -> bytes:
    """ok-<size>: that many bytes, different for each key (by its last part)."""
    key = key.rpartition("/")[2]
    size = int(key.rpartition("-")[2])
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


class Store:
    """Answers each GET by the last part of its path:
    ok-N (200, N bytes, their MD5 as ETag), slow-N (the same, sent 7 bytes at a time),
    interim-N (a 100 Continue first), closing-N (and Connection: close), gone (404),
    chunked (a chunked body), forged-N (an ETag that is not the body's MD5), silent (no answer).
    With `hang_up`, the server closes each connection after its answer without saying so."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.context = context
        self.connections = 0
        self.requests: list[str] = []
        self.hang_up = False
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            pending = b""
            while True:
                while b"\r\n\r\n" not in pending:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                head, _, pending = pending.partition(b"\r\n\r\n")
                path = head.split(b" ")[1].decode()
                with self.lock:
                    self.requests.append(path)
                key = path.rpartition("/")[2]
                if not self._answer(conn, key, head) or self.hang_up:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def _answer(self, conn: socket.socket, key: str, head: bytes) -> bool:
        kind = key.partition("-")[0]
        if kind == "silent":
            time.sleep(30)
            return False
        if kind == "gone":
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNoSuchKey")
            return True
        if kind == "chunked":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
            return True
        data = body_of(key)
        tag = hashlib.md5(b"something else" if kind == "forged" else data).hexdigest()
        assert f'if-match: "{hashlib.md5(data).hexdigest()}"'.encode() in head.lower()  # the listing's ETag
        extra = "Connection: close\r\n" if kind == "closing" else ""
        answer = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\nETag: \"{tag}\"\r\n{extra}"
                  f"Server: stand-in\r\n\r\n").encode() + data
        if kind == "interim":
            answer = b"HTTP/1.1 100 Continue\r\n\r\n" + answer
        if kind == "slow":
            for i in range(0, len(answer), 7):
                conn.sendall(answer[i:i + 7])
                time.sleep(0.001)
        else:
            conn.sendall(answer)
        return kind != "closing"

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for conn in self.open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture
def stores() -> Iterator[list[Store]]:
    made: list[Store] = []
    yield made
    for store in made:
        store.close()


def client_for(made: list[Store], tmp_path: Path, scheme: str = "http", timeout: float = 10.0) -> tuple[Store, DirectGet]:
    server_context = client_context = None
    if scheme == "https":
        server_context, client_context = _self_signed(tmp_path)
    store = Store(server_context)
    made.append(store)
    client = DirectGet(scheme, f"127.0.0.1:{store.port}", "/bucket/", "us-east-1",
                       lambda: Credentials("AKID", "secret"), ssl_context=client_context, timeout=timeout)
    return store, client


def wanted(key: str) -> Wanted:
    etag = None if key.startswith(("gone", "chunked", "silent")) else hashlib.md5(body_of(key)).hexdigest()
    if key.startswith("forged"):
        etag = hashlib.md5(body_of(key)).hexdigest()  # the listing's, not what the answer will say
    return Wanted(key, etag, token=key)


def fetch(client: DirectGet, keys: list[str], in_flight: int, stop=None) -> tuple[dict[str, bytes], list[str], float]:
    landed: dict[str, bytes] = {}
    threads: set[int] = set()

    def got(item: Wanted, body: bytes) -> None:
        threads.add(threading.get_ident())
        assert item.token not in landed, "landed twice"
        landed[item.token] = body

    started = time.monotonic()
    left = client.get_many([wanted(key) for key in keys], got, in_flight, stop)
    assert threads <= {threading.get_ident()}, "bodies are handed over in the caller's thread"
    return landed, [item.token for item in left], time.monotonic() - started


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_many_objects_come_whole_over_as_many_connections_as_in_flight_and_those_serve_again(
        stores: list[Store], tmp_path: Path, scheme: str) -> None:
    sizes = [0, 1, 100, 4095, 65536 + 7, 300_000, SMALL_BODY]
    keys = [f"dir/ok-{i}-{sizes[i % len(sizes)]}" for i in range(150)] + [f"slow-{n}" for n in (0, 5000)]
    store, client = client_for(stores, tmp_path, scheme)
    landed, left, _ = fetch(client, keys, in_flight=6)
    assert left == []
    assert landed == {key: body_of(key) for key in keys}  # every body whole, each once
    assert store.connections <= 6 and len(store.requests) == len(keys)
    assert client.fetched == len(keys)
    # The connections went back to the client's pool, blocking again: an ordinary GET uses one.
    assert client._spare.qsize() == store.connections
    fd = None
    try:
        import os

        fd = os.open(tmp_path / "one", os.O_RDWR | os.O_CREAT)
        assert client.get("ok-7-100", fd, etag=wanted("ok-7-100").etag) == 100
        assert (tmp_path / "one").read_bytes() == body_of("ok-7-100")
    finally:
        if fd is not None:
            os.close(fd)
    assert store.connections <= 6  # no new connection for it
    client.close()


def test_answers_this_path_does_not_take_are_given_back_and_the_rest_land(stores: list[Store], tmp_path: Path) -> None:
    store, client = client_for(stores, tmp_path)
    good = ["ok-a-10", "interim-b-20", "closing-c-30", "ok-d-40", "closing-e-50", "ok-f-0"]
    bad = ["gone", "chunked", "forged-x-60", f"ok-big-{SMALL_BODY + 1}"]
    keys = [key for pair in zip(good, bad + ["", ""]) for key in pair if key]
    landed, left, _ = fetch(client, keys, in_flight=3)
    assert landed == {key: body_of(key) for key in good}
    assert sorted(left) == sorted(bad)
    assert client.fetched == len(good)
    # A server that says it closes is not asked again on that connection: with a connection
    # each for the two closing answers, and the error answers' connections (chunked, too
    # large) dropped, more than the three in flight were opened.
    assert store.connections > 3
    assert not client.resting()  # 404 and one refusal are not a store that refuses


def test_a_silent_store_gives_the_items_back_after_the_timeout(stores: list[Store], tmp_path: Path) -> None:
    store, client = client_for(stores, tmp_path, timeout=0.6)
    landed, left, took = fetch(client, ["silent-1", "ok-a-10", "silent-2", "ok-b-20"], in_flight=4)
    assert landed == {"ok-a-10": body_of("ok-a-10"), "ok-b-20": body_of("ok-b-20")}
    assert sorted(left) == ["silent-1", "silent-2"]
    assert 0.5 < took < 5


def test_kept_alive_connections_the_store_closed_meanwhile_are_no_failure(stores: list[Store], tmp_path: Path) -> None:
    store, client = client_for(stores, tmp_path)
    keys = [f"ok-{i}-{i * 10}" for i in range(20)]
    assert fetch(client, keys, in_flight=4)[1] == []
    kept = client._spare.qsize()
    assert kept > 0
    store.hang_up = True  # from now on each connection serves one answer, then the server closes it
    with store.lock:
        for conn in store.open:
            conn.shutdown(socket.SHUT_RDWR)  # every idle connection closed by the server
    landed, left, _ = fetch(client, keys, in_flight=4)
    assert left == [] and landed == {key: body_of(key) for key in keys}


def test_once_stop_turns_true_nothing_more_is_sent_and_the_rest_is_given_back(stores: list[Store], tmp_path: Path) -> None:
    store, client = client_for(stores, tmp_path)
    keys = [f"ok-{i}-100" for i in range(40)]
    seen: list[str] = []

    def stop() -> bool:
        return len(seen) >= 5

    landed: dict[str, bytes] = {}

    def got(item: Wanted, body: bytes) -> None:
        seen.append(item.token)
        landed[item.token] = body

    left = [item.token for item in client.get_many([wanted(k) for k in keys], got, 2, stop)]
    assert 5 <= len(landed) <= 7  # what was in flight when it turned true may still land
    assert set(landed) | set(left) == set(keys)
    assert not set(landed) & set(left)
    assert len(store.requests) < len(keys)  # the rest was never asked for


def test_a_store_that_refuses_makes_the_client_rest_and_everything_is_given_back(
        stores: list[Store], tmp_path: Path) -> None:
    store, client = client_for(stores, tmp_path)
    keys = [f"ok-{i}-10" for i in range(30)]
    original = Store._answer

    def refuse(self: Store, conn: socket.socket, key: str, head: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        return True

    Store._answer = refuse  # type: ignore[method-assign]
    try:
        landed, left, _ = fetch(client, keys, in_flight=2)
    finally:
        Store._answer = original  # type: ignore[method-assign]
    assert landed == {} and sorted(left) == sorted(keys)
    assert client.resting()
    assert len(store.requests) < len(keys)  # it stopped asking once it rests
