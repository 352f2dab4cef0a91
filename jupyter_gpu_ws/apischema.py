"""The REST API's one description (openapi.yaml, shipped in this package) held to every request:
its parameters and body checked against the operation's schemas, a failure in one line that
names the field."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # imported where a request is checked: jsonschema's import costs a CLI ~1 s
    from jsonschema import Draft4Validator, ValidationError
    from referencing import Registry

# docs/openapi.yaml is a link to this file, so the description read here is the one published.
SPEC_FILE = Path(__file__).with_name("openapi.yaml")
_BASE = "urn:jupyter-gpu-ws:openapi"
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# What a request without a requestBody in the description may still send: nothing, or `{}`.
NO_BODY = "#/components/schemas/NoOptions"
# A vendor extension of a schema in the description: the one line its failure answers, where
# the field's own words would not tell the user what to send.
MESSAGE = "x-message"
# How many unknown keys a message names; a hostile body may send thousands.
MAX_NAMED = 5


class RequestError(ValueError):
    """A request the description does not allow: 400, or 404 for a path that names nothing."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@cache
def spec() -> dict[str, Any]:
    """The description as written."""
    loaded: dict[str, Any] = yaml.safe_load(SPEC_FILE.read_text(encoding="utf-8"))
    return loaded


@cache
def _registry() -> Registry:
    """The description with OpenAPI 3.0's `nullable` said in JSON Schema's words, so that
    jsonschema (draft 4, the dialect OpenAPI 3.0 schemas follow) reads it; `$ref`s resolve
    within it."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    document = _json_schema(copy.deepcopy(spec()))
    return Registry().with_resource(
        _BASE, Resource.from_contents(document, default_specification=DRAFT4)
    )


def _json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value) for key, value in node.items()}
    if node.pop("nullable", False):
        if "enum" in node and None not in node["enum"]:
            node["enum"] = [*node["enum"], None]
        if "type" in node:
            node["type"] = [node["type"], "null"]
        elif any(key in node for key in ("allOf", "anyOf", "oneOf", "$ref")):
            return {"anyOf": [node, {"type": "null"}]}
    return node


def _resolve(pointer: str) -> Any:
    """The node at a JSON pointer of the description (`#/…`), following `$ref`s."""
    resolver = _registry().resolver()
    node = resolver.lookup(_BASE + pointer).contents
    while isinstance(node, dict) and "$ref" in node:
        node = resolver.lookup(_BASE + node["$ref"]).contents
    return node


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def operations() -> list[tuple[str, str]]:
    """Every (route, method) the description lists, the method in capitals."""
    return [
        (route, method.upper())
        for route, item in spec()["paths"].items()
        for method in item
        if method in HTTP_METHODS
    ]


def _operation(route: str, method: str) -> str:
    """The JSON pointer of an operation; LookupError when the description has none."""
    item = spec()["paths"].get(route)
    if item is None or method.lower() not in item:
        raise LookupError(f"{method} {route} is not in {SPEC_FILE.name}")
    return f"#/paths/{_escape(route)}/{method.lower()}"


def parameters(route: str, method: str) -> list[dict[str, Any]]:
    """The operation's parameters (its path's and its own, the operation's winning)."""
    pointer = _operation(route, method)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for where in (f"#/paths/{_escape(route)}", pointer):
        for parameter in _resolve(where).get("parameters", []):
            parameter = parameter if "$ref" not in parameter else _resolve(parameter["$ref"])
            found[(parameter["name"], parameter["in"])] = parameter
    return list(found.values())


def body_schema_pointer(route: str, method: str) -> str:
    """Where the operation's body schema is; NoOptions for an operation that takes none."""
    pointer = _operation(route, method)
    if "requestBody" not in _resolve(pointer):
        return NO_BODY
    body = f"{pointer}/requestBody"
    if "$ref" in _resolve_raw(body):
        body = _resolve_raw(body)["$ref"]
    return f"{body}/content/application~1json/schema"


def _resolve_raw(pointer: str) -> Any:
    return _registry().resolver().lookup(_BASE + pointer).contents


