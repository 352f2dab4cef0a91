"""Helpers for the sync engine tests: trees of real files and engines over real stores."""

from __future__ import annotations

import filecmp
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from tests.fusefs import mounted_drive  # noqa: F401  (a fixture: a FUSE drive that stalls, drops or fills up)
from tests.sync.s3server import S3Server, S3ServerError

S3_ACCESS_KEY = "gpuws-test-key"
S3_SECRET_KEY = "gpuws-test-secret-0123456789"
S3_BUCKET = "gpuws-test"


def write(root: Path, rel: str, data: bytes | str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def tree_files(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path → content), skipping none that stays: a file that
    vanishes between the listing and the read (a write's temporary file renamed into place
    by a running engine) was never there for a reader either."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            try:
                out[path.relative_to(root).as_posix()] = path.read_bytes()
            except FileNotFoundError:
                continue
    return out


def same_trees(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_trees(a / d, b / d) for d in cmp.common_dirs)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def make_engine(tmp_path: Path, store_dir: Path) -> Callable[..., SyncEngine]:
    engines: list[SyncEngine] = []

    def make(
        workdir: Path, store_url: str | None = None, state: str = "state", **options: Any
    ) -> SyncEngine:
        backend = options.pop("backend", None)
        settings = SyncSettings(
            workdir=str(workdir),
            store_url=store_url or str(store_dir),
            workspace=options.pop("workspace", "ws"),
            state_dir=str(tmp_path / state),
            retry_backoff=0.01,
            **options,
        )
        engine = SyncEngine(settings, backend=backend)
        engine.open()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        try:
            engine.close()
        except Exception:
            pass


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real SeaweedFS S3 server on 127.0.0.1 for the whole session, with one bucket.

    A server that cannot start fails the tests that need it: they never skip silently.
    """
    server = S3Server(tmp_path_factory.mktemp("seaweedfs"), S3_ACCESS_KEY, S3_SECRET_KEY)
    try:
        server.start()
        server.create_bucket(S3_BUCKET)
    except S3ServerError as err:
        pytest.fail(f"The SeaweedFS S3 server could not start: {err}", pytrace=False)
    except Exception as err:
        server.stop()
        pytest.fail(
            f"The SeaweedFS S3 server started but does not work: {err}\n{server.log_tail()}",
            pytrace=False,
        )
    yield server
    server.stop(grace=2)  # its data goes with the session


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This test talks to the session's server: credentials and endpoint from the environment."""
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL_S3",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def s3_url(s3_env: S3Server) -> str:
    """A fresh prefix in the test bucket, so tests never see each other's objects."""
    return f"s3://{S3_BUCKET}/{uuid.uuid4().hex[:12]}"
