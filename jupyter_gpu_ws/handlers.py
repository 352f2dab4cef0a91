"""HTTP and websocket handlers: parse the request, ask the service, answer. No logic here."""

from __future__ import annotations

import asyncio
import json
import math
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web, websocket

if TYPE_CHECKING:
    from .app import GpuWorkspaceApp

# The permission name an authorizer sees for every jupyter_gpu_ws API.
AUTH_RESOURCE = "gpuws"


class GpuWorkspaceHandler(APIHandler):
    """Shared rules: every API is authenticated, authorised on `gpuws`, and answers JSON."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, app: GpuWorkspaceApp) -> None:
        self.app = app

    def query_params(self, allowed: set[str]) -> dict[str, str]:
        """The known query parameters as single values; a repeated one is a 400.

        Others are ignored: `token` and cache-busting parameters are legitimate.
        """
        params: dict[str, str] = {}
        for name, values in self.request.query_arguments.items():
            if name not in allowed:
                continue
            if len(values) != 1:
                raise web.HTTPError(400, f"Parameter {name!r} was given more than once")
            params[name] = values[0].decode("utf-8", "replace")
        return params


def parse_time(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise web.HTTPError(400, f"{name!r} must be a time in seconds since the epoch, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise web.HTTPError(400, f"{name!r} must be a finite, non-negative number of seconds, not {text!r}")
    return value


class MetricsHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/metrics[?since=EPOCH]`: the latest sample, and history after `since`."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        params = self.query_params({"since"})
        sampler = self.app.sampler
        if sampler.latest_json is None:  # the first tick has not run yet
            await asyncio.get_running_loop().run_in_executor(None, sampler.sample_once)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        if "since" not in params:
            self.finish(sampler.latest_json)
            return
        since = parse_time("since", params["since"])
        history = sampler.history(since)
        body = dict(sampler.latest or {})
        body["history"] = history
        body["history_seconds"] = sampler.history_capacity * sampler.interval
        self.finish(json.dumps(body, separators=(",", ":")))


class MetricsStreamHandler(JupyterHandler, websocket.WebSocketHandler):
    """`/gpuws/api/metrics/stream`: a websocket that receives every sample as it is taken."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, app: GpuWorkspaceApp) -> None:
        self.app = app

    async def pre_get(self) -> None:
        authorized_user = await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, "read", AUTH_RESOURCE)
        )
        if not authorized_user:
            raise web.HTTPError(403, "Not authorised to read GPU workspace metrics")

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        await self.pre_get()
        result = super().get(*args, **kwargs)
        if result is not None:
            await result

    def open(self, *args: Any, **kwargs: Any) -> None:
        self.app.stream_clients.add(self)
        if self.app.sampler.latest_json is not None:
            self.send_sample(self.app.sampler.latest_json)

    def send_sample(self, text: str) -> None:
        try:
            self.write_message(text)
        except websocket.WebSocketClosedError:
            self.app.stream_clients.discard(self)

    def on_message(self, message: str | bytes) -> None:
        pass  # the stream is one-way; clients have nothing to say

    def on_close(self) -> None:
        self.app.stream_clients.discard(self)


def handlers(app: GpuWorkspaceApp) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"app": app}
    return [
        (r"/gpuws/api/metrics", MetricsHandler, kwargs),
        (r"/gpuws/api/metrics/stream", MetricsStreamHandler, kwargs),
    ]
