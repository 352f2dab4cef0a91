"""Real store servers on 127.0.0.1, one of each for the whole session, and the environment a
client needs to reach each: SeaweedFS S3 over HTTPS, Azurite (Azure Blob), fake-gcs-server
(GCS) and an SFTP server.

A server that cannot start fails every test that needs it (`pytest.fail`): none skips. Each is
started the first time a test asks for it, so a run of one store's tests starts that store only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import pytest

from tests.stores.azurite import AzuriteServer
from tests.stores.certs import make_loopback_certificates
from tests.stores.gcsserver import GCSServer
from tests.stores.sftpserver import SFTPServer
from tests.sync.s3server import S3Server

BUCKET = "gpuws-test"  # the bucket (S3, GCS) or container (Azure) every server is given
S3_ACCESS_KEY = "gpuws-test-key"
S3_SECRET_KEY = "gpuws-test-secret-0123456789"

# Variables that could point a client at something other than the test server.
FOREIGN_ENV = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_BASE_URL",
    "AZURE_STORAGE_ENDPOINT",
    "AZURE_ENDPOINT",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
)


class RunningServer(Protocol):
    def stop(self, grace: float = ...) -> None: ...
    def log_tail(self, lines: int = 30) -> str: ...


Server = TypeVar("Server", bound=RunningServer)

# How long each server took to start in this session, for the terminal summary.
START_SECONDS: dict[str, float] = {}


def _started(name: str, server: Server, start: Callable[[], None]) -> Server:
    """`server` once `start()` has returned; the test fails (never skips) if it raises."""
    began = time.monotonic()
    try:
        start()
    except Exception as err:
        server.stop(grace=2)
        pytest.fail(
            f"The {name} test server could not start: {err}\n{server.log_tail()}", pytrace=False
        )
    START_SECONDS[name] = time.monotonic() - began
    return server


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if START_SECONDS:
        times = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in START_SECONDS.items())
        terminalreporter.write_line(f"store servers started: {times}")


@pytest.fixture(scope="session")
def s3_https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS (`weed mini`) with its S3 gateway on HTTPS too, the certificate signed by a CA
    made for this session; `env()` names the HTTPS endpoint and `AWS_CA_BUNDLE`.

    Trusting the CA, by client (obstore 0.12.1, measured in test_servers.py):
    - botocore/boto3/s3fs read `AWS_CA_BUNDLE`;
    - obstore does NOT read `AWS_CA_BUNDLE`. It trusts the CA given as
      `client_options={"root_certificate": PEM}` (str or bytes; added to the system's roots),
      or through `SSL_CERT_FILE` (read when the store is built; it replaces the system's
      roots for that store). A backend that honours `AWS_CA_BUNDLE` passes that file's
      content as `root_certificate`.
    """
    folder = tmp_path_factory.mktemp("seaweedfs-https")
    tls = make_loopback_certificates(folder / "tls")
    server = S3Server(folder, S3_ACCESS_KEY, S3_SECRET_KEY, tls=tls)

    def start() -> None:
        server.start()
        server.create_bucket(BUCKET)

    yield _started("SeaweedFS S3 (HTTPS)", server, start)
    server.stop(grace=2)  # its data goes with the session


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    """Azurite's blob service with the container `BUCKET`."""
    server = AzuriteServer(tmp_path_factory.mktemp("azurite"), BUCKET)
    yield _started("Azurite", server, server.start)
    server.stop(grace=2)  # its data goes with the session


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSServer]:
    """fake-gcs-server with the bucket `BUCKET` (reads only, for obstore: see gcsserver.py)."""
    server = GCSServer(tmp_path_factory.mktemp("fake-gcs"), BUCKET)
    yield _started("fake-gcs-server", server, server.start)
    server.stop(grace=2)  # its data goes with the session


@pytest.fixture(scope="session")
def sftp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SFTPServer]:
    """An SFTP server whose root is a temp folder (`sftp_server.root`)."""
    server = SFTPServer(tmp_path_factory.mktemp("sftp"))
    yield _started("SFTP", server, server.start)
    server.stop(grace=2)  # its data goes with the session


def _use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def s3_https_env(s3_https_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This test's environment points at the HTTPS server (credentials, endpoint, CA bundle)."""
    _use_env(monkeypatch, s3_https_server.env())
    return s3_https_server


@pytest.fixture
def azurite_env(azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> AzuriteServer:
    _use_env(monkeypatch, azurite_server.env())
    return azurite_server


@pytest.fixture
def gcs_env(gcs_server: GCSServer, monkeypatch: pytest.MonkeyPatch) -> GCSServer:
    _use_env(monkeypatch, gcs_server.env())
    return gcs_server


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix, so tests sharing a bucket never see each other's objects."""
    return uuid.uuid4().hex[:12]
