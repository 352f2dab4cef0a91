"""Persist asks every connected browser page to save its open documents first: a real server,
pages played by websocket clients that save through the real contents API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_gpu_ws.documents import DocumentsReport, parse_answer
from jupyter_gpu_ws.handlers import AUTH_RESOURCE
from tests.test_handlers import DenyGpuws
from tests.test_sync_api import finished, get, mirror, sync_running


class ReadOnlyGpuws(Authorizer):
    """May read this extension's resource (the metrics), not write it."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != AUTH_RESOURCE or action == "read"


@pytest.fixture
def save_timeout() -> float:
    """`document_save_timeout` of the test server. A test that must not wait for the bound sets
    it far beyond the test's own patience, so waiting for it would fail the test."""
    return 600.0


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any], save_timeout: float) -> dict[str, Any]:
    return {**gpuws_config, "document_save_timeout": save_timeout}


async def connect(jp_ws_fetch: Any, page: str = "") -> Any:
    return await jp_ws_fetch(
        "gpuws", "api", "documents", "stream", params={"page": page} if page else None
    )


async def wait_connected(app: Any, count: int) -> None:
    for _ in range(100):
        if len(app.pages.pages) == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(app.pages.pages)} pages connected, expected {count}")


async def start_persist(jp_fetch: Any) -> str:
    response = await jp_fetch("gpuws", "api", "persist", method="POST", body="")
    return json.loads(response.body)["id"]


async def read_json(ws: Any) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.read_message(), 30))


def answer(
    request: dict[str, Any],
    saved: list[str] | None = None,
    failed: list[dict[str, str]] | None = None,
) -> str:
    return json.dumps(
        {
            "type": "documents-saved",
            "request_id": request["request_id"],
            "saved": saved or [],
            "failed": failed or [],
        }
    )


