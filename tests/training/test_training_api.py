"""Training in view with real kernels and the real server: pace, ETA and verdict, a deadline that
turns it, NaN, a stalled loop, curves across a resume, TensorBoard files and a W&B run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.checkpoints.files import complete_checkpoints
from tests.kernels import Notebook, collect
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

SETUP = """
%load_ext jupyter_gpu_ws
import time, torch, jupyter_gpu_ws as gpuws
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 8, generator=torch.Generator().manual_seed(7))
target = data.sum(1, keepdim=True)
gpuws.track(model=model, optimizer=opt, {options})
losses = {{}}

def train(start, stop, delay=0.0, nan_at=None, pause_at=None, pause=0.0):
    for i in range(start, stop):
        loss = torch.nn.functional.mse_loss(model(data), target)
        if nan_at is not None and i >= nan_at:
            loss = loss * float("nan")  # what an exploding gradient ends in
        opt.zero_grad(); loss.backward(); opt.step()
        losses[i] = float(loss.detach())
        gpuws.step(i, loss=loss, lr=opt.param_groups[0]["lr"])  # the tensor itself, read later
        time.sleep(delay)
        if i == pause_at:
            time.sleep(pause)
"""


async def training(jp_fetch: Any) -> dict[str, Any]:
    return json.loads((await jp_fetch("gpuws", "api", "training")).body)


def run_of(state: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((r for r in state["runs"] if r["run"] == name), None)


async def stop_cell(jp_fetch: Any, nb: Notebook, cell: str) -> None:
    await jp_fetch("api", "kernels", nb.kernel_id, "interrupt", method="POST", body="")
    try:
        await collect(nb.client, cell)
    except AssertionError:
        pass  # the KeyboardInterrupt


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any]) -> dict[str, Any]:
    # A far deadline: the verdict is "finishes"; the sync is beside the point here.
    return {**gpuws_config, "sync_enabled": False, "max_runtime": "10h"}


async def test_a_tracked_loop_with_loss_tensors_reports_pace_eta_and_verdict(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "pace.ipynb") as nb:
        await nb.run(SETUP.format(options="total_steps=5000"))
        cell = nb.client.execute("train(0, 5000, delay=0.02)")

        async def measured() -> Any:
            run = run_of(await training(jp_fetch), "pace.ipynb")
            return run if run and run["rate"] and run["step"] >= 100 else None

        run = await async_until(measured, timeout=60, interval=0.5)
        assert run["live"] and run["state"] == "running" and run["notebook"] == "pace.ipynb"
        assert run["total"] == 5000 and run["done_steps"] == run["step"] + 1
        assert 5 < run["rate"] < 55  # one step every 20 ms and a little more
        assert run["eta"] == pytest.approx((5000 - run["done_steps"]) / run["rate"])
        assert run["elapsed"] > 1.0
        verdict = run["verdict"]
        assert verdict["state"] == "finishes" and verdict["source"] == "max_runtime"
        assert verdict["margin"] > 9 * 3600 - run["eta"] - 60
        assert "before the runtime ends" in verdict["message"]
        # The loss tensors were read in the background: the values the loop computed.
        assert {"loss", "lr"} <= set(run["scalars"]) and run["values"]["lr"] == pytest.approx(0.01)
        assert len(run["sparkline"]) >= 3 and all(
            v is not None and v >= 0 for _, v in run["sparkline"]
        )
        await stop_cell(jp_fetch, nb, cell)
        losses = json.loads(await nb.run("import json; print(json.dumps(losses))"))
        last = run["values"]["loss"]
        assert any(abs(v - last) < 1e-6 * max(1.0, abs(v)) for v in losses.values())


@pytest.fixture
def deadline_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "deadline"
    monkeypatch.setenv("GPUWS_DEADLINE_FILE", str(path))  # read when the server starts
    return path


class TestDeadline:
    @pytest.fixture
    def gpuws_config(self, deadline_file: Path, gpuws_config: dict[str, Any]) -> dict[str, Any]:
        # No deadline at first; the platform's file brings one. A short persist lead time, so the
        # automatic persist is still ahead when the deadline arrives.
        config = {**gpuws_config, "persist_lead_time": 10.0, "warning_lead_times": []}
        config.pop("max_runtime")
        return config

    async def test_a_deadline_closer_than_the_eta_turns_the_verdict_and_raises_the_notice(
        self, jp_fetch: Any, gpuws_app: Any, deadline_file: Path
    ) -> None:
        async with Notebook(jp_fetch, gpuws_app, "long.ipynb") as nb:
            await nb.run(SETUP.format(options="total_steps=100000"))
            cell = nb.client.execute("train(0, 100000, delay=0.01)")

            def verdict(state: str) -> Any:
                async def check() -> Any:
                    run = run_of(await training(jp_fetch), "long.ipynb")
                    return run if run and (run["verdict"] or {}).get("state") == state else None

                return check

            run = await async_until(verdict("no-deadline"), timeout=60, interval=0.5)
            assert run["eta"] > 600  # 100,000 steps at ~100 a second
            assert not [a for a in run["anomalies"] if a["kind"] == "eta-past-deadline"]

            deadline_file.write_text(str(time.time() + 300))  # the platform says: 5 minutes left
            run = await async_until(verdict("short"), timeout=30, interval=0.5)
            v = run["verdict"]
            assert v["source"] == "deadline_file" and v["short_by"] > 0
            assert v["short_by"] == pytest.approx(
                run["eta"] - (v["deadline"] - time.time()), abs=30
            )
            assert run["step"] < v["persist_step"] < v["steps_by_deadline"] < 100000
            assert f"about step {v['persist_step']:,}" in v["message"]
            state = await training(jp_fetch)
            [notice] = [a for a in state["anomalies"] if a["kind"] == "eta-past-deadline"]
            assert notice["run"] == "long.ipynb" and notice["level"] == "warning"
            assert "short" in notice["message"] and "gpuws.resume()" in notice["advice"]

            # One episode: the same notice (id) on the next look, its figures moving.
            async def moved() -> Any:
                found = [
                    a
                    for a in (await training(jp_fetch))["anomalies"]
                    if a["kind"] == "eta-past-deadline"
                ]
                return found if [a["message"] for a in found] != [notice["message"]] else None

            again = await async_until(moved, timeout=30, interval=0.5)
            assert [a["id"] for a in again] == [notice["id"]]

            deadline_file.write_text(str(time.time() + 10 * 3600))  # moved: now it finishes
            run = await async_until(verdict("finishes"), timeout=30, interval=0.5)
            assert not [a for a in run["anomalies"] if a["kind"] == "eta-past-deadline"]
            await stop_cell(jp_fetch, nb, cell)


async def test_a_nan_loss_raises_the_alert_and_resume_goes_back_to_the_last_healthy_checkpoint(
    jp_fetch: Any, gpuws_app: Any, jp_root_dir: Path
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "nan.ipynb") as nb:
        await nb.run(SETUP.format(options="every_steps=5, keep_last=2"))
        await nb.run("train(0, 31, delay=0.05, nan_at=12)\ngpuws.checkpoint(wait=True)")

        async def alerted() -> Any:
            state = await training(jp_fetch)
            return [a for a in state["anomalies"] if a["kind"] == "nan-loss"]

        [alert] = await async_until(alerted, timeout=30, interval=0.3)
        assert alert["run"] == "nan.ipynb" and alert["level"] == "error" and alert["step"] == 12
        assert "nan at step 12" in alert["message"] and "gpuws.resume()" in alert["advice"]

        run_dir = jp_root_dir / ".gpuws" / "checkpoints" / "nan.ipynb"
        kept = [(m["step"], m["health"]) for _, m in complete_checkpoints(run_dir)]
        healthy = [step for step, health in kept if health == "healthy"]
        # Those taken from step 12 on are suspect; keep_last=2 keeps the two newest (suspect), and
        # the newest healthy one (step 10, unless a busy machine coalesced its write) stays too.
        assert len(kept) == 3 and len(healthy) == 1 and healthy[0] in (5, 10)
        assert all(health == "suspect" for step, health in kept if step >= 12)
        said = await nb.run("print(gpuws.resume())")
        assert said.strip().splitlines()[-1] == str(healthy[0] + 1)
        assert (
            f"newest healthy checkpoint, at step {healthy[0]}" in said and "nan at step 12" in said
        )
        assert await nb.run("print(torch.isfinite(model.weight).all().item())") == "True\n"


class TestStall:
    @pytest.fixture
    def gpuws_config(self, gpuws_config: dict[str, Any]) -> dict[str, Any]:
        return {**gpuws_config, "training_stall_seconds": 2.0}

    async def test_a_loop_that_stops_stepping_mid_run_raises_the_stall_alert(
        self, jp_fetch: Any, gpuws_app: Any
    ) -> None:
        async with Notebook(jp_fetch, gpuws_app, "stall.ipynb") as nb:
            await nb.run(SETUP.format(options="total_steps=1000"))
            cell = nb.client.execute("train(0, 1000, delay=0.01, pause_at=150, pause=600)")

            async def stalled() -> Any:
                run = run_of(await training(jp_fetch), "stall.ipynb")
                return run if run and run["state"] == "stalled" else None

            run = await async_until(stalled, timeout=60, interval=0.5)
            [alert] = [a for a in run["anomalies"] if a["kind"] == "stall"]
            assert run["step"] == 150 and alert["step"] == 150
            assert "no step for" in alert["message"] and "busy" in alert["message"]
            assert "traceback" in alert["advice"]
            await stop_cell(jp_fetch, nb, cell)  # the kernel is idle: not a stall any more

            async def over() -> Any:
                run = run_of(await training(jp_fetch), "stall.ipynb")
                return run if run and run["state"] == "paused" and not run["anomalies"] else None

            await async_until(over, timeout=20, interval=0.5)


async def test_a_run_whose_kernel_died_mid_cell_is_stopped_not_running(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    # Out of memory, a crash, kill -9: the kernel stays listed, its last status "busy", until
    # the restarter brings a fresh process under the same id, which trains nothing.
    async with Notebook(jp_fetch, gpuws_app, "died.ipynb") as nb:
        await nb.run(SETUP.format(options="total_steps=100000"))
        nb.client.execute("train(0, 100000, delay=0.01)")

        async def state(wanted: str) -> Any:
            run = run_of(await training(jp_fetch), "died.ipynb")
            return run if run and run["state"] == wanted else None

        before = await async_until(lambda: state("running"), timeout=30, interval=0.3)
        assert before["live"]
        os.kill(nb.pid, signal.SIGKILL)
        after = await async_until(lambda: state("stopped"), timeout=15, interval=0.3)
        assert not after["live"] and after["rate"] is None
        for _ in range(12):  # and it stays stopped while the kernel is restarted, and after
            await asyncio.sleep(0.5)
            run = run_of(await training(jp_fetch), "died.ipynb")
            assert run is not None and run["state"] == "stopped", run


async def test_a_resumed_run_shows_its_curve_continuous_across_a_new_kernel(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "curve.ipynb") as nb:
        await nb.run(SETUP.format(options="total_steps=60"))
        await nb.run(
            "train(0, 30, delay=0.02)\ngpuws.checkpoint(wait=True)\ntrain(30, 40, delay=0.02)"
        )
        os.kill(nb.pid, signal.SIGKILL)  # the runtime is gone: steps 30-39 are lost

    async def from_checkpoint() -> Any:  # what the runtime shows once the kernel is gone
        run = run_of(await training(jp_fetch), "curve.ipynb")
        return run if run and not run["live"] and run["checkpoint"] else None

    run = await async_until(from_checkpoint, timeout=30, interval=0.5)
    # Its step is the last the kernel reported (the checkpoint's, or one of 30-39 where the
    # kernel's stream was written while they ran: its steps are read every 0.2 s, READ_EVERY).
    assert run["state"] == "stopped" and run["checkpoint"]["step"] == 29
    assert 29 <= run["step"] <= 39
    history = json.loads(
        (await jp_fetch("gpuws", "api", "training", "history", params={"run": "curve.ipynb"})).body
    )
    before = [p[0] for p in history["runs"]["curve.ipynb"]["series"]["loss"]]
    assert before and max(before) <= 39 and min(before) < 10

    async with Notebook(jp_fetch, gpuws_app, "curve.ipynb") as nb:
        await nb.run(SETUP.format(options="total_steps=60"))
        assert (await nb.run("start = gpuws.resume(); print(start)")).strip().splitlines()[
            -1
        ] == "30"
        await nb.run("train(start, 60, delay=0.02)")

        async def continued() -> Any:
            run = run_of(await training(jp_fetch), "curve.ipynb")
            return run if run and run["live"] and run["step"] == 59 else None

        run = await async_until(continued, timeout=30, interval=0.5)
        assert run["state"] == "done" and (run["verdict"] or {}).get("state") == "done"
        history = json.loads((await jp_fetch("gpuws", "api", "training", "history")).body)
        steps = [p[0] for p in history["runs"]["curve.ipynb"]["series"]["loss"]]
        assert steps == sorted(steps) and len(steps) == len(
            set(steps)
        )  # one curve, never doubling back
        assert min(steps) < 10 and max(steps) == 59 and any(25 <= s <= 29 for s in steps)
        assert any(30 <= s <= 40 for s in steps)


async def test_tensorboard_event_files_hold_the_loops_values(
    jp_fetch: Any, gpuws_app: Any, jp_root_dir: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    async with Notebook(jp_fetch, gpuws_app, "tb.ipynb") as nb:
        await nb.run(SETUP.format(options="total_steps=40, tensorboard=True"))
        await nb.run(
            "train(0, 40)\ngpuws.log(val_acc=0.75)\ngpuws.checkpoint(wait=True)"
        )  # a checkpoint flushes them
        losses = json.loads(await nb.run("import json; print(json.dumps(losses))"))

    folder = jp_root_dir / ".gpuws" / "checkpoints" / "tb.ipynb" / "tensorboard"
    events = EventAccumulator(str(folder))
    events.Reload()
    assert {"loss", "lr", "val_acc"} <= set(events.Tags()["scalars"])
    read = {e.step: e.value for e in events.Scalars("loss")}
    assert sorted(read) == list(range(40))
    assert all(read[i] == pytest.approx(losses[str(i)], rel=1e-6) for i in range(40))
    assert [(e.step, e.value) for e in events.Scalars("val_acc")] == [(39, pytest.approx(0.75))]


async def test_a_wandb_run_keeps_its_id_across_a_resume(
    jp_fetch: Any, gpuws_app: Any, jp_root_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("wandb")
    offline = f"import os; os.environ.update(WANDB_MODE='offline', WANDB_DIR={str(tmp_path)!r}, WANDB_SILENT='true')\n"
    async with Notebook(jp_fetch, gpuws_app, "wb.ipynb") as nb:
        await nb.run(offline + SETUP.format(options=""))
        first = (
            (
                await nb.run(
                    "import wandb\nrun = wandb.init(project='gpuws-test')\ntrain(0, 10)\n"
                    "gpuws.checkpoint(wait=True)\nprint(run.id)"
                )
            )
            .strip()
            .splitlines()[-1]
        )
        os.kill(nb.pid, signal.SIGKILL)

    [(_, manifest)] = complete_checkpoints(jp_root_dir / ".gpuws" / "checkpoints" / "wb.ipynb")
    assert manifest["wandb"]["run_id"] == first and manifest["wandb"]["project"] == "gpuws-test"
    async with Notebook(jp_fetch, gpuws_app, "wb.ipynb") as nb:
        await nb.run(offline + SETUP.format(options=""))
        said = await nb.run(
            "start = gpuws.resume()\nimport wandb\nrun = wandb.init(project='gpuws-test')\n"
            "print(run.id)\nwandb.finish()"
        )
        assert said.strip().splitlines()[-1] == first  # one W&B run, continued, not split in two
        assert f"W&B run {first} continues" in said


async def test_gpuws_status_shows_each_run_with_its_step_eta_and_verdict(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "status.ipynb") as nb:
        await nb.run(SETUP.format(options="total_steps=5000"))
        cell = nb.client.execute("train(0, 5000, delay=0.02)")

        async def measured() -> Any:
            run = run_of(await training(jp_fetch), "status.ipynb")
            return run if run and run["rate"] else None

        await async_until(measured, timeout=60, interval=0.5)
        await stop_cell(jp_fetch, nb, cell)

        async def paused() -> Any:
            return (run_of(await training(jp_fetch), "status.ipynb") or {}).get("state") == "paused"

        await async_until(paused, what="the server has seen the loop pause")
        [shown] = await nb.display("%gpuws status")
        said = shown["text/plain"]
        assert "training run" in said  # after the GPU, sync and checkpoint tables
        assert "status.ipynb" in shown["text/html"]
        [line] = [
            line
            for line in said.splitlines()
            if line.strip().startswith("status.ipynb") and "/5,000" in line
        ]
        assert "paused" in line and "before the runtime ends" in line
        assert " h " in line or " min" in line  # the ETA in words


RESTART_AND_RUN_ALL = """
%load_ext jupyter_gpu_ws
import time, jupyter_gpu_ws as gpuws
gpuws.track(epoch=0)
for i in range({steps}):
    gpuws.step(i, loss={loss})
    time.sleep(0.01)
