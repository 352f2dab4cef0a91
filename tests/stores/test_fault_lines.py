"""Each way a store fails, caused for real (SeaweedFS, Azurite, TLS endpoints with bad
certificates, a port nobody listens on, a host that does not exist, one that never answers, one
that answers 503), reads as one line naming its cause and the fix, with none of the library's
own text; that text stays on the error as its `detail` (issue 46)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.store import open_backend
from jupyter_gpu_ws.store.errors import (
    StoreConfigError,
    StoreMissingError,
    StoreUnavailableError,
    SyncError,
)
from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from jupyter_gpu_ws.sync.stall import ASK_EVERY, STALLED_AFTER
from jupyter_gpu_ws.vocabulary import sync_word
from tests.faultproxy import FaultProxy
from tests.loopback import TLSFiles
from tests.stallproxy import StallProxy
from tests.stores.azurite import AzuriteServer
from tests.stores.certs import make_ca_used_as_server_certificate, make_loopback_certificates
from tests.stores.conftest import _use_env
from tests.sync.conftest import S3_BUCKET, s3_server  # noqa: F401 (a fixture)
from tests.sync.s3server import S3Server
from tests.waiting import async_until, until

# What only a store library says: none of it may reach a user's line.
RAW = ("Generic", "<?xml", "%2F", "Error performing", "Debug source", "reqwest", "list-type")


def failure(url: str, options: dict[str, Any] | None = None) -> SyncError:
    """The error a sync meets on its first request to the store at `url`."""
    backend = open_backend(url, {"max_retries": 0, **(options or {})})
    with pytest.raises(SyncError) as caught:
        list(backend.list("files/"))
        backend.write_bytes("files/x", b"x")
    return caught.value


def check(err: SyncError, kind: str, *words: str) -> None:
    line = str(err)
    assert "\n" not in line and all(raw not in line for raw in RAW), line
    assert err.kind == kind, (err.kind, line)
    for word in words:
        assert word in line, line
    assert err.detail and "\n" not in err.detail  # the library's words, one click away


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:  # noqa: F811
    _use_env(monkeypatch, s3_server.env())
    return s3_server


def test_a_bucket_that_does_not_exist(s3: S3Server) -> None:
    err = failure("s3://nosuchbucket/me")
    assert isinstance(err, StoreConfigError)
    check(err, "bucket-missing", "The bucket nosuchbucket does not exist", "create it")


def test_wrong_credentials(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    err = failure(f"s3://{S3_BUCKET}/me")
    check(err, "credentials", "refused the credentials", "AWS_SECRET_ACCESS_KEY")
    assert "not-the-secret" not in str(err) + str(err.detail)


def test_wrong_credentials_met_first_by_a_head_name_the_credentials(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A HEAD's 403 has no body to say why: S3 answers a wrong secret and a key without the
    # right alike, and the line names the credentials first rather than a store's policy.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    backend = open_backend(f"s3://{S3_BUCKET}/me", {"max_retries": 0})
    with pytest.raises(SyncError) as caught:
        backend.stat("files/x")
    check(caught.value, "credentials", "refused the credentials", "AWS_SECRET_ACCESS_KEY")
    assert f"{S3_BUCKET}/me" in str(caught.value)  # and the place they may not be allowed


def test_nothing_listening_on_the_port(s3: S3Server) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = failure("s3://b/p", {"endpoint_url": f"http://127.0.0.1:{port}"})
    assert isinstance(err, StoreUnavailableError)
    check(err, "refused", f"127.0.0.1:{port} refused the connection")


def test_a_host_that_does_not_exist(s3: S3Server) -> None:
    err = failure("s3://b/p", {"endpoint_url": "http://nosuchhost.invalid:8333"})
    check(err, "host-not-found", "nosuchhost.invalid was not found (DNS)")


def test_a_store_that_never_answers(s3: S3Server) -> None:
    with socket.socket() as listening:  # accepts connections, never says a word
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        port = listening.getsockname()[1]
        err = failure("s3://b/p", {"endpoint_url": f"http://127.0.0.1:{port}", "timeout": "1s"})
    assert isinstance(err, StoreUnavailableError)
    check(err, "timeout", f"127.0.0.1:{port} did not answer")


def test_a_store_that_resets_the_connection(s3: S3Server) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]

        def reset() -> None:  # reads the request, then resets the connection (SO_LINGER 0)
            with contextlib.suppress(OSError):
                conn, _ = listening.accept()
                conn.recv(1024)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()

        threading.Thread(target=reset, daemon=True).start()
        err = failure("s3://b/p", {"endpoint_url": f"http://127.0.0.1:{port}"})
    assert isinstance(err, StoreUnavailableError)
    check(err, "connection", f"127.0.0.1:{port} broke before it answered")


class Busy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'<?xml version="1.0"?><Error><Code>SlowDown</Code></Error>'
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_store_answering_503(s3: S3Server) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        err = failure("s3://b/p", {"endpoint_url": f"http://127.0.0.1:{server.server_port}"})
    finally:
        server.shutdown()
    check(err, "busy", "answers 503", "retries by itself")


@pytest.fixture
def tls_endpoint() -> Iterator[Callable[[TLSFiles, str], int]]:
    """A TLS listener on a loopback address with the given certificate: enough for a client's
    certificate check, which comes before any HTTP."""
    stops: list[Callable[[], None]] = []

    def start(files: TLSFiles, address: str = "127.0.0.1") -> int:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(files.cert_file, files.key_file)
        listening = socket.socket()
        listening.bind((address, 0))
        listening.listen(8)
        listening.settimeout(0.2)
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listening.accept()
                except OSError:
                    continue
                try:
                    with context.wrap_socket(conn, server_side=True):
                        pass
                except (OSError, ssl.SSLError):
                    conn.close()  # the client refused the certificate: what the test wants

        threading.Thread(target=serve, daemon=True).start()
        stops.append(lambda: (stop.set(), listening.close()))
        return listening.getsockname()[1]

    yield start
    for stop in stops:
        stop()


def test_a_certificate_signed_by_a_ca_this_machine_does_not_trust(
    s3: S3Server, tls_endpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = tls_endpoint(make_loopback_certificates(tmp_path / "tls"))
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    err = failure("s3://b/p", {"endpoint_url": f"https://127.0.0.1:{port}"})
    # Retried, not a configuration fault: the server's certificate may be mended meanwhile.
    assert isinstance(err, StoreUnavailableError)
    check(err, "certificate", "a CA this machine does not trust", "AWS_CA_BUNDLE")


def test_a_self_signed_ca_certificate_used_as_the_servers(
    s3: S3Server, tls_endpoint: Any, tmp_path: Path
) -> None:
    files = make_ca_used_as_server_certificate(tmp_path / "tls")
    port = tls_endpoint(files)
    err = failure(
        "s3://b/p", {"endpoint_url": f"https://127.0.0.1:{port}", "ca_bundle": str(files.ca_file)}
    )
    check(err, "certificate", "a CA certificate used as the server's own", "CA:FALSE")


def test_a_certificate_for_another_name(s3: S3Server, tls_endpoint: Any, tmp_path: Path) -> None:
    files = make_loopback_certificates(tmp_path / "tls")  # for 127.0.0.1 and localhost
    port = tls_endpoint(files, "127.0.0.2")
    err = failure(
        "s3://b/p", {"endpoint_url": f"https://127.0.0.2:{port}", "ca_bundle": str(files.ca_file)}
    )
    check(err, "certificate", "not for the name 127.0.0.2")


def test_azure_a_container_that_does_not_exist(azurite_env: AzuriteServer) -> None:
    err = failure("az://nosuchcontainer/me")
    check(err, "bucket-missing", "The container nosuchcontainer does not exist")


def test_azure_a_wrong_account_key(
    azurite_env: AzuriteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "bm90LXRoZS1rZXk=")
    err = failure(f"az://{azurite_env.container}/me")
    check(err, "credentials", "AZURE_STORAGE_ACCOUNT_KEY")


def test_a_local_store_whose_folder_is_gone(tmp_path: Path) -> None:
    # The local store's own line (store/presence.py), which names the folder and what to do.
    (tmp_path / "store" / "ws").mkdir(parents=True)
    backend = open_backend(str(tmp_path / "store"))
    (tmp_path / "store" / "ws").rmdir()
    (tmp_path / "store").rmdir()
    with pytest.raises((StoreMissingError, SyncError)) as caught:
        backend.write_bytes("ws/files/x", b"x")
    assert "\n" not in str(caught.value) and str(tmp_path / "store") in str(caught.value)


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any], s3: S3Server) -> dict[str, Any]:
    # The server the panel asks, on a store URL naming a bucket that is not there.
    return {**gpuws_config, "store_url": "s3://nosuchbucket/me", "storage_options": {}}


async def test_the_panel_reads_the_line_its_kind_and_has_the_stores_words_for_details(
    jp_fetch: Any,
) -> None:
    async def failed() -> Any:
        status = json.loads((await jp_fetch("gpuws", "api", "sync")).body)
        return status if status["error_kind"] else None

    status = await async_until(failed, timeout=30)
    line = status["last_error"]
    assert line.startswith("The bucket nosuchbucket does not exist"), status
    assert status["error_kind"] == "bucket-missing"
    assert "404" in status["error_detail"] and "<?xml" not in status["error_detail"]
    assert all(raw not in line for raw in RAW)
    env = json.loads((await jp_fetch("gpuws", "api", "env")).body)
    jobs = json.loads((await jp_fetch("gpuws", "api", "jobs")).body)
    # The other sections refer to the Sync section's box instead of repeating it.
    assert env["store_fault"] is (env["error"] is not None)
    assert jobs["store_fault"] or line not in (jobs["error"] or "")


def test_an_object_store_that_stalls_mid_pass_shows_within_5_s_and_heals(
    s3: S3Server, tmp_path: Path
) -> None:
    with stalling_engine(s3, tmp_path, "stall", retry_backoff=0.01) as (proxy, work, engine):
        (work / "first.txt").write_text("before the stall")
        assert engine.sync().ok
        proxy.stalled.set()
        (work / "second.txt").write_text("written while the store stalls")
        passing = threading.Thread(target=lambda: engine.sync(), daemon=True)
        passing.start()

        def said() -> Any:
            status = engine.status()
            return "is not answering" in (status["last_error"] or "") and status

        status = until(said, 20, "the stall in the status")
        # Within 5 s of the first stalled request by the product's own clock: a question asked
        # at most ASK_EVERY after the stall began, named a stall once unanswered STALLED_AFTER;
        # a panel looking twice a second during a pass shows it within half a second more.
        assert STALLED_AFTER + ASK_EVERY + 0.5 <= 4.0
        assert status["state"] == "error" and status["error_kind"] == "stalled"
        assert "has not answered" not in status["last_error"]  # not the mounted drive's words
        proxy.stalled.clear()
        passing.join(60)
        assert not passing.is_alive()
        assert engine.sync().ok  # the next pass (the service runs one by itself) sends it all
        # The lease's renewal, refused during the stall, is retried by itself within a second.
        until(lambda: engine.status()["state"] == "idle", 30, "the stall healed")


def test_a_stall_is_timed_from_the_passs_start_not_from_the_first_look_at_the_status(
    s3: S3Server, tmp_path: Path
) -> None:
    with stalling_engine(s3, tmp_path, "unread") as (proxy, work, engine):
        proxy.stalled.set()
        (work / "a.txt").write_text("written while the store stalls")
        passing = threading.Thread(target=lambda: engine.sync(), daemon=True)
        passing.start()
        until(lambda: engine.running is not None, 10, "the pass under way")
        # Nobody reads the status meanwhile (a panel looks every few seconds): its first look
        # after STALLED_AFTER already names the stall. The passage of time is the subject here.
        time.sleep(STALLED_AFTER + ASK_EVERY / 2)
        status = engine.status()
        assert status["error_kind"] == "stalled", status["last_error"]
        proxy.stalled.clear()
        passing.join(60)
        assert not passing.is_alive()


def test_a_store_that_stalls_mid_pass_is_named_with_no_look_at_the_status_meanwhile(
    s3: S3Server, tmp_path: Path
) -> None:
    # The pass began while the store answered (its first questions answered too): the
    # questions go on by themselves, so the stall is named ASK_EVERY + STALLED_AFTER after it
    # began at most, whenever the status is next read.
    with stalling_engine(s3, tmp_path, "midpass", bandwidth_limit=2**20) as (proxy, work, engine):
        (work / "big.bin").write_bytes(os.urandom(8 * 2**20))
        passing = threading.Thread(target=lambda: engine.sync(), daemon=True)
        passing.start()
        until(lambda: engine.running is not None, 10, "the pass under way")
        time.sleep(2 * ASK_EVERY)  # questions asked and answered while the store answers
        proxy.stalled.set()
        time.sleep(ASK_EVERY + STALLED_AFTER + 0.25)  # no look meanwhile: the time is the subject
        status = engine.status()
        assert engine.running is not None  # still the same pass
        assert status["error_kind"] == "stalled", status["last_error"]
        proxy.stalled.clear()
        passing.join(60)
        assert not passing.is_alive()


def test_a_store_that_stalls_under_the_versions_pruning_is_named_as_under_a_pass(
    s3: S3Server, tmp_path: Path
) -> None:
    # The pruning holds passes back while it lists the store: a stall there must not leave the
    # panel with a pending file and no word of the store.
    with stalling_engine(s3, tmp_path, "prune") as (proxy, work, engine):
        proxy.stalled.set()
        pruning = threading.Thread(target=engine.prune_versions, daemon=True)
        pruning.start()
        until(lambda: engine._pass_lock.locked(), 10, "the pruning under way")
        time.sleep(STALLED_AFTER + ASK_EVERY / 2)  # no look meanwhile: the time is the subject
        status = engine.status()
        assert status["error_kind"] == "stalled", status["last_error"]
        assert "is not answering" in status["last_error"]
        proxy.stalled.clear()
        pruning.join(60)
        assert not pruning.is_alive()


def test_an_idle_runtime_whose_lease_renewal_stalls_names_the_stall_and_heals(
    s3: S3Server, tmp_path: Path
) -> None:
    # No pass, no restore: only the lease's renewal (every ttl/4 s) waits on the store.
    with stalling_engine(s3, tmp_path, "idle", lease_ttl=4.0) as (proxy, work, engine):
        assert engine.status()["state"] == "idle"
        proxy.stalled.set()

        def said() -> Any:
            status = engine.status()  # as the panel asks, twice a second
            return "is not answering" in (status["last_error"] or "") and status

        status = until(said, 20, "the renewal's stall in the status", interval=0.5)
        assert status["state"] == "error" and status["error_kind"] == "stalled"
        proxy.stalled.clear()
        until(lambda: engine.status()["state"] == "idle", 30, "the stall healed")
        assert engine.status()["last_error"] is None


@contextlib.contextmanager
def stalling_engine(
    s3: S3Server, tmp_path: Path, name: str, **options: Any
) -> Iterator[tuple[StallProxy, Path, SyncEngine]]:
    """An engine on SeaweedFS through a proxy the test can stall, open; closed, with the proxy
    let go, at the end whatever happened."""
    proxy = StallProxy(int(s3.endpoint.rsplit(":", 1)[1]))
    work = tmp_path / "work"
    work.mkdir()
    engine = SyncEngine(
        SyncSettings(
            str(work),
            f"s3://{S3_BUCKET}/{name}-{tmp_path.name}",
            "ws",
            str(tmp_path / "state"),
            storage_options={"endpoint_url": proxy.url},
            **options,
        )
    )
    try:
        engine.open()
        yield proxy, work, engine
    finally:
        proxy.stalled.clear()
        engine.close()
        proxy.close()


@pytest.fixture
def fault_proxy(s3: S3Server, tmp_path: Path) -> Iterator[tuple[FaultProxy, dict[str, Any]]]:
    """The fault proxy in front of SeaweedFS (answering as S3 does where SeaweedFS does not:
    a write into a bucket that is not there), and the store options that reach it."""
    trusted = make_loopback_certificates(tmp_path / "trusted")
    others = make_loopback_certificates(tmp_path / "untrusted")
    own = make_ca_used_as_server_certificate(tmp_path / "self-signed")
    proxy = FaultProxy(int(s3.endpoint.rsplit(":", 1)[1]), trusted, others, own)
    yield proxy, {"endpoint_url": proxy.url, "ca_bundle": str(trusted.ca_file)}
    proxy.close()


@contextlib.contextmanager
def proxied_engine(
    fault_proxy: tuple[FaultProxy, dict[str, Any]], tmp_path: Path, name: str, **settings: Any
) -> Iterator[tuple[FaultProxy, Path, SyncEngine]]:
    """An engine on SeaweedFS through the fault proxy, open, without the library's retries;
    closed, with the proxy passing again, at the end whatever happened."""
    proxy, options = fault_proxy
    work = tmp_path / "work"
    work.mkdir()
    engine = SyncEngine(
        SyncSettings(
            str(work),
            f"s3://{S3_BUCKET}/{name}-{tmp_path.name}",
            "ws",
            str(tmp_path / "state"),
            storage_options={**options, "max_retries": 0},
            **settings,
        )
    )
    try:
        engine.open()
        yield proxy, work, engine
    finally:
        proxy.switch("pass")
        engine.close()


def test_a_conditional_write_to_a_bucket_that_does_not_exist(
    fault_proxy: tuple[FaultProxy, dict[str, Any]],
) -> None:
    # The lease's own write: a missing bucket reads as one, not as a missing object's raw text.
    proxy, options = fault_proxy
    backend = open_backend(f"s3://{S3_BUCKET}/me", {"max_retries": 0, **options})
    proxy.switch("bucket-missing")
    with pytest.raises(SyncError) as caught:
        backend.write_if(".gpuws/lease.json", b"{}", None)
    assert isinstance(caught.value, StoreConfigError)
    check(caught.value, "bucket-missing", f"The bucket {S3_BUCKET} does not exist", "create it")


def test_a_pass_retrying_a_503_says_the_stores_answer_not_that_it_does_not_answer(
    fault_proxy: tuple[FaultProxy, dict[str, Any]], tmp_path: Path
) -> None:
    # The retries take seconds: the status is read meanwhile.
    with proxied_engine(fault_proxy, tmp_path, "busy", retry_backoff=1.0) as (proxy, work, engine):
        proxy.switch("503")
        (work / "a.txt").write_text("written while the store answers 503")
        passing = threading.Thread(target=lambda: engine.sync(), daemon=True)
        passing.start()
        line = until(lambda: engine.last_error, 10, "the pass's first failure")
        assert line.startswith("The store at 127.0.0.1:") and "answers 503" in line, line
        assert "not answering" not in line, line
        assert engine.status()["error_kind"] == "busy"
        proxy.switch("pass")
        passing.join(60)
        assert not passing.is_alive()


def test_a_fault_the_store_answers_with_past_the_retries_keeps_its_own_line(
    fault_proxy: tuple[FaultProxy, dict[str, Any]], tmp_path: Path
) -> None:
    # A certificate this machine does not trust, for longer than the store-down time: the pass
    # gives up with the certificate's line, never "the store is not answering", and the summary
    # says a sync error (its fix is the user's), not "store down".
    with proxied_engine(
        fault_proxy, tmp_path, "ca", retries=1, retry_backoff=0.1, store_down_after=0.0
    ) as (proxy, work, engine):
        proxy.switch("untrusted-ca")
        (work / "a.txt").write_text("written while the certificate is refused")
        report = engine.sync()
        assert not report.ok
        status = engine.status()
        line = status["last_error"]
        assert status["error_kind"] == "certificate", status
        assert line.startswith("The store's certificate at ") and "does not trust" in line, line
        assert "not answering" not in line and "nothing written" not in line, line
        assert status["store_down"] is None
        assert sync_word(status) == ("sync error", "error")


def test_words_in_a_url_are_not_taken_for_the_fault() -> None:
    # A key named after a certificate, answered 503: busy, not a TLS verdict.
    from jupyter_gpu_ws.store.faults import fault_of

    text = (
        "Generic S3 error: Error performing GET http://127.0.0.1:9/b/p/certificate-timed out.pem "
        "in 2ms - Server returned non-2xx status code: 503 Service Unavailable"
    )
    fault = fault_of(text, "s3://b/p", "s3")
    assert fault is not None and fault.kind == "busy", fault


def test_sftp_a_port_nobody_listens_on_is_refused_in_one_line_with_no_password() -> None:
    from tests.loopback import free_ports

    (port,) = free_ports(1)
    backend = open_backend(f"sftp://bob:S3CRET@127.0.0.1:{port}/data/ws")
    assert backend.description == f"sftp://bob:***@127.0.0.1:{port}/data/ws"
    with pytest.raises(SyncError) as caught:
        list(backend.list("files/"))
    check(caught.value, "refused", f"The store at 127.0.0.1:{port} refused the connection")
    assert "S3CRET" not in str(caught.value) and "Errno" not in str(caught.value)
