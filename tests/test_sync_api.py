"""The sync and persist API against a real Jupyter Server and a local-folder store."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpu_ws.sync import SyncEngine, SyncSettings
from tests.test_handlers import DenyGpuws
from tests.waiting import async_until


async def get(jp_fetch: Any, *path: str) -> dict[str, Any]:
    return json.loads((await jp_fetch("gpuws", "api", *path)).body)


async def finished(jp_fetch: Any, path: str, job_id: str, timeout: float = 300) -> dict[str, Any]:
    """The job at `gpuws/api/<path>/<job_id>` once it is no longer running."""

    async def ended() -> Any:
        job = await get(jp_fetch, *path.split("/"), job_id)
        return job if job["state"] != "running" else None

    return await async_until(ended, timeout=timeout)


async def sync_running(jp_fetch: Any) -> dict[str, Any]:
    async def running() -> Any:
        status = await get(jp_fetch, "sync")
        return (
            status if status["state"] in ("idle", "syncing") and status.get("last_sync") else None
        )

    return await async_until(running)


def mirror(store_dir: Path) -> Path:
    return store_dir / "test-ws" / "files"


async def test_sync_status_reports_state_and_pending_files(
    jp_fetch: Any, jp_root_dir: Path
) -> None:
    status = await sync_running(jp_fetch)
    assert status["workspace"] == "test-ws" and status["lease_held"] is True
    assert status["pending_files"] == 0 and status["last_error"] is None
    watch = status["watch"]  # how changes are noticed: every folder watched, nothing stopped
    assert watch["folders"] >= 1 and watch["limited"] is False and watch["error"] is None
    assert watch["watcher"] in ("inotify", "watchfiles") and watch["rescan_interval"] > 0
    # A change is seen by the watcher and synced by itself.
    (jp_root_dir / "new.py").write_text("print('hi')")

    async def synced() -> Any:
        s = await get(jp_fetch, "sync")
        return s if s["synced_files"] >= 1 and s["pending_files"] == 0 else None

    await async_until(synced)


async def test_persist_runs_a_job_with_progress_until_all_is_saved(
    jp_fetch: Any, jp_root_dir: Path, store_dir: Path
) -> None:
    await sync_running(jp_fetch)
    for i in range(20):
        (jp_root_dir / f"f{i}.txt").write_text("x" * i)
    response = await jp_fetch("gpuws", "api", "persist", method="POST", body="")
    assert response.code == 202
    job = await finished(jp_fetch, "persist", json.loads(response.body)["id"])
    assert job["state"] == "done", job["errors"]
    assert [(s["name"], s["state"]) for s in job["steps"]] == [
        ("documents", "done"),
        ("checkpoints", "done"),
        ("sync", "done"),
    ]
    assert job["steps"][1]["detail"] == "no kernel tracks anything"
    assert job["progress"]["files_done"] == job["progress"]["files_total"]
    assert sorted(p.name for p in mirror(store_dir).iterdir()) == sorted(
        f"f{i}.txt" for i in range(20)
    )
    status = await get(jp_fetch, "sync")
    assert status["persist"]["id"] == job["id"] and status["pending_files"] == 0


async def test_unknown_job_is_a_404(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "persist", "0123456789ab")
    assert (
        err.value.code == 404 and "No persist job" in json.loads(err.value.response.body)["message"]
    )


async def test_malformed_body_is_a_400(jp_fetch: Any) -> None:
    await sync_running(jp_fetch)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "persist", method="POST", body="{not json")
    assert (
        err.value.code == 400 and "not valid JSON" in json.loads(err.value.response.body)["message"]
    )


async def test_lease_takeover_needs_an_explicit_body(jp_fetch: Any) -> None:
    await sync_running(jp_fetch)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "sync", "lease", method="POST", body="{}")
    assert err.value.code == 400 and "take_over" in json.loads(err.value.response.body)["message"]


@pytest.mark.parametrize("server_authorizer", [DenyGpuws])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "sync"),
        ("POST", "persist"),
        ("POST", "sync/restore"),
        ("GET", "persist/0123456789ab"),
        ("GET", "runtime"),
        ("POST", "runtime/release"),
        ("GET", "env"),
        ("POST", "env/snapshots"),
        ("POST", "env/restore"),
        ("DELETE", "env/restore/0123456789ab"),
    ],
)
async def test_denied_user_gets_403_everywhere(
    jp_fetch: Any, server_authorizer: Any, method: str, path: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            "gpuws", "api", *path.split("/"), method=method, body="" if method == "POST" else None
        )
    assert err.value.code == 403


class TestBrokenStore:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any]) -> dict[str, Any]:
        return {**gpuws_config, "store_url": "nosuchproto://bucket/x"}

    async def test_status_says_why_and_persist_is_refused_with_the_reason(
        self, jp_fetch: Any
    ) -> None:
        async def failed() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["state"] == "error" else None

        status = await async_until(failed)
        assert "Unknown storage protocol 'nosuchproto'" in status["last_error"]
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpuws", "api", "persist", method="POST", body="")
        assert err.value.code == 503
        assert "nosuchproto" in json.loads(err.value.response.body)["message"]


class TestMistypedStoreUrl:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any]) -> dict[str, Any]:
        return {**gpuws_config, "store_url": "s3:/my-bucket/work"}

    async def test_the_status_says_what_was_meant_within_seconds(
        self, jp_fetch: Any, jp_root_dir: Path
    ) -> None:
        async def failed() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["state"] == "error" else None

        status = await async_until(failed, timeout=10)
        assert "did you mean 's3://my-bucket/work'" in status["last_error"]
        assert not (jp_root_dir / "s3:").exists() and not list(jp_root_dir.glob("s3*"))


class TestStoreOnADriveThatIsNotMounted:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
        (tmp_path / "drive").mkdir()  # the mount point, empty while the drive is not mounted
        return {
            **gpuws_config,
            "store_url": str(tmp_path / "drive" / "MyDrive" / "gpuws"),
            "lease_ttl": 2.0,
        }

    async def test_it_is_store_unavailable_and_goes_on_by_itself_once_mounted(
        self, jp_fetch: Any, jp_root_dir: Path, tmp_path: Path
    ) -> None:
        (jp_root_dir / "notes.md").write_text("mine")

        async def missing() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s.get("store_missing") else None

        status = await async_until(missing, timeout=10)
        assert status["state"] == "error" and "unmounted drive" in status["store_down"]
        assert status["can_take_over"] is True
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpuws", "api", "persist", method="POST", body="")
        assert err.value.code in (409, 503)
        assert list((tmp_path / "drive").iterdir()) == []  # nothing made in the mount point
        (tmp_path / "drive" / "MyDrive" / "gpuws").mkdir(parents=True)  # the drive is mounted

        async def saved() -> Any:
            s = await get(jp_fetch, "sync")
            return (
                s
                if not s["store_missing"] and s["synced_files"] >= 1 and s["pending_files"] == 0
                else None
            )

        await async_until(saved, timeout=30)
        assert (
            tmp_path / "drive" / "MyDrive" / "gpuws" / "test-ws" / "files" / "notes.md"
        ).read_text() == "mine"


class TestLeaseHeldElsewhere:
    @pytest.fixture
    def other_runtime(self, store_dir: Path, tmp_path: Path) -> Any:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        engine = SyncEngine(
            SyncSettings(str(elsewhere), str(store_dir), "test-ws", str(tmp_path / "other-state"))
        )
        engine.open()
        yield engine
        engine.close()

    async def test_second_runtime_is_read_only_and_says_who_holds_it(
        self, other_runtime: Any, jp_fetch: Any, jp_root_dir: Path
    ) -> None:
        async def read_only() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["state"] == "read-only" and s["restore"] and not s["restoring"] else None

        status = await async_until(read_only)
        assert "Another runtime is writing this workspace" in status["read_only_reason"]
        # The holder saves a file after this server's restore on start: only Take over brings it.
        written = Path(other_runtime.workdir) / "from-the-holder.txt"
        written.write_text("saved by the other runtime")
        assert (await asyncio.to_thread(other_runtime.sync)).ok
        assert not (jp_root_dir / "from-the-holder.txt").exists()
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpuws", "api", "persist", method="POST", body="")
        assert err.value.code == 409
        # Take over, as the user's word, works on a live holder too: writing waits for its time.
        response = await jp_fetch(
            "gpuws", "api", "sync", "lease", method="POST", body='{"take_over": true}'
        )
        status = json.loads(response.body)
        assert (
            status["state"] == "taking-over"
            and status["lease_held"]
            and status["writes_start_in"] > 0
        )
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpuws", "api", "persist", method="POST", body="")
        assert (
            err.value.code == 409
            and "writing starts in" in json.loads(err.value.response.body)["message"]
        )
        await async_until(lambda: _true(other_runtime.read_only), timeout=15)  # the other one stops
        assert "took the workspace lease" in other_runtime.read_only_reason
        # Take over also restores: the holder's file is here, as it saved it.
        here = jp_root_dir / "from-the-holder.txt"
        await async_until(lambda: _true(here.exists()), timeout=30)
        assert here.read_text() == "saved by the other runtime"


class TestRestoreOnStart:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any], store_dir: Path) -> dict[str, Any]:
        saved = mirror(store_dir) / "notebooks" / "yesterday.ipynb"
        saved.parent.mkdir(parents=True)
        saved.write_text('{"cells": []}')
        return gpuws_config

    async def test_files_come_back_into_a_fresh_work_directory(
        self, jp_fetch: Any, jp_root_dir: Path
    ) -> None:
        status = await sync_running(jp_fetch)
        assert status["restore"]["restored"] == 1
        assert (jp_root_dir / "notebooks" / "yesterday.ipynb").read_text() == '{"cells": []}'


async def _true(value: Any) -> Any:
    return value


class TestStoreWrittenBySomeoneElse:
    @pytest.fixture
    def gpuws_config(
        self, gpuws_config: dict[str, Any], store_dir: Path, tmp_path: Path
    ) -> dict[str, Any]:
        saved = mirror(store_dir) / "notes.md"
        saved.parent.mkdir(parents=True)
        saved.write_text("notes")
        host_file = tmp_path / "host" / "passwd"
        host_file.parent.mkdir()
        host_file.write_text("root:x:0:0")
        (mirror(store_dir) / "passwd").symlink_to(host_file)
        return gpuws_config

    async def test_a_link_in_the_store_is_not_restored_and_the_status_names_it(
        self, jp_fetch: Any, jp_root_dir: Path
    ) -> None:
        status = await sync_running(jp_fetch)
        assert status["restore"]["restored"] == 1 and not status["restore"]["errors"]
        assert (jp_root_dir / "notes.md").read_text() == "notes"
        assert not os.path.lexists(jp_root_dir / "passwd")
        assert "symbolic link" in status["store_skipped"]["test-ws/files/passwd"]
        assert status["store_skipped_count"] == 1


class TestWorkspaceChooser:
    """A fresh machine whose default workspace is new, while the store holds the user's work
    under another name: the panel lists it, and using it brings the files back."""

    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any], store_dir: Path) -> dict[str, Any]:
        saved = store_dir / "someone-project" / "files" / "notes.md"
        saved.parent.mkdir(parents=True)
        saved.write_text("yesterday's notes")
        config = dict(gpuws_config)
        del config["workspace"]  # the default, derived from the user and the folder
        return config

    async def test_the_other_workspaces_are_listed_and_one_can_be_used(
        self, jp_fetch: Any, jp_root_dir: Path, gpuws_app: Any
    ) -> None:
        await sync_running(jp_fetch)
        listing = await get(jp_fetch, "sync", "workspaces")
        assert listing["current"] == gpuws_app.workspace and listing["current"].endswith(
            jp_root_dir.name
        )
        assert listing["current_files"] == 0
        other = next(w for w in listing["workspaces"] if w["name"] == "someone-project")
        assert (
            other["files"] == 1
            and other["bytes"] == len("yesterday's notes")
            and other["last_write"]
        )
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                "gpuws", "api", "sync", "workspaces", "use", method="POST", body='{"name": "nope"}'
            )
        assert (
            err.value.code == 404
            and "someone-project" in json.loads(err.value.response.body)["message"]
        )
        response = await jp_fetch(
            "gpuws",
            "api",
            "sync",
            "workspaces",
            "use",
            method="POST",
            body='{"name": "someone-project"}',
        )
        assert json.loads(response.body)["current"] == "someone-project"

        async def restored() -> Any:
            status = await get(jp_fetch, "sync")
            return (
                status
                if status.get("workspace") == "someone-project" and status["state"] == "idle"
                else None
            )

        await async_until(restored, timeout=60)
        assert (jp_root_dir / "notes.md").read_text() == "yesterday's notes"
        assert gpuws_app.workspace == "someone-project"


class TestStartupFaults:
    """Whatever is wrong at start shows in the status with its reason, and nothing is lost."""

    @pytest.fixture
    def fault(self) -> str:
        return "lease"

    @pytest.fixture
    def gpuws_config(
        self,
        gpuws_config: dict[str, Any],
        store_dir: Path,
        tmp_path: Path,
        jp_root_dir: Path,
        fault: str,
    ) -> dict[str, Any]:
        from jupyter_gpu_ws.sync import LocalBackend
        from jupyter_gpu_ws.sync.engine import index_path

        config = dict(gpuws_config)
        if fault == "lease":
            lease = store_dir / "test-ws" / ".gpuws" / "lease.json"
            lease.parent.mkdir(parents=True)
            lease.write_text('{"holder": "abc", "host": "elsewh')  # truncated mid-write
        elif fault == "record":
            (mirror(store_dir)).mkdir(parents=True)
            (mirror(store_dir) / "shared.txt").write_text("the store's copy")
            (jp_root_dir / "shared.txt").write_text("the local copy")
            path = Path(
                index_path(
                    config["state_dir"], str(jp_root_dir), LocalBackend(str(store_dir)), "test-ws"
                )
            )
            path.parent.mkdir(parents=True)
            path.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))  # a damaged record
        elif fault == "ignore":
            (jp_root_dir / ".gpuwsignore").write_text("*.log\n[z-a]\n")
            (jp_root_dir / "run.log").write_text("not mirrored")
            (jp_root_dir / "train.py").write_text("mirrored")
        elif fault == "state_dir":
            blocker = tmp_path / "not-a-folder"
            blocker.write_text("a file where the state folder should be")
            config["state_dir"] = str(blocker / "state")
        return config

    @pytest.mark.parametrize("fault", ["lease"])
    async def test_an_unreadable_lease_is_an_error_with_take_over(
        self, jp_fetch: Any, fault: str
    ) -> None:
        async def error() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["state"] == "error" else None

        status = await async_until(error)
        assert status["can_take_over"] and "unreadable" in status["read_only_reason"]
        response = await jp_fetch(
            "gpuws", "api", "sync", "lease", method="POST", body='{"take_over": true}'
        )
        assert json.loads(response.body)["lease_held"]
        await sync_running(jp_fetch)

    @pytest.fixture
    def start_restore_held(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
        """The restore at start waits until the test lets it go."""
        gate = threading.Event()
        restore = SyncEngine.restore

        def held(engine: SyncEngine, *args: Any, **kwargs: Any) -> Any:
            gate.wait(60)
            return restore(engine, *args, **kwargs)

        monkeypatch.setattr(SyncEngine, "restore", held)
        yield gate
        gate.set()

    @pytest.mark.parametrize("fault", ["lease"])
    async def test_take_over_works_while_the_start_still_restores(
        self, start_restore_held: threading.Event, jp_fetch: Any, fault: str
    ) -> None:
        async def error_while_restoring() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["state"] == "error" and s["restoring"] else None

        status = await async_until(error_while_restoring)
        assert status["can_take_over"] and "take over to replace it" in status["read_only_reason"]
        # What the status offers works now, not only once the restore is over.
        response = await jp_fetch(
            "gpuws", "api", "sync", "lease", method="POST", body='{"take_over": true}'
        )
        status = json.loads(response.body)
        assert status["lease_held"] and status["state"] == "starting" and status["restoring"]
        start_restore_held.set()
        status = await sync_running(jp_fetch)
        assert status["lease_held"] and not status["read_only_reason"]

    @pytest.mark.parametrize("fault", ["record"])
    async def test_a_damaged_record_is_rebuilt_and_overwrites_nothing_unversioned(
        self, jp_fetch: Any, store_dir: Path, fault: str
    ) -> None:
        status = await sync_running(jp_fetch)
        assert "unreadable" in (status["record_rebuilt"] or "")
        assert (mirror(store_dir) / "shared.txt").read_text() == "the local copy"
        [version] = (store_dir / "test-ws" / ".gpuws" / "versions" / "shared.txt").iterdir()
        assert version.read_text() == "the store's copy"

    @pytest.mark.parametrize("fault", ["ignore"])
    async def test_a_bad_ignore_line_is_named_and_the_rest_applies(
        self, jp_fetch: Any, store_dir: Path, fault: str
    ) -> None:
        status = await sync_running(jp_fetch)
        [problem] = status["ignore_problems"]
        assert "line 2" in problem and "[z-a]" in problem
        # The patterns in force are named (the Sync section shows them): the one that applies.
        assert status["ignore_rules"] == ["*.log"] and status["ignore_rules_count"] == 1
        assert (mirror(store_dir) / "train.py").exists() and not (
            mirror(store_dir) / "run.log"
        ).exists()

    @pytest.mark.parametrize("fault", ["state_dir"])
    async def test_any_other_fault_at_start_is_state_error_with_its_message(
        self, jp_fetch: Any, fault: str
    ) -> None:
        async def error() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["state"] == "error" else None

        status = await async_until(error)
        assert "not-a-folder" in status["last_error"] or "Not a directory" in status["last_error"]
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpuws", "api", "persist", method="POST", body="")
        assert (
            err.value.code == 503
            and "not running" in json.loads(err.value.response.body)["message"]
        )


async def test_a_file_that_cannot_be_read_is_named_and_does_not_fail_persist(
    jp_fetch: Any, jp_root_dir: Path, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sync_running(jp_fetch)
    (jp_root_dir / "fine.txt").write_text("fine")
    locked = jp_root_dir / "locked.csv"
    locked.write_text("secret")
    real_open = os.open

    def guarded(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(locked):  # as chmod 000 would, even for root
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    response = await jp_fetch("gpuws", "api", "persist", method="POST", body="")
    job = await finished(jp_fetch, "persist", json.loads(response.body)["id"])
    assert job["state"] == "done", job["errors"]  # the rest is persisted; a release would go on
    assert job["result"]["problems"] == ["locked.csv: cannot be read: Permission denied"]
    assert (mirror(store_dir) / "fine.txt").read_text() == "fine"
    status = await get(jp_fetch, "sync")
    assert status["problem_files"] == 1 and status["state"] == "idle"
    listing = await get(jp_fetch, "sync", "pending")
    assert listing["problems"][0]["path"] == "locked.csv"


class TestEncryptedStore:
    @pytest.fixture
    def gpuws_config(
        self, gpuws_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> dict[str, Any]:
        monkeypatch.setenv("GPUWS_TEST_PASSPHRASE", "api test passphrase")
        return {**gpuws_config, "encrypt": True, "passphrase_env": "GPUWS_TEST_PASSPHRASE"}

    async def test_status_names_the_cipher_and_never_the_key(
        self, jp_fetch: Any, jp_root_dir: Path, gpuws_app: Any
    ) -> None:
        status = await sync_running(jp_fetch)
        assert status["encryption"] == {"cipher": "AES-256-GCM", "names": False}
        body = (await jp_fetch("gpuws", "api", "sync")).body
        assert b"api test passphrase" not in body
        (jp_root_dir / "secret.py").write_text("KEY = 'hidden'")

        async def synced() -> Any:
            s = await get(jp_fetch, "sync")
            return s if s["synced_files"] >= 1 and s["pending_files"] == 0 else None

        await async_until(synced)
        stored = Path(gpuws_app.store_url) / "test-ws" / "files" / "secret.py"
        assert stored.exists() and b"hidden" not in stored.read_bytes()


async def test_a_plain_store_says_encryption_null(jp_fetch: Any) -> None:
    assert (await sync_running(jp_fetch))["encryption"] is None


def strict_json(body: bytes) -> Any:
    """The answer as a strict parser reads it: UTF-8, no NaN or Infinity, every string Unicode."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    value = json.loads(body.decode("utf-8"), parse_constant=refuse)
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            item.encode("utf-8")  # a "\udce9" escape would parse to text no encoder takes
    return value