@cache
def _validator(pointer: str) -> Draft4Validator:
    from jsonschema import Draft4Validator

    return Draft4Validator({"$ref": _BASE + pointer}, registry=_registry())


def validate_body(route: str, method: str, body: Any) -> Any:
    """The body (parsed JSON; `{}` where none was sent) if the operation's schema allows it;
    else RequestError with the first problem, in one line that names the field."""
    pointer = body_schema_pointer(route, method)
    errors = list(_validator(pointer).iter_errors(body))
    if errors:
        raise RequestError(_body_message(_resolve(pointer), body, errors))
    return body


def validate_parameters(
    route: str,
    method: str,
    query: Mapping[str, list[bytes]],
    path: Mapping[str, str],
) -> dict[str, Any]:
    """The operation's parameters, as their schema's types (a number from its text), each
    checked against its schema: a query parameter given twice, or not as its schema says, is a
    400; a path parameter not as its schema says names nothing (404). Query parameters the
    operation does not list are left alone (`token`, a cache-buster)."""
    values: dict[str, Any] = {}
    for parameter in parameters(route, method):
        name, where = parameter["name"], parameter["in"]
        schema = parameter.get("schema", {})
        status = 404 if where == "path" else 400
        if where == "path":
            text: str | None = path.get(name)
        elif where == "query":
            given = query.get(name)
            if given is not None and len(given) != 1:
                raise RequestError(f"Parameter {quoted(name)} was given more than once")
            text = None if given is None else given[0].decode("utf-8", "replace")
        else:
            continue
        if text is None:
            if parameter.get("required"):
                raise RequestError(f"Parameter {quoted(name)} is required", status)
            if "default" in schema:
                values[name] = schema["default"]
            continue
        value = _typed(name, text, schema, status)
        from jsonschema import Draft4Validator

        errors = list(Draft4Validator(schema, registry=_registry()).iter_errors(value))
        if errors:
            raise RequestError(_field_message(_first(errors), name), status)
        values[name] = value
    return values


def _typed(name: str, text: str, schema: Mapping[str, Any], status: int) -> Any:
    """A parameter's text as its schema's type."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "integer" in kinds:
        try:
            return int(text)
        except ValueError:
            raise RequestError(
                f"{quoted(name)} must be a whole number, not {_shown(text)}", status
            ) from None
    if "number" in kinds:
        try:
            number = float(text)
        except ValueError:
            raise RequestError(
                f"{quoted(name)} must be a number, not {_shown(text)}", status
            ) from None
        if not math.isfinite(number):
            raise RequestError(
                f"{quoted(name)} must be a finite number, not {_shown(text)}", status
            )
        return number
    if "boolean" in kinds:
        if text not in ("true", "false"):
            raise RequestError(f"{quoted(name)} must be true or false, not {_shown(text)}", status)
        return text == "true"
    return text


# -- messages --------------------------------------------------------------------------------


def json_type(value: Any) -> str:
    """A parsed JSON value's type in JSON's own words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before the numbers: a bool is an int in Python
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def quoted(name: str) -> str:
    """A key from the request for a message: quoted, and cut short, since it may be huge."""
    return json.dumps(name if len(name) <= 40 else name[:40] + "…")


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return json.dumps(text[:40] + "…" if len(text) > 40 else text)


