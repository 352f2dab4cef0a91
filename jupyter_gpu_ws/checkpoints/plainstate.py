"""A checkpoint's state as JSON where torch is not installed: plain Python values, their tuples
and non-string dictionary keys kept, and nothing in it ever run when it is read back."""

from __future__ import annotations

import importlib
import json
from typing import Any

from .files import CheckpointError

# A checkpoint saved without torch holds these instead of state.pt and rng.pt.
STATE = "state.json"
RNG = "rng.json"
# JSON has lists and string-keyed objects only: a tuple, and a dict with other keys (or with a
# key that is one of these tags), are written as an object holding just the tag.
TUPLE = "__gpuws_tuple__"
ITEMS = "__gpuws_items__"
TORCH_MISSING = "pip install torch"


def optional_module(name: str) -> Any | None:
    """The module, or None when it is not installed (one that is there but fails to import is an error)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name == name:
            return None
        raise


def optional_torch() -> Any | None:
    """torch, or None when it is not installed."""
    return optional_module("torch")


def require_torch(why: str) -> Any:
    """torch, or a CheckpointError saying in one line what needs it and how to install it."""
    torch = optional_torch()
    if torch is None:
        raise CheckpointError(f"{why} needs torch, which is not installed here: {TORCH_MISSING}")
    return torch


def dumps(state: dict[str, Any]) -> bytes:
    """The state as JSON; a value JSON cannot hold is a CheckpointError naming where it is."""
    return json.dumps({name: _encode(value, name) for name, value in state.items()}).encode("utf-8")


def loads(data: bytes | bytearray) -> dict[str, Any]:
    """A state written by `dumps` (from the store, so from anyone: anything else is a CheckpointError)."""
    try:
        value = json.loads(bytes(data).decode("utf-8"), object_hook=_decode)
    except (ValueError, TypeError, RecursionError) as err:
        raise CheckpointError(f"not a checkpoint's plain state ({err})") from None
    if not isinstance(value, dict):
        raise CheckpointError("not a checkpoint's plain state (no object at its top)")
    return value


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value  # json writes nan and inf as NaN and Infinity, and reads them back
    if isinstance(value, tuple):
        return {TUPLE: [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not ({TUPLE, ITEMS} & value.keys()):
            return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
        return {
            ITEMS: [
                [_encode(k, f"{where} key"), _encode(v, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
        }
    raise CheckpointError(
        f"{where} is a {type(value).__name__}, which a checkpoint without torch cannot keep: "
        f"track plain values (numbers, strings, lists, tuples, dicts), or {TORCH_MISSING}"
    )


def _decode(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and TUPLE in obj and isinstance(obj[TUPLE], list):
        return tuple(obj[TUPLE])
    if len(obj) == 1 and ITEMS in obj and isinstance(obj[ITEMS], list):
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in obj[ITEMS]):
            raise ValueError("a dictionary's items are not pairs")
        return {key: value for key, value in obj[ITEMS]}  # an unhashable key is a TypeError
    return obj
