"""The test store servers do what the object-store backend will rely on, shown with obstore
itself (and fsspec for SFTP): byte-identical round trips, multipart uploads, ranged reads,
listing by prefix, and conditional writes, on each server that supports them.

Where a server cannot do something, its test is a strict xfail naming what is missing: it runs,
and it fails loudly the day the server starts to do it.
"""

from __future__ import annotations

import datetime
import os
import urllib.parse
from typing import Any

import asyncssh
import boto3
import fsspec
import obstore
import paramiko
import pytest
from obstore.exceptions import (
    AlreadyExistsError,
    GenericError,
    NotSupportedError,
    PreconditionError,
)
from obstore.store import AzureStore, GCSStore, S3Store

from tests.stores.azurite import ACCOUNT_KEY, ACCOUNT_NAME, AzuriteServer
from tests.stores.conftest import BUCKET
from tests.stores.gcsserver import GCSServer
from tests.stores.sftpserver import PinnedHostKey, SFTPServer
from tests.sync.s3server import S3Server

KIB, MIB = 1024, 1024 * 1024
FEW_KIB = os.urandom(5 * KIB + 3)
TEN_MIB = os.urandom(10 * MIB + 17)  # not a multiple of the part size: the last part is short
PART = 5 * MIB  # S3's smallest part

# Failures are the point of some tests: let them come at once instead of after ten retries.
QUICK = {"max_retries": 1, "retry_timeout": datetime.timedelta(seconds=10)}

GCS_NO_XML_WRITES = pytest.mark.xfail(
    strict=True,
    raises=GenericError,
    reason="fake-gcs-server (1.54) takes no XML-API write: obstore's PUT is answered 400 'invalid "
    "uploadType'; XML multipart and copy are not implemented (tests/stores/gcsserver.py)",
)


def s3_https_store(server: S3Server, **config: Any) -> S3Store:
    """The endpoint and credentials from the environment; the CA as obstore takes it."""
    return S3Store(
        BUCKET,
        client_options={"root_certificate": server.tls.ca_file.read_text()},  # type: ignore[union-attr]
        retry_config=QUICK,
        **config,
    )


@pytest.fixture(params=["s3-https", "azurite", pytest.param("gcs", marks=GCS_NO_XML_WRITES)])
def store(request: pytest.FixtureRequest) -> Any:
    """An obstore store on one test server, built from the environment that server's `env()` gives."""
    if request.param == "s3-https":
        # copy(overwrite=False) on S3 needs copy_if_not_exists; SeaweedFS honours "multipart"
        # (the copy done as a multipart upload whose completion says If-None-Match: *)
        return s3_https_store(
            request.getfixturevalue("s3_https_env"), copy_if_not_exists="multipart"
        )
    if request.param == "azurite":
        request.getfixturevalue("azurite_env")
        return AzureStore.from_url(f"az://{BUCKET}", retry_config=QUICK)
    request.getfixturevalue("gcs_env")
    return GCSStore.from_url(f"gs://{BUCKET}", retry_config=QUICK)


def read(store: Any, path: str) -> bytes:
    return obstore.get(store, path).bytes().to_bytes()


def update_mode(meta: Any) -> dict[str, str]:
    """The put mode that replaces exactly the object `meta` describes. obstore 0.12 refuses a
    `version` of None (TypeError): leave it out where the store has none (S3 without
    versioning, Azure)."""
    mode = {"e_tag": meta["e_tag"]}
    if meta["version"] is not None:
        mode["version"] = meta["version"]
    return mode


# --- every object store: S3 over HTTPS, Azure, GCS -------------------------------------------


def test_a_small_object_comes_back_byte_identical(store: Any, prefix: str) -> None:
    obstore.put(store, f"{prefix}/small.bin", FEW_KIB)
    assert read(store, f"{prefix}/small.bin") == FEW_KIB
    assert obstore.head(store, f"{prefix}/small.bin")["size"] == len(FEW_KIB)


def test_a_ten_mib_multipart_upload_comes_back_byte_identical(store: Any, prefix: str) -> None:
    obstore.put(store, f"{prefix}/big.bin", TEN_MIB, use_multipart=True, chunk_size=PART)
    assert obstore.head(store, f"{prefix}/big.bin")["size"] == len(TEN_MIB)
    assert read(store, f"{prefix}/big.bin") == TEN_MIB


def test_ranged_reads_return_exactly_the_bytes_asked_for(store: Any, prefix: str) -> None:
    obstore.put(store, f"{prefix}/big.bin", TEN_MIB, use_multipart=True, chunk_size=PART)
    path = f"{prefix}/big.bin"
    assert bytes(obstore.get_range(store, path, start=0, end=1)) == TEN_MIB[:1]
    assert (
        bytes(obstore.get_range(store, path, start=PART - 7, length=14))
        == TEN_MIB[PART - 7 : PART + 7]
    )
    starts, ends = [3, MIB, len(TEN_MIB) - 5], [10, 2 * MIB, len(TEN_MIB)]
    assert [bytes(b) for b in obstore.get_ranges(store, path, starts=starts, ends=ends)] == [
        TEN_MIB[s:e] for s, e in zip(starts, ends, strict=True)
    ]