def _branches(schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The object schemas a body may match: the schema itself, or each of its alternatives."""
    alternatives = schema.get("oneOf") or schema.get("anyOf")
    if not alternatives:
        return [schema]
    resolver = _registry().resolver()
    return [
        resolver.lookup(_BASE + branch["$ref"]).contents if "$ref" in branch else branch
        for branch in alternatives
    ]


def _unknown_keys(schema: Mapping[str, Any], body: Mapping[str, Any]) -> str | None:
    """The message for keys no alternative of the schema takes, where none takes others."""
    branches = _branches(schema)
    if not all(branch.get("additionalProperties") is False for branch in branches):
        return None
    known: list[str] = []
    for branch in branches:
        known += [name for name in branch.get("properties", {}) if name not in known]
    unknown = [name for name in body if name not in known]
    if not unknown:
        return None
    expected = f"expected only {', '.join(known)}" if known else "this request takes none"
    return (
        f"Unknown {'key' if len(unknown) == 1 else 'keys'} in the request body: "
        f"{', '.join(quoted(name) for name in unknown[:MAX_NAMED])}"
        f"{' …' if len(unknown) > MAX_NAMED else ''} ({expected})"
    )


def _leaves(errors: Iterable[ValidationError]) -> list[ValidationError]:
    """The errors, those of a oneOf or anyOf replaced by their alternatives' own."""
    out: list[ValidationError] = []
    for error in errors:
        out.extend(_leaves(error.context) if error.context else [error])
    return out


def _first(errors: list[ValidationError]) -> ValidationError:
    """The error to tell: a value of the wrong type first (the most basic), then the first."""
    typed = [error for error in errors if error.validator == "type"]
    return (typed or errors)[0]


def _body_message(schema: Mapping[str, Any], body: Any, errors: list[ValidationError]) -> str:
    if not isinstance(body, dict):
        return f"The request body must be a JSON object, not {json_type(body)}"
    unknown = _unknown_keys(schema, body)
    if unknown:
        return unknown
    wrong_type = [e for e in _leaves(errors) if e.validator == "type" and e.path]
    if wrong_type:
        return _field_message(wrong_type[0])
    error = errors[0]
    if error.validator in ("oneOf", "anyOf") and MESSAGE in error.schema:
        # Keys of more than one alternative: say so, it is the likely slip.
        matched = [
            branch
            for branch in _branches(error.schema)
            if branch.get("required") and all(name in body for name in branch["required"])
        ]
        return error.schema[MESSAGE] + (", not several" if len(matched) > 1 else "")
    return _field_message(_first(_leaves(errors)))


def _field_name(error: ValidationError, name: str | None) -> str:
    path = "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    ).lstrip(".")
    return quoted(f"{name}{path}" if name else path)


def _field_message(error: ValidationError, name: str | None = None) -> str:
    """One line for one failure of a value, naming its field (`name` for a parameter)."""
    if MESSAGE in error.schema:
        return str(error.schema[MESSAGE])
    field = _field_name(error, name)
    rule, value, instance = error.validator, error.validator_value, error.instance
    if rule == "type":
        kinds = value if isinstance(value, list) else [value]
        return f"{field} must be {' or '.join(kinds)}, not {json_type(instance)}"
    if rule == "required":
        missing = next(key for key in value if key not in instance)
        return f"{quoted(missing)} is required" + (f" in {field}" if error.absolute_path else "")
    if rule == "enum":
        allowed = [json.dumps(v) for v in value]
        return (
            f"{field} must be {allowed[0]}"
            if len(allowed) == 1
            else f"{field} must be one of {', '.join(allowed)}, not {_shown(instance)}"
        )
    if rule in ("minimum", "maximum"):
        exclusive = error.schema.get(
            "exclusiveMinimum" if rule == "minimum" else "exclusiveMaximum"
        )
        bound = (
            ("more than" if exclusive else "at least")
            if rule == "minimum"
            else ("less than" if exclusive else "at most")
        )
        return f"{field} must be {bound} {_number(value)}, not {_number(instance)}"
    if rule == "minLength":
        return (
            f"{field} must not be empty"
            if value == 1
            else f"{field} must be at least {value} characters long"
        )
    if rule == "maxLength":
        return f"{field} must be at most {value} characters long"
    if rule == "minItems":
        return (
            f"{field} must be a non-empty list"
            if value == 1
            else f"{field} must have at least {value} items"
        )
    if rule == "maxItems":
        return f"{field} must have at most {value} items"
    if rule == "pattern":
        return f"{field} must match {value}, not {_shown(instance)}"
    if rule == "additionalProperties" and isinstance(instance, dict):
        extra = [key for key in instance if key not in error.schema.get("properties", {})]
        return f"Unknown keys in {field}: {', '.join(quoted(key) for key in extra[:MAX_NAMED])}"
    return f"{field}: {' '.join(error.message.split())[:200]}"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
