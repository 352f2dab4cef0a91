"""Checkpoint folders written through torch.distributed.checkpoint (DCP): the tracked objects
in DCP's state-dict form and back, read without running anything the folder holds, and
converted into one `torch.save` file for inference elsewhere.

    <root>/<run>/ckpt-000000123-20261129T154210Z/
        __0_0.distcp, __1_0.distcp, …   each rank's shard of the model and optimizer state (DCP)
        .metadata                       DCP's index of what lies where (written by rank 0)
        rank-0.pt, rank-1.pt, …         each rank's RNG states and plain values
        manifest.json                   written last by rank 0, once every rank has finished

DCP itself unpickles `.metadata` and loads non-tensor values with `weights_only=False`: either
would run code planted in a checkpoint that came from the store. Here `.metadata` goes through
an unpickler that knows only DCP's own record classes, and values load with `weights_only=True`.
Every file DCP opens (the index, the shards it names) is opened as files.CheckpointFolder opens
a checkpoint's files: listed in the manifest, a regular file of the stated size, inside the
folder; the index naming any other file, or a place past a shard's end, is refused before DCP
reads anything.
"""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

from ..diskio import replace_whole
from .files import CheckpointError, CheckpointFolder, name_problem, open_file
from .formats import read_checkpoint, restore_rng, restore_value

KIND = "dcp"
METADATA = ".metadata"


def rank_file(rank: int) -> str:
    """The file of one rank's RNG states and plain values."""
    return f"rank-{rank}.pt"


def read_rank_file(path: Path, manifest: dict[str, Any], rank: int) -> dict[str, Any]:
    """One rank's RNG states and plain values, from its file as the manifest lists it."""
    import torch

    with open_file(path, manifest, rank_file(rank)) as f:
        own = torch.load(f, map_location="cpu", weights_only=True)
    if not isinstance(own, dict) or not isinstance(own.get("rng"), dict):
        raise CheckpointError(f"{rank_file(rank)} holds no random states")
    return own


def rank_shards(names: list[str], rank: int) -> list[str]:
    """The DCP data files a rank wrote (`__<rank>_<n>.distcp`)."""
    prefix = f"__{rank}_"
    return sorted(n for n in names if n.startswith(prefix) and n.endswith(".distcp"))


# -- reading without running anything ----------------------------------------------------------

# What a DCP `.metadata` pickle is made of (torch 2.x): DCP's record classes, torch sizes,
# dtypes and layouts, paths, containers. Any other global is refused before it is looked up.
_METADATA_GLOBALS: dict[str, set[str]] = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath", "Path"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset", "slice", "tuple", "list", "dict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        import torch

        allowed = name in _METADATA_GLOBALS.get(module, ()) or (
            module == "torch"
            and isinstance(
                getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)
            )
        )
        if not allowed:
            raise pickle.UnpicklingError(
                f"{METADATA} refers to {module}.{name}, which a DCP index never holds"
            )
        return super().find_class(module, name)


def read_metadata(path: Path, manifest: dict[str, Any]) -> Any:
    """A checkpoint folder's DCP index, unpickled with DCP's record classes only, and checked:
    every place it names lies inside a shard file the manifest lists, and the manifest lists
    every rank's own file."""
    with CheckpointFolder(path, manifest) as folder:
        with folder.open(METADATA) as f:
            metadata = _MetadataUnpickler(f).load()
        _check_places(metadata, folder)
        ranks = manifest.get("world_size", 1)
        # Every rank wrote a file of its own: more ranks than files is not a checkpoint's count.
        if (
            not isinstance(ranks, int)
            or isinstance(ranks, bool)
            or not 1 <= ranks <= len(folder.files)
        ):
            raise CheckpointError(f"the manifest gives the world size {ranks!r}")
        for rank in range(ranks):
            folder.size(rank_file(rank))
    return metadata


def _check_places(metadata: Any, folder: CheckpointFolder) -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata

    storage = getattr(metadata, "storage_data", None) if isinstance(metadata, Metadata) else None
    if not isinstance(storage, dict):
        raise CheckpointError(f"{METADATA} is not a DCP index of files")
    for place in storage.values():
        if not isinstance(place, _StorageInfo):
            raise CheckpointError(f"{METADATA} holds a place that is not a file's")
        name, offset, length = place.relative_path, place.offset, place.length
        problem = name_problem(name, METADATA)
        if problem is not None:
            raise CheckpointError(problem)
        if place.transform_descriptors:
            raise CheckpointError(
                f"{METADATA} reads {name} through stream transforms, which gpuws never writes"
            )
        size = folder.size(name)  # listed in the manifest, or refused
        if (
            not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (offset, length)
            )
            or offset + length > size
        ):
            raise CheckpointError(
                f"{METADATA} places data at {offset!r} (+{length!r} bytes) of {name}, "
                f"which has {size}"
            )


