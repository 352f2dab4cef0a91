"""HTTP and websocket handlers: parse the request, ask the service, answer. No logic here."""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web, websocket

from . import apischema, strictjson
from .checkpoints.coordinator import CheckpointRequestError
from .documents import ERROR
from .envsnap import (
    EnvError,
    InterpreterError,
    SnapshotNotFoundError,
    SourcesNotAllowedError,
    UnsafeSnapshotError,
)
from .persist import start_checkpoint_fetch, start_restore
from .store.names import encodable, shown
from .store.redact import redact
from .sync.errors import (
    DeletionGuardError,
    LeaseHeldError,
    QuotaExceededError,
    StoreFullError,
    SyncError,
    WorkdirError,
    WorkspaceNotFoundError,
)

if TYPE_CHECKING:
    from .services import Services

# The permission name an authorizer sees for every jupyter_gpu_ws API.
AUTH_RESOURCE = "gpuws"
# The largest body any route takes: a job's command at openapi.yaml's limits (262,144 characters,
# each at most 6 bytes as a JSON escape) with room to spare.
MAX_BODY_BYTES = 4 * 2**20


class ApiRequest(JupyterHandler):
    """A request to a route of the API's description (openapi.yaml): its parameters and body,
    as that description allows them, or a 4xx that names what is wrong."""

    def initialize(self, app: Services, route: str) -> None:
        self.app = app
        self.route = route  # the description's path, e.g. /gpuws/api/persist/{id}

    def params(self) -> dict[str, Any]:
        """The operation's query and path parameters, typed and checked (apischema.py)."""
        names = re.findall(r"\{(\w+)\}", self.route)
        path = dict(zip(names, self.path_args, strict=False))
        try:
            return apischema.validate_parameters(
                self.route, self.request.method or "GET", self.request.query_arguments, path
            )
        except apischema.RequestError as err:
            raise web.HTTPError(err.status, str(err)) from None

    def body(self) -> Any:
        """The request's JSON body (`{}` when there is none) as the operation's schema allows."""
        try:
            return apischema.validate_body(
                self.route, self.request.method or "POST", self.json_body({})
            )
        except apischema.RequestError as err:
            raise web.HTTPError(err.status, str(err)) from None

    def json_body(self, empty: Any) -> Any:
        """The request's JSON body (`empty` when there is none); anything that is not JSON text in
        UTF-8 (RFC 8259) is a 400 that says why.

        NaN, Infinity and numbers too large for a float are refused: they are not JSON, and no
        value this API takes can be one. Nesting too deep for the parser is refused too, rather
        than let its RecursionError become a 500, and so is an object naming a key twice. A body
        larger than any this API takes (MAX_BODY_BYTES) is refused before it is parsed.
        """
        body = self.request.body
        if len(body) > MAX_BODY_BYTES:
            raise web.HTTPError(
                413, f"The request body is larger than {MAX_BODY_BYTES // 2**20} MiB"
            )
        if not body.strip():
            return empty
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as err:
            raise web.HTTPError(
                400, f"The request body is not UTF-8 text: {err.reason} at byte {err.start}"
            ) from None
        try:
            return json.loads(
                text,
                parse_constant=strictjson.refuse_constant,
                parse_float=strictjson.finite_float,
                object_pairs_hook=strictjson.unique_keys,
            )
        except RecursionError:
            raise web.HTTPError(
                400, "The request body is not valid JSON: it is nested too deeply"
            ) from None
        except ValueError as err:
            raise web.HTTPError(400, f"The request body is not valid JSON: {err}") from None


class GpuWorkspaceHandler(ApiRequest, APIHandler):
    """Shared rules: every API is authenticated, authorised on `gpuws`, and answers strict JSON."""

    auth_resource = AUTH_RESOURCE

    def write(self, chunk: str | bytes | dict[str, Any] | list[Any]) -> None:
        """Every answer's value goes out as strict JSON (strictjson.py): no NaN or Infinity, no
        string that is not Unicode (a file name's bytes that are not UTF-8), whatever it holds."""
        if isinstance(chunk, (dict, list)):
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            chunk = strictjson.dumps(chunk).replace(
                "</", "<\\/"
            )  # as Tornado's own: never ends a <script>
        super().write(chunk)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if (
            isinstance(error, web.HTTPError)
            and error.log_message
            and not encodable(error.log_message)
        ):
            # The message names a file whose name is not UTF-8: written as people read it.
            message = error.get_message() if hasattr(error, "get_message") else error.log_message
            kwargs["exc_info"] = (
                exc_info[0],
                web.HTTPError(error.status_code, shown(message), reason=error.reason),
                exc_info[2],
            )
        if status_code == 405:  # RFC 9110: a 405 says which methods the address does take
            own = [
                m
                for m in self.SUPPORTED_METHODS
                if getattr(type(self), m.lower()) is not getattr(web.RequestHandler, m.lower())
            ]
            self.set_header("Allow", ", ".join(own))
        super().write_error(status_code, **kwargs)


