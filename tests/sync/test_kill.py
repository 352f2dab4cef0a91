"""`kill -9` of a process in the middle of a sync pass: the store never shows a partial file,
and the next run completes the mirror.

Each test runs one pass in a child process (sync_child.py), sends it SIGKILL after a delay
spread over the length of an uninterrupted pass (measured once per tree), then checks every
file visible under the store's files/ tree against the work directory, and runs the next pass
in this process. Temporary `*.gpuws-part*` names may stay behind after a kill, never under a
final name. The kills land at different moments of the pass: the delays are stratified over
its length, with a seeded jitter; a pass that ends before its signal is run again on a fresh
store and killed twice as early, so every test does interrupt a pass.

The first-pass tests run on an encrypted store too (store/crypto): there every object visible
under files/ must decrypt and authenticate whole, and equal a source file.

The killed process's lease cannot be released: the next run, on the same machine, finds its
holder's process gone and takes it at once (as a server restarted after a crash does).
"""

from __future__ import annotations

import filecmp
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.store import open_backend
from jupyter_gpu_ws.store.backend import PART_SUFFIX
from jupyter_gpu_ws.store.crypto import Encryption, protect
from jupyter_gpu_ws.store.local import LocalBackend
from jupyter_gpu_ws.sync import SyncEngine
from jupyter_gpu_ws.sync.engine import index_path
from jupyter_gpu_ws.sync.index import SyncIndex
from tests.sync.conftest import S3_BUCKET
from tests.sync.s3server import S3Server
from tests.sync.sync_child import settings_from

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("sync_child.py")
MiB = 2**20

SMALL_POINTS = 10  # kill points in a pass of many small files
LARGE_POINTS = 8  # … of a few large files
CHANGE_POINTS = 4  # … of changes and deletions over a synced store
S3_POINTS = 3  # … to SeaweedFS over S3


# -- running and killing a pass ------------------------------------------------------------


PASSPHRASE = "kill -9 passphrase"


def child_settings(
    workdir: Path, store_url: str, state_dir: Path, encrypted: bool = False
) -> dict[str, Any]:
    # durable=False: a killed process loses nothing the kernel has, so the syncfs() that makes a
    # pass survive a power cut changes nothing here, and costs seconds of writeback per pass.
    settings = {
        "workdir": str(workdir),
        "store_url": store_url,
        "workspace": "ws",
        "state_dir": str(state_dir),
        "lease_ttl": 60.0,
        "durable": False,
    }
    if encrypted:
        settings["passphrase"] = PASSPHRASE
    return settings


@dataclass
class ChildRun:
    killed: bool  # False: the pass ended before the signal
    seconds: float  # from "syncing" to the end of the process
    output: str


