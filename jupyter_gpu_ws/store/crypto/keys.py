"""The workspace's keys: a random master key, wrapped once per passphrase in key files.

    <workspace>/.gpuws/encryption.json   plain marker: encrypted, format, cipher, names, MAC
    <workspace>/.gpuws/keys/<id>.json     scrypt parameters and salt, the master key wrapped
                                          with AES-256-GCM under the scrypt-derived key

As in restic, the data is encrypted under the master key, never under a passphrase, so adding,
changing or removing a passphrase rewrites one small key file and no data. Neither the master
key nor a passphrase is ever written to the store in clear, logged, or returned by an API.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from ..backend import Backend
from ..errors import StoreConfigError

MARKER = "encryption.json"
KEYS = "keys"
CIPHER = "AES-256-GCM"
FORMAT = 1
# scrypt's cost: about 0.1 s and 32 MiB per unlock (restic's defaults are of this order).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
_WRAP_INFO = b"gpuws key file v1"


class WrongKeyError(StoreConfigError):
    """No key file of the workspace opens with this passphrase (or the key files are damaged)."""


@dataclass(frozen=True)
class Marker:
    """What the plain marker says about the workspace's encryption."""

    names: bool
    format: int = FORMAT
    cipher: str = CIPHER


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def read_passphrase(key_file: str | None = None, env: str = "GPUWS_PASSPHRASE") -> str | None:
    """The passphrase from a local file (its first line) or else the environment variable;
    None where neither gives one (the command line may then ask on a terminal)."""
    if key_file:
        try:
            with open(os.path.expanduser(key_file), encoding="utf-8") as f:
                text = f.readline().rstrip("\r\n")
        except OSError as err:
            raise StoreConfigError(
                f"Cannot read the key file {key_file}: {err.strerror or err}"
            ) from None
        if not text:
            raise StoreConfigError(f"The key file {key_file} is empty")
        return text
    return os.environ.get(env) or None


def _marker_key(workspace: str) -> str:
    return f"{workspace}/.gpuws/{MARKER}"


def _keys_prefix(workspace: str) -> str:
    return f"{workspace}/.gpuws/{KEYS}"


def _marker_mac(master: bytes, fields: dict[str, Any]) -> str:
    # A MAC under the master key: flipping `names` in the plain marker is noticed once unlocked.
    body = json.dumps(fields, sort_keys=True).encode()
    mac_key = hashlib.sha256(b"gpuws marker\0" + master).digest()
    return hmac.new(mac_key, body, hashlib.sha256).hexdigest()


def read_marker(backend: Backend, workspace: str) -> Marker | None:
    """The workspace's marker; None where the workspace is not encrypted."""
    data = backend.read_bytes(_marker_key(workspace))
    if data is None:
        return None
    try:
        fields = json.loads(data)
        return Marker(bool(fields["names"]), int(fields["format"]), str(fields["cipher"]))
    except (ValueError, KeyError, TypeError):
        raise StoreConfigError(
            f"The encryption marker of the workspace {workspace!r} is damaged"
        ) from None


def check_marker(backend: Backend, workspace: str, master: bytes) -> None:
    """The marker is the one written with this master key (not edited by someone without it)."""
    data = backend.read_bytes(_marker_key(workspace)) or b"{}"
    fields = json.loads(data)
    mac = fields.pop("mac", "")
    if not hmac.compare_digest(str(mac), _marker_mac(master, fields)):
        raise StoreConfigError(
            f"The encryption marker of the workspace {workspace!r} was changed by "
            "someone without its key: refusing to use it"
        )


def _kek(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode())


def _key_file(master: bytes, passphrase: str, key_id: str) -> bytes:
    salt, nonce = os.urandom(16), os.urandom(12)
    wrapped = AESGCM(_kek(passphrase, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)).encrypt(
        nonce, master, _WRAP_INFO + key_id.encode()
    )
    return json.dumps(
        {
            "id": key_id,
            "created": time.time(),
            "kdf": "scrypt",
            "n": SCRYPT_N,
            "r": SCRYPT_R,
            "p": SCRYPT_P,
            "salt": _b64(salt),
            "nonce": _b64(nonce),
            "wrapped": _b64(wrapped),
        },
        indent=1,
    ).encode()


