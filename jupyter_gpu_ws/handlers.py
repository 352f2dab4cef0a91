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

from .checkpoints.coordinator import CheckpointRequestError
from .envsnap import EnvError, InterpreterError, SnapshotNotFoundError, SourcesNotAllowedError, UnsafeSnapshotError
from .persist import start_restore
from .sync.errors import (
    DeletionGuardError,
    LeaseHeldError,
    QuotaExceededError,
    StoreFullError,
    SyncError,
    WorkdirError,
)

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

    def json_body(self, empty: Any) -> Any:
        """The request's JSON body (`empty` when there is none); malformed JSON is a 400."""
        if not self.request.body.strip():
            return empty
        try:
            return json.loads(self.request.body)
        except ValueError as err:
            raise web.HTTPError(400, f"The request body is not valid JSON: {err}") from None


def parse_time(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise web.HTTPError(400, f"{name!r} must be a time in seconds since the epoch, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise web.HTTPError(400, f"{name!r} must be a finite, non-negative number of seconds, not {text!r}")
    return value


# Core errors to HTTP codes, in one place.
ERROR_STATUS: list[tuple[type[Exception], int]] = [
    (LeaseHeldError, 409),
    (DeletionGuardError, 409),
    (WorkdirError, 409),
    (QuotaExceededError, 507),
    (StoreFullError, 507),
    (SyncError, 503),  # store unreachable or misconfigured, sync not running
    (SnapshotNotFoundError, 404),
    (UnsafeSnapshotError, 422),  # the store's snapshot, not the request, is malformed: nothing is run
    (SourcesNotAllowedError, 409),
    (InterpreterError, 409),
    (EnvError, 500),
]


def http_error(err: Exception) -> web.HTTPError:
    for cls, status in ERROR_STATUS:
        if isinstance(err, cls):
            return web.HTTPError(status, str(err))
    return web.HTTPError(500, f"Unexpected error: {err}")


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


class SyncHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/sync`: state, pending files and bytes, last sync and error, quota, lease."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        status = await run_blocking(self.app.sync.status)
        status["persist"] = _job_summary(self.app.jobs.latest("persist"))
        self.finish(status)


class PersistHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/persist`: start the persist pipeline (or join the one running)."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.json_body({})
        try:
            job = self.app.runtime.persist("user")
        except SyncError as err:
            raise http_error(err) from err
        self.set_status(202)
        self.finish(job.to_dict())


class RuntimeHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/runtime`: start, deadline and its source, time left, idle time, preemption,
    the next automatic persist, notices for the browser, and the Git status."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(self.app.runtime.state(), default=str))


class ReleaseHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/runtime/release` `{"force": false}`: persist, then shut the server down.
    A failed persist keeps the server running unless `force`."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body({})
        if not isinstance(body, dict) or set(body) - {"force"} or not isinstance(body.get("force", False), bool):
            raise web.HTTPError(400, 'Expected {"force": true|false} or an empty body')
        try:
            job = self.app.runtime.persist_and_release(force=body.get("force", False))
        except SyncError as err:
            raise http_error(err) from err
        self.set_status(202)
        self.finish(job.to_dict())


class EnvHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/env`: the kernels' environment against the latest snapshot: the state
    (`matches`, `differs`, `no-snapshot`, `capturing`, `error`), the diff, the CUDA / driver /
    GPU verdicts, the snapshots in the store, and the latest snapshot and restore jobs."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.app.environment.watch()
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(await run_blocking(self.app.environment.state), default=str))


class EnvSnapshotsHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/env/snapshots`: take a snapshot now, as a job (a new one only when the
    environment changed)."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.json_body({})
        try:
            job = self.app.environment.start_snapshot()
        except (SyncError, EnvError) as err:
            raise http_error(err) from err
        self.set_status(202)
        self.finish(job.to_dict())


class EnvRestoreHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/env/restore` `{"snapshot": id?, "offline": false, "uninstall": false,
    "allow_sources": false}`: install what differs from the snapshot (the latest by default), as
    a job with progress; `result.sources` lists what it fetches and builds from VCS or URL
    sources, which only `allow_sources` permits (else a 409 naming them)."""

    FLAGS = ("offline", "uninstall", "allow_sources")

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body({})
        if not isinstance(body, dict) or set(body) - {"snapshot", *self.FLAGS}:
            raise web.HTTPError(400, 'Expected {"snapshot": "<id>", "offline": bool, "uninstall": bool, '
                                     '"allow_sources": bool}')
        snapshot = body.get("snapshot")
        if snapshot is not None and not isinstance(snapshot, str):
            raise web.HTTPError(400, '"snapshot" is a snapshot id (a string)')
        for flag in self.FLAGS:
            if not isinstance(body.get(flag, False), bool):
                raise web.HTTPError(400, f'"{flag}" is true or false')
        try:
            job = await run_blocking(self.app.environment.start_restore, snapshot, body.get("offline", False),
                                     body.get("uninstall", False), body.get("allow_sources", False))
        except (SyncError, EnvError) as err:
            raise http_error(err) from err
        self.set_status(202)
        self.finish(job.to_dict())


class RestoreHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/sync/restore`: bring back what the work directory lacks, as a job."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.json_body({})
        try:
            service = self.app.sync.require()
        except SyncError as err:
            raise http_error(err) from err
        job = start_restore(self.app.jobs, service)
        self.set_status(202)
        self.finish(job.to_dict())


class JobHandler(GpuWorkspaceHandler):
    """`GET` a job's state and progress; `DELETE` cancels it (what is done stays done)."""

    def initialize(self, app: GpuWorkspaceApp, kind: str = "persist") -> None:  # type: ignore[override]
        super().initialize(app)
        self.kind = kind

    def _job(self, job_id: str) -> Any:
        job = self.app.jobs.get(job_id)
        if job is None or job.kind != self.kind:
            raise web.HTTPError(404, f"No {self.kind} job {job_id!r} (jobs are kept while the server runs)")
        return job

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.finish(self._job(job_id).to_dict())

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        job = self._job(job_id)
        self.app.jobs.cancel(job.id)
        self.set_status(202)
        self.finish(job.to_dict())


class LeaseHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/sync/lease` with `{"take_over": true}`: take over an expired lease."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body(None)
        if not isinstance(body, dict) or body.get("take_over") is not True:
            raise web.HTTPError(400, 'Send {"take_over": true} to take over the workspace lease')
        try:
            service = self.app.sync.require()
            await run_blocking(service.engine.open, True)
        except SyncError as err:
            raise http_error(err) from err
        if service.engine.read_only:
            raise web.HTTPError(409, service.engine.read_only_reason or "The lease is still held")
        service.request_rescan()
        self.finish(await run_blocking(self.app.sync.status))


class CheckpointsHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/checkpoints`: kernels running the agent, what they track, their last
    checkpoint and pending request. `POST` `{"kernel_id": …}` or `{"all": true}`: ask for one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        kernels = await self.app.checkpoints.list()
        for kernel in kernels:
            last = kernel.get("last")
            if last:
                last["synced"] = await run_blocking(self.app.is_synced, last.get("path"))
        self.finish({"kernels": kernels})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body(None)
        coordinator = self.app.checkpoints
        if isinstance(body, dict) and body.get("all") is True:
            results = await coordinator.request_all()
        elif isinstance(body, dict) and isinstance(body.get("kernel_id"), str) and body["kernel_id"]:
            try:
                results = [await coordinator.request(body["kernel_id"])]
            except CheckpointRequestError as err:
                raise web.HTTPError(err.status, str(err)) from err
        else:
            raise web.HTTPError(400, 'Send {"kernel_id": "<id>"} or {"all": true}')
        self.set_status(202)
        self.finish({"requests": results})


def _job_summary(job: Any) -> dict[str, Any] | None:
    return None if job is None else job.to_dict()


async def run_blocking(function: Any, *args: Any) -> Any:
    """Store and disk I/O off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


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
    job_id = r"([0-9a-f]{12})"
    return [
        (r"/gpuws/api/metrics", MetricsHandler, kwargs),
        (r"/gpuws/api/metrics/stream", MetricsStreamHandler, kwargs),
        (r"/gpuws/api/sync", SyncHandler, kwargs),
        (r"/gpuws/api/sync/lease", LeaseHandler, kwargs),
        (r"/gpuws/api/sync/restore", RestoreHandler, kwargs),
        (rf"/gpuws/api/sync/restore/{job_id}", JobHandler, {"app": app, "kind": "restore"}),
        (r"/gpuws/api/checkpoints", CheckpointsHandler, kwargs),
        (r"/gpuws/api/persist", PersistHandler, kwargs),
        (r"/gpuws/api/runtime", RuntimeHandler, kwargs),
        (r"/gpuws/api/env", EnvHandler, kwargs),
        (r"/gpuws/api/env/snapshots", EnvSnapshotsHandler, kwargs),
        (rf"/gpuws/api/env/snapshots/{job_id}", JobHandler, {"app": app, "kind": "env-snapshot"}),
        (r"/gpuws/api/env/restore", EnvRestoreHandler, kwargs),
        (rf"/gpuws/api/env/restore/{job_id}", JobHandler, {"app": app, "kind": "env-restore"}),
        (r"/gpuws/api/runtime/release", ReleaseHandler, kwargs),
        (rf"/gpuws/api/persist/{job_id}", JobHandler, {"app": app, "kind": "persist"}),
    ]