def run_pass(settings: dict[str, Any], kill_after: float | None = None) -> ChildRun:
    """One pass in a child process; with `kill_after`, SIGKILL that many seconds into it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PYTHONWARNINGS": "ignore",
    }
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), json.dumps(settings)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first.strip() != "syncing":
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"The sync process did not start its pass: {first}{out}{err}")
        start = time.monotonic()
        if kill_after is not None:
            time.sleep(kill_after)
            proc.send_signal(signal.SIGKILL)  # a no-op if it has ended already
        out, err = proc.communicate(timeout=300)
        seconds = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed = proc.returncode == -signal.SIGKILL
    if not killed and proc.returncode != 0:
        pytest.fail(f"The sync process failed ({proc.returncode}): {out}{err}")
    return ChildRun(killed, seconds, out + err)


def kill_delay(seconds: float, point: int, points: int, seed: int) -> float:
    """Point `point` of `points`, spread over [0, seconds) with a seeded jitter inside its slot."""
    return seconds * (point + random.Random(seed * 1000 + point).random()) / points


def interrupted_pass(
    fresh: Callable[[int], dict[str, Any]], delay: float, tries: int = 5
) -> dict[str, Any]:
    """Run a pass over `fresh(n)` (a new store each time) and kill it after `delay`; a pass
    that ended before the signal (this machine was faster than when it was measured) is run
    again on a fresh store, killed twice as early. Returns the settings of the last run."""
    for attempt in range(tries):
        settings = fresh(attempt)
        if run_pass(settings, kill_after=delay).killed:
            break
        delay /= 2
    return settings


# -- checking a store ----------------------------------------------------------------------


def local_mirror(store: Path) -> Path:
    return store / "ws" / "files"


def visible(files_root: Path) -> dict[str, Path]:
    """Files a reader of the mirror sees under their final names."""
    out = {}
    for dirpath, _, names in os.walk(files_root):
        for name in names:
            if PART_SUFFIX not in name:
                path = Path(dirpath) / name
                out[path.relative_to(files_root).as_posix()] = path
    return out


def source_files(workdir: Path) -> dict[str, Path]:
    return visible(workdir)


def assert_only_complete_files(files_root: Path, *sources: Path) -> int:
    """Every visible file equals that path in one of `sources` (old and new trees)."""
    filecmp.clear_cache()  # compare bytes, never a remembered answer
    seen = visible(files_root)
    for rel, path in seen.items():
        candidates = [src / rel for src in sources if (src / rel).is_file()]
        assert candidates, f"{rel} is in the store under a name no source file has"
        assert any(filecmp.cmp(path, c, shallow=False) for c in candidates), (
            f"{rel} is visible in the store with {path.stat().st_size} bytes that no version of it had"
        )
    return len(seen)


def finish(settings: dict[str, Any]) -> SyncEngine:
    """The next run, in this process: takes the expired lease and completes the pass."""
    engine = SyncEngine(settings_from({**settings, "lease_ttl": 60.0}))
    engine.open()
    assert not engine.read_only, engine.read_only_reason
    report = engine.sync()
    assert report.ok, report.errors
    return engine


def assert_mirror_equals(files_root: Path, workdir: Path) -> None:
    filecmp.clear_cache()
    seen, source = visible(files_root), source_files(workdir)
    assert sorted(seen) == sorted(source)
    different = [rel for rel in source if not filecmp.cmp(seen[rel], source[rel], shallow=False)]
    assert different == []


# -- trees ---------------------------------------------------------------------------------


def make_small_tree(root: Path, count: int, seed: int) -> Path:
    rng = random.Random(seed)
    for i in range(count):
        path = root / f"dir{i % 30:02d}" / f"sub{i % 7}" / f"file{i:05d}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(0, 8192)))
    return root


def make_large_tree(root: Path) -> Path:
    root.mkdir(parents=True)
    for name, size in [
        ("ckpt/model-a.pt", 30 * MiB + 11),
        ("ckpt/model-b.pt", 55 * MiB),
        ("data.bin", 90 * MiB + 5),
    ]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(os.urandom(size))
    for i in range(4):
        (root / f"notes{i}.txt").write_text(f"small file {i}\n")
    return root


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_small_tree(tmp_path_factory.mktemp("small") / "tree", 1000, seed=1)


@pytest.fixture(scope="module")
def large_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tree = make_large_tree(tmp_path_factory.mktemp("large") / "tree")
    yield tree
    shutil.rmtree(tree, ignore_errors=True)  # pytest keeps temporary folders of recent runs


def measure_pass(tree: Path, scratch: Path) -> float:
    """Seconds an uninterrupted first pass of `tree` takes here (and now), caches warm."""
    seconds = []
    for n in range(2):
        store = scratch / f"store{n}"
        try:
            run = run_pass(child_settings(tree, str(store), scratch / f"state{n}"))
            assert not run.killed and run.output.startswith("done"), run.output
            seconds.append(run.seconds)
        finally:
            shutil.rmtree(store, ignore_errors=True)
    return min(seconds)


@pytest.fixture(scope="module")
def small_tree_seconds(small_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    return measure_pass(small_tree, tmp_path_factory.mktemp("measure-small"))


@pytest.fixture(scope="module")
def large_tree_seconds(large_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    return measure_pass(large_tree, tmp_path_factory.mktemp("measure-large"))


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for path in [*tmp_path.glob("store*"), *tmp_path.glob("work*")]:  # large copies: free the disk
        shutil.rmtree(path, ignore_errors=True)


# -- first passes --------------------------------------------------------------------------


def decrypted_mirror(store: Path, into: Path) -> Path:
    """The encrypted store's files/ tree, each object decrypted and authenticated whole (an
    object cut short or torn fails here) into `into`."""
    shutil.rmtree(into, ignore_errors=True)
    backend = protect(open_backend(str(store)), "ws", Encryption(PASSPHRASE))
    prefix = "ws/files/"
    for f in backend.list(prefix.rstrip("/")):
        target = into / f.key[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        backend.get(f.key, str(target))
    into.mkdir(parents=True, exist_ok=True)
    return into


def kill_first_pass_and_check(
    tree: Path,
    seconds: float,
    point: int,
    points: int,
    seed: int,
    scratch: Path,
    encrypted: bool = False,
) -> None:
    def fresh(attempt: int) -> dict[str, Any]:
        store = scratch / f"store{attempt}"
        return child_settings(tree, str(store), scratch / f"state{attempt}", encrypted)

    settings = interrupted_pass(fresh, kill_delay(seconds, point, points, seed))
    store = Path(settings["store_url"])

    def mirror() -> Path:
        return (
            decrypted_mirror(store, scratch / "work-decrypted")
            if encrypted
            else local_mirror(store)
        )

    assert_only_complete_files(mirror(), tree)
    finish(settings).close()
    assert_mirror_equals(mirror(), tree)


# Every kill point on a plain store; the first few again on an encrypted one.
ENCRYPTED_POINTS = 4


@pytest.mark.parametrize(
    ("point", "encrypted"),
    [(p, False) for p in range(SMALL_POINTS)] + [(p, True) for p in range(ENCRYPTED_POINTS)],
)
def test_kill_during_a_pass_of_many_small_files_leaves_only_complete_files(
    point: int, encrypted: bool, small_tree: Path, small_tree_seconds: float, scratch: Path
) -> None:
    kill_first_pass_and_check(
        small_tree, small_tree_seconds, point, SMALL_POINTS, 1, scratch, encrypted
    )


@pytest.mark.parametrize(
    ("point", "encrypted"),
    [(p, False) for p in range(LARGE_POINTS)] + [(p, True) for p in range(ENCRYPTED_POINTS)],
)
def test_kill_during_a_pass_of_large_files_leaves_only_complete_files(
    point: int, encrypted: bool, large_tree: Path, large_tree_seconds: float, scratch: Path
) -> None:
    kill_first_pass_and_check(
        large_tree, large_tree_seconds, point, LARGE_POINTS, 2, scratch, encrypted
    )


# -- what the record claims after a kill ---------------------------------------------------

DURABLE_POINTS = 4  # kill points in a pass that waits for the disk


def durable_settings(tree: Path, scratch: Path, n: int) -> dict[str, Any]:
    """A pass as Persist now and the command line run it (it waits for the disk), on a store
    that logs which keys each flush made durable (sync_child.flush_logged)."""
    settings = child_settings(tree, str(scratch / f"store{n}"), scratch / f"state{n}")
    return {**settings, "durable": True, "flush_log": str(scratch / f"flushed{n}.log")}


@pytest.fixture(scope="module")
def durable_pass_seconds(small_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    scratch = tmp_path_factory.mktemp("measure-durable")
    run = run_pass(durable_settings(small_tree, scratch, 0))
    assert not run.killed and run.output.startswith("done"), run.output
    return run.seconds


@pytest.mark.parametrize("point", range(DURABLE_POINTS))
def test_kill_during_a_first_pass_leaves_a_record_of_durable_whole_files_only(
    point: int, small_tree: Path, durable_pass_seconds: float, scratch: Path
) -> None:
    settings = interrupted_pass(
        lambda n: durable_settings(small_tree, scratch, n),
        kill_delay(durable_pass_seconds, point, DURABLE_POINTS, 7),
    )
    store = Path(settings["store_url"])
    log = Path(settings["flush_log"])  # none where the kill came before the first flush
    durable = set(log.read_text(encoding="utf-8").split()) if log.exists() else set()
    index = SyncIndex(
        index_path(settings["state_dir"], str(small_tree), LocalBackend(str(store)), "ws")
    )
    try:
        # What the record says is in the store, and an unclean stop does not make it forget.
        claimed = set(index.all()) - set(index.unflushed_paths())
    finally:
        index.close()
    filecmp.clear_cache()
    for rel in claimed:
        assert f"ws/files/{rel}" in durable, f"{rel} is recorded as synced but was never flushed"
        assert filecmp.cmp(local_mirror(store) / rel, small_tree / rel, shallow=False), rel
    assert_only_complete_files(local_mirror(store), small_tree)
    finish({k: v for k, v in settings.items() if k != "flush_log"}).close()
    assert_mirror_equals(local_mirror(store), small_tree)


# -- a pass of changes and deletions -------------------------------------------------------


@pytest.fixture(scope="module")
def change_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What the store holds before the pass that gets killed."""
    root = make_small_tree(tmp_path_factory.mktemp("change") / "tree", 300, seed=3)
    (root / "model.pt").write_bytes(os.urandom(40 * MiB))
    yield root
    shutil.rmtree(root, ignore_errors=True)  # pytest keeps temporary folders of recent runs


