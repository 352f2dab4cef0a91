"""A store fault at start (a bucket not made yet) goes by itself: the server's sync says what it
waits on and when it tries again, and starts once the bucket is there, with no restart."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from jupyter_gpu_ws.sync import supervisor
from tests.stores.conftest import _use_env
from tests.sync.conftest import s3_server  # noqa: F401 (a fixture)
from tests.sync.s3server import S3Server
from tests.waiting import async_until

BUCKET = f"late-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def gpuws_config(
    gpuws_config: dict[str, Any],
    s3_server: S3Server,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    _use_env(monkeypatch, s3_server.env())
    # The same back-off, started short: the test waits for tries, not for minutes.
    monkeypatch.setattr(supervisor, "RETRY_FIRST", 0.5)
    return {**gpuws_config, "store_url": f"s3://{BUCKET}/me", "storage_options": {}}


async def test_a_bucket_made_after_the_start_is_used_with_no_restart(
    jp_fetch: Any,
    s3_server: S3Server,  # noqa: F811
) -> None:
    async def status() -> dict[str, Any]:
        return json.loads((await jp_fetch("gpuws", "api", "sync")).body)

    async def waiting() -> Any:
        answer = await status()
        return answer if answer["error_kind"] == "bucket-missing" else None

    found = await async_until(waiting, timeout=30)
    assert found["state"] == "error"
    assert found["last_error"].startswith(f"The bucket {BUCKET} does not exist")
    assert found["starting"].startswith("trying again by itself in "), found["starting"]

    s3_server.create_bucket(BUCKET)

    async def running() -> Any:
        answer = await status()
        return answer if answer["state"] in ("idle", "syncing") else None

    healed = await async_until(running, timeout=60)
    assert healed["last_error"] is None and healed["error_kind"] is None
    assert healed["starting"] is None
    assert healed["lease_held"] is True
