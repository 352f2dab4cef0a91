"""Hostile request bodies against every handler that reads one (each POST and DELETE), on a real
Jupyter Server: each is a 400 that says what is wrong, and starts nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpu_ws.handlers import MAX_BODY_BYTES, handlers

JOB_ID = "0123456789ab"


def body_routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every handler method that may read a body, from the server's own table,
    so a handler added later is covered too."""
    routes = []
    for pattern, cls, _ in handlers(app):
        for method in ("post", "put", "patch", "delete"):
            if method in vars(cls):
                routes.append((method.upper(), pattern.replace("([^/]+)", JOB_ID)))
    return routes


async def refusals(jp_fetch: Any, app: Any, body: bytes) -> dict[str, tuple[int, str]]:
    """Each route's status and message for this body."""
    answers = {}
    for method, path in body_routes(app):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                *path.strip("/").split("/"),
                method=method,
                body=body,
                allow_nonstandard_methods=True,
            )
        answers[f"{method} {path}"] = (
            err.value.code,
            json.loads(err.value.response.body)["message"],
        )
    assert app.jobs.latest("persist") is None and app.runtime.release is None  # nothing was started
    return answers


def test_every_route_that_reads_a_body_is_tried(gpuws_app: Any) -> None:
    routes = body_routes(gpuws_app)
    assert ("POST", "/gpuws/api/persist") in routes and (
        "POST",
        "/gpuws/api/runtime/release",
    ) in routes
    assert ("DELETE", f"/gpuws/api/persist/{JOB_ID}") in routes


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"[{}]", "array"),
        (b'"{}"', "string"),
        (b"7", "number"),
        (b"null", "null"),
        (b"true", "boolean"),
    ],
)
async def test_a_body_that_is_not_an_object_is_a_400(
    jp_fetch: Any, gpuws_app: Any, body: bytes, kind: str
) -> None:
    answers = await refusals(jp_fetch, gpuws_app, body)
    expected = (400, f"The request body must be a JSON object, not {kind}")
    assert {route: answer for route, answer in answers.items() if answer != expected} == {}


async def test_a_deeply_nested_body_is_a_400_not_a_server_error(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    for body in (b"[" * 5000 + b"]" * 5000, b'{"a":' * 5000 + b"1" + b"}" * 5000):
        answers = await refusals(jp_fetch, gpuws_app, body)
        assert set(answers.values()) == {
            (400, "The request body is not valid JSON: it is nested too deeply")
        }


@pytest.mark.parametrize(
    "body", [b'{"force": "\xff"}', "{}".encode("utf-16"), "{}".encode("utf-32")]
)
async def test_a_body_that_is_not_utf8_is_a_400(jp_fetch: Any, gpuws_app: Any, body: bytes) -> None:
    # UTF-16 and UTF-32 are what Python's json would otherwise read; JSON between systems is UTF-8.
    answers = await refusals(jp_fetch, gpuws_app, body)
    assert {code for code, _ in answers.values()} == {400}
    assert all(
        message.startswith("The request body is not UTF-8 text") for _, message in answers.values()
    )


@pytest.mark.parametrize(
    "body",
    [b'{"force": NaN}', b'{"force": Infinity}', b'{"force": -Infinity}', b'{"force": 1e999}'],
)
async def test_nan_infinity_and_overflowing_numbers_are_a_400(
    jp_fetch: Any, gpuws_app: Any, body: bytes
) -> None:
    answers = await refusals(jp_fetch, gpuws_app, body)
    assert {code for code, _ in answers.values()} == {400}
    assert all(
        message.startswith("The request body is not valid JSON") for _, message in answers.values()
    )


async def test_an_object_naming_a_key_twice_is_a_400(jp_fetch: Any, gpuws_app: Any) -> None:
    # Python's json keeps the last, other readers the first: what was checked is not what is used.
    answers = await refusals(jp_fetch, gpuws_app, b'{"force": false, "force": true}')
    expected = (
        400,
        "The request body is not valid JSON: the key 'force' is given twice in one object",
    )
    assert {route: answer for route, answer in answers.items() if answer != expected} == {}


async def test_a_body_larger_than_any_route_takes_is_refused_before_it_is_parsed(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    huge = b'{"force": [' + b"[]," * (MAX_BODY_BYTES // 3) + b"[]]}"
    answers = await refusals(jp_fetch, gpuws_app, huge)
    assert set(answers.values()) == {(413, "The request body is larger than 4 MiB")}


async def test_unknown_keys_are_named_in_the_400(jp_fetch: Any, gpuws_app: Any) -> None:
    answers = await refusals(jp_fetch, gpuws_app, b'{"forse": true, "x": 1}')
    assert {code for code, _ in answers.values()} == {400}
    assert all('"forse", "x"' in message for _, message in answers.values()), answers
    _, release = answers["POST /gpuws/api/runtime/release"]
    assert release == 'Unknown keys in the request body: "forse", "x" (expected only force)'


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("runtime/release", b'{"force": "yes"}', '"force" must be boolean, not string'),
        ("env/restore", b'{"snapshot": 5}', '"snapshot" must be string or null, not number'),
        ("checkpoints", b'{"kernel_id": ["k"]}', '"kernel_id" must be string, not array'),
        (
            "checkpoints",
            b'{"kernel_id": "k", "all": true}',
            'Send {"kernel_id": "<id>"}, {"run_id": "<id>"} or {"all": true}, not several',
        ),
        (
            "checkpoints",
            b'{"all": false}',
            'Send {"kernel_id": "<id>"}, {"run_id": "<id>"} or {"all": true}',
        ),
        (
            "checkpoints",
            b'{"run_id": ""}',
            'Send {"kernel_id": "<id>"}, {"run_id": "<id>"} or {"all": true}',
        ),
        (
            "sync/lease",
            b'{"take_over": false}',
            'Send {"take_over": true} to take over the workspace lease',
        ),
    ],
)
async def test_a_value_of_the_wrong_type_is_named_in_the_400(
    jp_fetch: Any, gpuws_app: Any, path: str, body: bytes, message: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", *path.split("/"), method="POST", body=body)
    assert err.value.code == 400
    assert json.loads(err.value.response.body)["message"] == message
    assert gpuws_app.jobs.latest("persist") is None and gpuws_app.runtime.release is None


async def test_a_method_not_taken_is_a_405_that_names_those_taken(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "persist", method="PUT", body=b"{}")
    assert err.value.code == 405
    assert err.value.response.headers["Allow"] == "POST, OPTIONS"
