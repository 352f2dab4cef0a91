"""diff() and compatibility(): pure functions over recorded environments and machines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.envsnap import Change, capture, compatibility, diff, load_snapshot
from tests.envsnap.conftest import EDITABLE, LOCAL, PINNED, store_at


def env(**versions: str) -> dict[str, Any]:
    return {
        "packages": [{"name": name.replace("_", "-"), "version": v} for name, v in versions.items()]
    }


def test_diff_names_added_removed_and_changed_packages() -> None:
    snapshot = env(six="1.16.0", idna="3.7", attrs="23.1.0", click="8.1.7")
    current = env(six="1.17.0", idna="3.7", attrs="23.1.0", requests="2.32.3")
    result = diff(current, snapshot)
    assert result.added == [{"name": "requests", "version": "2.32.3"}]
    assert result.removed == [{"name": "click", "version": "8.1.7"}]
    assert result.changed == [Change("six", "1.16.0", "1.17.0")]
    assert result.same == 2 and not result.matches


def test_equal_versions_in_another_spelling_are_the_same() -> None:
    assert diff(env(foo="1.0.0"), env(foo="1.0")).matches


def test_a_fresh_venv_lacks_what_the_snapshot_has(
    snapshot_store: tuple[Path, Any], new_venv: Any
) -> None:
    snapshot = load_snapshot(store_at(snapshot_store[0]))
    result = diff(capture(new_venv(), include_torch=False, machine=False), snapshot)
    assert {item["name"] for item in result.removed} == {*PINNED, LOCAL[0], EDITABLE[0]}
    assert result.added == [] and result.changed == []


def cuda_snapshot(cuda: str | None = "12.1", arch_list: list[str] | None = None) -> dict[str, Any]:
    return {
        "python": {"implementation": "cpython", "version": "3.11.7"},
        "torch": {
            "version": "2.5.1+cu121" if cuda else "2.5.1+cpu",
            "cuda": cuda,
            "arch_list": arch_list if arch_list is not None else ["sm_80", "sm_86", "sm_90"],
        },
    }


def machine(driver: str = "550.54.15", *capabilities: str) -> dict[str, Any]:
    return {
        "driver_version": driver,
        "gpus": [
            {"name": f"GPU{i}", "compute_capability": c}
            for i, c in enumerate(capabilities or ("8.0",))
        ],
    }


def levels(verdicts: list[Any]) -> list[str]:
    return [v.level for v in verdicts]


@pytest.mark.parametrize(
    ("cuda", "driver", "level"),
    [
        ("12.1", "470.82.01", "error"),
        ("12.1", "525.60.13", "ok"),
        ("12.4", "525.60.12", "error"),
        ("11.8", "470.82.01", "ok"),
        ("11.8", "450.80.01", "error"),
        ("13.0", "575.51.03", "error"),
        ("13.0", "580.65.06", "ok"),
    ],
)
def test_driver_must_reach_the_minimum_of_torchs_cuda_major(
    cuda: str, driver: str, level: str
) -> None:
    verdicts = compatibility(cuda_snapshot(cuda), machine(driver, "8.0"))
    assert levels(verdicts) == [level, "ok"]
    if level == "error":
        assert driver in verdicts[0].message and "older than" in verdicts[0].message


@pytest.mark.parametrize(
    ("capability", "arch_list", "level"),
    [
        ("8.0", ["sm_80", "sm_90"], "ok"),  # native
        ("8.6", ["sm_80"], "ok"),  # sm_80 code runs on 8.6
        ("12.0", ["sm_80", "sm_90", "compute_90"], "ok"),  # PTX JIT
        ("12.0", ["sm_80", "sm_90"], "error"),  # Blackwell without PTX
        ("7.0", ["sm_80", "sm_90", "compute_90"], "error"),  # PTX only runs forward
        ("9.0", ["sm_90a"], "ok"),
        ("10.0", ["sm_90a"], "error"),  # arch-specific code does not run elsewhere
        ("10.0", ["sm_100"], "ok"),
    ],
)
def test_each_gpu_must_be_served_by_torchs_architectures(
    capability: str, arch_list: list[str], level: str
) -> None:
    verdicts = compatibility(cuda_snapshot("12.8", arch_list), machine("570.124.06", capability))
    assert levels(verdicts) == ["ok", level]


def test_one_verdict_per_gpu_names_the_one_left_out() -> None:
    verdicts = compatibility(
        cuda_snapshot("12.1", ["sm_80", "sm_90"]), machine("550.54.15", "8.0", "7.5")
    )
    assert levels(verdicts) == ["ok", "ok", "error"]
    assert "GPU1 (sm_75)" in verdicts[2].message


def test_no_gpu_is_informational() -> None:
    assert levels(compatibility(cuda_snapshot("12.1"), None)) == ["info"]
    assert levels(compatibility(cuda_snapshot("12.1"), {"driver_version": None, "gpus": []})) == [
        "info"
    ]


def test_a_cpu_build_of_torch_with_a_gpu_here_is_a_warning() -> None:
    assert levels(compatibility(cuda_snapshot(None), machine())) == ["warn"]
    assert levels(compatibility(cuda_snapshot(None), None)) == ["ok"]


def test_another_python_minor_version_is_a_warning() -> None:
    verdicts = compatibility(
        cuda_snapshot("12.1"), None, {"implementation": "cpython", "version": "3.12.1"}
    )
    assert levels(verdicts) == ["warn", "info"] and "3.11.7" in verdicts[0].message
    same_minor = {"implementation": "cpython", "version": "3.11.9"}
    assert levels(compatibility(cuda_snapshot("12.1"), None, same_minor)) == ["info"]
