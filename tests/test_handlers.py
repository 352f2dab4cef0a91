"""The REST and websocket API against a real Jupyter Server."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError
from tornado.websocket import WebSocketClosedError

from jupyter_gpu_ws.handlers import AUTH_RESOURCE
from tests.waiting import async_until


class DenyGpuws(Authorizer):
    """Allows everything except this extension's resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != AUTH_RESOURCE


async def get_json(jp_fetch: Any, *path: str, **params: Any) -> dict[str, Any]:
    response = await jp_fetch(*path, params=params or None)
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def test_metrics_report_every_gpu_and_the_system(jp_fetch: Any) -> None:
    data = await get_json(jp_fetch, "gpuws", "api", "metrics")
    assert [gpu["index"] for gpu in data["gpus"]] == [0, 1]
    first = data["gpus"][0]
    assert first["name"] == "NVIDIA A100-SXM4-40GB"
    assert first["utilization"] == 87
    assert first["memory_used"] == 12 * 2**30 and first["memory_total"] == 40 * 2**30
    assert first["temperature"] == 61 and first["power_draw"] == 250.5 and first["sm_clock"] == 1410
    assert first["processes"][0]["pid"] == 4242
    assert [m["memory_total"] for m in data["gpus"][1]["mig"]] == [10 * 2**30, 10 * 2**30]
    assert data["gpu_error"] is None
    assert data["cuda_driver_version"] == "12.4"
    system = data["system"]
    assert 0 <= system["cpu_percent"] <= 100
    assert 0 < system["memory_used"] < system["memory_total"]
    assert system["disks"][0]["label"] == "workdir" and system["disks"][0]["total"] > 0


async def test_metrics_history_holds_samples_after_since(jp_fetch: Any) -> None:
    async def three_samples() -> Any:  # a few ticks at 0.1 s
        answer = await get_json(jp_fetch, "gpuws", "api", "metrics", since="0")
        return answer if len(answer["history"]) >= 3 else None

    everything = await async_until(three_samples, 10, "three samples in the history")
    times = [s["time"] for s in everything["history"]]
    assert times == sorted(times)
    later = await get_json(jp_fetch, "gpuws", "api", "metrics", since=str(times[1]))
    assert later["history"] and all(s["time"] > times[1] for s in later["history"])
    assert everything["history_seconds"] == pytest.approx(300, rel=0.01)


async def test_metrics_without_since_has_no_history(jp_fetch: Any) -> None:
    data = await get_json(jp_fetch, "gpuws", "api", "metrics")
    assert "history" not in data


@pytest.mark.parametrize("since", ["yesterday", "-5", "nan", "inf", ""])
async def test_bad_since_is_a_400_with_a_message(jp_fetch: Any, since: str) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "metrics", params={"since": since})
    assert err.value.code == 400
    assert "since" in json.loads(err.value.response.body)["message"]


async def test_repeated_parameter_is_a_400(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "metrics", params=[("since", "1"), ("since", "2")])
    assert err.value.code == 400
    assert "more than once" in json.loads(err.value.response.body)["message"]


async def test_request_without_credentials_is_refused(
    jp_serverapp: Any, jp_base_url: str, http_server_client: Any
) -> None:
    # The test server's own client, without the token jp_fetch adds.
    with pytest.raises(HTTPClientError) as err:
        await http_server_client.fetch(f"{jp_base_url}gpuws/api/metrics")
    assert err.value.code == 403


@pytest.mark.parametrize("server_authorizer", [DenyGpuws])
async def test_authorizer_denying_gpuws_gets_403(jp_fetch: Any, server_authorizer: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "metrics")
    assert err.value.code == 403
    # The same authorizer still allows the server's own APIs: the denial is specific.
    response = await jp_fetch("api", "status")
    assert response.code == 200


async def test_stream_pushes_each_new_sample(jp_ws_fetch: Any) -> None:
    ws = await jp_ws_fetch("gpuws", "api", "metrics", "stream")
    times = []
    for _ in range(3):
        sample = json.loads(await asyncio.wait_for(ws.read_message(), 5))
        assert [gpu["index"] for gpu in sample["gpus"]] == [0, 1]
        times.append(sample["time"])
    ws.close()
    assert times == sorted(times) and len(set(times)) == 3


@pytest.mark.parametrize("server_authorizer", [DenyGpuws])
async def test_stream_refuses_a_denied_user(jp_ws_fetch: Any, server_authorizer: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch("gpuws", "api", "metrics", "stream")
    assert err.value.code == 403


async def test_nvml_reads_do_not_grow_with_the_number_of_browsers(
    jp_ws_fetch: Any, gpuws_app: Any
) -> None:
    sockets = [await jp_ws_fetch("gpuws", "api", "metrics", "stream") for _ in range(5)]
    reader, sampler = gpuws_app.sampler.gpus, gpuws_app.sampler
    # Both counts read on the sampler's thread between two ticks: read from here, a tick could
    # be half done (its NVML read counted, the tick not yet).
    counts: list[tuple[int, int]] = []
    unsubscribe = sampler.subscribe(lambda *_: counts.append((reader.queries, sampler.ticks)))
    started = time.monotonic()
    received = [0] * len(sockets)
    while time.monotonic() - started < 1.0:
        for i, ws in enumerate(sockets):
            try:
                await asyncio.wait_for(ws.read_message(), 0.05)
                received[i] += 1
            except asyncio.TimeoutError:
                pass
    unsubscribe()
    for ws in sockets:
        ws.close()
    assert all(count >= 3 for count in received), received
    # One NVML read per tick, whatever the number of listeners.
    (queries, ticks), (queries_then, ticks_then) = counts[0], counts[-1]
    assert ticks_then - ticks >= 3
    assert queries_then - queries == ticks_then - ticks


async def test_stream_clients_are_forgotten_when_they_close(
    jp_ws_fetch: Any, gpuws_app: Any
) -> None:
    ws = await jp_ws_fetch("gpuws", "api", "metrics", "stream")
    await asyncio.wait_for(ws.read_message(), 5)
    assert len(gpuws_app.stream_clients) == 1
    ws.close()
    await async_until(lambda: not gpuws_app.stream_clients, 5, "the closed client forgotten")
    with pytest.raises(WebSocketClosedError):
        await ws.write_message("x")
