"""jupyter_gpu_ws: make an ephemeral GPU runtime feel like a persistent workstation."""

from __future__ import annotations

from typing import Any

try:
    from ._version import __version__
except ImportError:  # a source checkout that was never built
    import warnings

    warnings.warn("Importing 'jupyter_gpu_ws' outside a proper installation.", stacklevel=2)
    __version__ = "dev"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter_gpu_ws"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import GpuWorkspaceApp

    return [{"module": "jupyter_gpu_ws", "app": GpuWorkspaceApp}]
