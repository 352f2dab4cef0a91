"""The API's description (jupyter_gpu_ws/openapi.yaml) held to every request on a real Jupyter
Server: a request it does not allow is a 4xx naming the field, each route it lists is served by
a handler that checks its requests, and the frontend's generated types follow it."""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tornado.httpclient import HTTPClientError
from tornado.web import RequestHandler

from jupyter_gpu_ws import apischema
from jupyter_gpu_ws.handlers import handlers
from jupyter_gpu_ws.userjobs_handlers import handlers as job_handlers

ROOT = Path(__file__).resolve().parents[1]
EXTRA_KEY = "not_in_the_description"


async def refusal(jp_fetch: Any, method: str, path: str, body: Any = None, **params: str) -> Any:
    """The status and message of a request that must be refused."""
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            *path.strip("/").split("/"),
            method=method,
            body=None if body is None else json.dumps(body),
            params=params or None,
            allow_nonstandard_methods=True,
        )
    return err.value.code, json.loads(err.value.response.body)["message"]


def test_the_description_is_read_from_the_installed_package() -> None:
    installed = importlib.resources.files("jupyter_gpu_ws").joinpath("openapi.yaml")
    assert installed.is_file() and not Path(str(installed)).is_symlink()  # a wheel keeps it
    assert apischema.SPEC_FILE == Path(str(installed))
    assert apischema.spec() == yaml.safe_load(installed.read_text(encoding="utf-8"))
    # docs/ links to the package's copy: one file, published in both places.
    docs = ROOT / "docs" / "openapi.yaml"
    assert docs.is_symlink() and not os.path.isabs(os.readlink(docs))
    assert docs.resolve() == Path(str(installed)).resolve()


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "field"),
    [
        # a required field missing
        ("POST", "/gpuws/api/jobs/j-0123456789ab/hold", {}, {}, "hold"),
        # a value of the wrong type
        ("POST", "/gpuws/api/runtime/release", {"force": "yes"}, {}, "force"),
        ("GET", "/gpuws/api/sync/pending", None, {"limit": "many"}, "limit"),
        # a number out of range, in a body and in a query
        (
            "POST",
            "/gpuws/api/checkpoints/fetch",
            {"run": ".gpuws/checkpoints/r", "timeout": 0},
            {},
            "timeout",
        ),
        ("GET", "/gpuws/api/sync/pending", None, {"limit": "10001"}, "limit"),
        ("GET", "/gpuws/api/metrics", None, {"since": "-1"}, "since"),
        # a value its enum does not list
        ("POST", "/gpuws/api/sync/lease", {"take_over": False}, {}, "take_over"),
        # a key where the operation takes no others
        ("POST", "/gpuws/api/persist", {"force": True}, {}, "force"),
        # a string too long, one not of its pattern, an empty list
        ("POST", "/gpuws/api/jobs", {"command": ["true"], "name": "n" * 201}, {}, "name"),
        ("POST", "/gpuws/api/env/restore", {"snapshot": "../../x"}, {}, "snapshot"),
        ("POST", "/gpuws/api/jobs", {"command": []}, {}, "command"),
    ],
    ids=[
        "missing",
        "wrong-type-body",
        "wrong-type-query",
        "too-small-body",
        "too-large-query",
        "negative-query",
        "not-in-enum",
        "extra-key",
        "too-long",
        "not-the-pattern",
        "empty-list",
    ],
)
async def test_a_request_the_description_does_not_allow_is_a_400_naming_the_field(
    jp_fetch: Any,
    gpuws_app: Any,
    method: str,
    path: str,
    body: Any,
    params: dict[str, str],
    field: str,
) -> None:
    code, message = await refusal(jp_fetch, method, path, body, **params)
    assert code == 400 and field in message, message
    assert "\n" not in message
    # Refused before anything started.
    assert gpuws_app.jobs.latest("persist") is None and gpuws_app.runtime.release is None
    assert gpuws_app.jobs.latest("env-restore") is None
    assert gpuws_app.jobs.latest("checkpoint-fetch") is None
    assert gpuws_app.userjobs.manager.list()["jobs"] == []


async def test_a_path_parameter_the_description_does_not_allow_names_nothing(
    jp_fetch: Any,
) -> None:
    code, message = await refusal(jp_fetch, "GET", "/gpuws/api/persist/not-a-job")
    assert code == 404 and '"id"' in message, message