# Core errors to HTTP codes, in one place.
ERROR_STATUS: list[tuple[type[Exception], int]] = [
    (WorkspaceNotFoundError, 404),
    (LeaseHeldError, 409),
    (DeletionGuardError, 409),
    (WorkdirError, 409),
    (QuotaExceededError, 507),
    (StoreFullError, 507),
    (SyncError, 503),  # store unreachable or misconfigured, sync not running
    (SnapshotNotFoundError, 404),
    (
        UnsafeSnapshotError,
        422,
    ),  # the store's snapshot, not the request, is malformed: nothing is run
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
        params = self.params()
        sampler = self.app.sampler
        if sampler.latest_json is None:  # the first tick has not run yet
            await asyncio.get_running_loop().run_in_executor(None, sampler.sample_once)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        if "since" not in params:
            self.finish(sampler.latest_json)  # strict JSON already (the sampler's)
            return
        history = sampler.history(params["since"])
        body = dict(sampler.latest or {})
        body["history"] = history
        body["history_seconds"] = sampler.history_capacity * sampler.interval
        self.finish(body)


class SyncHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/sync`: state, pending files and bytes, last sync and error, quota, lease."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(await sync_status(self.app))


class PersistHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/persist`: start the persist pipeline (or join the one running)."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.body()
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
        self.finish(self.app.runtime.state())


class ReleaseHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/runtime/release` `{"force": false}`: persist, then shut the server down.
    A failed persist keeps the server running unless `force`."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()
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
        self.finish(await run_blocking(self.app.environment.state))


class EnvSnapshotsHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/env/snapshots`: take a snapshot now, as a job (a new one only when the
    environment changed)."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.body()
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

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()  # a null snapshot, like none, means the latest
        try:
            job = await run_blocking(
                self.app.environment.start_restore,
                body.get("snapshot"),
                body.get("offline", False),
                body.get("uninstall", False),
                body.get("allow_sources", False),
            )
        except (SyncError, EnvError) as err:
            raise http_error(err) from err
        self.set_status(202)
        self.finish(job.to_dict())


class RestoreHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/sync/restore`: bring back what the work directory lacks, as a job."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.body()
        try:
            service = self.app.sync.require()
        except SyncError as err:
            raise http_error(err) from err
        job = start_restore(self.app.jobs, service)
        self.set_status(202)
        self.finish(job.to_dict())


class WorkspacesHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/sync/workspaces`: the workspaces of the store, each with its files, bytes and
    last write, and which one this work directory uses (a new or empty one shows the others)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            listing = await run_blocking(self.app.workspaces)
        except SyncError as err:
            raise http_error(err) from err
        self.finish(listing)


class UseWorkspaceHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/sync/workspaces/use` `{"name": …}`: this work directory uses that workspace of
    the store from now on (remembered on this machine); the sync restarts there and restores."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        name = self.body()["name"]
        if name in (".", ".."):
            raise web.HTTPError(400, f"Not a workspace name: {name!r}")
        try:
            listing = await run_blocking(self.app.use_workspace, name)
        except SyncError as err:
            raise http_error(err) from err
        self.finish(listing)


class JobHandler(GpuWorkspaceHandler):
    """`GET` a job's state and progress; `DELETE` cancels it (what is done stays done)."""

    def initialize(self, app: Services, route: str, kind: str = "persist") -> None:
        super().initialize(app, route)
        self.kind = kind

    def _job(self, job_id: str) -> Any:
        self.params()
        job = self.app.jobs.get(job_id)
        if job is None or job.kind != self.kind:
            raise web.HTTPError(
                404,
                f"No {self.kind} job {apischema.quoted(job_id)} (jobs are kept while the server runs)",
            )
        return job

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.finish(self._job(job_id).to_dict())

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        self.body()
        job = self._job(job_id)
        self.app.jobs.cancel(job.id)
        self.set_status(202)
        self.finish(job.to_dict())


class LeaseHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/sync/lease` with `{"take_over": true}`: this runtime becomes the writer,
    also from a live holder (its writes wait until that holder's lease has run out) or over an
    unreadable lease; then it restores and rescans."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.body()  # {"take_over": true}, nothing else
        try:
            await run_blocking(self.app.sync.take_over)
        except SyncError as err:
            raise http_error(err) from err
        self.finish(await sync_status(self.app))


class PendingHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/sync/pending[?limit=N]`: the files not yet in the store, each with why
    (waiting, uploading, failing with the error, deleting), and the files that cannot be synced."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        limit = self.params()["limit"]
        engine = self.app.sync.engine
        if engine is None:
            self.finish({"files": [], "total": 0, "problems": [], "problems_total": 0})
            return
        self.finish(await run_blocking(engine.pending_list, limit))


class CheckpointsHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/checkpoints`: kernels running the agent, what they track, their last
    checkpoint and pending request; distributed runs (live ones registered by their ranks, and
    those the work directory holds checkpoints of). `POST` `{"kernel_id": …}`, `{"run_id": …}` or
    `{"all": true}`: ask for one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        kernels = await self.app.checkpoints.list()
        for kernel in kernels:
            last = kernel.get("last")
            if last:
                last["synced"] = await run_blocking(self.app.is_synced, last.get("path"))
        runs = await run_blocking(self.app.distributed_runs)
        self.finish({"kernels": kernels, "runs": runs})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()  # one of {"kernel_id": …}, {"run_id": …}, {"all": true}
        coordinator = self.app.checkpoints
        try:
            if "all" in body:
                results = await coordinator.request_all()
            elif "kernel_id" in body:
                results = [await coordinator.request(body["kernel_id"])]
            else:
                results = [await coordinator.request_run(body["run_id"])]
        except CheckpointRequestError as err:
            raise web.HTTPError(err.status, str(err)) from err
        self.set_status(202)
        self.finish({"requests": results})


class CheckpointFetchHandler(GpuWorkspaceHandler):
    """`POST /gpuws/api/checkpoints/fetch` `{"run": ".gpuws/checkpoints/<run>", "timeout": s}`: for
    a kernel's `gpuws.resume()`, the run's newest complete checkpoint made complete here (waiting
    for a restore in progress, fetched from the store otherwise), as a job."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()
        run = body["run"]
        if run.rsplit("/", 1)[-1] in (".", ".."):  # the pattern lets them through
            raise web.HTTPError(400, '"run" is a run folder: ".gpuws/checkpoints/<run>"')
        timeout = float(body.get("timeout", 600))
        if self.app.sync.state == "disabled":
            raise web.HTTPError(409, "The sync is turned off: there is no store to resume from")
        job = start_checkpoint_fetch(self.app.jobs, self.app.sync, run, timeout)
        self.set_status(202)
        self.finish(job.to_dict())


class TrainingHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/training`: every tracked run (live in a kernel of this server, or found in
    the checkpoints) with step and total, steps/s, elapsed, ETA, the verdict against the
    runtime's deadline, the loss's sparkline, its last checkpoint, and the open anomalies."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        notebooks = await self.app.kernel_notebooks()
        self.finish(await run_blocking(self.app.training.state, notebooks))


class TrainingHistoryHandler(GpuWorkspaceHandler):
    """`GET /gpuws/api/training/history[?run=NAME]`: every scalar's curve per run over steps, and
    each GPU's utilisation and memory over time (the dashboard's charts, after a reload too)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        run = self.params().get("run")
        history = await run_blocking(self.app.training.history, run)
        if history is None:
            raise web.HTTPError(
                404, f"No run {apischema.quoted(run or '')}: GET /gpuws/api/training lists them"
            )
        self.set_header("Cache-Control", "no-store")
        self.finish(history)


async def sync_status(app: Services) -> dict[str, Any]:
    """The answer of `GET /gpuws/api/sync`, also sent after a lease take-over."""
    status = await run_blocking(app.sync.status)
    # Where this server syncs from and to: `jupyter gpuws` run inside its work directory follows it.
    # The URL as set, but never a password or a token in it (store/redact.py).
    status.update(workdir=app.workdir, store_url=redact(app.store_url), state_dir=app.state_dir)
    status.setdefault("workspace", app.workspace)
    status.setdefault("store", redact(app.store_url))  # the store not open yet: as configured
    latest = app.jobs.latest("persist")
    status["persist"] = None if latest is None else latest.to_dict()
    return status


async def run_blocking(function: Any, *args: Any) -> Any:
    """Store and disk I/O off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


class GpuWorkspaceSocket(WebSocketMixin, websocket.WebSocketHandler, ApiRequest):
    """The shared rules of this API's websockets: authenticated, authorised on `gpuws` for
    `action`, their parameters as the description says, before the upgrade.

    Built as Jupyter Server builds its kernel websocket: the mixin answers a request without
    credentials with 403 (not the login page), checks the origin and pings, so a page that
    vanished without closing (a laptop asleep, a dropped network) is dropped.
    """

    auth_resource = AUTH_RESOURCE
    action = "read"
    refusal = "Not authorised"

    async def pre_get(self) -> None:
        authorized_user = await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, self.action, AUTH_RESOURCE)
        )
        if not authorized_user:
            raise web.HTTPError(403, self.refusal)
        self.query_values = self.params()

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        await self.pre_get()
        result = super().get(*args, **kwargs)
        if result is not None:
            await result


class MetricsStreamHandler(GpuWorkspaceSocket):
    """`/gpuws/api/metrics/stream`: a websocket that receives every sample as it is taken."""

    refusal = "Not authorised to read GPU workspace metrics"

    def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)
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


# What a page may call itself (`?page=`), in the persist's report of pages that did not answer.
MAX_PAGE_NAME = 200


class DocumentsStreamHandler(GpuWorkspaceSocket):
    """`/gpuws/api/documents/stream`: a websocket every JupyterLab and Notebook page keeps open,
    on which the server asks it to save its open documents before a persist (so no persist
    waits for a page that vanished: the pings drop it)."""

    action = "write"  # answers become part of a persist's result
    refusal = "Not authorised to take part in GPU workspace persists"
    name = "a browser page"

    def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)
        page = self.query_values.get("page", "")
        page = "".join(ch for ch in page if ch.isprintable())[:MAX_PAGE_NAME].strip()
        if page:
            self.name = page
        self.app.pages.connect(self)

    def send(self, message: dict[str, Any]) -> None:
        self.write_message(strictjson.dumps(message))

    def on_message(self, message: str | bytes) -> None:
        try:
            self.app.pages.answer(self, json.loads(message))
        except ValueError as err:  # not JSON, or an AnswerError: the page hears why
            self.write_message(
                strictjson.dumps({"type": ERROR, "message": f"Not understood: {err}"})
            )

    def on_close(self) -> None:
        self.app.pages.disconnect(self)


def api_route(
    route: str, handler: type, app: Services, **options: Any
) -> tuple[str, type, dict[str, Any]]:
    """A route of the API's description (`/gpuws/api/jobs/{id}`) as Tornado's pattern, its
    handler told which route it serves (what its requests are checked against). Any last
    segment reaches the handler, so an id that is not one gets this API's JSON 404 rather than
    the server's page for unknown addresses."""
    return (re.sub(r"\{\w+\}", "([^/]+)", route), handler, {"app": app, "route": route, **options})


def handlers(app: Services) -> list[tuple[str, type, dict[str, Any]]]:
    return [
        api_route("/gpuws/api/metrics", MetricsHandler, app),
        api_route("/gpuws/api/metrics/stream", MetricsStreamHandler, app),
        api_route("/gpuws/api/documents/stream", DocumentsStreamHandler, app),
        api_route("/gpuws/api/sync", SyncHandler, app),
        api_route("/gpuws/api/sync/lease", LeaseHandler, app),
        api_route("/gpuws/api/sync/pending", PendingHandler, app),
        api_route("/gpuws/api/sync/workspaces", WorkspacesHandler, app),
        api_route("/gpuws/api/sync/workspaces/use", UseWorkspaceHandler, app),
        api_route("/gpuws/api/sync/restore", RestoreHandler, app),
        api_route("/gpuws/api/sync/restore/{id}", JobHandler, app, kind="restore"),
        api_route("/gpuws/api/checkpoints", CheckpointsHandler, app),
        api_route("/gpuws/api/checkpoints/fetch", CheckpointFetchHandler, app),
        api_route("/gpuws/api/checkpoints/fetch/{id}", JobHandler, app, kind="checkpoint-fetch"),
        api_route("/gpuws/api/persist", PersistHandler, app),
        api_route("/gpuws/api/training", TrainingHandler, app),
        api_route("/gpuws/api/training/history", TrainingHistoryHandler, app),
        api_route("/gpuws/api/runtime", RuntimeHandler, app),
        api_route("/gpuws/api/env", EnvHandler, app),
        api_route("/gpuws/api/env/snapshots", EnvSnapshotsHandler, app),
        api_route("/gpuws/api/env/snapshots/{id}", JobHandler, app, kind="env-snapshot"),
        api_route("/gpuws/api/env/restore", EnvRestoreHandler, app),
        api_route("/gpuws/api/env/restore/{id}", JobHandler, app, kind="env-restore"),
        api_route("/gpuws/api/runtime/release", ReleaseHandler, app),
        api_route("/gpuws/api/persist/{id}", JobHandler, app, kind="persist"),
    ]
