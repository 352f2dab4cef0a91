"""Writes a job as a Kubernetes Job that runs it against the same store and resumes it from its checkpoint.

The pod restores the workspace into an emptyDir at /work (an init container: `jupyter gpuws
restore --job ID`, which marks the job's start and brings its own files of an earlier attempt
too), then its container runs `jupyter gpuws sync --job ID -- COMMAND …`: the command, as a
child that gets the signals the container gets (gpuws.track() checkpoints on SIGTERM), and what
it creates or changes sent to the job's own area of the workspace every minute and when it ends
(elsewhere.py). The job never needs the lease of the runtime that exported it, which writes on
meanwhile; that runtime lists the job and brings its results home (bringhome.py).
`restartPolicy: OnFailure` restarts the container in the same pod, where /work and its newest
checkpoint still are; a new pod (the node lost) restores them from the store first. The store's
credentials come from a Secret named in the manifest, never written into it; the manifest's head
is a template of that Secret naming every variable the store reads.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ..checkpoints.files import RUN_ENV, plain_run_name
from ..store.redact import is_redacted, redact
from .elsewhere import new_job_id

WORKDIR = "/work"
# The record of what was restored, shared by the init container and the job's own: the job's
# sync then knows which files came from the store (outside /work, so it is not mirrored).
STATE_DIR = "/var/lib/gpuws"
SECRET = "gpuws-store"
# Where `ca.pem` (a store whose certificate the user's own CA signed) is mounted: from a Secret
# of its own (the credentials' name + CA_SUFFIX), as every key of the credentials' Secret
# becomes a variable (envFrom) and "ca.pem" is none.
CA_DIR = "/etc/gpuws/ca"
CA_KEY = "ca.pem"
CA_SUFFIX = "-ca"
# The system's CA bundles (Debian's, Red Hat's, Alpine's): every image has its own.
SYSTEM_CA_BUNDLES = frozenset(
    {
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    }
)
# Long enough for a checkpoint on SIGTERM and the sync after it.
GRACE_SECONDS = 300
# backoffLimit without --retries: a pod lost with its node, or one failure that retrying
# changes, is not the end of a long run (Kubernetes' own default is 6).
DEFAULT_RETRIES = 3
GPU = "nvidia.com/gpu"
DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class StoreVariable:
    """A variable of the Secret: its name, why the store needs it, where this machine's value of
    it is read when it is no secret (an endpoint, a region), and whether only some stores need it
    (left commented out in the template unless this machine has a value)."""

    name: str
    why: str = ""
    sources: tuple[str, ...] = ()
    optional: bool = False


# Every variable the store reads, per cloud (store/objectstore.py: obstore reads the cloud's
# usual ones, and the endpoint and CA bundle of an S3-compatible store).
STORE_VARIABLES: dict[str, list[StoreVariable]] = {
    "s3": [
        StoreVariable("AWS_ACCESS_KEY_ID", "the store's credentials"),
        StoreVariable("AWS_SECRET_ACCESS_KEY"),
        StoreVariable("AWS_SESSION_TOKEN", "only with temporary credentials", optional=True),
        StoreVariable(
            "AWS_ENDPOINT_URL",
            "an S3-compatible store (MinIO, SeaweedFS, Ceph), as the pod reaches it; none for AWS",
            ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            optional=True,
        ),
        StoreVariable(
            "AWS_DEFAULT_REGION", "the bucket's region", ("AWS_REGION", "AWS_DEFAULT_REGION")
        ),
        StoreVariable(
            "AWS_CA_BUNDLE",
            f"a store whose certificate your own CA signed: the CA's PEM goes under {CA_KEY} in "
            f"the Secret of the same name with {CA_SUFFIX}",
            ("AWS_CA_BUNDLE",),
            optional=True,
        ),
    ],
    "gs": [StoreVariable("GOOGLE_SERVICE_ACCOUNT_KEY", "the service account's JSON key, as text")],
    "az": [
        StoreVariable(
            "AZURE_STORAGE_ACCOUNT_NAME", "the storage account", ("AZURE_STORAGE_ACCOUNT_NAME",)
        ),
        StoreVariable("AZURE_STORAGE_ACCOUNT_KEY", "its key (or AZURE_STORAGE_SAS_KEY)"),
        StoreVariable(
            "AZURE_STORAGE_ENDPOINT",
            "another endpoint (Azurite)",
            ("AZURE_STORAGE_ENDPOINT",),
            optional=True,
        ),
    ],
}
# A store URL's scheme and the cloud whose variables it reads (store/objectstore.py's SCHEMES).
CLOUDS = {
    **dict.fromkeys(("s3", "s3a"), "s3"),
    **dict.fromkeys(("gs", "gcs"), "gs"),
    **dict.fromkeys(("az", "abfs", "abfss", "azure"), "az"),
}


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


def job_run(command: list[str], name: str | None, job_id: str) -> str:
    """The run a job exported as a cluster Job tracks, as a job of the server names it: its
    name, else its script's or notebook's and the end of its id; never another job's run unless
    `--resume` names it (export_k8s)."""
    if name and plain_run_name(name):
        return plain_run_name(name)
    script = next((word for word in command[1:] if word.endswith((".py", ".ipynb"))), command[0])
    return f"{plain_run_name(os.path.basename(script)) or 'job'}-{job_id[-4:]}"


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
    if redact(store_url) != store_url or is_redacted(store_url):
        raise ManifestError(
            f"The store URL {redact(store_url)} holds a secret, which a Job's manifest would show "
            "to anyone who can read it: give the store's credentials in the Secret (--secret) "
            "and --store URL without them"
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
    retries: int | None = None,
    secret: str = SECRET,
    cwd: str = "",
    encrypted: bool = False,
    job_id: str | None = None,
    run: str | None = None,
) -> dict[str, Any]:
    """A `batch/v1` Job running `command` in `image` on the workspace's files from the store:
    restored first, what it creates or changes sent to its own area of the workspace while it
    runs and when it ends; `retries` more attempts (backoffLimit, DEFAULT_RETRIES when None),
    `gpus` NVIDIA GPUs, the store's credentials from the Secret `secret` (its keys become
    variables: secret_template). `cwd`: the job's folder inside the work directory; `encrypted`:
    the workspace is (its passphrase is the Secret's GPUWS_PASSPHRASE); `job_id`: its id, the
    name of its area (a new one when None); `run`: the checkpoint run it tracks (GPUWS_RUN, as a
    job of the server: job_run), a new one of its own when None. `name` is made a DNS-1123 label (job_name)."""
    retries = DEFAULT_RETRIES if retries is None else retries
    _check(command, store_url, workspace, image, gpus, retries, secret, cwd)
    label = job_name(name)
    job_id = job_id or new_job_id()
    run = run or job_run(command, None, job_id)
    env = [
        {"name": "GPUWS_STORE", "value": store_url},
        {"name": "GPUWS_WORKSPACE", "value": workspace},
        {"name": "GPUWS_WORKDIR", "value": WORKDIR},
        {"name": "GPUWS_STATE_DIR", "value": STATE_DIR},
    ]
    where = [
        "--job",
        job_id,
        "--workdir",
        WORKDIR,
        "--state-dir",
        STATE_DIR,
        "--store",
        store_url,
        "--workspace",
        workspace,
        *(["--encrypt"] if encrypted else []),
    ]
    shared: dict[str, Any] = {
        "image": image,
        "env": env,
        "envFrom": [{"secretRef": {"name": secret}}],
        "volumeMounts": [
            {"name": "work", "mountPath": WORKDIR},
            {"name": "gpuws-state", "mountPath": STATE_DIR},
            {"name": "store-ca", "mountPath": CA_DIR, "readOnly": True},
        ],
    }
    restore = {"name": "restore", **shared, "command": ["jupyter", "gpuws", "restore", *where]}
    job: dict[str, Any] = {
        "name": "job",
        **shared,
        "env": [
            *env,
            {"name": "GPUWS_JOB_ID", "value": job_id},
            {"name": RUN_ENV, "value": run},
        ],
        "command": ["jupyter", "gpuws", "sync", *where, "--name", name, "--", *command],
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
            "annotations": {"gpuws/workspace": workspace, "gpuws/job-id": job_id},
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
                        {
                            # the CA's Secret, where there is one (optional: most stores need none)
                            "name": "store-ca",
                            "secret": {
                                "secretName": secret + CA_SUFFIX,
                                "optional": True,
                                "items": [{"key": CA_KEY, "path": CA_KEY}],
                            },
                        },
                    ],
                },
            },
        },
    }


def secret_template(
    secret: str, store_url: str, encrypted: bool, environ: Mapping[str, str] = os.environ
) -> str:
    """The Secret the job reads the store's settings from, as comment lines: without their
    leading `# ` they are its YAML. Every variable the store reads is named (STORE_VARIABLES):
    what is no secret and this machine has (an endpoint, a region) filled in, the rest left for
    the user ("…"), and what only some stores need commented out unless this machine uses it."""
    cloud = CLOUDS.get(store_url.partition("://")[0].lower(), "")
    ca_lines: list[str] = []
    lines = [
        "apiVersion: v1",
        "kind: Secret",
        "metadata:",
        f"  name: {secret}",
        "type: Opaque",
        "stringData:",
    ]

    def entry(name: str, value: str, why: str, used: bool) -> None:
        note = f"  # {why}" if why else ""
        value_text = json.dumps(value, ensure_ascii=False)
        lines.append(f"  {'' if used else '# '}{name}: {value_text}{note}")

    endpoint = next(
        (environ[s] for s in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if environ.get(s)), ""
    )
    for variable in STORE_VARIABLES.get(cloud, []):
        known = next((environ[s] for s in variable.sources if environ.get(s)), None)
        if variable.name == "AWS_ENDPOINT_URL" and known and _loopback(known):
            # This machine's own address: a pod reaches the store elsewhere, or not at all.
            entry(
                variable.name,
                "…",
                f"the address the cluster reaches the store at (here it is {known}, this "
                "machine's own, which no pod reaches)",
                True,
            )
            continue
        if variable.name == "AWS_CA_BUNDLE":
            # A system bundle is the image's own; only a CA of the user's, for an https
            # endpoint, goes with the pod.
            if known and (known in SYSTEM_CA_BUNDLES or not endpoint.lower().startswith("https:")):
                known = None
            # Where this machine uses one, the pod will too: the same certificate, as a file.
            entry(variable.name, f"{CA_DIR}/{CA_KEY}", variable.why, known is not None)
            if known:  # its PEM in a Secret of its own, which the manifest mounts
                ca_lines = [
                    "",
                    f"# The CA, in a Secret of its own (kubectl apply -f ca.yaml): the PEM of {known},",
                    "# as this machine uses it.",
                    "apiVersion: v1",
                    "kind: Secret",
                    "metadata:",
                    f"  name: {secret}{CA_SUFFIX}",
                    "type: Opaque",
                    "stringData:",
                    f"  {CA_KEY}: {json.dumps('-----BEGIN CERTIFICATE-----' + chr(10) + '…', ensure_ascii=False)}",
                ]
            continue
        entry(variable.name, known or "…", variable.why, known is not None or not variable.optional)
    if encrypted:
        entry("GPUWS_PASSPHRASE", "…", "the encrypted workspace's passphrase", True)
    return "\n".join(f"# {line}".rstrip() for line in [*lines, *ca_lines])


def _loopback(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def manifest_yaml(manifest: dict[str, Any], secret: str | None = None) -> str:
    """The manifest as `kubectl apply -f -` takes it, with lines saying how, and the Secret it
    reads as a commented template."""
    name = manifest["metadata"]["name"]
    job_id = manifest["metadata"]["annotations"].get("gpuws/job-id", "")
    secret_name = manifest["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["secretRef"][
        "name"
    ]
    head = [
        f"# The job {name} ({job_id}) on a Kubernetes cluster, against the workspace's store "
        "(`jupyter gpuws run --export k8s`).",
        f"# First the Secret {secret_name}, with every variable the store reads: this template without "
        "its '# ', the values filled in",
        "# (kubectl apply -f secret.yaml). Then: kubectl apply -f THIS. The runtime lists the job "
        f"and brings its results home: jupyter gpuws jobs --bring-home {job_id}",
        "#",
    ]
    if secret is not None:
        head += [secret, "#"]
    return (
        "\n".join(head)
        + "\n"
        + yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)
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
    job_id = new_job_id()
    manifest = job_manifest(
        argv,
        name=getattr(args, "name", None) or default_name(argv or ["job"]),
        job_id=job_id,
        run=getattr(args, "resume", None) or job_run(argv, getattr(args, "name", None), job_id),
        store_url=getattr(args, "store", None) or "",
        workspace=getattr(args, "workspace", None) or "",
        image=getattr(args, "image", None) or "",
        gpus=getattr(args, "gpus", None),
        retries=getattr(args, "retries", None),
        secret=getattr(args, "secret", None) or SECRET,
        cwd=getattr(args, "cwd", None) or "",
        encrypted=bool(getattr(args, "encrypt", False)),
    )
    secret = secret_template(
        manifest["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["secretRef"]["name"],
        getattr(args, "store", None) or "",
        bool(getattr(args, "encrypt", False)),
    )
    return manifest_yaml(manifest, secret)
