"""The sync engine against a real S3 server (SeaweedFS on loopback), through obstore."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.sync import (
    DeletionGuardError,
    LeaseHeldError,
    StoreConfigError,
    StoreUnavailableError,
    SyncEngine,
    SyncError,
    SyncSettings,
)
from tests.sync.conftest import S3_BUCKET, same_trees, tree_files, write
from tests.sync.s3server import S3Server, closed_port

Make = Callable[..., SyncEngine]
MiB = 2**20


def bucket_keys(server: S3Server, url: str) -> dict[str, int]:
    """Every object under the store URL's prefix: key relative to it → size."""
    prefix = url.split(f"s3://{S3_BUCKET}/", 1)[1] + "/"
    out = {}
    for page in (
        server.client().get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix)
    ):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(prefix) :]] = obj["Size"]
    return out


def bucket_read(server: S3Server, url: str, key: str) -> bytes:
    prefix = url.split(f"s3://{S3_BUCKET}/", 1)[1]
    return server.client().get_object(Bucket=S3_BUCKET, Key=f"{prefix}/{key}")["Body"].read()


def mirror_keys(server: S3Server, url: str, workspace: str = "ws") -> set[str]:
    head = f"{workspace}/files/"
    return {k[len(head) :] for k in bucket_keys(server, url) if k.startswith(head)}


