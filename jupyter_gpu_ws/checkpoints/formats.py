"""The files of a checkpoint's state (files.py has the folder): the tracked state as state.pt
and tensors.bin (or state.json without torch: plainstate.py) written and read back without
running anything they hold, the RNG states, and saved values put back into the tracked objects.
The single-process tracker, the distributed one, the callbacks and the export share these."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, TypeGuard, cast

from ..diskio import start_writeback
from . import plainstate
from .files import CheckpointError, CheckpointFolder

TENSOR = "__gpuws_tensor__"
# Tensor bytes are written in slices of this size, each one queued for disk once written.
WRITE_SLICE = 32 * 2**20


def write_tensors(state: dict[str, Any], path: Path) -> tuple[dict[str, Any], str]:
    """Write every tensor's bytes to `path` back to back, hashing as it goes; return the state
    with each tensor replaced by where its bytes are, and the file's xxh3.

    Unbuffered writes straight from the staging buffers, in slices whose writeback to disk
    starts as soon as each is written: the closing fsync finds little left to do.
    """
    import torch
    import xxhash

    hasher = xxhash.xxh3_128()
    offset = 0
    with open(path, "wb", buffering=0) as f:
        fd = f.fileno()

        def put(data: memoryview) -> None:
            nonlocal offset
            for start in range(0, len(data), WRITE_SLICE):
                piece = data[start : start + WRITE_SLICE]
                written = 0
                while written < len(piece):
                    written += f.write(piece[written:])
                hasher.update(piece)
                start_writeback(fd, offset, len(piece))
                offset += len(piece)

        def strip(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                _require_numpy()
                flat = value.contiguous().reshape(-1)
                data = flat.view(torch.uint8).numpy().data if flat.numel() else memoryview(b"")
                entry = {
                    TENSOR: True,
                    "dtype": str(value.dtype).replace("torch.", ""),
                    "shape": list(value.shape),
                    "offset": offset,
                    "nbytes": len(data),
                }
                put(data)
                return entry
            if isinstance(value, dict):
                return {k: strip(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                items = [strip(v) for v in value]
                return tuple(items) if isinstance(value, tuple) else items
            return value

        skeleton = {name: strip(value) for name, value in state.items()}
    return skeleton, hasher.hexdigest()


def _require_numpy() -> None:
    """torch hands a tensor's bytes over through NumPy: without it, one line saying what to install."""
    if plainstate.optional_module("numpy") is None:
        raise CheckpointError(
            "saving tensors needs NumPy, which torch hands their bytes over through: "
            "pip install numpy"
        )