def test_listing_with_a_prefix_shows_only_that_prefix(store: Any, prefix: str) -> None:
    for name in ("a/1", "a/2", "a/sub/3", "b/4"):
        obstore.put(store, f"{prefix}/{name}", name.encode())
    listed = sorted(meta["path"] for meta in obstore.list(store, prefix=f"{prefix}/a").collect())
    assert listed == [f"{prefix}/a/1", f"{prefix}/a/2", f"{prefix}/a/sub/3"]
    one_level = obstore.list_with_delimiter(store, prefix=f"{prefix}/a")
    assert sorted(meta["path"] for meta in one_level["objects"]) == [
        f"{prefix}/a/1",
        f"{prefix}/a/2",
    ]
    assert one_level["common_prefixes"] == [f"{prefix}/a/sub"]


def test_put_create_succeeds_once_then_raises_already_exists(store: Any, prefix: str) -> None:
    path = f"{prefix}/lease"
    obstore.put(store, path, b"first", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, path, b"second", mode="create")
    assert read(store, path) == b"first"


def test_put_update_succeeds_with_the_current_tag_and_fails_with_a_stale_one(
    store: Any, prefix: str
) -> None:
    path = f"{prefix}/manifest"
    obstore.put(store, path, b"v1")
    stale = obstore.head(store, path)
    obstore.put(store, path, b"v2", mode=update_mode(stale))
    assert read(store, path) == b"v2"
    with pytest.raises(PreconditionError):
        obstore.put(store, path, b"v3", mode=update_mode(stale))
    assert read(store, path) == b"v2"


def test_copy_without_overwrite_copies_once_then_raises_already_exists(
    store: Any, prefix: str
) -> None:
    obstore.put(store, f"{prefix}/src", b"src")
    obstore.put(store, f"{prefix}/dst", b"dst")
    obstore.copy(store, f"{prefix}/src", f"{prefix}/new", overwrite=False)
    assert read(store, f"{prefix}/new") == b"src"
    with pytest.raises(AlreadyExistsError):
        obstore.copy(store, f"{prefix}/src", f"{prefix}/dst", overwrite=False)
    assert read(store, f"{prefix}/dst") == b"dst"


def test_a_deleted_object_is_gone(store: Any, prefix: str) -> None:
    obstore.put(store, f"{prefix}/gone", b"x")
    obstore.delete(store, f"{prefix}/gone")
    with pytest.raises(FileNotFoundError):  # what obstore raises for a missing object
        obstore.head(store, f"{prefix}/gone")


# --- SeaweedFS S3 over HTTPS ------------------------------------------------------------------


def test_s3_https_without_the_ca_fails_with_a_certificate_error(
    s3_https_env: S3Server, prefix: str
) -> None:
    # AWS_CA_BUNDLE is set (botocore's variable): obstore does not read it.
    assert os.environ["AWS_CA_BUNDLE"] == str(s3_https_env.tls.ca_file)  # type: ignore[union-attr]
    untrusting = S3Store(BUCKET, retry_config={"max_retries": 0})
    with pytest.raises(GenericError, match="InvalidCertificate") as caught:
        obstore.put(untrusting, f"{prefix}/x", b"x")
    assert "UnknownIssuer" in str(caught.value)


def test_s3_https_obstore_trusts_the_ca_through_ssl_cert_file(
    s3_https_env: S3Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(s3_https_env.tls.ca_file))  # type: ignore[union-attr]
    store = S3Store.from_url(f"s3://{BUCKET}", retry_config=QUICK)  # read when the store is built
    obstore.put(store, f"{prefix}/x", FEW_KIB)
    assert read(store, f"{prefix}/x") == FEW_KIB


def test_s3_https_botocore_trusts_the_ca_through_aws_ca_bundle(
    s3_https_env: S3Server, prefix: str
) -> None:
    client = boto3.client("s3")  # endpoint, credentials and CA bundle all from the environment
    assert client.meta.endpoint_url.startswith("https://127.0.0.1:")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/boto", Body=FEW_KIB)
    assert client.get_object(Bucket=BUCKET, Key=f"{prefix}/boto")["Body"].read() == FEW_KIB


def test_s3_copy_without_overwrite_is_not_supported_without_copy_if_not_exists(
    s3_https_env: S3Server, prefix: str
) -> None:
    store = s3_https_store(s3_https_env)
    obstore.put(store, f"{prefix}/src", b"src")
    with pytest.raises(NotSupportedError):
        obstore.copy(store, f"{prefix}/src", f"{prefix}/dst", overwrite=False)


# --- Azurite ----------------------------------------------------------------------------------


def test_azurite_is_reached_from_the_environment_alone(
    azurite_env: AzuriteServer, prefix: str
) -> None:
    store = AzureStore(retry_config=QUICK)  # emulator mode, account, key and container from env()
    obstore.put(store, f"{prefix}/env", FEW_KIB)
    assert read(store, f"{prefix}/env") == FEW_KIB