def make_file(folder: Path, name: bytes, data: bytes) -> None:
    fd = os.open(os.fsencode(folder) + b"/" + name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    os.close(fd)


class TestAnswersStayJson:
    """A lease another program wrote with `"expires": Infinity` (Python's json writes it, and
    reads it back): corrupt, never trusted; and a file whose name is not UTF-8 waiting behind it:
    every answer is JSON."""

    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any], store_dir: Path) -> dict[str, Any]:
        lease = store_dir / "test-ws" / ".gpuws" / "lease.json"
        lease.parent.mkdir(parents=True)
        lease.write_text(
            '{"holder": "forever-1", "host": "elsewhere", "pid": 1, "user": "someone", '
            '"acquired": 0, "heartbeat": 1e308, "expires": Infinity, "ttl": NaN}'
        )
        return gpuws_config

    async def test_the_status_and_the_pending_list_are_strict_json(
        self, jp_fetch: Any, jp_root_dir: Path
    ) -> None:
        async def status_when(ready: Any) -> Any:
            status = strict_json((await jp_fetch("gpuws", "api", "sync")).body)
            return status if ready(status) else None

        status = await async_until(lambda: status_when(lambda s: s["state"] == "error"))
        assert (
            "corrupt" in status["read_only_reason"] and status["can_take_over"] is True
        )  # not trusted
        make_file(
            jp_root_dir, b"f-\xe9\n.txt", b"waiting"
        )  # seen by the watcher, held back by the lease
        await async_until(lambda: status_when(lambda s: s["pending_files"] == 1))
        pending = strict_json((await jp_fetch("gpuws", "api", "sync", "pending")).body)
        assert [(f["path"], f["state"]) for f in pending["files"]] == [
            ("f-\\xe9\\n.txt", "waiting")
        ]