def test_round_trip_of_a_thousand_small_and_two_large_files_through_s3(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    for i in range(1000):
        write(
            workdir, f"src/pkg{i % 20:02d}/mod{i:04d}.py", f"# module {i}\n" + "x = 1\n" * (i % 13)
        )
    # Over the single-PUT limit: a temporary key, then a server-side copy. The second is also
    # over s3fs's multipart threshold (2 × 50 MiB), and large enough to report progress.
    big = {"models/a.bin": os.urandom(21 * MiB + 7), "models/b.bin": os.urandom(101 * MiB + 3)}
    for rel, data in big.items():
        write(workdir, rel, data)
    engine = make_engine(workdir, store_url=s3_url)
    report = engine.sync()
    assert report.ok, report.errors
    assert len(report.uploaded) == 1002
    keys = bucket_keys(s3_env, s3_url)
    assert mirror_keys(s3_env, s3_url) == set(tree_files(workdir))
    assert keys["ws/files/models/b.bin"] == len(big["models/b.bin"])
    assert not [
        k for k in keys if ".gpuws-tmp" in k or ".gpuws-part" in k
    ]  # temporary keys removed

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    restored = make_engine(fresh, store_url=s3_url, state="state2").restore()
    assert not restored.errors and not restored.conflicts
    assert len(restored.restored) == 1002
    assert same_trees(workdir, fresh)


def test_change_and_delete_reach_s3_and_previous_versions_stay_in_gpuws_versions(
    workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    write(workdir, "notes.md", "first draft")
    write(workdir, "old.csv", "a,b\n1,2\n")
    large_v1 = os.urandom(17 * MiB)
    write(workdir, "weights.bin", large_v1)
    engine = make_engine(workdir, store_url=s3_url)
    assert engine.sync().ok

    write(workdir, "notes.md", "second, longer draft")
    large_v2 = os.urandom(17 * MiB + 1)
    write(workdir, "weights.bin", large_v2)
    (workdir / "old.csv").unlink()
    report = engine.sync()
    assert report.ok, report.errors
    assert sorted(report.uploaded) == ["notes.md", "weights.bin"] and report.deleted == ["old.csv"]

    assert mirror_keys(s3_env, s3_url) == {"notes.md", "weights.bin"}
    assert bucket_read(s3_env, s3_url, "ws/files/notes.md") == b"second, longer draft"
    assert bucket_read(s3_env, s3_url, "ws/files/weights.bin") == large_v2
    versions = {
        k: size
        for k, size in bucket_keys(s3_env, s3_url).items()
        if k.startswith("ws/.gpuws/versions/")
    }
    by_path = {k.split("/", 3)[3].rpartition("/")[0]: k for k in versions}
    assert set(by_path) == {"notes.md", "old.csv", "weights.bin"}
    assert bucket_read(s3_env, s3_url, by_path["notes.md"]) == b"first draft"
    assert bucket_read(s3_env, s3_url, by_path["old.csv"]) == b"a,b\n1,2\n"
    assert bucket_read(s3_env, s3_url, by_path["weights.bin"]) == large_v1
    [kept] = engine.versions("old.csv")
    assert (
        workdir / engine.restore_version("old.csv", kept["version"], "old.csv")
    ).read_bytes() == b"a,b\n1,2\n"


def test_emptied_work_directory_does_not_empty_the_s3_store(
    workdir: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    for i in range(5):
        write(workdir, f"f{i}.txt", str(i))
    engine = make_engine(workdir, store_url=s3_url)
    engine.sync()
    for path in workdir.iterdir():
        path.unlink()
    with pytest.raises(DeletionGuardError, match="empty"):
        engine.sync()
    assert mirror_keys(s3_env, s3_url) == {f"f{i}.txt" for i in range(5)}
    assert not [k for k in bucket_keys(s3_env, s3_url) if "/versions/" in k]


def test_lease_in_s3_refuses_a_second_engine(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    write(workdir, "a.txt", "from the first runtime")
    first = make_engine(workdir, store_url=s3_url)
    other = tmp_path / "other"
    write(other, "a.txt", "from the second runtime")
    second = make_engine(other, store_url=s3_url, state="state2")
    assert second.read_only and "Another runtime is writing this workspace" in (
        second.read_only_reason or ""
    )
    with pytest.raises(LeaseHeldError):
        second.sync()
    assert "ws/files/a.txt" not in bucket_keys(s3_env, s3_url)
    assert first.sync().ok
    assert bucket_read(s3_env, s3_url, "ws/files/a.txt") == b"from the first runtime"


def _engine(workdir: Path, tmp_path: Path, url: str, options: dict[str, Any]) -> SyncEngine:
    return SyncEngine(
        SyncSettings(
            str(workdir),
            url,
            "ws",
            str(tmp_path / "state"),
            storage_options=options,
            retry_backoff=0.01,
        )
    )


def _assert_refused(
    make: Callable[[], SyncEngine],
    error: type[Exception],
    workdir: Path,
    before: dict[str, bytes],
    *words: str,
) -> None:
    """The engine refuses at its creation (it first asks the store whether the workspace is
    encrypted) or when it opens; either way with one line, and nothing changes here."""
    engine = None
    with pytest.raises(error) as raised:
        engine = make()
        engine.open()
    message = str(raised.value)
    assert message and "\n" not in message
    for word in words:
        assert word in message
    if engine is not None:
        with pytest.raises(error):
            engine.restore()
    assert tree_files(workdir) == before  # nothing written, nothing removed, nothing conflicting


@pytest.mark.parametrize("keys", ["wrong", "missing"])
def test_bad_credentials_are_a_config_error_and_change_nothing_locally(
    workdir: Path,
    tmp_path: Path,
    s3_url: str,
    s3_env: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    keys: str,
) -> None:
    # Data in the store, and a work directory that lacks it: a restore would write here.
    write(workdir, "a.txt", "a")
    engine = _engine(workdir, tmp_path, s3_url, {})
    engine.open()
    assert engine.sync().ok
    engine.close()
    fresh = tmp_path / "fresh"
    write(fresh, "local.txt", "local work")
    before = tree_files(fresh)
    if keys == "wrong":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
        words: tuple[str, ...] = ("refused the credentials", "AWS_SECRET_ACCESS_KEY")
    else:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        words = ("No credentials",)
    _assert_refused(
        lambda: _engine(fresh, tmp_path / "2", s3_url, {}), StoreConfigError, fresh, before, *words
    )
    assert mirror_keys(s3_env, s3_url) == {"a.txt"}


def test_unreachable_endpoint_is_unavailable_and_changes_nothing_locally(
    workdir: Path, tmp_path: Path, s3_env: S3Server
) -> None:
    write(workdir, "local.txt", "local work")
    before = tree_files(workdir)
    endpoint = f"http://127.0.0.1:{closed_port()}"
    # One attempt per request: botocore's own retries would only make the test slower.
    options = {
        "endpoint_url": endpoint,
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    engine = _engine(workdir, tmp_path, f"s3://{S3_BUCKET}/unreachable", options)
    engine.open()  # a store that does not answer is waited for, not fatal: it may come back
    try:
        reason = engine.read_only_reason or ""
        assert "\n" not in reason and "refused the connection" in reason
        assert endpoint.removeprefix("http://") in reason
        assert engine.status()["state"] == "error"
        with pytest.raises(StoreUnavailableError):
            engine.restore()
        assert (
            tree_files(workdir) == before
        )  # nothing written, nothing removed, nothing conflicting
    finally:
        engine.close()


def test_an_object_whose_name_the_client_cannot_list_is_named_in_one_line_with_the_fix(
    workdir: Path, tmp_path: Path, s3_url: str, s3_env: S3Server, make_engine: Make
) -> None:
    write(workdir, "notes.md", "mine")
    assert make_engine(workdir, store_url=s3_url).sync().ok
    # Written by someone else, with a carriage return in its name: object_store's listing
    # refuses it and cannot go past it.
    prefix = s3_url.split(f"s3://{S3_BUCKET}/", 1)[1]
    s3_env.client().put_object(
        Bucket=S3_BUCKET, Key=f"{prefix}/ws/files/cr\rplanted.txt", Body=b"x"
    )
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with pytest.raises(SyncError) as raised:
        make_engine(fresh, store_url=s3_url, state="state2").restore()
    message = str(raised.value)
    assert message.startswith("An object in the store under ")
    assert "cannot list" in message and "renamed or removed with another tool" in message
    assert "\\r" in message and "\r" not in message  # named, escaped, on one line