def test_azurite_is_reached_through_an_explicit_endpoint(
    azurite_server: AzuriteServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in azurite_server.env():
        monkeypatch.delenv(name, raising=False)
    store = AzureStore(
        BUCKET,
        account_name=ACCOUNT_NAME,
        account_key=ACCOUNT_KEY,
        endpoint=azurite_server.endpoint,
        client_options={"allow_http": True},
        retry_config=QUICK,
    )
    obstore.put(store, f"{prefix}/explicit", FEW_KIB)
    assert read(store, f"{prefix}/explicit") == FEW_KIB


# --- fake-gcs-server --------------------------------------------------------------------------


def test_gcs_reads_what_the_emulator_holds(gcs_env: GCSServer, prefix: str) -> None:
    """The read side works: get (whole and ranged), head with the generation as version,
    listing by prefix, delete. Objects go in through the emulator's JSON API."""
    small = gcs_env.upload(f"{prefix}/a/small", FEW_KIB)
    gcs_env.upload(f"{prefix}/a/big", TEN_MIB)
    gcs_env.upload(f"{prefix}/b/other", b"x")
    store = GCSStore(retry_config=QUICK)  # service-account file and bucket from env()

    assert read(store, f"{prefix}/a/big") == TEN_MIB
    assert (
        bytes(obstore.get_range(store, f"{prefix}/a/big", start=MIB - 1, end=MIB + 1))
        == TEN_MIB[MIB - 1 : MIB + 1]
    )
    meta = obstore.head(store, f"{prefix}/a/small")
    assert (meta["size"], meta["version"]) == (len(FEW_KIB), small["generation"])
    assert sorted(m["path"] for m in obstore.list(store, prefix=f"{prefix}/a").collect()) == [
        f"{prefix}/a/big",
        f"{prefix}/a/small",
    ]
    obstore.delete(store, f"{prefix}/a/small")
    with pytest.raises(FileNotFoundError):
        obstore.head(store, f"{prefix}/a/small")


def test_gcs_is_reached_through_an_explicit_base_url(gcs_server: GCSServer, prefix: str) -> None:
    gcs_server.upload(f"{prefix}/explicit", FEW_KIB)
    store = GCSStore(
        BUCKET,
        base_url=gcs_server.url,
        skip_signature=True,
        client_options={"allow_http": True},
        retry_config=QUICK,
    )
    assert read(store, f"{prefix}/explicit") == FEW_KIB


# --- SFTP through fsspec (paramiko) -----------------------------------------------------------


def sftp(server: SFTPServer, **overrides: Any) -> Any:
    return fsspec.filesystem(
        "sftp", skip_instance_cache=True, **{**server.storage_options(), **overrides}
    )


def test_sftp_round_trip_through_fsspec(
    sftp_server: SFTPServer, prefix: str, tmp_path: Any
) -> None:
    fs = sftp(sftp_server)
    fs.makedirs(f"/{prefix}/sub", exist_ok=True)
    fs.pipe_file(f"/{prefix}/small.bin", FEW_KIB)
    local = tmp_path / "big.bin"
    local.write_bytes(TEN_MIB)
    fs.put_file(str(local), f"/{prefix}/sub/big.bin")

    assert fs.cat_file(f"/{prefix}/small.bin") == FEW_KIB
    assert (
        fs.cat_file(f"/{prefix}/sub/big.bin", start=MIB, end=MIB + 100) == TEN_MIB[MIB : MIB + 100]
    )
    fs.get_file(f"/{prefix}/sub/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == TEN_MIB
    assert sorted(fs.ls(f"/{prefix}", detail=False)) == [f"/{prefix}/small.bin", f"/{prefix}/sub"]
    # The server's root is the temp folder: what the client wrote is there on disk.
    assert (sftp_server.root / prefix / "small.bin").read_bytes() == FEW_KIB
    fs.rm_file(f"/{prefix}/small.bin")
    assert not fs.exists(f"/{prefix}/small.bin")


def test_sftp_url_with_storage_options_opens_the_same_root(
    sftp_server: SFTPServer, prefix: str
) -> None:
    options = {
        k: v
        for k, v in sftp_server.storage_options().items()
        if k not in ("host", "port", "username")
    }
    fs, path = fsspec.core.url_to_fs(
        sftp_server.url + f"{prefix}-via-url", skip_instance_cache=True, **options
    )
    assert path == f"/{prefix}-via-url"
    fs.pipe_file(path, b"by url")
    assert (sftp_server.root / f"{prefix}-via-url").read_bytes() == b"by url"
    assert urllib.parse.urlsplit(sftp_server.url).port == sftp_server.port


def test_sftp_refuses_a_wrong_password(sftp_server: SFTPServer) -> None:
    with pytest.raises(paramiko.AuthenticationException):
        sftp(sftp_server, password="not-the-password")


def test_sftp_client_refuses_a_server_with_another_host_key(sftp_server: SFTPServer) -> None:
    someone_else = (
        asyncssh.generate_private_key("ssh-ed25519")
        .export_public_key("openssh")
        .split()[1]
        .decode()
    )
    with pytest.raises(paramiko.SSHException, match="not the test server's"):
        sftp(sftp_server, host_key_policy=PinnedHostKey(someone_else))
