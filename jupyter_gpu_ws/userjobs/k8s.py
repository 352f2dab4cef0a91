"""Writes a job as a Kubernetes Job that runs it against the same store and resumes it from its checkpoint.

The pod restores the workspace into an emptyDir at /work (an init container), runs the command
there with GPUWS_WORKDIR=/work, and syncs /work back to the store when the command ends, however
it ends: the command runs as a child of a small shell that passes SIGTERM on (gpuws.track()
checkpoints on it) and syncs after. `restartPolicy: OnFailure` restarts the container in the same
pod, where /work and its newest checkpoint still are; a new pod (the node lost) restores them
from the store first. The store's credentials come from a Secret named in the manifest, never
written into it.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

WORKDIR = "/work"
# The record of what was restored, shared by the init container and the job's own: the sync at
# the end then knows which files came from the store (outside /work, so it is not mirrored).
STATE_DIR = "/var/lib/gpuws"
SECRET = "gpuws-store"
# Long enough for a checkpoint on SIGTERM and the sync after it.
GRACE_SECONDS = 300
GPU = "nvidia.com/gpu"
DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$")

# `sh -c SCRIPT NAME COMMAND…`: the command arrives as "$@", so no word of it is read by the
# shell. A signal makes `wait` return early: the loop waits again for the command's own exit.
# A failed sync fails a job that succeeded, so that the container runs again and syncs.
WRAPPER = """\
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"; status=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
jupyter gpuws sync --once --take-over{encrypt} --workdir "$GPUWS_WORKDIR" --state-dir "$GPUWS_STATE_DIR" \\
  --store "$GPUWS_STORE" --workspace "$GPUWS_WORKSPACE" || {{ [ "$status" -ne 0 ] || status=1; }}
exit "$status"
"""


class _Dumper(yaml.SafeDumper):
    """YAML as people write manifests: no anchors for shared parts, scripts as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    )


_Dumper.add_representer(str, _text)


class ManifestError(ValueError):
    """What the manifest cannot be made of, in one line (bad input)."""


def job_name(name: str) -> str:
    """`name` as a DNS-1123 label, which a Job's name must be: lower case, runs of anything
    else made one '-', at most 63 characters. ManifestError when nothing is left."""
    label = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    if not DNS_LABEL.match(label):
        raise ManifestError(
            f"The job name {name!r} has no letter or digit to make a Kubernetes name of"
        )
    return label


def default_name(command: list[str]) -> str:
    """The job's name from its command: the script or notebook it runs (`python train.py` ->
    `train`), else the program."""
    script = next((word for word in command[1:] if word.endswith((".py", ".ipynb"))), command[0])
    return os.path.splitext(os.path.basename(script))[0] or "job"


