"""Small files to S3 by one lean signed PUT each (sync/s3direct.py), against botocore's own
signer and a real S3 server (SeaweedFS on loopback checks every signature)."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ssl
import threading
from pathlib import Path
from typing import Any, Callable

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from jupyter_gpu_ws.sync import SyncEngine
from jupyter_gpu_ws.sync.s3direct import FAILURES_TO_PAUSE, Credentials, DirectPut, authorization
from jupyter_gpu_ws.sync.remote import FsspecBackend
from tests.sync.conftest import tree_files, write
from tests.sync.s3server import S3Server
from tests.sync.conftest import S3_BUCKET
from tests.sync.test_s3 import bucket_keys, bucket_read, mirror_keys

Make = Callable[..., SyncEngine]

# Names whose encoding a signer gets wrong first: spaces, reserved and non-ASCII characters.
ODD_NAMES = [
    "plain.txt",
    "with space/and+plus.txt",
    "percent%20literal.txt",
    "q?mark#hash.txt",
    "eq=amp&semi;comma,.txt",
    "tilde~star*bang!quote'(paren)[br]{cu}$@.txt",
    "ünïcødé/日本語.txt",
    "deep/a/b/c/d/e/f.txt",
]


@pytest.mark.parametrize("token", [None, "a-session-token"])
@pytest.mark.parametrize("key", ["bucket/plain.txt", "bucket/with%20space/and%2Bplus.txt",
                                 "bucket/%C3%BC%2A%21.txt"])
def test_signature_is_the_one_botocore_computes(monkeypatch: pytest.MonkeyPatch, key: str, token: str | None) -> None:
    when = datetime.datetime(2026, 11, 30, 1, 2, 3, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    body = b"some bytes of a small file\n"
    payload = hashlib.sha256(body).hexdigest()
    url = f"http://127.0.0.1:8333/{key}"
    request = AWSRequest(method="PUT", url=url, data=body,
                         headers={"Content-MD5": "abc=", "X-Amz-Content-SHA256": payload})
    signer = botocore.auth.S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", "secret/key+1", token), "s3", "eu-west-3")
    signer.add_auth(request)

    headers = {"host": "127.0.0.1:8333", "content-md5": "abc=", "x-amz-content-sha256": payload,
               "x-amz-date": "20261130T010203Z"}
    if token:
        headers["x-amz-security-token"] = token
    ours = authorization("PUT", f"/{key}", headers, payload, "20261130T010203Z", "eu-west-3",
                         Credentials("AKIDEXAMPLE", "secret/key+1", token))
    assert ours == request.headers["Authorization"]


def _backend(engine: SyncEngine) -> FsspecBackend:
    backend = engine.backend
    assert isinstance(backend, FsspecBackend)
    return backend


def test_small_files_go_by_direct_put_and_arrive_whole(
        workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make) -> None:
    for i, name in enumerate(ODD_NAMES):
        write(workdir, name, f"file {i}: {name}\n".encode() * (i + 1))
    write(workdir, "empty.txt", b"")
    engine = make_engine(workdir, store_url=s3_url)
    report = engine.sync()
    assert report.ok, report.errors
    direct = _backend(engine).direct_put()
    assert direct is not None, "a plain S3 store should use the direct PUT"
    assert direct.sent == len(ODD_NAMES) + 1
    # Read back by botocore itself: the keys are the names, the bytes are the files'.
    assert mirror_keys(s3_env, s3_url) == set(tree_files(workdir))
    for name, data in tree_files(workdir).items():
        assert bucket_read(s3_env, s3_url, f"ws/files/{name}") == data


def test_a_refused_direct_put_falls_back_to_s3fs_and_rests_after_a_few(
        workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make) -> None:
    write(workdir, "a.txt", "first")
    engine = make_engine(workdir, store_url=s3_url, concurrency=1)
    assert engine.sync().ok
    direct = _backend(engine).direct_put()
    assert direct is not None and direct.sent == 1
    # The shortcut's credentials go stale (as rotated keys would): the server refuses it.
    direct._fetch_credentials = lambda: Credentials("wrong-key", "wrong-secret")
    direct.forget_credentials()
    requests = direct.requests
    write(workdir, "a.txt", "second")
    for i in range(FAILURES_TO_PAUSE + 3):
        write(workdir, f"new/{i}.txt", f"new {i}")
    report = engine.sync()
    assert report.ok, report.errors
    assert direct.sent == 1  # nothing more went the short way
    assert direct.requests == requests + FAILURES_TO_PAUSE  # then it rested: s3fs alone
    assert bucket_read(s3_env, s3_url, "ws/files/a.txt") == b"second"
    for i in range(FAILURES_TO_PAUSE + 3):
        assert bucket_read(s3_env, s3_url, f"ws/files/new/{i}.txt") == f"new {i}".encode()


class RegionalStore(http.server.BaseHTTPRequestHandler):
    """An S3 stand-in that only takes signatures for eu-west-1 and says so otherwise, as S3
    does for a bucket in another region than the request was signed for."""

    def do_PUT(self) -> None:  # noqa: N802 - the http.server name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if "/eu-west-1/s3/aws4_request" in self.headers["Authorization"]:
            self.send_response(200)
            self.send_header("ETag", f'"{hashlib.md5(body).hexdigest()}"')
        else:
            self.send_response(400)
            self.send_header("x-amz-bucket-region", "eu-west-1")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_bucket_in_another_region_is_signed_for_its_own_after_one_refusal() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RegionalStore)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        direct = DirectPut("http", f"127.0.0.1:{server.server_port}", "/bucket/", "us-east-1",
                           lambda: Credentials("AKID", "secret"))
        data = b"a small file"
        assert direct.put("a.txt", data, hashlib.md5(data).digest())
        assert direct.region == "eu-west-1" and direct.requests == 2
        assert direct.put("b.txt", data, hashlib.md5(data).digest())
        assert direct.requests == 3  # straight to the right region from then on
        assert not direct.put("c.txt", data, hashlib.md5(b"other bytes").digest())  # an ETag that does not match
        direct.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_closed_the_kept_alive_connection_is_no_failure(
        workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make) -> None:
    write(workdir, "a.txt", "one")
    engine = make_engine(workdir, store_url=s3_url)
    assert engine.sync().ok
    direct = _backend(engine).direct_put()
    assert direct is not None and direct._idle
    for conn in direct._idle:
        conn.sock.close()  # as if the server had closed it while idle  # type: ignore[union-attr]
    write(workdir, "a.txt", "two")
    assert engine.sync().ok
    assert direct.sent == 2
    assert bucket_read(s3_env, s3_url, "ws/files/a.txt") == b"two"


def test_no_direct_put_where_requests_carry_extra_arguments(
        workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make) -> None:
    write(workdir, "a.txt", "x")
    engine = make_engine(workdir, store_url=s3_url,
                         storage_options={"s3_additional_kwargs": {"StorageClass": "STANDARD"}})
    assert engine.sync().ok
    assert _backend(engine).direct_put() is None
    assert bucket_read(s3_env, s3_url, "ws/files/a.txt") == b"x"


class BodyStore(http.server.BaseHTTPRequestHandler):
    """Serves one object of BODY bytes (whole or a Range) on kept-alive connections, counting
    the connections; with `cut` set, the next answer stops halfway and the connection closes."""

    protocol_version = "HTTP/1.1"
    body = b""
    connections: set[int] = set()
    cut = False

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        type(self).connections.add(id(self.connection))
        data, status = self.body, 200
        wanted = self.headers.get("Range")
        if wanted:
            first, last = (int(v) for v in wanted.removeprefix("bytes=").split("-"))
            data, status = data[first:last + 1], 206
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Partial Content'}\r\n"
                f"Content-Length: {len(data)}\r\nETag: \"not-an-md5-3\"\r\n\r\n").encode()
        if type(self).cut:
            type(self).cut = False
            data = data[:len(data) // 2]
            self.close_connection = True
        # The headers and the body's start in one write: the client's reader holds some of the
        # body along with the headers, which must come first.
        self.wfile.write(head + data)

    def log_message(self, *args: object) -> None:
        pass


def _self_signed(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh certificate for 127.0.0.1, and a client context that trusts it."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                       serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return server, ssl.create_default_context(cafile=str(folder / "cert.pem"))


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_large_body_goes_from_the_socket_to_the_file_whole_and_the_connection_serves_again(
        tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from jupyter_gpu_ws.sync import splice
    from jupyter_gpu_ws.sync.s3direct import PROGRESS_EVERY, RECEIVE, SMALL_BODY, DirectGet

    spliced: list[int] = []
    real = splice.socket_into_file

    def counted(*args: Any, **kwargs: Any) -> tuple[int, bool]:
        got = real(*args, **kwargs)
        spliced.append(got[0])
        return got

    monkeypatch.setattr(splice, "socket_into_file", counted)

    BodyStore.body = os.urandom(SMALL_BODY + 3 * RECEIVE + 12345)  # odd sized: the last chunk is short
    BodyStore.connections = set()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BodyStore)
    client_context = None
    if scheme == "https":  # the socket read straight is then a TLS socket with its own buffering
        server_context, client_context = _self_signed(tmp_path)
        server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    direct = DirectGet(scheme, f"127.0.0.1:{server.server_port}", "/bucket/", "us-east-1",
                       lambda: Credentials("AKID", "secret"), ssl_context=client_context)
    target = tmp_path / "out"
    fd = os.open(target, os.O_RDWR | os.O_CREAT)
    try:
        told: list[int] = []
        assert direct.get("big.bin", fd, progress=told.append) == len(BodyStore.body)
        assert target.read_bytes() == BodyStore.body
        assert sum(told) == len(BodyStore.body) and max(told) <= PROGRESS_EVERY + RECEIVE  # told in steps
        if scheme == "http" and splice.ENABLED:  # past what came with the head: socket to file, by the kernel
            assert sum(spliced) >= len(BodyStore.body) - RECEIVE
        else:
            assert spliced == []  # TLS: its bytes are decrypted in this process
        os.ftruncate(fd, 0)
        os.ftruncate(fd, len(BodyStore.body))
        half = len(BodyStore.body) // 2
        assert direct.get("big.bin", fd, half, len(BodyStore.body) - half) == len(BodyStore.body) - half
        assert direct.get("big.bin", fd, 0, half) == half
        assert target.read_bytes() == BodyStore.body  # two ranges at their offsets
        assert len(BodyStore.connections) == 1  # each body read to its end: the one connection served all

        BodyStore.cut = True  # an answer cut short: no good answer, and that connection is not kept
        assert direct.get("big.bin", fd) is None
        assert direct._spare.qsize() == 0
    finally:
        os.close(fd)
        direct.close()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("page", [1000, 2])  # 2: every listing, with and without the delimiter, in pages
def test_a_listing_folder_by_folder_finds_every_object_once_in_key_order(
        workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make, monkeypatch: pytest.MonkeyPatch,
        page: int) -> None:
    import jupyter_gpu_ws.sync.s3direct as s3direct

    names = [*ODD_NAMES, "top.txt", "z last.txt", "one/two/three/four/five/deep.txt",  # a lone-folder chain
             *(f"many/f{i}.txt" for i in range(7)), "many/sub/x.txt", "a+b/c.txt", "a b/c.txt"]
    for name in names:
        write(workdir, name, name.encode())
    engine = make_engine(workdir, store_url=s3_url)
    assert engine.sync().ok
    monkeypatch.setattr(s3direct, "LIST_PAGE", page)
    reader = _backend(engine).direct_get()
    assert reader is not None
    prefix = s3_url.split(f"s3://{S3_BUCKET}/", 1)[1] + "/"
    requests = reader.requests
    listed = reader.list(prefix + "ws/files/")
    assert listed is not None
    keys = [key for key, *_ in listed]
    assert keys == sorted(prefix + "ws/files/" + name for name in names)  # each once, in key order
    assert reader.requests - requests > 2  # a listing of the top, then one per folder
    sizes = {key[len(prefix):]: size for key, size, _, _ in listed}
    assert sizes == {k: v for k, v in bucket_keys(s3_env, s3_url).items() if k.startswith("ws/files/")}
    # A lone folder is entered: the chain's objects come from one listing at its end.
    assert [key for key, *_ in reader.list(prefix + "ws/files/one/") or []] == [
        prefix + "ws/files/one/two/three/four/five/deep.txt"]
    assert reader.list(prefix + "ws/files/nothing-here/") == []


class ForeignFolders(http.server.BaseHTTPRequestHandler):
    """A listing whose folders lie outside the prefix asked for (a broken or hostile store)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        body = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
                b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><IsTruncated>false</IsTruncated>'
                b'<CommonPrefixes><Prefix>ws/files/a/</Prefix></CommonPrefixes>'
                b'<CommonPrefixes><Prefix>other-ws/files/</Prefix></CommonPrefixes></ListBucketResult>')
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_listing_that_names_folders_outside_the_prefix_is_no_answer() -> None:
    from jupyter_gpu_ws.sync.s3direct import DirectGet

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ForeignFolders)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    direct = DirectGet("http", f"127.0.0.1:{server.server_port}", "/bucket/", "us-east-1",
                       lambda: Credentials("AKID", "secret"))
    try:
        assert direct.list("ws/files/") is None  # the caller lists through s3fs instead
        assert direct.requests == 1  # and nothing outside was listed
    finally:
        direct.close()
        server.shutdown()
        server.server_close()


