"""`resume()`'s question to the server: make this run's newest checkpoint in the store complete
here, waiting for a restore that is bringing it, so a resume is never silently from an older
checkpoint or from 0. Runs in the kernel; the server does the work (persist.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..client import ServerUnreachable, call
from .files import CheckpointError

HERE = "here"  # the store's newest checkpoint of the run is complete here now
NONE = "none"  # the store holds no checkpoint of the run
NO_SERVER = "no-server"  # nobody to ask: a script, a kernel of another server, sync off
# How long past its own timeout the server's fetch may take to say it ended, before resume() gives up.
SERVER_GRACE = 30.0


def bring_newest(run_path: Path, run: str, timeout: float) -> str:
    """HERE, NONE or NO_SERVER; CheckpointError when the store cannot be read or the wait
    timed out (then the caller must not start from 0)."""
    workdir = os.environ.get("GPUWS_WORKDIR")
    if not workdir:
        return NO_SERVER
    try:
        rel = run_path.resolve().relative_to(Path(workdir).resolve()).as_posix()
    except ValueError:
        return NO_SERVER  # checkpoints kept outside the mirrored folder
    try:
        job = call("gpuws/api/checkpoints/fetch", "POST", {"run": rel, "timeout": timeout})
        said = False
        polls = 0
        started = time.monotonic()
        while job["state"] == "running":
            # The server ends the job at `timeout`; a server that never does must not hold the
            # kernel for ever (each call has its own timeout too, client.call's).
            if time.monotonic() - started > timeout + SERVER_GRACE:
                raise CheckpointError(
                    f"gpuws.resume(): the server did not finish bringing {run}'s checkpoint "
                    f"within {timeout + SERVER_GRACE:.0f} s. Not starting from 0: try again."
                )
            if not said and time.monotonic() - started > 0.5:
                how = (
                    "the restore is bringing it"
                    if job["result"].get("restoring")
                    else "fetching it"
                )
                print(
                    f"gpuws: waiting for the newest checkpoint of {run} in the store ({how})…",
                    flush=True,
                )
                said = True
            # Soon at first (a fetch of a checkpoint here already ends in milliseconds), then
            # every quarter second while the store is read.
            time.sleep(min(0.25, 0.02 * 2**polls))
            polls += 1
            job = call(f"gpuws/api/checkpoints/fetch/{job['id']}")
    except ServerUnreachable as err:
        if err.status in (None, 404, 409):  # no server, one without this API, or its sync is off
            return NO_SERVER
        raise CheckpointError(
            f"gpuws.resume(): cannot ask the server for {run}'s checkpoint: {err}"
        ) from None
    if job["state"] != "done":
        reason = "; ".join(job["errors"]) or job["state"]
        raise CheckpointError(
            f"gpuws.resume(): the newest checkpoint of {run} could not be brought from the store ({reason}). "
            "Not starting from 0: try again once the store answers."
        )
    return HERE if job["result"].get("checkpoint") else NONE