def routes(app: Any) -> dict[str, tuple[type, dict[str, Any]]]:
    """The server's routes by the description's path, from its own tables."""
    return {
        options["route"]: (handler, options)
        for _, handler, options in handlers(app) + job_handlers(app)
    }


def violation(route: str, method: str) -> tuple[str, Any, dict[str, str], str] | None:
    """A request to the operation that its description refuses (path, body, query) and the
    field it names; None for an operation that takes nothing it could refuse."""
    path = route
    query: dict[str, str] = {}
    field = None
    for parameter in apischema.parameters(route, method):
        schema, name = parameter.get("schema", {}), parameter["name"]
        kinds = schema.get("type", [])
        kinds = {kinds} if isinstance(kinds, str) else set(kinds)
        if parameter["in"] == "path":
            path = path.replace("{" + name + "}", "0123456789ab")
            if "pattern" in schema and field is None:
                path, field = route.replace("{" + name + "}", "not.an.id"), name
        elif field is None and kinds & {"integer", "number"}:
            query, field = {name: "not-a-number"}, name
        elif field is None and schema.get("minLength"):
            query, field = {name: ""}, name
    body = None
    if "requestBody" in apischema.spec()["paths"][route][method.lower()]:
        body, field = {EXTRA_KEY: 1}, field or EXTRA_KEY
    return None if field is None else (path, body, query, field)


def test_every_operation_of_the_description_has_a_handler_and_every_handler_an_operation(
    gpuws_app: Any,
) -> None:
    served = routes(gpuws_app)
    assert sorted(served) == sorted(apischema.spec()["paths"])
    for route, method in apischema.operations():
        handler, _ = served[route]
        # Its own method, not Tornado's default (which answers 405).
        assert getattr(handler, method.lower()) is not getattr(RequestHandler, method.lower())


def test_every_body_the_description_takes_forbids_other_keys() -> None:
    # So that a key the server would ignore (a typo: "forse") is refused instead.
    for route, method in apischema.operations():
        schema = apischema._resolve(apischema.body_schema_pointer(route, method))
        for branch in apischema._branches(schema):
            assert branch.get("additionalProperties") is False, f"{method} {route}"


async def test_every_operation_that_takes_a_body_or_parameters_checks_them(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    checked = []
    for route, method in apischema.operations():
        if route.endswith("/stream"):
            continue  # websockets: their one parameter (a page's name) takes any text
        wrong = violation(route, method)
        if wrong is None:
            continue
        path, body, query, field = wrong
        code, message = await refusal(jp_fetch, method, path, body, **query)
        assert code in (400, 404) and field in message, (method, route, message)
        checked.append(f"{method} {route}")
    # The operations with something to refuse, counted from the description: a route added
    # without a check fails above, one left out of this walk fails here.
    assert len(checked) == len(
        [op for op in apischema.operations() if not op[0].endswith("/stream") and violation(*op)]
    )
    assert "POST /gpuws/api/jobs" in checked and "GET /gpuws/api/metrics" in checked


NODE_MODULES = ROOT / "node_modules" / "openapi-typescript"


@pytest.mark.skipif(
    not NODE_MODULES.exists() or shutil.which("node") is None,
    reason="needs `jlpm install` (scripts/test.sh runs it)",
)
def test_api_check_fails_when_the_description_changes(tmp_path: Path) -> None:
    copy = tmp_path / "openapi.yaml"
    shutil.copy(apischema.SPEC_FILE, copy)
    command = ["node", str(ROOT / "scripts" / "api-types.mjs"), "check"]
    same = subprocess.run(
        command, env={**os.environ, "GPUWS_OPENAPI": str(copy)}, capture_output=True, text=True
    )
    assert same.returncode == 0, same.stderr
    spec = yaml.safe_load(copy.read_text())
    spec["components"]["schemas"]["Alert"]["properties"]["acknowledged"] = {"type": "boolean"}
    copy.write_text(yaml.safe_dump(spec))
    changed = subprocess.run(
        command, env={**os.environ, "GPUWS_OPENAPI": str(copy)}, capture_output=True, text=True
    )
    assert changed.returncode == 1
    assert changed.stderr.strip().splitlines() == [
        "src/api.generated.ts is out of date with docs/openapi.yaml: run `jlpm run api:generate` "
        "and commit it"
    ]
