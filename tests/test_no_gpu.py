"""A machine without an NVIDIA driver, through the real pynvml module: normal, not an error."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from jupyter_gpu_ws.monitor import NvmlReader


@pytest.fixture
def gpuws_config() -> dict[str, Any]:
    return {"sample_interval": 0.1}  # no test double: the real NVML binding


def nvml_available() -> bool:
    return NvmlReader().read().gpus != []


pytestmark = pytest.mark.skipif(nvml_available(), reason="this machine has a working NVIDIA GPU")


async def test_api_reports_no_gpus_with_the_reason(jp_fetch: Any) -> None:
    response = await jp_fetch("gpuws", "api", "metrics")
    data = json.loads(response.body)
    assert data["gpus"] == []
    assert "NVIDIA" in data["gpu_error"] or "NVML" in data["gpu_error"]
    # Everything else is still reported.
    assert data["system"]["memory_total"] > 0


def test_real_reader_explains_a_missing_driver_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = NvmlReader()
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu_ws.monitor.nvml"):
        readings = [reader.read() for _ in range(5)]
    assert all(r.gpus == [] for r in readings)
    assert readings[0].error == "No NVIDIA driver is installed (NVML library not found)"
    assert len([r for r in caplog.records if "NVML" in r.getMessage()]) == 1
    reader.close()