def test_state_is_read_by_one_lean_get_and_s3fs_answers_when_the_shortcut_cannot(
        workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make) -> None:
    import time

    for name in ODD_NAMES:
        write(workdir, name, name.encode() * 3)
    engine = make_engine(workdir, store_url=s3_url)
    assert engine.sync().ok
    backend = _backend(engine)
    backend.write_bytes("ws/.gpuws/state.json", b'{"a": 1}')
    reader = backend.direct_get()
    assert reader is not None
    assert reader._connect_timeout == 5  # the store's own connect timeout, not its 60 s for an answer
    fetched, requests = reader.fetched, reader.requests
    assert backend.read_bytes("ws/.gpuws/state.json") == b'{"a": 1}'
    for name in ODD_NAMES:
        assert backend.read_bytes(f"ws/files/{name}") == bucket_read(s3_env, s3_url, f"ws/files/{name}")
    assert reader.fetched == fetched + 1 + len(ODD_NAMES)
    # A missing key is one request (s3fs asks twice: the object, then whether it is a folder).
    requests = reader.requests
    assert backend.read_bytes("ws/.gpuws/missing.json") is None
    assert backend.read_bytes("ws/.gpuws") is None  # a folder is no object
    assert reader.requests == requests + 2

    # Larger than the shortcut reads: no answer from it, and not held against it.
    key = s3_url.split(f"s3://{S3_BUCKET}/", 1)[1] + "/ws/.gpuws/state.json"
    assert reader.read(key, limit=4) is None
    assert reader._failures == 0 and not reader.resting()

    # Refused (stale credentials), then resting: s3fs reads, and says what is missing.
    reader._fetch_credentials = lambda: Credentials("wrong-key", "wrong-secret")
    reader.forget_credentials()
    assert backend.read_bytes("ws/.gpuws/state.json") == b'{"a": 1}'
    assert backend.read_bytes("ws/.gpuws/missing.json") is None
    assert reader._failures == 2
    reader._paused_until = time.monotonic() + 60
    requests = reader.requests
    assert backend.read_bytes("ws/.gpuws/state.json") == b'{"a": 1}'
    assert backend.read_bytes("ws/.gpuws/missing.json") is None
    assert reader.requests == requests


def test_a_store_that_drops_connection_attempts_is_given_up_on_after_the_connect_timeout() -> None:
    import socket
    import time

    from jupyter_gpu_ws.sync.getmany import Wanted
    from jupyter_gpu_ws.sync.s3direct import DirectGet

    # A listener whose accept queue is full: the kernel drops further connection attempts, as
    # for a store behind a network that lost its route.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    direct = DirectGet("http", f"127.0.0.1:{port}", "/bucket/", "us-east-1", lambda: Credentials("AKID", "secret"),
                       timeout=120.0, connect_timeout=0.5)
    try:
        started = time.monotonic()
        assert direct.read("ws/.gpuws/state.json") is None  # the caller asks s3fs, with its own retries
        wanted = [Wanted(f"ws/files/{i}.txt", None) for i in range(3)]
        assert direct.get_many(wanted, lambda item, body: None, in_flight=3) == wanted  # all given back
        assert time.monotonic() - started < 30  # not the 120 s a silent answer is waited for
    finally:
        direct.close()
        for sock in [*fillers, listener]:
            sock.close()
