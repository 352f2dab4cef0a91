"""`jupyter gpuws run … --export k8s`: the Job manifest read back by the Kubernetes client's own
models, its name made a DNS-1123 label, bad input refused, the Secret it reads named in full, and
its containers' commands run here against a local store: the restore, then the job, whose files
reach its own area of the workspace however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, V1Job

from jupyter_gpu_ws.userjobs.elsewhere import JOB_ID
from jupyter_gpu_ws.userjobs.k8s import (
    CA_DIR,
    CA_KEY,
    DEFAULT_RETRIES,
    DNS_LABEL,
    STATE_DIR,
    WORKDIR,
    ManifestError,
    export_k8s,
    job_manifest,
)
from tests.waiting import until

STORE = "s3://bucket/me"
JOB = "j-0123456789ab"
COMMAND = ["python", "train.py", "--lr", "0.1"]


def read_back(text: str) -> V1Job:
    """The manifest as the Kubernetes client reads an API server's answer into its models (its
    own deserializer: the public deserialize() wants a response and its signature changes)."""
    job = ApiClient()._ApiClient__deserialize(yaml.safe_load(text), "V1Job")  # type: ignore[attr-defined]
    assert isinstance(job, V1Job)
    return job


def run_args(**options: Any) -> Namespace:
    """The run command's options, as `jupyter gpuws run` parses and resolves them."""
    defaults = {
        "name": None,
        "retries": 2,
        "gpus": 4,
        "cwd": "",
        "store": STORE,
        "workspace": "me-work",
        "image": "registry.example/train:1",
        "secret": "store-credentials",
        "export": "k8s",
    }
    return Namespace(**{**defaults, **options})


def test_the_manifest_read_back_by_the_kubernetes_client_has_the_command_gpus_retries_and_restore() -> (
    None
):
    job = read_back(export_k8s(COMMAND, run_args()))
    assert job.api_version == "batch/v1" and job.kind == "Job" and job.metadata.name == "train"
    assert job.spec.backoff_limit == 2
    job_id = job.metadata.annotations["gpuws/job-id"]
    assert JOB_ID.match(job_id)
    pod = job.spec.template.spec
    assert pod.restart_policy == "OnFailure"
    [restore] = pod.init_containers
    assert restore.command[:5] == ["jupyter", "gpuws", "restore", "--job", job_id]
    options = restore.command[5:]
    assert dict(zip(options[::2], options[1::2], strict=True)) == {
        "--workdir": WORKDIR,
        "--state-dir": STATE_DIR,
        "--store": STORE,
        "--workspace": "me-work",
    }
    [main] = pod.containers
    assert main.command[:5] == ["jupyter", "gpuws", "sync", "--job", job_id]
    assert main.command[5:] == [*options, "--name", "train", "--", *COMMAND]
    assert main.image == "registry.example/train:1"
    assert int(main.resources.limits["nvidia.com/gpu"]) == 4
    env = {e.name: e.value for e in main.env}
    assert env["GPUWS_WORKDIR"] == WORKDIR
    # A run of its own, as a job of the server would have: its script and the end of its id.
    assert env["GPUWS_RUN"] == f"train.py-{job_id[-4:]}"
    for container in (restore, main):  # the credentials by the Secret's name, never their values
        assert [source.secret_ref.name for source in container.env_from] == ["store-credentials"]
        assert {m.mount_path for m in container.volume_mounts} == {WORKDIR, STATE_DIR, CA_DIR}
    assert {v.name for v in pod.volumes if v.empty_dir is not None} == {"work", "gpuws-state"}
    [ca] = [v.secret for v in pod.volumes if v.secret is not None]
    assert ca.secret_name == "store-credentials-ca" and ca.optional  # most stores need no CA


