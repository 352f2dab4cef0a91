"""A backend wrapper that encrypts what it writes and authenticates what it reads.

Every object of a workspace is encrypted (format.py) except the few records that must stay
readable without the key: the lease (so another runtime can see who writes), the summary (so
workspaces can be listed), the encryption marker and the key files. The engine, the restore and
the version keeping see plain keys, plain sizes and plain bytes; this wrapper maps each key to
its stored name (with `names`, each path segment of a file encrypted by AES-SIV), each size to
the stored size and back, and each read to whole segments.

A read decrypts into the caller's descriptor, which is always a file that is not yet in the
work directory (an unnamed file, or a temporary name): a segment that does not authenticate
raises IntegrityError, naming the file, and the caller discards what it wrote.
"""

from __future__ import annotations

import base64
import builtins  # the class defines a method `list`: its annotations say builtins.list
import errno
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ...diskio import pwrite_all
from ..backend import Backend, RemoteFile, SourceChangedError
from ..errors import LocalDiskFullError, LocalFileError, StoreConfigError, SyncError
from ..names import decode, shown
from . import format as fmt
from . import keys
from .keys import CIPHER

log = logging.getLogger(__name__)

# Objects that stay plain, by their name under <workspace>/.gpuws/ (see the module's doc).
PLAIN_STATE = ("lease.json", "lease.json.lock", "summary.json", keys.MARKER)
# The ETag of an encrypted object, as the wrapper reports it: never mistaken for the MD5 of the
# file's bytes (the restore checks a 32-digit ETag against what it received).
ETAG_MARK = "gpuws-enc:"
# A read fetches at most this many segments per request (bounded memory per transfer).
WINDOW_SEGMENTS = 16


class IntegrityError(SyncError):
    """A stored object failed authentication: tampered with, cut short, moved from another
    path, or written with another key. Nothing of it was kept."""


@dataclass
class Encryption:
    """The setting: a passphrase (never shown: not in repr, logs or answers) and whether the
    names are encrypted too (None: as the workspace says; plain for a new one). `scratch`: a
    folder for the encrypted copy of a file being sent."""

    passphrase: str = field(repr=False)
    names: bool | None = None
    scratch: str | None = None


def protect(backend: Backend, workspace: str, encryption: Encryption | None) -> Backend:
    """The backend to use for `workspace`: wrapped where it is (or is to be) encrypted. Refuses
    an unencrypted writer on an encrypted workspace and an encrypted one on a workspace that
    already holds plain files; a wrong passphrase fails here, before anything is read."""
    marker = keys.read_marker(backend, workspace)
    if encryption is None:
        if marker is not None:
            raise StoreConfigError(
                f"The workspace {workspace!r} in the store is encrypted ({marker.cipher}): turn encryption on "
                "(c.GpuWorkspace.encrypt = True, or --encrypt) and give its passphrase (GPUWS_PASSPHRASE)"
            )
        return backend
    if marker is None:
        if _holds_files(backend, workspace):
            raise StoreConfigError(
                f"The workspace {workspace!r} in the store holds unencrypted files: an encrypted runtime will "
                "not mix with them. Use a new workspace name, or turn encryption off for this one"
            )
        master = keys.create(backend, workspace, encryption.passphrase, bool(encryption.names))
        log.info("Sync: the workspace %s is now encrypted (%s)", workspace, CIPHER)
    else:
        if marker.format != keys.FORMAT or marker.cipher != CIPHER:
            raise StoreConfigError(
                f"The workspace {workspace!r} is encrypted in format {marker.format} "
                f"({marker.cipher}), which this version cannot read"
            )
        master, _ = keys.unlock(backend, workspace, encryption.passphrase)
        keys.check_marker(backend, workspace, master)
        if encryption.names is not None and marker.names != encryption.names:
            raise StoreConfigError(
                f"The workspace {workspace!r} was encrypted with names {'encrypted' if marker.names else 'plain'}: "
                f"set encrypt_names = {marker.names} to use it"
            )
    return EncryptedBackend(
        backend,
        workspace,
        master,
        marker.names if marker else bool(encryption.names),
        encryption.scratch,
    )