async def test_a_file_whose_name_is_not_utf8_reaches_the_store_and_the_answers_stay_json(
    jp_fetch: Any, jp_root_dir: Path, store_dir: Path
) -> None:
    from jupyter_gpu_ws.store.names import encode

    await sync_running(jp_fetch)
    make_file(jp_root_dir, b"caf\xe9\tnotes.txt", b"written by a latin-1 program")
    make_file(jp_root_dir, b"\xff" * 250, b"a name too long for the store as key text")
    stored = (
        os.fsencode(mirror(store_dir)) + b"/" + encode(os.fsdecode(b"caf\xe9\tnotes.txt")).encode()
    )

    async def settled() -> Any:
        response = await jp_fetch("gpuws", "api", "sync")
        status = strict_json(response.body)
        done = (
            os.path.exists(stored) and status["pending_files"] == 0 and status["problem_files"] == 1
        )
        return status if response.code == 200 and done else None

    status = await async_until(settled)
    assert status["state"] == "idle" and status["last_error"] is None
    with open(stored, "rb") as f:
        assert f.read() == b"written by a latin-1 program"
    pending = strict_json((await jp_fetch("gpuws", "api", "sync", "pending")).body)
    [problem] = pending["problems"]
    assert problem["path"] == "\\xff" * 250 and "too long for the store" in problem["reason"]


class TestWorkspaceNamedInLatin1:
    """A store folder another program made, its name not UTF-8: the listing and an error that
    names it are JSON, the name written as people read it."""

    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any], store_dir: Path) -> dict[str, Any]:
        files = os.fsencode(store_dir) + b"/lab\xe9/files"
        os.makedirs(files)
        make_file(Path(os.fsdecode(files)), b"notes.md", b"notes")
        return gpuws_config

    async def test_the_listing_and_an_error_naming_it_are_strict_json(self, jp_fetch: Any) -> None:
        await sync_running(jp_fetch)
        listing = strict_json((await jp_fetch("gpuws", "api", "sync", "workspaces")).body)
        assert "lab\\xe9" in [w["name"] for w in listing["workspaces"]]
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                "gpuws", "api", "sync", "workspaces", "use", method="POST", body='{"name": "nope"}'
            )
        assert err.value.code == 404
        assert "lab\\xe9" in strict_json(err.value.response.body)["message"]