@pytest.mark.parametrize(
    ("options", "run"), [({"name": "big run"}, "big-run"), ({"resume": "trainA"}, "trainA")]
)
def test_the_pods_run_is_the_jobs_name_or_the_run_it_resumes(
    options: dict[str, Any], run: str
) -> None:
    [main] = read_back(export_k8s(COMMAND, run_args(**options))).spec.template.spec.containers
    assert {e.name: e.value for e in main.env}["GPUWS_RUN"] == run


def secret_of(text: str) -> dict[str, Any]:
    """The Secret template at the manifest's head, as the user takes it: its lines without '# '."""
    lines = text.split("\n")
    start = lines.index("# apiVersion: v1")
    end = lines.index("#", start)
    secret = yaml.safe_load("\n".join(line[2:] for line in lines[start:end]))
    assert secret["kind"] == "Secret"
    return dict(secret)


def test_the_secret_template_names_every_variable_of_an_s3_compatible_store_with_this_machines_endpoint_region_and_ca(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://seaweed.store:8333")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "ca.pem"))
    text = export_k8s(COMMAND, run_args(encrypt=True))
    secret = secret_of(text)
    assert secret["metadata"]["name"] == "store-credentials"
    data = secret["stringData"]
    assert data["AWS_ENDPOINT_URL"] == "https://seaweed.store:8333"
    assert data["AWS_DEFAULT_REGION"] == "eu-west-3"
    # The pod's CA bundle: the CA Secret's ca.pem, where the manifest mounts it. Not a key of the
    # credentials' Secret, whose every key becomes a variable (envFrom): "ca.pem" is none.
    assert data["AWS_CA_BUNDLE"] == f"{CA_DIR}/{CA_KEY}" and CA_KEY not in data
    lines = text.split("\n")
    start = lines.index("# apiVersion: v1", lines.index("# apiVersion: v1") + 1)  # the second
    end = lines.index("#", start)
    ca_secret = yaml.safe_load("\n".join(line[2:] for line in lines[start:end]))
    assert ca_secret["kind"] == "Secret" and list(ca_secret["stringData"]) == [CA_KEY]
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GPUWS_PASSPHRASE"} <= set(data)
    assert "AWS_SESSION_TOKEN" in text  # named, commented out: only temporary credentials have one
    pod = read_back(text).spec.template.spec
    [ca] = [v.secret for v in pod.volumes if v.secret is not None]
    assert [(item.key, item.path) for item in ca.items] == [(CA_KEY, CA_KEY)]


def test_without_an_endpoint_or_ca_here_the_template_still_names_them_for_the_user_to_fill_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_CA_BUNDLE",
    ):
        monkeypatch.delenv(name, raising=False)
    text = export_k8s(COMMAND, run_args())
    data = secret_of(text)["stringData"]
    assert data["AWS_DEFAULT_REGION"] == "…"  # every store needs a region: left to fill in
    assert "AWS_ENDPOINT_URL" not in data and "AWS_CA_BUNDLE" not in data
    assert "#   # AWS_ENDPOINT_URL:" in text and "#   # AWS_CA_BUNDLE:" in text