def _holds_files(backend: Backend, workspace: str) -> bool:
    for prefix in (f"{workspace}/files", f"{workspace}/.gpuws/versions"):
        if next(iter(backend.list(prefix)), None) is not None:
            return True
    return False


class EncryptedBackend:
    """The Backend interface over another backend, with every object of one workspace
    encrypted (see the module's doc). Keys outside the workspace pass through unchanged."""

    def __init__(
        self,
        inner: Backend,
        workspace: str,
        master: bytes,
        names: bool = False,
        scratch: str | None = None,
    ) -> None:
        self.inner = inner
        self.workspace = workspace
        self._master = master
        self.names = names
        self.scratch = scratch
        self.description = inner.description
        self.supports_rename = inner.supports_rename
        self.round_trips = getattr(inner, "round_trips", True)
        name_key = HKDF(
            algorithm=hashes.SHA256(), length=64, salt=None, info=b"gpuws names AES-SIV v1"
        ).derive(master)
        self._siv = AESSIV(name_key)
        # Stored key → (stored size, ETag) as last listed: a read needs the size to find the last
        # segment, and the restore reads what it has just listed.
        self._sizes: dict[str, tuple[int, str | None]] = {}
        self._sizes_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EncryptedBackend({self.description!r}, {self.workspace!r}, names={self.names})"

    @property
    def encryption(self) -> dict[str, object]:
        """What the status says: the cipher and whether names are encrypted; never a key."""
        return {"cipher": CIPHER, "names": self.names}

    @property
    def flushes(self) -> bool:
        return self.inner.flushes

    @property
    def skipped(self) -> dict[str, str]:
        return self.inner.skipped

    # -- plain keys to stored keys -----------------------------------------------------------

    def _seal_name(self, name: str) -> str:
        # Keys come as key text (Store.file_key, names.py): valid UTF-8 whatever the file's bytes.
        sealed = self._siv.encrypt(name.encode(), [b"gpuws name"])
        return base64.b32encode(sealed).decode().rstrip("=").lower()

    def _open_name(self, name: str) -> str | None:
        try:
            raw = base64.b32decode(name.upper() + "=" * (-len(name) % 8))
            return self._siv.decrypt(raw, [b"gpuws name"]).decode()
        except (ValueError, InvalidTag, UnicodeDecodeError):
            return None

    def _seal_path(self, rel: str) -> str:
        if not self.names or not rel:
            return rel
        return "/".join(self._seal_name(part) if part else part for part in rel.split("/"))

    def _open_path(self, rel: str) -> str | None:
        if not self.names or not rel:
            return rel
        parts = [self._open_name(part) for part in rel.split("/")]
        return None if any(p is None for p in parts) else "/".join(parts)  # type: ignore[arg-type]

    def _map(self, key: str) -> tuple[str, bytes | None]:
        """The stored key, and what the object is bound to (None: stored plain)."""
        ws = self.workspace + "/"
        if not key.startswith(ws):
            return key, None
        rest = key[len(ws) :]
        if rest.startswith("files/"):
            rel = rest[len("files/") :]
            return ws + "files/" + self._seal_path(rel), b"file:" + rel.encode()
        versions = ".gpuws/versions/"
        if rest.startswith(versions):
            # Kept versions are server-side copies of files/<rel>: bound to the same path.
            rel, _, stamp = rest[len(versions) :].rpartition("/")
            return f"{ws}{versions}{self._seal_path(rel)}/{stamp}", b"file:" + rel.encode()
        if rest.startswith(".gpuws/"):
            name = rest[len(".gpuws/") :]
            if name in PLAIN_STATE or name.startswith(keys.KEYS + "/"):
                return key, None
            return key, b"state:" + name.encode()
        return key, None

    def _map_prefix(self, prefix: str) -> str:
        """A listing prefix (whole segments) as stored."""
        ws = self.workspace + "/"
        if not self.names or not prefix.startswith(ws):
            return prefix
        rest = prefix[len(ws) :]
        for head in ("files/", ".gpuws/versions/"):
            if rest.startswith(head):
                return ws + head + self._seal_path(rest[len(head) :])
        return prefix

    def _unmap(self, stored: str) -> str | None:
        """The plain key of a stored key; None where a sealed name does not open with our key."""
        ws = self.workspace + "/"
        if not self.names or not stored.startswith(ws):
            return stored
        rest = stored[len(ws) :]
        if rest.startswith("files/"):
            rel = self._open_path(rest[len("files/") :])
            return None if rel is None else ws + "files/" + rel
        versions = ".gpuws/versions/"
        if rest.startswith(versions):
            sealed, _, stamp = rest[len(versions) :].rpartition("/")
            rel = self._open_path(sealed)
            return None if rel is None else f"{ws}{versions}{rel}/{stamp}"
        return stored

    def _plain_file(self, f: RemoteFile, key: str) -> RemoteFile:
        with self._sizes_lock:
            self._sizes[f.key] = (f.size, f.etag)
        size = fmt.plain_size(f.size)
        etag = None if f.etag is None else ETAG_MARK + f.etag
        # A size no object of the format has: reported as is; reading it fails, naming it.
        return RemoteFile(key, f.size if size is None else size, f.mtime, etag)

    def _forget(self, stored: str) -> None:
        with self._sizes_lock:
            self._sizes.pop(stored, None)

    def _integrity(self, key: str, why: str) -> IntegrityError:
        return IntegrityError(
            f"{_shown(key, self.workspace)} in the store failed authentication ({why}): it was "
            "tampered with, cut short, or written with another key. Nothing of it was written"
        )

    # -- writing -----------------------------------------------------------------------------

    def put(
        self,
        local: str,
        key: str,
        progress: Callable[[int], None] | None = None,
        check: Callable[[], bool] | None = None,
        flush_soon: bool = False,
    ) -> int:
        """Encrypt the file straight into the store's temporary name where the inner backend
        takes an encoder (a local folder); otherwise into an unnamed scratch file, which the
        inner backend then sends as it sends any file (atomic, multipart, checked by `check`)."""
        stored, binding = self._map(key)
        if binding is None:
            return self.inner.put(local, key, progress, check, flush_soon)
        put_encoded = getattr(self.inner, "put_encoded", None)
        if put_encoded is not None:

            def encode(
                src: int, dst: int, size: int, written: Callable[[int, int], None] | None
            ) -> int:
                return fmt.encrypt_file(self._master, binding, src, dst, size, progress, written)

            self._forget(stored)
            return put_encoded(local, stored, encode, check, flush_soon)
        try:
            src = os.open(local, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise LocalFileError(f"cannot be read: {err.strerror or err}") from None
        scratch = -1
        try:
            try:
                scratch = _scratch_file(self.scratch)
                size = os.fstat(src).st_size
                read = fmt.encrypt_file(self._master, binding, src, scratch, size)
            except OSError as err:
                if (
                    err.errno in DISK_FULL
                ):  # making or writing the copy: reading the file never says so
                    raise self._disk_full(key) from err
                raise
            finally:
                os.close(src)
            if read != size:
                raise SourceChangedError(key)
            stored_size = fmt.encrypted_size(size)
            scaled = None
            if progress is not None:
                sent = 0

                def scaled(n: int) -> None:
                    nonlocal sent
                    before = sent * size // stored_size
                    sent += n
                    progress(sent * size // stored_size - before)

            self._forget(stored)
            self.inner.put(f"/proc/self/fd/{scratch}", stored, scaled, check, flush_soon)
        finally:
            if scratch >= 0:
                os.close(scratch)
        return size

    def _disk_full(self, key: str) -> LocalDiskFullError:
        where = self.scratch or tempfile.gettempdir()
        return LocalDiskFullError(
            f"This machine's disk is full: no room in {where} for the encrypted copy of "
            f"{_shown(key, self.workspace)} to send"
        )

    def write_bytes(self, key: str, data: bytes) -> None:
        stored, binding = self._map(key)
        if binding is None:
            return self.inner.write_bytes(key, data)
        self._forget(stored)
        self.inner.write_bytes(stored, fmt.encrypt_bytes(self._master, binding, data))

    def read_bytes(self, key: str) -> bytes | None:
        stored, binding = self._map(key)
        data = self.inner.read_bytes(stored)
        if binding is None or data is None:
            return data
        try:
            return fmt.decrypt_bytes(self._master, binding, data)
        except fmt.FormatError as err:
            raise self._integrity(key, str(err)) from None

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        stored, binding = self._map(key)
        got = self.inner.read_tagged(stored)
        if binding is None or got is None:
            return got
        try:
            return fmt.decrypt_bytes(self._master, binding, got[0]), got[1]
        except fmt.FormatError as err:
            raise self._integrity(key, str(err)) from None

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        stored, binding = self._map(key)
        if binding is not None:
            data = fmt.encrypt_bytes(self._master, binding, data)
        return self.inner.write_if(stored, data, tag)

    def copy(self, src: str, dst: str) -> None:
        self._forget(self._map(dst)[0])
        self.inner.copy(self._map(src)[0], self._map(dst)[0])

    def move(self, src: str, dst: str) -> None:
        self._forget(self._map(src)[0])
        self._forget(self._map(dst)[0])
        self.inner.move(self._map(src)[0], self._map(dst)[0])

    def delete(self, key: str) -> None:
        self._forget(self._map(key)[0])
        self.inner.delete(self._map(key)[0])

    # -- reading -----------------------------------------------------------------------------

    def stat(self, key: str) -> RemoteFile | None:
        stored, binding = self._map(key)
        found = self.inner.stat(stored)
        if binding is None or found is None:
            return found
        return self._plain_file(found, key)

    def list(self, prefix: str) -> Iterator[RemoteFile]:
        for f in self.inner.list(self._map_prefix(prefix)):
            key = self._unmap(f.key)
            if key is None:
                log.warning(
                    "Sync: %s in the store is not a name sealed with this workspace's key; skipped",
                    f.key,
                )
                continue
            if self._map(key)[1] is None:
                yield RemoteFile(key, f.size, f.mtime, f.etag)
            else:
                yield self._plain_file(f, key)

    def folders(self, prefix: str) -> builtins.list[str]:
        return self.inner.folders(prefix)

    def _stored_size(self, stored: str, etag: str | None, key: str) -> tuple[int, str | None]:
        with self._sizes_lock:
            known = self._sizes.get(stored)
        if known is not None and (etag is None or known[1] == etag):
            return known
        found = self.inner.stat(stored)
        if found is None:
            raise FileNotFoundError(2, "No such file in the store", key)
        with self._sizes_lock:
            self._sizes[stored] = (found.size, found.etag)
        return found.size, found.etag

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Callable[[int], None] | None = None,
        etag: str | None = None,
    ) -> int:
        """Fetch the whole segments that hold the wanted bytes, a window at a time, decrypt and
        authenticate each, and write its plain bytes at their offsets in `fd`."""
        stored, binding = self._map(key)
        if binding is None:
            return self.inner.read_into(key, fd, offset, length, progress, etag)
        inner_etag = etag[len(ETAG_MARK) :] if etag and etag.startswith(ETAG_MARK) else etag
        stored_size, _ = self._stored_size(stored, inner_etag, key)
        plain = fmt.plain_size(stored_size)
        if plain is None:
            raise self._integrity(key, "its size is no whole number of segments: cut short")
        if length is None:
            offset, length = 0, plain
        if offset + length > plain:
            raise self._integrity(key, "shorter than listed")
        first, past, _, _ = fmt.segment_span(offset, length, plain)
        head = self._fetch(stored, 0, fmt.HEADER, inner_etag, key)
        try:
            decryptor = fmt.Decryptor(self._master, binding, head)
        except fmt.FormatError as err:
            raise self._integrity(key, str(err)) from None
        size = decryptor.header.segment
        if size != fmt.SEGMENT:  # sizes and offsets are computed for the segment size we write
            raise self._integrity(key, "an unexpected segment size")
        count = max(1, -(-plain // size))
        written = 0
        number = first
        while number < past:
            upto = min(past, number + WINDOW_SEGMENTS)
            start = fmt.HEADER + number * (size + fmt.TAG)
            end = min(stored_size, fmt.HEADER + upto * (size + fmt.TAG))
            data = memoryview(self._fetch(stored, start, end - start, inner_etag, key))
            at = 0
            for n in range(number, upto):
                piece = data[at : at + size + fmt.TAG]
                at += len(piece)
                try:
                    clear = decryptor.segment(n, bytes(piece), n == count - 1)
                except fmt.FormatError as err:
                    raise self._integrity(key, str(err)) from None
                lo = max(offset, n * size)
                hi = min(offset + length, n * size + len(clear))
                if hi > lo:
                    pwrite_all(fd, memoryview(clear)[lo - n * size : hi - n * size], lo)
                    written += hi - lo
                    if progress:
                        progress(hi - lo)
            number = upto
        return written

    def _fetch(self, stored: str, start: int, length: int, etag: str | None, key: str) -> bytes:
        """Stored bytes start..start+length-1, through the inner backend's ranged read."""
        buffer = os.memfd_create("gpuws-read", os.MFD_CLOEXEC)
        try:
            got = self.inner.read_into(stored, buffer, start, length, None, etag)
            if got < length:
                raise self._integrity(key, "shorter than listed: cut short")
            return os.pread(buffer, length, start)
        finally:
            os.close(buffer)

    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int:
        """Decrypt into a temporary name beside `local`, then move it into place: a file that
        fails authentication never appears under `local`."""
        stored, binding = self._map(key)
        if binding is None:
            return self.inner.get(key, local, progress)
        folder = os.path.dirname(os.path.abspath(local))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gpuws-decrypt-")
        try:
            n = self.read_into(key, fd, 0, None, progress)
            os.close(fd)
            fd = -1
            os.replace(tmp, local)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(tmp)
            raise
        return n

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        stored, binding = self._map(key)
        if binding is None:
            return self.inner.same_content(key, local, remote)
        return None  # the stored bytes are ciphertext: no hash of them says anything of the file

    # -- passed through ----------------------------------------------------------------------

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        return self.inner.sweep_parts(prefix, older_than)

    def abort_uploads(self, prefix: str) -> int:
        return self.inner.abort_uploads(prefix)

    def abandoned_uploads(self) -> int:
        return self.inner.abandoned_uploads()

    def conditional_writes(self) -> str | None:
        return self.inner.conditional_writes()

    def present(self, prefix: str) -> bool:
        return self.inner.present(prefix)  # a workspace's own folder has its plain name

    def probe(self) -> object:
        return self.inner.probe()

    def expect(self, prefix: str) -> None:
        self.inner.expect(prefix)

    def make(self, prefix: str) -> None:
        self.inner.make(prefix)

    def missing(self, prefix: str) -> str:
        return self.inner.missing(prefix)

    def flush(self) -> None:
        self.inner.flush()

    def unflushed(self) -> bool:
        return self.inner.unflushed()

    def close(self) -> None:
        self.inner.close()


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _shown(key: str, workspace: str) -> str:
    """The key as the user knows it: the file's path under files/ (as names.shown writes it),
    else the key."""
    prefix = f"{workspace}/files/"
    return shown(decode(key[len(prefix) :])) if key.startswith(prefix) else key


def _scratch_file(folder: str | None) -> int:
    """An unnamed file for the encrypted copy (gone when closed, even if the process dies),
    reachable by the inner backend through /proc/self/fd."""
    where = folder or tempfile.gettempdir()
    try:
        return os.open(where, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:
        fd, path = tempfile.mkstemp(dir=where, prefix=".gpuws-encrypt-")
        os.unlink(path)
        return fd


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
