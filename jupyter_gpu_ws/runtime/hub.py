"""Where the server runs: a JupyterHub single-user server, a Kubernetes pod; the hub's view of
this server read with the server's own token, and activity reported to the hub on purpose."""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import string
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger(__name__)

STORE_FIELDS = ("username", "servername")
# Characters kept as they are in a user or server name put into a store URL; anything else
# (a '/', a ':', the escape character '-' itself) becomes '-' and two hex digits per byte, as
# KubeSpawner names pods, so a name never climbs out of its prefix and two names never meet.
_SAFE = set(string.ascii_letters + string.digits + "_@+.")


@dataclass(frozen=True)
class HubEnvironment:
    """What JupyterHub tells the single-user servers it spawns (their `JUPYTERHUB_*` variables)."""

    user: str
    server_name: str
    api_url: str
    activity_url: str
    api_token: str = field(repr=False)

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> HubEnvironment | None:
        """None outside JupyterHub (no `JUPYTERHUB_USER` and `JUPYTERHUB_API_URL`)."""
        env = os.environ if env is None else env
        if not env.get("JUPYTERHUB_USER") or not env.get("JUPYTERHUB_API_URL"):
            return None
        return cls(
            user=env["JUPYTERHUB_USER"],
            server_name=env.get("JUPYTERHUB_SERVER_NAME", ""),
            api_url=env["JUPYTERHUB_API_URL"].rstrip("/"),
            activity_url=env.get("JUPYTERHUB_ACTIVITY_URL", ""),
            api_token=env.get("JUPYTERHUB_API_TOKEN", ""),
        )


@dataclass(frozen=True)
class Platform:
    """JupyterHub, Kubernetes, and KubeSpawner (a hub's server in a pod) as detected at start."""

    hub: HubEnvironment | None
    kubernetes: bool

    @classmethod
    def detect(cls, env: Mapping[str, str] | None = None) -> Platform:
        env = os.environ if env is None else env
        # Kubernetes puts its API service's address into every container's environment.
        return cls(HubEnvironment.from_environ(env), bool(env.get("KUBERNETES_SERVICE_HOST")))

    @property
    def kubespawner(self) -> bool:
        return self.hub is not None and self.kubernetes


# -- store URL templates ------------------------------------------------------------------------


def store_template_fields(url: str) -> list[str]:
    """The `{…}` fields of a store URL; ValueError for a malformed template."""
    try:
        return [name for _, name, _, _ in string.Formatter().parse(url) if name is not None]
    except ValueError as err:
        raise ValueError(
            f"store_url {url!r}: {err} (write a literal brace as {{{{ or }}}})"
        ) from None


def check_store_template(url: str) -> None:
    """ValueError naming any field other than {username} and {servername}."""
    unknown = sorted({name for name in store_template_fields(url) if name not in STORE_FIELDS})
    if unknown:
        raise ValueError(
            f"store_url {url!r}: unknown field {', '.join('{' + n + '}' for n in unknown)} "
            "(use {username} and {servername})"
        )


def template_base(url: str) -> str | None:
    """For a local store template (`/srv/stores/{username}`), the folder the admin chose to hold
    the users' stores (`/srv/stores`); None for a URL that is no template or not a local folder."""
    if not store_template_fields(url) or "://" in url and not url.startswith("file://"):
        return None
    path = url[len("file://") :] if url.startswith("file://") else url
    fixed = path[: path.index("{")]
    return os.path.dirname(fixed) if not fixed.endswith("/") else fixed.rstrip("/") or "/"


def expand_store_url(url: str, env: Mapping[str, str] | None = None) -> str:
    """`s3://bucket/{username}/{servername}` for this server: the hub's user and server name
    (outside JupyterHub, the local user and an empty server name)."""
    if not store_template_fields(url):
        return url
    check_store_template(url)
    env = os.environ if env is None else env
    hub = HubEnvironment.from_environ(env)
    user = hub.user if hub else _local_user()
    server = hub.server_name if hub else ""
    expanded = url.format(username=escape_name(user), servername=escape_name(server))
    # An empty server name (the default server) leaves no empty path segment behind.
    scheme, sep, path = expanded.rpartition("://") if "://" in expanded else ("", "", expanded)
    path = re.sub(r"(?<!^)/{2,}", "/", path)
    path = path.rstrip("/") or path
    return f"{scheme}{sep}{path}"


def escape_name(name: str) -> str:
    """A user or server name as one path segment: '-' and two hex digits for anything unsafe,
    and for the dots of '..' (or of a name made only of dots)."""
    escaped = "".join(
        ch if ch in _SAFE else "".join(f"-{b:02x}" for b in ch.encode()) for ch in name
    )
    return escaped.replace(".", "-2e") if set(name) <= {"."} else escaped.replace("..", "-2e-2e")


def _local_user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "user"


# -- the hub's view of this server --------------------------------------------------------------


@dataclass
class HubView:
    """What the hub API answered about this server, with the server's own token.

    Both figures need `read:servers` on this server, which the default token does not have
    (`c.Spawner.server_token_scopes` can grant it). The user's own `last_activity` is not used:
    the culler judges the server's, and every use of the token moves the user's.
    """

    started: float | None = None
    last_activity: float | None = None
    activity_of: str | None = None  # "server": whose last activity it is
    read_at: float | None = None
    error: str | None = None


class HubClient:
    """Reads this server's model from the hub API and reports activity, as the single-user
    server itself does (blocking urllib calls: the caller runs them off the event loop)."""

    def __init__(self, hub: HubEnvironment, timeout: float = 5.0) -> None:
        self.hub = hub
        self.timeout = timeout

    def read(self, now: float) -> HubView:
        url = f"{self.hub.api_url}/users/{urllib.parse.quote(self.hub.user, safe='')}"
        try:
            model = self._request("GET", url)
        except HubError as err:
            return HubView(read_at=now, error=str(err))
        view = HubView(read_at=now)
        server = (
            (model.get("servers") or {}).get(self.hub.server_name)
            if isinstance(model, dict)
            else None
        )
        if isinstance(server, dict):
            view.started = _epoch(server.get("started"))
            view.last_activity = _epoch(server.get("last_activity"))
            view.activity_of = "server" if view.last_activity is not None else None
        return view

    def report_activity(self, when: float) -> None:
        """Tell the hub this server is in use at `when` (HubError when it did not listen)."""
        if not self.hub.activity_url:
            raise HubError("JupyterHub gave no activity address (JUPYTERHUB_ACTIVITY_URL)")
        stamp = datetime.fromtimestamp(when, timezone.utc).isoformat().replace("+00:00", "Z")
        self._request(
            "POST",
            self.hub.activity_url,
            {"servers": {self.hub.server_name: {"last_activity": stamp}}, "last_activity": stamp},
        )

    def _request(self, method: str, url: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            url,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"token {self.hub.api_token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as err:
            reason = "the server's token lacks the scope" if err.code == 403 else err.reason
            raise HubError(f"JupyterHub answered {err.code} ({reason}) to {method} {url}") from None
        except (OSError, ValueError) as err:
            raise HubError(f"cannot reach JupyterHub at {url}: {err}") from None
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise HubError(f"JupyterHub's answer to {method} {url} is not JSON") from None


class HubError(Exception):
    """The hub could not be asked, or refused."""


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