def _safe_reader(path: Path, manifest: dict[str, Any]) -> Any:
    from contextlib import contextmanager

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.filesystem import FileSystem
    from torch.distributed.checkpoint.metadata import StorageMeta

    class CheckpointFiles(FileSystem):
        """DCP's file access, reduced to the checkpoint's own files by name: every path DCP
        joins stays the bare name it was given, opened through CheckpointFolder."""

        def concat_path(self, path: Any, suffix: str) -> Any:
            return suffix

        @contextmanager
        def create_stream(self, name: Any, mode: str) -> Any:
            if mode != "rb":
                raise CheckpointError(f"a checkpoint is only read here, not opened with {mode!r}")
            with CheckpointFolder(path, manifest) as folder, folder.open(str(name)) as stream:
                yield stream

    class SafeReader(FileSystemReader):
        """DCP's file reader, with the index read by `read_metadata` above and every file opened
        as a checkpoint's file."""

        def __init__(self) -> None:
            super().__init__(path)
            self.fs = CheckpointFiles()

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("rank") is not None:
                raise CheckpointError("per-rank DCP indexes are not written by gpuws")
            metadata = read_metadata(path, manifest)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader()


def _weights_only_bytes(base: type) -> type:
    """A DCP load planner whose non-tensor values load with `weights_only=True`."""

    class Planner(base):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            import torch
            from torch.distributed.checkpoint._traverse import set_element

            try:
                loaded = torch.load(value, weights_only=True)
            except Exception as err:
                raise CheckpointError(
                    f"{read_item.dest_index.fqn} holds a value that cannot be loaded safely: {err}"
                ) from None
            # DCP keeps flattened keys and, when it flattened the state dict, the mapping back.
            if self.flatten_state_dict:
                set_element(
                    self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded
                )
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    Planner.__name__ = f"WeightsOnly{base.__name__}"
    return Planner


def _load_planner() -> Any:
    from torch.distributed.checkpoint import DefaultLoadPlanner

    return _weights_only_bytes(DefaultLoadPlanner)()


# -- the tracked objects in DCP's form ---------------------------------------------------------


def owners(objects: dict[str, Any]) -> dict[str, str]:
    """For each tracked optimizer, the tracked model holding its parameters (DCP keys optimizer
    state by parameter names, which only the model knows)."""
    import torch

    models = {name: obj for name, obj in objects.items() if isinstance(obj, torch.nn.Module)}
    found: dict[str, str] = {}
    for name, obj in objects.items():
        if not isinstance(obj, torch.optim.Optimizer):
            continue
        first = next((p for group in obj.param_groups for p in group["params"]), None)
        owner = next(
            (
                m
                for m, model in models.items()
                if first is not None and any(p is first for p in model.parameters())
            ),
            None,
        )
        if owner is None:
            raise CheckpointError(
                f"gpuws.track: the optimizer {name!r} updates parameters of no tracked model: track the "
                "model too (model=..., optimizer=...), so its state can be saved by parameter name"
            )
        found[name] = owner
    return found


def is_plain(obj: Any) -> bool:
    """A plain value (no state_dict): kept per rank beside the DCP files, not in them."""
    return not (
        callable(getattr(obj, "state_dict", None))
        and callable(getattr(obj, "load_state_dict", None))
    )


def state_of(objects: dict[str, Any], owner: dict[str, str]) -> dict[str, Any]:
    """The tracked stateful objects as DCP saves and loads them: models and optimizers through
    DCP's state-dict helpers (DDP, FSDP2/DTensor, compiled and plain modules alike; optimizer
    state keyed by parameter name), anything else through its own state_dict()."""
    import torch
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    state: dict[str, Any] = {}
    for name, obj in objects.items():
        if isinstance(obj, torch.nn.Module):
            state[name] = get_model_state_dict(obj)
        elif isinstance(obj, torch.optim.Optimizer):
            state[name] = get_optimizer_state_dict(objects[owner[name]], obj)
        elif not is_plain(obj):
            state[name] = obj.state_dict()
    return state