async def save_notebook(jp_fetch: Any, path: str, source: str) -> None:
    """What a page does when asked: save its notebook through the contents API."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    await jp_fetch(
        "api",
        "contents",
        path,
        method="PUT",
        body=json.dumps({"type": "notebook", "format": "json", "content": notebook}),
    )


async def test_persist_waits_for_the_pages_to_save_their_documents_then_syncs_them(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any, store_dir: Path
) -> None:
    await sync_running(jp_fetch)
    gpuws_app.sync.service.debounce = 3600  # only the persist's own sync uploads
    ws = await connect(jp_ws_fetch, "JupyterLab /lab")
    await wait_connected(gpuws_app, 1)
    job_id = await start_persist(jp_fetch)

    request = await read_json(ws)
    assert (
        request["type"] == "save-documents"
        and request["request_id"]
        and 0 < request["timeout"] < 600
    )
    job = await get(jp_fetch, "persist", job_id)
    assert [(s["name"], s["state"]) for s in job["steps"]] == [
        ("documents", "running"),
        ("checkpoints", "pending"),
        ("sync", "pending"),
    ]
    await save_notebook(jp_fetch, "notes.ipynb", "x = 'the unsaved edit'")
    await ws.write_message(answer(request, saved=["notes.ipynb"]))

    job = await finished(jp_fetch, "persist", job_id)
    assert job["state"] == "done", job["errors"]
    assert job["result"]["documents"] == {
        "saved": ["notes.ipynb"],
        "failed": [],
        "browsers": 1,
        "unanswered": [],
    }
    assert job["steps"][0]["detail"] == "1 document saved; 1 browser page asked"
    assert "the unsaved edit" in (mirror(store_dir) / "notes.ipynb").read_text()
    ws.close()


async def test_every_connected_page_is_asked_and_their_answers_are_gathered(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    lab, notebook = (
        await connect(jp_ws_fetch, "JupyterLab /lab"),
        await connect(jp_ws_fetch, "Notebook /tree"),
    )
    await wait_connected(gpuws_app, 2)
    job_id = await start_persist(jp_fetch)
    lab_request, notebook_request = await read_json(lab), await read_json(notebook)
    assert lab_request["request_id"] == notebook_request["request_id"]
    await lab.write_message(answer(lab_request, saved=["b.py", "a.ipynb"]))
    await notebook.write_message(answer(notebook_request, saved=["a.ipynb"]))
    job = await finished(jp_fetch, "persist", job_id)
    assert job["result"]["documents"] == {
        "saved": ["a.ipynb", "b.py"],
        "failed": [],
        "browsers": 2,
        "unanswered": [],
    }
    lab.close()
    notebook.close()


@pytest.mark.parametrize("save_timeout", [1.0])
async def test_a_page_that_does_not_answer_is_named_and_the_persist_goes_on(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any, jp_root_dir: Path, store_dir: Path
) -> None:
    await sync_running(jp_fetch)
    answering, silent = (
        await connect(jp_ws_fetch, "JupyterLab /lab"),
        await connect(jp_ws_fetch, "Notebook /tree"),
    )
    await wait_connected(gpuws_app, 2)
    (jp_root_dir / "data.txt").write_text("42")
    job_id = await start_persist(jp_fetch)
    request = await read_json(answering)
    await answering.write_message(answer(request))
    assert (await read_json(silent))["request_id"] == request[
        "request_id"
    ]  # asked, and never answers

    job = await finished(jp_fetch, "persist", job_id)
    assert job["state"] == "done", job[
        "errors"
    ]  # named, not a failure: it may hold nothing unsaved
    assert job["result"]["documents"] == {
        "saved": [],
        "failed": [],
        "browsers": 2,
        "unanswered": ["Notebook /tree"],
    }
    assert (
        job["steps"][0]["detail"]
        == "0 documents saved; 1 of 2 browser pages did not answer (Notebook /tree)"
    )
    assert [s["state"] for s in job["steps"]] == ["done", "done", "done"]
    assert (mirror(store_dir) / "data.txt").read_text() == "42"
    assert (
        len(gpuws_app.pages.pages) == 2
    )  # the silent page is still connected: the bound, not a close, ended the wait
    answering.close()
    silent.close()


async def test_with_no_page_connected_the_step_says_so_and_does_not_wait(jp_fetch: Any) -> None:
    await sync_running(jp_fetch)
    job = await finished(jp_fetch, "persist", await start_persist(jp_fetch), timeout=60)
    assert job["state"] == "done", job["errors"]
    assert job["steps"][0] == {
        "name": "documents",
        "state": "done",
        "detail": "no browser page is connected",
    }
    assert job["result"]["documents"] == {
        "saved": [],
        "failed": [],
        "browsers": 0,
        "unanswered": [],
    }


async def test_a_page_that_closes_while_asked_is_not_waited_for(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    ws = await connect(jp_ws_fetch, "JupyterLab /lab")
    await wait_connected(gpuws_app, 1)
    job_id = await start_persist(jp_fetch)
    await read_json(ws)
    ws.close()
    job = await finished(jp_fetch, "persist", job_id, timeout=60)
    assert job["result"]["documents"]["unanswered"] == ["JupyterLab /lab"]
    assert not gpuws_app.pages.pages


async def test_a_document_that_could_not_be_saved_fails_the_persist_but_the_sync_still_runs(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any, jp_root_dir: Path, store_dir: Path
) -> None:
    await sync_running(jp_fetch)
    ws = await connect(jp_ws_fetch)
    await wait_connected(gpuws_app, 1)
    (jp_root_dir / "results.csv").write_text("loss\n0.1\n")
    job_id = await start_persist(jp_fetch)
    request = await read_json(ws)
    await ws.write_message(
        answer(
            request,
            saved=["train.ipynb"],
            failed=[{"path": "draft.py", "error": "Permission denied"}],
        )
    )
    job = await finished(jp_fetch, "persist", job_id)
    assert job["state"] == "failed"
    assert job["errors"] == ["draft.py could not be saved: Permission denied"]
    assert job["result"]["documents"]["failed"] == [
        {"path": "draft.py", "error": "Permission denied"}
    ]
    assert (
        job["steps"][0]["detail"]
        == "1 document saved; 1 not saved (draft.py); 1 browser page asked"
    )
    assert job["steps"][-1] == {**job["steps"][-1], "name": "sync", "state": "done"}
    assert (mirror(store_dir) / "results.csv").read_text() == "loss\n0.1\n"
    ws.close()


async def test_a_malformed_answer_is_refused_with_the_reason_and_a_good_one_still_counts(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    ws = await connect(jp_ws_fetch)
    await wait_connected(gpuws_app, 1)
    job_id = await start_persist(jp_fetch)
    request = await read_json(ws)
    await ws.write_message("saved everything")
    assert (await read_json(ws))["type"] == "error"
    await ws.write_message(
        json.dumps(
            {"type": "documents-saved", "request_id": request["request_id"], "saved": "notes.ipynb"}
        )
    )
    refused = await read_json(ws)
    assert (
        refused["type"] == "error" and '"saved" is a list of document paths' in refused["message"]
    )
    assert (await get(jp_fetch, "persist", job_id))[
        "state"
    ] == "running"  # still waiting for a real answer
    await ws.write_message(answer(request, saved=["notes.ipynb"]))
    job = await finished(jp_fetch, "persist", job_id)
    assert job["result"]["documents"]["saved"] == ["notes.ipynb"]
    ws.close()


@pytest.mark.parametrize("server_authorizer", [DenyGpuws, ReadOnlyGpuws])
async def test_the_documents_stream_needs_write_access_to_gpuws(
    jp_ws_fetch: Any, server_authorizer: Any
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await connect(jp_ws_fetch)
    assert err.value.code == 403


async def test_the_emergency_persist_gives_the_pages_at_most_two_seconds(
    jp_fetch: Any, jp_ws_fetch: Any, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    ws = await connect(jp_ws_fetch, "JupyterLab /lab")
    await wait_connected(gpuws_app, 1)
    report = await gpuws_app.runtime.emergency_persist("test", False)  # the page never answers
    request = await read_json(ws)
    assert request["timeout"] <= 2
    assert report["job"]["result"]["documents"]["unanswered"] == ["JupyterLab /lab"]
    ws.close()


async def test_the_documents_stream_refuses_a_request_without_credentials(jp_ws_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch(
            "gpuws", "api", "documents", "stream", headers={"Authorization": "token not-the-token"}
        )
    assert err.value.code == 403


def test_an_answer_is_checked_field_by_field() -> None:
    good = parse_answer(
        {
            "type": "documents-saved",
            "request_id": "r1",
            "saved": ["a.ipynb"],
            "failed": [{"path": "b.py", "error": ""}],
        }
    )
    assert good.saved == ["a.ipynb"] and good.failed == [{"path": "b.py", "error": "unknown error"}]
    for bad in (
        {"type": "hello"},
        {"type": "documents-saved", "saved": []},
        {"type": "documents-saved", "request_id": "r1", "saved": [""]},
        {"type": "documents-saved", "request_id": "r1", "failed": [{"path": "b.py"}]},
        {"type": "documents-saved", "request_id": "r1", "saved": ["x"] * 1001},
    ):
        with pytest.raises(ValueError):
            parse_answer(bad)


def test_the_summary_names_what_was_not_saved_and_who_did_not_answer() -> None:
    report = DocumentsReport(
        saved=["a.ipynb", "b.ipynb"],
        failed=[{"path": "c.py", "error": "disk full"}],
        browsers=3,
        unanswered=["Notebook /tree"],
    )
    assert report.summary() == (
        "2 documents saved; 1 not saved (c.py); "
        "1 of 3 browser pages did not answer (Notebook /tree)"
    )