def prepare_changes(
    old: Path, scratch: Path, n: int = 0
) -> tuple[dict[str, Any], Path, list[str], list[str]]:
    """A synced work directory, then edits and deletions not yet carried over."""
    workdir = scratch / f"work{n}"
    shutil.copytree(old, workdir)
    settings = child_settings(workdir, str(scratch / f"store{n}"), scratch / f"state{n}")
    finish(settings).close()
    rng = random.Random(4)
    files = sorted(rel for rel in source_files(workdir) if rel != "model.pt")
    changed = [rel for i, rel in enumerate(files) if i % 3 == 0] + ["model.pt"]
    deleted = [rel for i, rel in enumerate(files) if i % 15 == 1]
    for rel in changed:
        path = workdir / rel
        path.write_bytes(rng.randbytes(path.stat().st_size + 1 + rng.randint(0, 100)))
    for rel in deleted:
        (workdir / rel).unlink()
    return settings, workdir, changed, deleted


@pytest.fixture(scope="module")
def change_pass_seconds(change_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    scratch = tmp_path_factory.mktemp("measure-change")
    seconds = []
    for n in range(2):
        try:
            settings, *_ = prepare_changes(change_tree, scratch, n)
            run = run_pass(settings)
            assert not run.killed and run.output.startswith("done"), run.output
            seconds.append(run.seconds)
        finally:
            shutil.rmtree(scratch / f"store{n}", ignore_errors=True)
    return min(seconds)


def versions_of(store: Path, rel: str) -> list[Path]:
    folder = store / "ws" / ".gpuws" / "versions" / rel
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("point", range(CHANGE_POINTS))
def test_kill_during_a_pass_of_changes_and_deletions_loses_no_version(
    point: int, change_tree: Path, change_pass_seconds: float, scratch: Path
) -> None:
    prepared: list[tuple[dict[str, Any], Path, list[str], list[str]]] = []

    def fresh(attempt: int) -> dict[str, Any]:
        prepared.append(prepare_changes(change_tree, scratch, attempt))
        return prepared[-1][0]

    interrupted_pass(fresh, kill_delay(change_pass_seconds, point, CHANGE_POINTS, 5))
    settings, workdir, changed, deleted = prepared[-1]
    store = Path(settings["store_url"])
    # Each visible file is the old or the new content, whole.
    assert_only_complete_files(local_mirror(store), change_tree, workdir)
    finish(settings).close()
    assert_mirror_equals(local_mirror(store), workdir)
    for rel in changed + deleted:  # the content the pass replaced or removed is kept
        assert any(
            filecmp.cmp(v, change_tree / rel, shallow=False) for v in versions_of(store, rel)
        ), rel


# -- S3 --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_kill_env(s3_server: S3Server) -> Iterator[S3Server]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        for name, value in s3_server.env().items():
            mp.setenv(name, value)
        yield s3_server


@pytest.fixture(scope="module")
def s3_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_small_tree(tmp_path_factory.mktemp("s3") / "tree", 120, seed=6)
    (root / "weights.bin").write_bytes(os.urandom(24 * MiB))  # a temporary key, then a copy
    return root


@pytest.fixture(scope="module")
def s3_pass_seconds(
    s3_kill_env: S3Server, s3_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> float:
    url = f"s3://{S3_BUCKET}/kill-measure-{uuid.uuid4().hex[:8]}"
    run = run_pass(child_settings(s3_tree, url, tmp_path_factory.mktemp("measure-s3")))
    assert not run.killed and run.output.startswith("done")
    return run.seconds


def bucket_mirror(server: S3Server, prefix: str) -> dict[str, bytes]:
    client = server.client()
    head = f"{prefix}/ws/files/"
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=head):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(head) :]] = client.get_object(Bucket=S3_BUCKET, Key=obj["Key"])[
                "Body"
            ].read()
    return out


@pytest.mark.parametrize("point", range(S3_POINTS))
def test_kill_during_a_pass_to_s3_leaves_only_complete_objects(
    point: int, s3_kill_env: S3Server, s3_tree: Path, s3_pass_seconds: float, tmp_path: Path
) -> None:
    def fresh(attempt: int) -> dict[str, Any]:
        url = f"s3://{S3_BUCKET}/kill-{uuid.uuid4().hex[:8]}"
        return child_settings(s3_tree, url, tmp_path / f"state{attempt}")

    settings = interrupted_pass(fresh, kill_delay(s3_pass_seconds, point, S3_POINTS, 7))
    prefix = settings["store_url"].rsplit("/", 1)[1]
    for rel, data in bucket_mirror(s3_kill_env, prefix).items():
        assert PART_SUFFIX not in rel
        assert (s3_tree / rel).read_bytes() == data, (
            f"{rel}: {len(data)} bytes in the bucket, not the file"
        )
    finish(settings).close()
    mirror = bucket_mirror(s3_kill_env, prefix)
    assert sorted(mirror) == sorted(source_files(s3_tree))
    assert all((s3_tree / rel).read_bytes() == data for rel, data in mirror.items())