def load(
    objects: dict[str, Any],
    owner: dict[str, str],
    path: Path,
    manifest: dict[str, Any],
    group: Any = None,
) -> None:
    """Load a DCP checkpoint folder into the tracked stateful objects, resharded by DCP to this
    run's world size and layout (every rank calls it; `group` None: a single process)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = state_of(objects, owner)
    try:
        with (
            warnings.catch_warnings()
        ):  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            dcp.load(
                state,
                storage_reader=_safe_reader(path, manifest),
                planner=_load_planner(),
                process_group=group,
                no_dist=group is None,
            )
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(
            f"Checkpoint {path.name} does not fit the tracked objects: {_first_line(err)}"
        ) from err
    for name, obj in objects.items():
        if name not in state:
            continue
        try:
            if isinstance(obj, torch.nn.Module):
                set_model_state_dict(obj, state[name])
            elif isinstance(obj, torch.optim.Optimizer):
                set_optimizer_state_dict(objects[owner[name]], obj, state[name])
            else:
                obj.load_state_dict(state[name])
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"Checkpoint {path.name} does not fit the tracked {name!r}: {_first_line(err)}"
            ) from err


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# -- export ------------------------------------------------------------------------------------


def _read_state(
    path: Path, manifest: dict[str, Any], names: list[str], only: list[str] | None
) -> dict[str, Any]:
    if manifest.get("kind") == KIND:
        # DCP's conversion, as dcp_to_torch_save runs it: a planner that builds the state from
        # the index (the public load() would fill a copy of an empty dict).
        from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        read_metadata(path, manifest)  # its refusal said here, in one line, not inside DCP's
        state: dict[str, Any] = {}
        planner = _weights_only_bytes(_EmptyStateDictLoadPlanner)(keys=set(only) if only else None)
        _load_state_dict(
            state, storage_reader=_safe_reader(path, manifest), planner=planner, no_dist=True
        )
        return state
    state, _ = read_checkpoint(path, manifest)
    return {k: v for k, v in state.items() if k in names}  # plain values are not model state


def export(
    path: Path, manifest: dict[str, Any], to: Path, only: list[str] | None = None
) -> dict[str, Any]:
    """Write one checkpoint's state as a single `torch.save` file (full tensors, no sharding,
    loads with `weights_only=True`): DCP's own conversion (what `dcp_to_torch_save` does) for a
    DCP checkpoint, the saved state for a single-process one. `only` keeps those tracked objects.

    Written under a temporary name and renamed: `to` is whole or untouched."""
    import torch

    names = list(manifest.get("objects") or [])
    unknown = [n for n in only or [] if n not in names]
    if unknown:
        raise CheckpointError(
            f"The checkpoint has no {', '.join(map(repr, unknown))} (it tracks {', '.join(names)})"
        )
    try:
        state = _read_state(path, manifest, names, only)
    except CheckpointError as err:
        raise CheckpointError(f"{path.name}: {err}") from None
    if only:
        state = {k: v for k, v in state.items() if k in only}
    to.parent.mkdir(parents=True, exist_ok=True)
    replace_whole(to, lambda f: torch.save(state, f))
    return state


def load_whole(
    objects: dict[str, Any], restored: dict[str, Any], path: Path, manifest: dict[str, Any]
) -> None:
    """A checkpoint of a distributed run resumed by one process without torch.distributed (a
    notebook on the single GPU of a free tier): DCP loads the whole state here, and rank 0's RNG
    states and plain values come back."""
    import torch

    load(objects, owners(objects), path, manifest, None)
    own = read_rank_file(path, manifest, 0)
    restore_rng(torch, own["rng"])
    restore_values(objects, restored, own.get("values", {}), path)
    saved_on = int(manifest.get("world_size", 1))
    if saved_on > 1:
        print(
            f"gpuws: checkpoint {path.name} was saved on {saved_on} ranks: loaded whole into this process, "
            "with rank 0's random states",
            flush=True,
        )


def restore_values(
    objects: dict[str, Any], restored: dict[str, Any], values: dict[str, Any], path: Path
) -> None:
    """The tracked plain values from a rank's file (DCP holds only the stateful objects)."""
    for name, obj in objects.items():
        if not is_plain(obj):
            continue
        if name not in values:
            raise CheckpointError(f"Checkpoint {path.name} has no state for {name!r}")
        restore_value(objects, restored, name, values[name])
