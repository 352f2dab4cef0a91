"""Attribution without host PIDs: NVML's process list joined with what each kernel reports of
its own GPU use, for a server and kernels in a PID namespace (as in a container)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from jupyter_gpu_ws.monitor.attribution import KernelReport, attribute, reports_from_registration
from jupyter_gpu_ws.monitor.fake_nvml import FakeNvml, FakeTorchCuda
from jupyter_gpu_ws.monitor.kernels import KernelRef
from jupyter_gpu_ws.monitor.own_use import NVML, TORCH_ALLOCATED, TORCH_RESERVED, OwnGpuUseReader
from tests.conftest import GIB, write_spec
from tests.kernels import connected_client
from tests.servers import server_process
from tests.waiting import until

UUID = "GPU-5d1c2a3b-0000-4000-8000-00000000a100"
HOST_PID = 4_000_123  # beyond any pid_max here: a PID that exists only on "the host"


def _gpu(processes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"index": 0, "uuid": UUID, "processes": processes, "mig": []}


def test_a_pid_this_server_cannot_see_is_marked_not_visible() -> None:
    gpus = [_gpu([{"pid": HOST_PID, "memory_used": 15 * GIB}])]
    attribute(gpus, {})
    (proc,) = gpus[0]["processes"]
    assert proc["visible"] is False and proc.get("kernel_id") is None


def test_a_kernel_report_names_the_notebook_where_no_pid_maps() -> None:
    kernel = KernelRef("k-1", "python3", "train.ipynb")
    gpus = [_gpu([{"pid": HOST_PID, "memory_used": 15 * GIB}])]
    attribute(gpus, {}, [KernelReport(kernel, 57, UUID[4:], 14 * GIB, TORCH_RESERVED)])
    hidden, reported = gpus[0]["processes"]
    assert hidden["visible"] is False
    assert reported == {
        "pid": 57,
        "memory_used": 14 * GIB,
        "kernel_id": "k-1",
        "kernel_name": "python3",
        "notebook": "train.ipynb",
        "memory_source": "kernel:torch_reserved",
        "visible": True,
    }


def test_a_kernel_already_mapped_by_pid_is_not_counted_twice() -> None:
    me = os.getpid()
    kernel = KernelRef("k-1", "python3", "train.ipynb")
    gpus = [_gpu([{"pid": me, "memory_used": 3 * GIB}])]
    attribute(gpus, {me: kernel}, [KernelReport(kernel, me, UUID, 2 * GIB, TORCH_RESERVED)])
    (proc,) = gpus[0]["processes"]
    assert (
        proc["kernel_id"] == "k-1"
        and proc["memory_source"] == "nvml"
        and proc["memory_used"] == 3 * GIB
    )


def test_a_report_for_another_gpu_lands_on_that_gpu_only() -> None:
    kernel = KernelRef("k-1", "python3", "train.ipynb")
    other = {"index": 1, "uuid": "GPU-other", "processes": [], "mig": []}
    gpus = [_gpu([]), other]
    attribute(gpus, {}, [KernelReport(kernel, 57, "GPU-other", GIB, TORCH_RESERVED)])
    assert gpus[0]["processes"] == [] and other["processes"][0]["kernel_id"] == "k-1"


def test_malformed_registration_entries_are_skipped() -> None:
    kernel = KernelRef("k-1", "python3", None)
    reports = reports_from_registration(
        kernel,
        {
            "pid": 9,
            "gpu": [
                {"uuid": UUID, "memory_used": GIB, "figure": "torch_reserved"},
                {"uuid": UUID, "memory_used": "lots", "figure": "torch_reserved"},
                {"uuid": UUID, "memory_used": -1, "figure": "torch_reserved"},
                {"uuid": UUID, "memory_used": GIB, "figure": "x; rm -rf"},
                "not a dict",
            ],
        },
    )
    assert reports == [KernelReport(kernel, 9, UUID, GIB, "torch_reserved")]


# -- the kernel's own view ------------------------------------------------------------------


def test_own_use_prefers_nvml_where_it_lists_this_process(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "g.json",
        {
            "gpus": [{"uuid": UUID, "processes": [{"pid": os.getpid(), "memory_used": 5 * GIB}]}],
            "torch_cuda": {
                str(os.getpid()): [{"uuid": UUID, "reserved": 4 * GIB, "allocated": 3 * GIB}]
            },
        },
    )
    reader = OwnGpuUseReader(FakeNvml(str(spec)), FakeTorchCuda(str(spec)))
    (use,) = reader.read()
    assert (use.uuid, use.memory_used, use.figure) == (UUID[4:].lower(), 5 * GIB, NVML)


def test_own_use_falls_back_to_torch_when_nvml_lists_host_pids(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "g.json",
        {
            "gpus": [{"uuid": UUID, "processes": [{"pid": HOST_PID, "memory_used": 5 * GIB}]}],
            "torch_cuda": {
                str(os.getpid()): [
                    {"uuid": UUID, "reserved": 4 * GIB, "allocated": 3 * GIB},
                    {"uuid": "GPU-b", "reserved": 0, "allocated": GIB},
                ]
            },
        },
    )
    reader = OwnGpuUseReader(FakeNvml(str(spec)), FakeTorchCuda(str(spec)))
    figures = {(u.uuid, u.memory_used, u.figure) for u in reader.read()}
    assert figures == {(UUID[4:].lower(), 4 * GIB, TORCH_RESERVED), ("b", GIB, TORCH_ALLOCATED)}


def test_own_use_is_empty_without_a_cuda_context(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "g.json",
        {"gpus": [{"uuid": UUID, "processes": [{"pid": os.getpid(), "memory_used": 5 * GIB}]}]},
    )
    assert OwnGpuUseReader(FakeNvml(str(spec)), FakeTorchCuda(str(spec))).read() == []


# -- a server and its kernels in a PID namespace ----------------------------------------------


def _host_pid_of_kernel(server_pid: int, kernel_id: str) -> int:
    """The kernel's PID as the host sees it (the test runs outside the namespace)."""
    for proc in psutil.Process(server_pid).children(recursive=True):
        try:
            if any(kernel_id in part for part in proc.cmdline()):
                return proc.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no process for kernel {kernel_id}")


