"""The runtime API on a real Jupyter Server: countdown, warnings, the automatic persist before the
deadline, persist and release, Git commits at persist, and bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import git
import pytest
from tornado.httpclient import HTTPClientError
from traitlets import TraitError

from jupyter_gpu_ws.app import GpuWorkspace
from tests.test_sync_api import finished, get, mirror, sync_running
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any]) -> dict[str, Any]:
    # A minute of runtime, persisted 40 s before its end: the automatic persist comes ~20 s in.
    return {**gpuws_config, "max_runtime": "1m", "persist_lead_time": 40.0}


async def test_runtime_reports_the_deadline_its_source_and_time_left(jp_fetch: Any) -> None:
    state = await get(jp_fetch, "runtime")
    assert state["source"] == "max_runtime"
    assert state["deadline"] == pytest.approx(state["start"] + 60, abs=0.01)
    assert 0 < state["remaining"] <= 60
    assert state["next_persist"] == pytest.approx(state["deadline"] - 40, abs=0.01)
    assert state["grace_period"] == 25 and state["git"] == {"enabled": False}
    later = await get(jp_fetch, "runtime")
    assert later["remaining"] < state["remaining"]  # it counts down


async def test_a_warning_notice_comes_once_the_lead_time_is_crossed(jp_fetch: Any) -> None:
    async def warned() -> Any:
        notices = (await get(jp_fetch, "runtime"))["notices"]
        return [n for n in notices if n["level"] == "warning"]

    warnings = await async_until(warned, timeout=10)
    # All three default lead times (30, 10, 2 min) are crossed at once: one warning, not three.
    assert len(warnings) == 1 and "about 1 minute" in warnings[0]["message"]
    # In the panel's words: the source as the Runtime section names it, not the setting's name.
    assert (
        "(runtime limit)" in warnings[0]["message"] and "max_runtime" not in warnings[0]["message"]
    )


async def test_the_runtime_persists_by_itself_before_the_deadline(
    jp_fetch: Any, jp_root_dir: Path, store_dir: Path, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    gpuws_app.sync.service.debounce = 3600  # the watcher alone would not carry the next file
    big = jp_root_dir / "results.bin"
    big.write_bytes(b"r" * (5 * 2**20))  # large: it waits for the (now endless) settle delay

    async def persisted() -> Any:
        job = (await get(jp_fetch, "runtime"))["auto_persist"]
        return job if job and job["state"] != "running" else None

    job = await async_until(persisted, timeout=45)
    state = await get(jp_fetch, "runtime")
    assert job["state"] == "done" and job["result"]["trigger"] == "auto"
    assert job["finished"] < state["deadline"]
    assert (mirror(store_dir) / "results.bin").read_bytes() == big.read_bytes()
    assert any("Persisting automatically" in n["message"] for n in state["notices"])


def test_unreadable_runtime_settings_are_refused_with_their_name() -> None:
    with pytest.raises(TraitError, match="max_runtime"):
        GpuWorkspace(max_runtime="soon")
    with pytest.raises(TraitError, match="deadline"):
        GpuWorkspace(deadline="next tuesday")
    with pytest.raises(TraitError, match="preemption_clouds"):
        GpuWorkspace(preemption_clouds=["ibm"])


@pytest.mark.parametrize("body", ['{"force": "yes"}', '{"other": 1}', "[1]", "{not json"])
async def test_release_refuses_a_bad_body(jp_fetch: Any, body: str, gpuws_app: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "runtime", "release", method="POST", body=body)
    assert err.value.code == 400
    assert gpuws_app.runtime.release is None  # nothing was started


class TestRelease:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any]) -> dict[str, Any]:
        return {**gpuws_config, "max_runtime": ""}

    async def test_release_persists_then_stops_the_server(
        self,
        jp_fetch: Any,
        jp_root_dir: Path,
        store_dir: Path,
        gpuws_app: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        stopped: list[float] = []
        monkeypatch.setattr(
            gpuws_app.serverapp, "stop", lambda *a, **k: stopped.append(time.time())
        )
        await sync_running(jp_fetch)
        (jp_root_dir / "last.py").write_text("x = 1")
        response = await jp_fetch("gpuws", "api", "runtime", "release", method="POST", body="{}")
        assert response.code == 202
        job_id = json.loads(response.body)["id"]

        async def released() -> Any:
            return stopped or None

        await async_until(released, timeout=20)
        job = await get(jp_fetch, "persist", job_id)
        assert job["state"] == "done" and job["result"]["trigger"] == "release"
        assert (mirror(store_dir) / "last.py").read_text() == "x = 1"
        assert stopped[0] >= job["finished"]  # only after everything was persisted

    async def test_a_failed_persist_keeps_the_server_running(
        self, jp_fetch: Any, jp_root_dir: Path, gpuws_app: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        stopped: list[float] = []
        monkeypatch.setattr(
            gpuws_app.serverapp, "stop", lambda *a, **k: stopped.append(time.time())
        )
        await sync_running(jp_fetch)
        engine = gpuws_app.sync.service.engine
        monkeypatch.setattr(engine.settings, "quota_bytes", 10)
        (jp_root_dir / "too-big.txt").write_text("more than ten bytes of text")
        await jp_fetch("gpuws", "api", "runtime", "release", method="POST", body='{"force": false}')

        async def kept() -> Any:
            release = (await get(jp_fetch, "runtime"))["release"]
            return release if release and release["state"] == "kept" else None

        release = await async_until(kept, timeout=20)
        assert "quota" in release["error"].lower()
        assert stopped == []


class TestGit:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any]) -> dict[str, Any]:
        return {**gpuws_config, "max_runtime": "", "git_versioning": True, "git_init": True}

    async def test_persist_commits_code_but_not_data(
        self, jp_fetch: Any, jp_root_dir: Path
    ) -> None:
        await sync_running(jp_fetch)
        (jp_root_dir / "train.py").write_text("print('train')")
        (jp_root_dir / "weights.pt").write_bytes(b"w" * 1000)
        response = await jp_fetch("gpuws", "api", "persist", method="POST", body="{}")
        job = await finished(jp_fetch, "persist", json.loads(response.body)["id"])
        assert job["state"] == "done", job["errors"]
        assert [s["name"] for s in job["steps"]] == ["documents", "checkpoints", "git", "sync"]
        repo = git.Repo(jp_root_dir)
        committed = {item.path for item in repo.head.commit.tree.traverse()}
        assert "train.py" in committed and "weights.pt" not in committed
        assert repo.head.commit.message.startswith("gpuws: persist")

    async def test_the_history_comes_back_with_the_work_directory(
        self, jp_fetch: Any, jp_root_dir: Path, store_dir: Path, tmp_path: Path
    ) -> None:
        """After a reset (a fresh machine) and a restore, `git log` shows the history."""
        from jupyter_gpu_ws.sync import SyncEngine, SyncSettings

        await sync_running(jp_fetch)
        for n in range(2):
            (jp_root_dir / "train.py").write_text(f"print({n})")
            response = await jp_fetch("gpuws", "api", "persist", method="POST", body="{}")
            assert (await finished(jp_fetch, "persist", json.loads(response.body)["id"]))[
                "state"
            ] == "done"
        fresh = tmp_path / "fresh-machine"
        fresh.mkdir()
        engine = SyncEngine(
            SyncSettings(
                workdir=str(fresh),
                store_url=str(store_dir),
                workspace="test-ws",
                state_dir=str(tmp_path / "fresh-state"),
            )
        )
        engine.open(take_over=True)
        try:
            engine.restore()
        finally:
            engine.close()
        messages = [c.message for c in git.Repo(fresh).iter_commits()]
        assert len(messages) == 2 and all(m.startswith("gpuws: persist") for m in messages)
        assert (fresh / "train.py").read_text() == "print(1)"
