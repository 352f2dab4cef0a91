"""Alert episodes: each starts once, keeps its id while it lasts, and ends with its cause."""

from __future__ import annotations

from typing import Any

from jupyter_gpu_ws.monitor.alerts import AlertPolicy, AlertTracker

GIB = 2**30
POLICY = AlertPolicy(
    gpu_idle_percent=5, gpu_idle_seconds=600, gpu_memory_fraction=0.95, disk_fraction=0.90
)


def gpu(util: int = 50, used: float = 4, kernel: bool = True) -> dict[str, Any]:
    procs = [
        {
            "pid": 10,
            "memory_used": GIB,
            "kernel_id": "k1" if kernel else None,
            "notebook": "train.ipynb" if kernel else None,
        }
    ]
    return {
        "index": 0,
        "name": "A100",
        "utilization": util,
        "memory_used": int(used * GIB),
        "memory_total": 40 * GIB,
        "processes": procs,
        "mig": [],
    }


def disk(fraction: float) -> dict[str, Any]:
    return {
        "label": "workdir",
        "path": "/content",
        "used": int(fraction * 100 * GIB),
        "total": 100 * GIB,
    }


def kinds(alerts: list[Any]) -> list[str]:
    return [a.kind for a in alerts]


def test_idle_gpu_with_kernel_memory_alerts_after_the_configured_time() -> None:
    tracker = AlertTracker(POLICY)
    assert tracker.update([gpu(util=2)], [], now=0) == []
    assert tracker.update([gpu(util=1)], [], now=599) == []
    alerts = tracker.update([gpu(util=0)], [], now=600)
    assert kinds(alerts) == ["gpu-idle"]
    assert "train.ipynb" in alerts[0].message and "10 min" in alerts[0].message


def test_idle_gpu_without_a_kernel_holding_memory_is_no_alert() -> None:
    tracker = AlertTracker(POLICY)
    tracker.update([gpu(util=0, kernel=False)], [], now=0)
    assert tracker.update([gpu(util=0, kernel=False)], [], now=10_000) == []


def test_one_episode_keeps_one_id_then_a_new_episode_gets_a_new_id() -> None:
    tracker = AlertTracker(POLICY)
    tracker.update([gpu(util=0)], [], now=0)
    first = tracker.update([gpu(util=0)], [], now=600)[0].id
    assert tracker.update([gpu(util=0)], [], now=900)[0].id == first
    assert tracker.update([gpu(util=60)], [], now=901) == []  # training resumed: episode over
    tracker.update([gpu(util=0)], [], now=1000)
    second = tracker.update([gpu(util=0)], [], now=1600)
    assert kinds(second) == ["gpu-idle"] and second[0].id != first


def test_busy_interval_resets_the_idle_clock() -> None:
    tracker = AlertTracker(POLICY)
    tracker.update([gpu(util=0)], [], now=0)
    tracker.update([gpu(util=80)], [], now=300)
    tracker.update([gpu(util=0)], [], now=301)
    assert tracker.update([gpu(util=0)], [], now=800) == []


def test_gpu_memory_above_95_percent_alerts_with_hysteresis() -> None:
    tracker = AlertTracker(POLICY)
    assert tracker.update([gpu(used=37.9)], [], now=0) == []  # 94.75 %
    alert = tracker.update([gpu(used=38.5)], [], now=1)
    assert kinds(alert) == ["gpu-memory"] and "96%" in alert[0].message
    # Hovering just under the line does not end and restart the episode.
    assert tracker.update([gpu(used=37.9)], [], now=2)[0].id == alert[0].id
    assert tracker.update([gpu(used=30)], [], now=3) == []


def test_disk_above_90_percent_alerts() -> None:
    tracker = AlertTracker(POLICY)
    assert tracker.update([], [disk(0.85)], now=0) == []
    alerts = tracker.update([], [disk(0.93)], now=1)
    assert (
        kinds(alerts) == ["disk"]
        and "/content" in alerts[0].message
        and "7.0 GiB left" in alerts[0].message
    )
    assert tracker.update([], [disk(0.5)], now=2) == []