def test_in_a_pid_namespace_the_notebooks_memory_comes_from_its_agent(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.json"
    base = {
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": UUID,
        "utilization": 90,
        "memory_used": 15 * GIB,
        "memory_total": 40 * GIB,
    }
    write_spec(gpus, {"gpus": [dict(base, processes=[])]})
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with server_process(
        tmp_path,
        runtime,
        {"nvml_test_double": str(gpus), "sample_interval": 0.2},
        pid_namespace=True,
    ) as server:
        session = server.api(
            "/api/sessions",
            "POST",
            {
                "path": "train.ipynb",
                "type": "notebook",
                "name": "train.ipynb",
                "kernel": {"name": "python3"},
            },
        )
        kernel_id = session["kernel"]["id"]
        client = connected_client(runtime / f"kernel-{kernel_id}.json")
        outputs: list[dict[str, Any]] = []
        try:
            reply = client.execute_interactive(
                "%load_ext jupyter_gpu_ws\nimport os\nprint(os.getpid())",
                timeout=60,
                output_hook=lambda msg: outputs.append(msg),
            )
            assert reply["content"]["status"] == "ok"
        finally:
            client.stop_channels()
        ns_pid = int(
            next(m["content"]["text"] for m in outputs if m["msg_type"] == "stream").strip()
        )
        host_pid = _host_pid_of_kernel(server.proc.pid, kernel_id)
        assert host_pid != ns_pid  # the kernel really lives in another PID namespace

        # NVML, like the real driver, lists the host's PIDs: the kernel's and another process's.
        write_spec(
            gpus,
            {
                "gpus": [
                    dict(
                        base,
                        processes=[
                            {"pid": host_pid, "memory_used": 14 * GIB},
                            {"pid": os.getpid(), "memory_used": GIB},
                        ],
                    )
                ],
                "torch_cuda": {
                    str(ns_pid): [{"uuid": UUID, "reserved": 13 * GIB, "allocated": 12 * GIB}]
                },
            },
        )

        def attributed() -> Any:
            procs = server.api("/gpuws/api/metrics")["gpus"][0]["processes"]
            return procs if any(p.get("kernel_id") == kernel_id for p in procs) else None

        procs = until(attributed, 30, "the notebook's memory from its agent")
        mine = next(p for p in procs if p.get("kernel_id") == kernel_id)
        assert mine["notebook"] == "train.ipynb"
        assert mine["memory_used"] == 13 * GIB and mine["memory_source"] == "kernel:torch_reserved"
        hidden = [p for p in procs if p["memory_source"] == "nvml"]
        # Neither host PID means anything inside the namespace: "not visible", not "no process".
        assert {p["pid"] for p in hidden} == {host_pid, os.getpid()}
        assert all(p["visible"] is False and p["kernel_id"] is None for p in hidden)