@pytest.mark.parametrize(
    ("endpoint", "bundle"),
    [
        ("http://127.0.0.1:8333", "/tmp/own-ca.pem"),  # no TLS: no CA to carry
        ("https://localhost:8333", "/etc/ssl/certs/ca-certificates.crt"),  # the system's own
    ],
)
def test_an_endpoint_no_pod_reaches_is_left_to_fill_in_and_a_ca_it_needs_not_is_left_out(
    monkeypatch: pytest.MonkeyPatch, endpoint: str, bundle: str
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_CA_BUNDLE", bundle)
    text = export_k8s(COMMAND, run_args())
    data = secret_of(text)["stringData"]
    assert data["AWS_ENDPOINT_URL"] == "…"
    assert f"(here it is {endpoint}, this machine's own, which no pod reaches)" in text
    assert "AWS_CA_BUNDLE" not in data and "#   # AWS_CA_BUNDLE:" in text
    assert "-----BEGIN CERTIFICATE-----" not in text  # no CA Secret offered


def test_no_gpus_asked_for_is_no_gpu_limit_and_no_retries_asked_for_is_the_default_backoff() -> (
    None
):
    job = read_back(export_k8s(COMMAND, run_args(gpus=None, retries=None)))
    assert job.spec.template.spec.containers[0].resources is None
    assert job.spec.backoff_limit == DEFAULT_RETRIES
    assert read_back(export_k8s(COMMAND, run_args(retries=0))).spec.backoff_limit == 0


def test_an_encrypted_workspace_is_restored_and_synced_with_the_secrets_passphrase() -> None:
    pod = read_back(export_k8s(COMMAND, run_args(encrypt=True))).spec.template.spec
    assert pod.init_containers[0].command[-1] == "--encrypt"
    main = pod.containers[0].command
    assert "--encrypt" in main[: main.index("--")]
    plain = read_back(export_k8s(COMMAND, run_args())).spec.template.spec
    assert "--encrypt" not in plain.init_containers[0].command + plain.containers[0].command


def test_a_notebook_job_run_by_this_machines_interpreter_runs_the_images_python() -> None:
    argv = [
        sys.executable,
        "-m",
        "jupyter_gpu_ws.userjobs.notebook",
        "experiments/Train Model.ipynb",
    ]
    job = read_back(export_k8s(argv, run_args()))
    assert job.metadata.name == "train-model"
    assert job.spec.template.spec.containers[0].command[-4:] == ["python", *argv[1:]]


@pytest.mark.parametrize(
    "name, label",
    [
        ("Train_ResNet 50!", "train-resnet-50"),
        ("-x-", "x"),
        ("a" * 70 + "-b", "a" * 63),
    ],
)
def test_a_name_that_is_not_a_dns_label_is_normalised(name: str, label: str) -> None:
    job = read_back(export_k8s(COMMAND, run_args(name=name)))
    assert job.metadata.name == label and DNS_LABEL.match(label)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": "___"}, "has no letter or digit"),
        ({"store": "/home/me/store"}, "is a folder on this machine"),
        ({"store": "file:///home/me/store"}, "is a folder on this machine"),
        ({"store": "az://box/p?sv=1&sig=S3CRET"}, r"az://box/p\?sv=1&sig=\*\*\* holds a secret"),
        ({"store": "s3://u:***@b/p"}, "holds a secret"),  # as a server shows it: unusable
        ({"image": None}, "Name the image the job runs in with --image"),
        ({"gpus": -1}, "GPUs must be a whole number"),
        ({"secret": "Store Credentials"}, "Not a Kubernetes Secret name"),
        ({"cwd": "../elsewhere"}, "is not inside the work directory"),
    ],
)
def test_bad_input_is_refused_in_one_line(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message) as caught:
        export_k8s(COMMAND, run_args(**change))
    assert "\n" not in str(caught.value)


# The containers' own commands, run on this machine: the same words, with the pod's paths moved
# into a temporary folder and the store a local one.
def gpuws_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GPUWS_STORE": str(tmp_path / "store"),
        "GPUWS_WORKSPACE": "ws",
        "GPUWS_WORKDIR": str(tmp_path / "pod-work"),
        "GPUWS_STATE_DIR": str(tmp_path / "pod-state"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
    }


def here(words: list[str], tmp_path: Path) -> list[str]:
    moved = {
        WORKDIR: str(tmp_path / "pod-work"),
        STATE_DIR: str(tmp_path / "pod-state"),
        STORE: str(tmp_path / "store"),
    }
    return [moved.get(word, word) for word in words]


