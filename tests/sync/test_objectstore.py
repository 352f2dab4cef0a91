"""The object-store backend on obstore, against a real S3 server (SeaweedFS on loopback): every
option the user gives takes effect or is refused by name, large files go as multipart uploads
that become visible only whole, and what a PUT stored is checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.store import open_backend
from jupyter_gpu_ws.store.backend import PreconditionFailed, SourceChangedError
from jupyter_gpu_ws.store.objectstore import PART, ObjectStoreBackend, open_object_store
from jupyter_gpu_ws.sync.errors import StoreConfigError, StoreUnavailableError
from tests.sync.conftest import S3_BUCKET
from tests.sync.s3server import S3Server, closed_port


def keys(server: S3Server, prefix: str) -> dict[str, dict[str, Any]]:
    listed = server.client().list_objects_v2(Bucket=S3_BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix) :]: o for o in listed}


def test_the_three_clouds_open_through_obstore(s3_url: str) -> None:
    assert isinstance(open_backend(s3_url), ObjectStoreBackend)
    assert isinstance(open_backend("gs://some-bucket/prefix", {"anon": True}), ObjectStoreBackend)
    assert isinstance(
        open_backend("az://container/prefix", {"account_name": "acct", "anon": True}),
        ObjectStoreBackend,
    )


@pytest.mark.parametrize(
    "options, named",
    [
        ({"use_listings_cache": False}, "use_listings_cache"),
        ({"client_kwargs": {"verify_ssl": False}}, "client_kwargs.verify_ssl"),
        ({"config_kwargs": {"retries": {"max_attempts": 0}}}, "max_attempts"),
    ],
)
def test_an_option_nobody_knows_is_refused_by_name(
    s3_url: str, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(StoreConfigError, match=named):
        open_backend(s3_url, options)


def test_an_fsspec_only_option_is_refused_in_one_line_that_names_it(s3_url: str) -> None:
    with pytest.raises(StoreConfigError) as err:
        open_backend(s3_url, {"skip_instance_cache": True})
    text = str(err.value)
    assert (
        text.startswith("The store option 'skip_instance_cache' is not one this store takes")
        and "\n" not in text
    )
    assert "storage_options" in text


def test_the_fsspec_names_users_write_take_effect(
    s3_env: S3Server, s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing in the environment: the options alone reach the server.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    backend = open_backend(
        s3_url,
        {
            "endpoint_url": s3_env.endpoint,
            "key": s3_env.access_key,
            "secret": s3_env.secret_key,
            "client_kwargs": {"region_name": "us-east-1"},
        },
    )
    backend.write_bytes("ws/.gpuws/hello.json", b"{}")
    assert backend.read_bytes("ws/.gpuws/hello.json") == b"{}"


def test_a_proxy_in_the_options_is_used_not_bypassed(s3_env: S3Server, s3_url: str) -> None:
    proxy = f"http://127.0.0.1:{closed_port()}"
    backend = open_backend(s3_url, {"proxy": proxy, "max_retries": 0})
    with pytest.raises(StoreUnavailableError, match="refused the connection"):
        backend.read_bytes("ws/.gpuws/lease.json")  # through the proxy, which is not there
    assert (
        open_backend(s3_url).read_bytes("ws/.gpuws/lease.json") is None
    )  # without it: the store answers


def test_a_large_file_goes_as_a_multipart_upload_whose_etag_is_recomputed_here(
    s3_env: S3Server, s3_url: str, tmp_path: Path
) -> None:
    data = os.urandom(PART + PART // 2)
    local = tmp_path / "weights.bin"
    local.write_bytes(data)
    backend = open_backend(s3_url)
    assert backend.put(str(local), "ws/files/weights.bin") == len(data)
    prefix = s3_url.split(f"{S3_BUCKET}/", 1)[1] + "/"
    stored = keys(s3_env, prefix)["ws/files/weights.bin"]
    assert stored["Size"] == len(data) and stored["ETag"].strip('"').endswith("-2")
    assert backend.same_content("ws/files/weights.bin", str(local)) is True
    local.write_bytes(data[:-1] + b"x")
    assert backend.same_content("ws/files/weights.bin", str(local)) is False


def test_a_file_that_changes_during_its_multipart_upload_never_becomes_visible(
    s3_env: S3Server, s3_url: str, tmp_path: Path
) -> None:
    local = tmp_path / "growing.bin"
    local.write_bytes(os.urandom(2 * PART + 10))
    backend = open_backend(s3_url)

    def changed() -> bool:
        with open(local, "ab") as f:
            f.write(b"more")  # a writer appended while the parts went
        return False

    with pytest.raises(SourceChangedError):
        backend.put(str(local), "ws/files/growing.bin", check=changed)
    prefix = s3_url.split(f"{S3_BUCKET}/", 1)[1] + "/"
    assert "ws/files/growing.bin" not in keys(s3_env, prefix)
    uploads = (
        s3_env.client().list_multipart_uploads(Bucket=S3_BUCKET, Prefix=prefix).get("Uploads", [])
    )
    assert uploads == []  # aborted, not left to the lifecycle rule


def test_the_lease_objects_compare_and_swap(s3_url: str, s3_env: S3Server) -> None:
    backend = open_backend(s3_url)
    tag = backend.write_if("ws/.gpuws/lease.json", b"one", None)
    with pytest.raises(PreconditionFailed):
        backend.write_if("ws/.gpuws/lease.json", b"two", None)  # it exists
    newer = backend.write_if("ws/.gpuws/lease.json", b"two", tag)
    with pytest.raises(PreconditionFailed):
        backend.write_if("ws/.gpuws/lease.json", b"three", tag)  # a stale tag
    assert backend.read_tagged("ws/.gpuws/lease.json") == (b"two", newer)
    assert backend.conditional_writes() is None  # SeaweedFS honours them: one writer is enforced


def test_a_bucket_that_does_not_exist_is_a_config_error_naming_it(s3_env: S3Server) -> None:
    backend = open_object_store("s3://no-such-bucket-here/x")
    with pytest.raises(StoreConfigError, match="The bucket no-such-bucket-here does not exist"):
        backend.read_bytes("ws/.gpuws/lease.json")
