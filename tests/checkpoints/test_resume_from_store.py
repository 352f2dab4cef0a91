"""`gpuws.resume()` in a real kernel of a real server is never silently wrong: with no
checkpoint of the run in the store it says so and starts from 0; with a store that cannot be
read it raises instead of starting from 0."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kernels import Notebook
from tests.servers import free_port

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

TRACK = """
%load_ext jupyter_gpu_ws
import torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(4, 1)
gpuws.track(name="fresh-run", model=model)
"""


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any], request: Any) -> dict[str, Any]:
    return {**gpuws_config, **getattr(request, "param", {})}


async def test_no_checkpoint_in_the_store_says_so_and_starts_from_0(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "fresh.ipynb") as nb:
        said = await nb.run(TRACK + "print('resumed', gpuws.resume())")
    assert "gpuws: no checkpoint of fresh-run in the store: starting from 0" in said
    assert "resumed 0" in said


# An S3 store at a port where nothing listens: the sync cannot start, nor can a fetch.
@pytest.mark.parametrize(
    "gpuws_config",
    [
        {
            "store_url": "s3://gpuws-nowhere/team",
            "storage_options": {
                "endpoint_url": f"http://127.0.0.1:{free_port()}",
                "key": "k",
                "secret": "s",
                "config_kwargs": {"retries": {"max_attempts": 1}},
            },
        }
    ],
    indirect=True,
)
async def test_a_store_that_cannot_be_read_makes_resume_raise_not_start_from_0(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "unreachable.ipynb") as nb:
        said = await nb.run(
            TRACK
            + """
try:
    print('resumed', gpuws.resume(timeout=30))
except Exception as err:
    print('raised', type(err).__name__, err)
""",
            timeout=180,
        )
    assert "resumed" not in said, said
    assert "raised CheckpointError" in said and "Not starting from 0" in said, said
