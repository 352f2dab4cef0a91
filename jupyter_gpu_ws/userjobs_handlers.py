"""HTTP handlers of the user's jobs (`/gpuws/api/jobs…`): parse, ask the job manager, answer."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from .handlers import GpuWorkspaceHandler, api_route
from .store.errors import SyncError
from .userjobs.bringhome import NoSuchJobElsewhere
from .userjobs.manager import JobInputError, JobNotFound, JobsNotRead
from .userjobs.trust import JobKeyError

if TYPE_CHECKING:
    from .services import Services
    from .userjobs.manager import JobManager


class _JobsHandler(GpuWorkspaceHandler):
    @property
    def manager(self) -> JobManager:
        return self.app.userjobs.manager

    async def blocking(self, function: Any, *args: Any) -> Any:
        """The manager's call off the event loop (a stop waits for a checkpoint), its errors as
        this API's: 400 for what was asked, 404 for an unknown job, 409 while the user's job key is
        not usable (the server's state, not the request, and no fault of the code: not a 500)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(None, function, *args)
        except JobInputError as err:
            raise web.HTTPError(400, str(err)) from None
        except JobsNotRead as err:
            raise web.HTTPError(503, str(err)) from None
        except JobNotFound as err:
            raise web.HTTPError(404, str(err)) from None
        except JobKeyError as err:
            raise web.HTTPError(409, str(err)) from None


class JobsHandler(_JobsHandler):
    """`GET /gpuws/api/jobs`: every job and what the next relaunch runs; `POST` starts one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(await self.blocking(self.manager.list))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body()
        if ("command" in body) == ("notebook" in body):
            raise web.HTTPError(
                400, 'Send {"command": ["python", "train.py", …]} or {"notebook": "path.ipynb"}'
            )
        record = await self.blocking(
            lambda: self.manager.submit(
                command=body.get("command"),
                notebook=body.get("notebook"),
                name=body.get("name"),
                retries=body.get("retries", 0),
                gpus=body.get("gpus"),
                cwd=body.get("cwd", ""),
                resume=body.get("resume"),
            )
        )
        self.set_status(201)
        self.finish(await self.blocking(lambda: self.manager.describe(self.manager.get(record.id))))


class JobHandler(_JobsHandler):
    """`GET /gpuws/api/jobs/{id}`; `DELETE` stops a running job (checkpoint first) or forgets one."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.params()
        self.finish(await self.blocking(lambda: self.manager.describe(self.manager.get(job_id))))

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        self.params()
        self.body()
        await self.blocking(self.manager.stop, job_id)
        self.set_status(204)
        self.finish()


class JobLogHandler(_JobsHandler):
    """`GET /gpuws/api/jobs/{id}/log?lines=N[&after=NEXT]`: the last lines of the job's output, or
    what it wrote since an earlier answer's `next` (`jupyter gpuws jobs --log ID --follow`)."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        params = self.params()
        self.set_header("Cache-Control", "no-store")
        text = await self.blocking(
            self.manager.log_text, job_id, params["lines"], params.get("after")
        )
        self.finish({"lines": text.lines, "open": text.open, "next": text.next})


class JobRestartHandler(_JobsHandler):
    """`POST /gpuws/api/jobs/{id}/restart`: run again from its newest checkpoint (for a record
    this machine's key did not sign: the user's approval)."""

    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        self.params()
        self.body()
        await self.blocking(self.manager.restart, job_id)
        self.finish(await self.blocking(lambda: self.manager.describe(self.manager.get(job_id))))


class JobHoldHandler(_JobsHandler):
    """`POST /gpuws/api/jobs/{id}/hold` `{"hold": true|false}`: a held job is not relaunched."""

    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        self.params()
        body = self.body()
        await self.blocking(self.manager.hold, job_id, body["hold"])
        self.finish(await self.blocking(lambda: self.manager.describe(self.manager.get(job_id))))


class BringHomeHandler(_JobsHandler):
    """`POST /gpuws/api/jobs/elsewhere/{id}/bring-home`: a job run elsewhere's outputs and
    checkpoints into the work directory, never over a file changed here since the job began."""

    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        self.params()
        self.body()
        elsewhere = self.app.userjobs.elsewhere
        try:
            answer = await asyncio.get_running_loop().run_in_executor(
                None, elsewhere.bring_home, job_id
            )
        except ValueError as err:
            raise web.HTTPError(400, str(err)) from None
        except NoSuchJobElsewhere as err:
            raise web.HTTPError(404, str(err)) from None
        except SyncError as err:
            raise web.HTTPError(503, f"The store cannot be read now: {err}") from None
        self.finish(answer)


def handlers(app: Services) -> list[tuple[str, type, dict[str, Any]]]:
    return [
        api_route("/gpuws/api/jobs", JobsHandler, app),
        api_route("/gpuws/api/jobs/{id}", JobHandler, app),
        api_route("/gpuws/api/jobs/{id}/log", JobLogHandler, app),
        api_route("/gpuws/api/jobs/{id}/restart", JobRestartHandler, app),
        api_route("/gpuws/api/jobs/{id}/hold", JobHoldHandler, app),
        api_route("/gpuws/api/jobs/elsewhere/{id}/bring-home", BringHomeHandler, app),
    ]