"""


async def test_restart_and_run_all_raises_no_alarm_against_the_earlier_runs_best(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    seen: list[dict[str, Any]] = []

    async def reached(step: int) -> Any:
        state = await training(jp_fetch)
        seen.extend(state["anomalies"])
        run = run_of(state, "restart.ipynb")
        return run if run and run["live"] and run["step"] == step else None

    async with Notebook(jp_fetch, gpuws_app, "restart.ipynb") as nb:  # the first run: down to 1e-6
        await nb.run(RESTART_AND_RUN_ALL.format(steps=200, loss="5.0 * (1e-6 / 5.0) ** (i / 199)"))
        await async_until(lambda: reached(199), timeout=30, interval=0.2)
    async with Notebook(
        jp_fetch, gpuws_app, "restart.ipynb"
    ) as nb:  # Restart and Run All: from 5.0 again
        rerun = RESTART_AND_RUN_ALL.format(steps=300, loss="5.0 * 0.99 ** i")
        cell = nb.client.execute(rerun)
        run = await async_until(lambda: reached(299), timeout=60, interval=0.2)
        await collect(nb.client, cell)
        assert seen == [] and run["anomalies"] == []
        history = json.loads(
            (
                await jp_fetch(
                    "gpuws", "api", "training", "history", params={"run": "restart.ipynb"}
                )
            ).body
        )
        curve = history["runs"]["restart.ipynb"]["series"]["loss"]
        # The rerun's curve alone, from its own start: none of the first run's points (down to 1e-6) left.
        assert curve[0][0] <= 30 and curve[0][2] > 3.5 and min(p[2] for p in curve) > 0.2
        assert [p[0] for p in curve] == sorted({p[0] for p in curve})
        await nb.run(
            rerun.replace("%load_ext jupyter_gpu_ws", "")
        )  # the loop's cell run again, same kernel
        run = await async_until(lambda: reached(299), timeout=60, interval=0.2)
    assert seen == [] and run["anomalies"] == []