def read_checkpoint(path: Path, manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saved state, tensors filled in, and the RNG states of one checkpoint folder: its
    files as the manifest lists them (CheckpointError, naming the file, for anything else)."""
    with CheckpointFolder(path, manifest) as folder:
        if plainstate.STATE in folder.files:  # saved without torch: plain values, as JSON
            return plainstate.loads(folder.read(plainstate.STATE)), plainstate.loads(
                folder.read(plainstate.RNG)
            )
        torch = plainstate.require_torch(f"Checkpoint {path.name} holds torch state: loading it")
        with folder.open("state.pt") as f:
            skeleton = torch.load(f, map_location="cpu", weights_only=True)
        if not isinstance(skeleton, dict):
            raise CheckpointError("state.pt holds no state")
        data = folder.read("tensors.bin") if "tensors.bin" in folder.files else bytearray()
        with folder.open("rng.pt") as f:
            rng = torch.load(f, map_location="cpu", weights_only=True)
    return read_tensors(skeleton, data), rng


def read_tensors(skeleton: dict[str, Any], data: bytearray) -> dict[str, Any]:
    """The skeleton with each tensor's entry replaced by the tensor, its bytes from `data` (views
    of it, not copies). An entry that is not a torch dtype, a shape, and a place inside `data`
    holding exactly that many bytes is a CheckpointError: nothing is allocated for it."""
    import torch

    def fill(value: Any) -> Any:
        if isinstance(value, dict) and value.get(TENSOR):
            dtype, shape, offset, nbytes = _tensor_entry(torch, value, len(data))
            if nbytes == 0:
                return torch.empty(shape, dtype=dtype)
            flat = torch.frombuffer(data, dtype=torch.uint8, count=nbytes, offset=offset)
            return flat.view(dtype).reshape(shape)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            items = [fill(v) for v in value]
            return tuple(items) if isinstance(value, tuple) else items
        return value

    return {name: fill(value) for name, value in skeleton.items()}


def _tensor_entry(
    torch: Any, value: dict[str, Any], available: int
) -> tuple[Any, list[int], int, int]:
    """(dtype, shape, offset, nbytes) of a tensor's entry in state.pt, checked against tensors.bin."""
    name = value.get("dtype")
    dtype = (
        getattr(torch, name, None) if isinstance(name, str) and not name.startswith("_") else None
    )
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError(f"state.pt names the dtype {name!r}, which is not a torch dtype")
    shape, offset, nbytes = value.get("shape"), value.get("offset"), value.get("nbytes")
    if not isinstance(shape, (list, tuple)) or not all(_count(n) for n in shape):
        raise CheckpointError(f"state.pt gives a tensor the shape {shape!r}")
    if not _count(offset) or not _count(nbytes) or offset + nbytes > available:
        raise CheckpointError(
            f"state.pt places a tensor at {offset!r} (+{nbytes!r} bytes), outside tensors.bin "
            f"({available} bytes)"
        )
    if math.prod(shape) * dtype.itemsize != nbytes:
        raise CheckpointError(
            f"state.pt gives a {name} tensor of shape {list(shape)} {nbytes} bytes"
        )
    return dtype, list(shape), offset, nbytes


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def capture_rng(torch: Any | None) -> dict[str, Any]:
    """Every RNG a training loop draws from, as tensors and plain values (weights_only-safe);
    without torch (None), Python's and NumPy's as plain values."""
    state: dict[str, Any] = {"python": random.getstate()}
    if torch is not None:
        state["torch"] = torch.get_rng_state()
    try:
        import numpy as np

        # numpy's stubs type get_state() as legacy=False's dict; the default is this tuple
        kind, keys, pos, has_gauss, gauss = cast(
            "tuple[str, np.ndarray, int, int, float]", np.random.get_state()
        )
        keys = keys.astype("int64")
        state["numpy"] = {
            "kind": kind,
            "keys": keys.tolist() if torch is None else torch.from_numpy(keys),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        }
    except ImportError:
        pass
    if torch is not None and torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng(torch: Any | None, state: dict[str, Any]) -> None:
    """Back to the RNG states `capture_rng` took; those of a library not here (torch, NumPy) are
    left out, since nothing in this process draws from them."""
    random.setstate(_tuples(state["python"]))
    if torch is not None and "torch" in state:
        torch.set_rng_state(state["torch"])
    np = plainstate.optional_module("numpy") if "numpy" in state else None
    if np is not None:
        n = state["numpy"]
        keys = n["keys"] if isinstance(n["keys"], list) else n["keys"].numpy()
        np.random.set_state(
            (
                n["kind"],
                np.asarray(keys, dtype="int64").astype("uint32"),
                n["pos"],
                n["has_gauss"],
                n["gauss"],
            )
        )
    if torch is not None and "cuda" in state and torch.cuda.is_available():
        devices = torch.cuda.device_count()
        torch.cuda.set_rng_state_all(state["cuda"][:devices])


def _tuples(value: Any) -> Any:
    """random.setstate wants tuples all the way down."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


def restore_value(objects: dict[str, Any], restored: dict[str, Any], name: str, value: Any) -> None:
    """A tracked plain value back from a checkpoint: a dict or list refilled in place (the
    user's own references see it), anything else handed back in `restored` (`gpuws.track().restored`)."""
    obj = objects[name]
    if isinstance(obj, dict):
        obj.clear()
        obj.update(value)
    elif isinstance(obj, list):
        obj[:] = value
    else:
        restored[name] = value