@pytest.fixture
def pod(tmp_path: Path) -> dict[str, Any]:
    """A workspace in the store with a training script and its checkpoint (what the notebook
    runtime left), and the pod's containers, the init container's restore already run."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "train.py").write_text("print('training')\n")
    (runtime / "checkpoint.txt").write_text("step 10")
    (tmp_path / "store").mkdir()
    env = gpuws_env(tmp_path)
    seeded = subprocess.run(
        [
            "jupyter",
            "gpuws",
            "sync",
            "--once",
            "--workdir",
            runtime,
            "--store",
            tmp_path / "store",
            "--workspace",
            "ws",
            "--state-dir",
            tmp_path / "runtime-state",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seeded.returncode == 0, seeded.stderr
    manifest = job_manifest(
        ["placeholder"], name="train", store_url=STORE, workspace="ws", image="i:1", job_id=JOB
    )
    spec = manifest["spec"]["template"]["spec"]
    restored = subprocess.run(
        here(spec["initContainers"][0]["command"], tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restored.returncode == 0, restored.stderr
    assert (tmp_path / "pod-work" / "checkpoint.txt").read_text() == "step 10"
    job = here(spec["containers"][0]["command"], tmp_path)
    return {
        "env": env,
        "wrapper": job[: job.index("--") + 1],
        "work": tmp_path / "pod-work",
        "store": tmp_path / "store" / "ws" / ".gpuws" / "elsewhere" / JOB / "files",
        "workspace": tmp_path / "store" / "ws" / "files",
    }


def test_a_failing_job_exits_with_its_status_and_its_newest_checkpoint_reaches_its_area(
    pod: dict[str, Any],
) -> None:
    step = "from pathlib import Path; Path('checkpoint.txt').write_text('step 20'); raise SystemExit(3)"
    done = subprocess.run(
        [*pod["wrapper"], sys.executable, "-c", step],
        cwd=pod["work"],
        env=pod["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stderr
    assert (pod["store"] / "checkpoint.txt").read_text() == "step 20"
    assert not (pod["store"] / "train.py").exists()  # what it began from is not sent again
    assert (pod["workspace"] / "checkpoint.txt").read_text() == "step 10"  # the runtime's own


def test_a_sigterm_reaches_the_job_which_checkpoints_and_is_sent_before_the_container_ends(
    pod: dict[str, Any],
) -> None:
    job = (
        "import signal, sys, time\nfrom pathlib import Path\n"
        "def stop(*_):\n    Path('checkpoint.txt').write_text('step 42')\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nPath('started').write_text('')\ntime.sleep(300)\n"
    )
    container = subprocess.Popen(
        [*pod["wrapper"], sys.executable, "-c", job],
        cwd=pod["work"],
        env=pod["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(
            lambda: (pod["work"] / "started").exists() or container.poll() is not None,
            120,
            "the job started in the container",
        )
        container.send_signal(
            signal.SIGTERM
        )  # what the kubelet sends the container's first process
        _, stderr = container.communicate(timeout=300)
    finally:
        container.kill()
    assert container.returncode == 0, stderr
    assert (pod["store"] / "checkpoint.txt").read_text() == "step 42"


def test_run_with_export_k8s_prints_the_job_and_runs_nothing(tmp_path: Path) -> None:
    """The command line: `jupyter gpuws run … --export k8s` prints a Job the client reads back,
    with the command after `--`; without a store and no server to ask, one line and exit 2."""
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    base = [
        sys.executable,
        "-m",
        "jupyter_gpu_ws.cli",
        "run",
        "--export",
        "k8s",
        "--image",
        "registry.example/t:1",
        "--name",
        "train",
        "--retries",
        "2",
        "--gpus",
        "1",
    ]
    done = subprocess.run(
        [*base, "--store", STORE, "--workspace", "me", "--", *COMMAND],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    job = read_back(done.stdout)
    main = job.spec.template.spec.containers[0]
    assert main.command[-len(COMMAND) :] == COMMAND
    assert job.spec.backoff_limit == 2 and main.resources.limits["nvidia.com/gpu"] == "1"
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing run, nothing written here
    refused = subprocess.run(
        [*base, "--", *COMMAND], capture_output=True, text=True, env=env, cwd=tmp_path, check=False
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert (
        len(refused.stderr.strip().splitlines()) == 1
        and "--store URL --workspace NAME" in refused.stderr
    )