def create(backend: Backend, workspace: str, passphrase: str, names: bool) -> bytes:
    """Make the workspace encrypted: a new master key, its first key file, then the marker
    (last: a store with a marker always has a key file that opens it)."""
    _require(passphrase)
    master = os.urandom(32)
    add(backend, workspace, master, passphrase)
    fields = {
        "encrypted": True,
        "format": FORMAT,
        "cipher": CIPHER,
        "names": names,
        "keys": f".gpuws/{KEYS}/",
    }
    fields["mac"] = _marker_mac(master, fields)
    backend.write_bytes(_marker_key(workspace), json.dumps(fields, indent=1).encode())
    return master


def _require(passphrase: str) -> None:
    if not passphrase:
        raise StoreConfigError("An empty passphrase cannot protect an encrypted store")


def key_ids(backend: Backend, workspace: str) -> list[str]:
    prefix = _keys_prefix(workspace) + "/"
    return sorted(
        f.key[len(prefix) : -len(".json")]
        for f in backend.list(prefix.rstrip("/"))
        if f.key.endswith(".json")
    )


def unlock(backend: Backend, workspace: str, passphrase: str) -> tuple[bytes, str]:
    """The master key and the id of the key file that the passphrase opens. WrongKeyError where
    none does: one clear error before anything is read or written."""
    _require(passphrase)
    ids = key_ids(backend, workspace)
    if not ids:
        raise WrongKeyError(
            f"The workspace {workspace!r} is encrypted but has no key files in the store"
        )
    for key_id in ids:
        data = backend.read_bytes(f"{_keys_prefix(workspace)}/{key_id}.json")
        if data is None:
            continue
        try:
            fields = json.loads(data)
            if fields.get("kdf") != "scrypt":
                continue
            kek = _kek(
                passphrase,
                _unb64(fields["salt"]),
                int(fields["n"]),
                int(fields["r"]),
                int(fields["p"]),
            )
            master = AESGCM(kek).decrypt(
                _unb64(fields["nonce"]), _unb64(fields["wrapped"]), _WRAP_INFO + key_id.encode()
            )
        except (InvalidTag, ValueError, KeyError, TypeError):
            continue
        if len(master) == 32:
            return master, key_id
    raise WrongKeyError(
        f"Wrong passphrase: it opens none of the {len(ids)} key file(s) of the encrypted "
        f"workspace {workspace!r}. Nothing was read or changed."
    )


def add(backend: Backend, workspace: str, master: bytes, passphrase: str) -> str:
    """A new key file for `passphrase`; returns its id."""
    _require(passphrase)
    key_id = uuid.uuid4().hex[:16]
    backend.write_bytes(
        f"{_keys_prefix(workspace)}/{key_id}.json", _key_file(master, passphrase, key_id)
    )
    return key_id


def remove(backend: Backend, workspace: str, key_id: str) -> None:
    """Delete one key file; never the last (the data would become unreadable for good)."""
    ids = key_ids(backend, workspace)
    if key_id not in ids:
        raise StoreConfigError(
            f"No key file {key_id!r} in the workspace {workspace!r} (there are: {', '.join(ids)})"
        )
    if len(ids) == 1:
        raise StoreConfigError(
            "Refusing to remove the last key file: nothing could read the workspace again"
        )
    backend.delete(f"{_keys_prefix(workspace)}/{key_id}.json")


def change(backend: Backend, workspace: str, old: str, new: str) -> str:
    """Replace the key file that `old` opens with one for `new` (written first, then the old
    one removed: a failure between leaves both working). Returns the new id."""
    master, old_id = unlock(backend, workspace, old)
    new_id = add(backend, workspace, master, new)
    backend.delete(f"{_keys_prefix(workspace)}/{old_id}.json")
    return new_id