def _check(
    command: list[str],
    store_url: str,
    workspace: str,
    image: str,
    gpus: int | None,
    retries: int,
    secret: str,
    cwd: str,
) -> None:
    if not command or not all(
        isinstance(word, str) and word and "\0" not in word for word in command
    ):
        raise ManifestError("The job has no command (give it after --: run -- python train.py)")
    if not store_url or "://" not in store_url or store_url.startswith("file://"):
        raise ManifestError(
            f"The store {store_url or '(none)'} is a folder on this machine, which the cluster's pods "
            "cannot reach: give an s3://, gs:// or az:// store"
        )
    if not workspace or "/" in workspace or not workspace.isprintable():
        raise ManifestError(f"Not a workspace name: {workspace!r}")
    if not image or not image.isprintable() or any(ch.isspace() for ch in image):
        raise ManifestError(
            "Name the image the job runs in with --image (build one from "
            "`jupyter gpuws env export --format dockerfile`)"
        )
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise ManifestError(f"GPUs must be a whole number, 0 or more: {gpus!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ManifestError(f"Retries must be a whole number, 0 or more: {retries!r}")
    if not DNS_SUBDOMAIN.match(secret):
        raise ManifestError(
            f"Not a Kubernetes Secret name: {secret!r} (lower case letters, digits, '-' and '.')"
        )
    parts = cwd.replace(os.sep, "/").split("/") if cwd else []
    if cwd.startswith("/") or ".." in parts or not cwd.isprintable():
        raise ManifestError(f"The job's folder {cwd!r} is not inside the work directory")


def job_manifest(
    command: list[str],
    *,
    name: str,
    store_url: str,
    workspace: str,
    image: str,
    gpus: int | None = None,
    retries: int = 0,
    secret: str = SECRET,
    cwd: str = "",
    encrypted: bool = False,
) -> dict[str, Any]:
    """A `batch/v1` Job running `command` in `image` on the workspace's files from the store:
    restored first, synced back when it ends; `retries` more attempts (backoffLimit), `gpus`
    NVIDIA GPUs, the store's credentials from the Secret `secret` (its keys become variables:
    AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, GPUWS_PASSPHRASE, …). `cwd`: the job's
    folder inside the work directory; `encrypted`: the workspace is (its passphrase is the
    Secret's GPUWS_PASSPHRASE). `name` is made a DNS-1123 label (job_name)."""
    _check(command, store_url, workspace, image, gpus, retries, secret, cwd)
    label = job_name(name)
    env = [
        {"name": "GPUWS_STORE", "value": store_url},
        {"name": "GPUWS_WORKSPACE", "value": workspace},
        {"name": "GPUWS_WORKDIR", "value": WORKDIR},
        {"name": "GPUWS_STATE_DIR", "value": STATE_DIR},
    ]
    shared: dict[str, Any] = {
        "image": image,
        "env": env,
        "envFrom": [{"secretRef": {"name": secret}}],
        "volumeMounts": [
            {"name": "work", "mountPath": WORKDIR},
            {"name": "gpuws-state", "mountPath": STATE_DIR},
        ],
    }
    restore = {
        "name": "restore",
        **shared,
        "command": [
            "jupyter",
            "gpuws",
            "restore",
            "--workdir",
            WORKDIR,
            "--state-dir",
            STATE_DIR,
            "--store",
            store_url,
            "--workspace",
            workspace,
            *(["--encrypt"] if encrypted else []),
        ],
    }
    script = WRAPPER.format(encrypt=" --encrypt" if encrypted else "")
    job: dict[str, Any] = {
        "name": "job",
        **shared,
        "command": ["/bin/sh", "-c", script, label, *command],
        "workingDir": f"{WORKDIR}/{cwd.strip('/')}".rstrip("/"),
    }
    if gpus:
        job["resources"] = {"limits": {GPU: str(gpus)}}  # a quantity: the API takes it as text
    labels = {"app.kubernetes.io/name": label, "app.kubernetes.io/managed-by": "jupyter-gpuws"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": label,
            "labels": labels,
            "annotations": {"gpuws/workspace": workspace},
        },
        "spec": {
            "backoffLimit": retries,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "terminationGracePeriodSeconds": GRACE_SECONDS,
                    "initContainers": [restore],
                    "containers": [job],
                    "volumes": [
                        {"name": "work", "emptyDir": {}},
                        {"name": "gpuws-state", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def manifest_yaml(manifest: dict[str, Any]) -> str:
    """The manifest as `kubectl apply -f -` takes it, with a line saying how."""
    name = manifest["metadata"]["name"]
    secret = manifest["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["secretRef"][
        "name"
    ]
    head = (
        f"# The job {name} on a Kubernetes cluster, against the workspace's store (`jupyter gpuws run "
        "--export k8s`).\n"
        f"# Create the Secret {secret} with the store's credentials first, then: kubectl apply -f THIS\n"
    )
    return head + yaml.dump(
        manifest, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000
    )


def add_k8s_arguments(parser: Any) -> None:
    """The flags of `jupyter gpuws run` that export_k8s reads."""
    parser.add_argument(
        "--export",
        choices=["k8s"],
        default=None,
        help="print the job as a Kubernetes Job manifest instead of running it here",
    )
    parser.add_argument(
        "--image",
        default=None,
        help="with --export k8s: the image the job runs in (one built from `jupyter gpuws env "
        "export --format dockerfile`)",
    )
    parser.add_argument(
        "--secret",
        default=SECRET,
        help=f"with --export k8s: the Secret holding the store's credentials (default: {SECRET})",
    )


def export_k8s(argv: list[str], args: Any) -> str:
    """`jupyter gpuws run … --export k8s`: the manifest's YAML for the command `argv` with the
    run command's options (name, retries, gpus, cwd, image, secret) and its resolved store
    and workspace. An interpreter named by its path here (a job's sys.executable) is the
    image's `python`: the path is this machine's."""
    argv = list(argv)
    if argv and os.path.isabs(argv[0]) and os.path.basename(argv[0]).startswith("python"):
        argv[0] = "python"
    manifest = job_manifest(
        argv,
        name=getattr(args, "name", None) or default_name(argv or ["job"]),
        store_url=getattr(args, "store", None) or "",
        workspace=getattr(args, "workspace", None) or "",
        image=getattr(args, "image", None) or "",
        gpus=getattr(args, "gpus", None),
        retries=getattr(args, "retries", None) or 0,
        secret=getattr(args, "secret", None) or SECRET,
        cwd=getattr(args, "cwd", None) or "",
        encrypted=bool(getattr(args, "encrypt", False)),
    )
    return manifest_yaml(manifest)
