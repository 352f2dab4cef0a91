"""A real JupyterHub for the tests, all on 127.0.0.1: configurable-http-proxy from npm, local
processes as the single-user servers (stopped the way Kubernetes stops a pod: SIGTERM, the
grace, SIGKILL), jupyterhub-idle-culler as a hub service. Everything variable comes from the
JSON in GPUWS_HUB_TEST, written by tests/hub/conftest.py."""

# ruff: noqa: F821 - `c` is JupyterHub's configuration object

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from jupyterhub.spawner import SimpleLocalProcessSpawner

test = json.loads(os.environ["GPUWS_HUB_TEST"])
folder = Path(test["folder"])


class PodLikeSpawner(SimpleLocalProcessSpawner):
    """Each start gets a new, empty home and work directory (a new pod); a stop is SIGTERM, the
    grace, then SIGKILL, as Kubernetes deletes a pod (a local spawner would send SIGINT first)."""

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=True)


def new_pod(spawner: PodLikeSpawner) -> None:
    """A fresh work directory, runtime and data folder for this start, recorded for the test."""
    user = spawner.user.name
    starts = folder / "starts" / user
    starts.mkdir(parents=True, exist_ok=True)
    number = len(list(starts.iterdir())) + 1
    pod = starts / str(number)
    home = pod / "home" / user  # the same folder name at every start, as /home/jovyan is
    for path in (home, pod / "runtime", pod / "data", pod / "config"):
        path.mkdir(parents=True)
    (pod / "config" / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {"allow_root": True},
                "GpuWorkspace": {
                    "store_url": test["store_url"],
                    "hub_poll_interval": 1.0,
                    "sample_interval": 0.5,
                    "hub_cull_warning": test["cull_warning"],
                    "env_snapshot_on_persist": False,
                    "sync_debounce": 0.2,
                },
            }
        )
    )
    spawner.home_dir_template = str(home)
    spawner.notebook_dir = str(home)
    spawner.environment = {
        **test["environment"],
        **test.get("user_environment", {}).get(user, {}),
        "JUPYTER_RUNTIME_DIR": str(pod / "runtime"),
        "JUPYTER_DATA_DIR": str(pod / "data"),
        "JUPYTER_CONFIG_DIR": str(pod / "config"),
        # The single-user server tells the hub of its activity this often (300 s by default).
        "JUPYTERHUB_ACTIVITY_INTERVAL": "2",
    }


c.JupyterHub.bind_url = f"http://127.0.0.1:{test['proxy_port']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{test['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{test['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [test["chp"]]
c.JupyterHub.db_url = f"sqlite:///{folder / 'hub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(folder / "cookie_secret")
c.JupyterHub.pid_file = str(folder / "hub.pid")
c.JupyterHub.last_activity_interval = 2
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True

c.JupyterHub.spawner_class = PodLikeSpawner
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.pre_spawn_hook = new_pod
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.LocalProcessSpawner.term_timeout = int(test["grace"])  # the pod's grace
# The server's own token may read its start and last activity at the hub (a deployment that
# wants the hub's times in the countdown grants the same).
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "read:servers!user",
    "access:servers!server",
]

c.JupyterHub.services = [
    {"name": "tester", "api_token": test["token"]},
    {
        "name": "idle-culler",
        "command": [
            sys.executable,
            "-m",
            "jupyterhub_idle_culler",
            f"--timeout={test['cull_timeout']}",
            f"--cull-every={test['cull_every']}",
        ],
    },
]
c.JupyterHub.load_roles = [
    {
        "name": "tester",
        "services": ["tester"],
        "scopes": ["admin:users", "admin:servers", "access:servers", "read:hub"],
    },
    {
        "name": "idle-culler",
        "services": ["idle-culler"],
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    },
]
