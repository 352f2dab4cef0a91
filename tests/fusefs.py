"""A mounted drive for tests and benches: a FUSE passthrough of a folder that adds a set delay to
every operation, counts operations by kind, and can be told to stall, disconnect or fill up.

It stands for what Colab users sync to (Google Drive mounted as a folder): a local-folder store
where each file operation costs milliseconds and the drive may stop answering. The file system
runs in a child process (`python tests/fusefs.py ROOT MOUNT CONTROL`) on a mount point of its own;
the parent steers it and reads its counts through a small shared control file (CONTROL, mapped
into both processes), so a change of mode applies to the very next operation and a count is
exact as soon as the operation that made it has returned.

    with MountedDrive(backing, mountpoint) as drive:     # or the `mounted_drive` fixture
        drive.set_delays(metadata=0.005, open=0.005, data=0.005)
        drive.fault("disconnect")                        # ENOTCONN from now on
        drive.heal()
        drive.counts()                                   # {"getattr": 12, "open": 3, ...}
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

# Operation kinds, each counted; the class of each decides its delay.
METADATA_OPS = (
    "getattr",
    "readdir",
    "opendir",
    "releasedir",
    "access",
    "statfs",
    "mkdir",
    "rmdir",
    "unlink",
    "rename",
    "chmod",
    "chown",
    "utimens",
    "truncate",
    "readlink",
    "symlink",
    "link",
    "mknod",
)
OPEN_OPS = ("open", "create", "release", "flush")
DATA_OPS = ("read", "write", "fsync", "fsyncdir", "fallocate")
KINDS = METADATA_OPS + OPEN_OPS + DATA_OPS

# Modes: what every operation does besides its delay.
MODES = ("ok", "stall", "disconnect", "full", "no-blocks")
# How long a stalled operation waits (unless healed first): what the issue calls a stall.
STALL_SECONDS = 30.0

# The control file: int64 slots. 0: mode; 1-3: delays in microseconds (metadata, open, data);
# then one count per kind.
_MODE, _DELAYS, _COUNTS = 0, 1, 4
_SLOTS = _COUNTS + len(KINDS)
DEFAULT_DELAY = 0.005


def _map(control: str, create: bool) -> tuple[mmap.mmap, memoryview]:
    if create:
        with open(control, "wb") as f:
            f.write(b"\0" * 8 * _SLOTS)
    fd = os.open(control, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 8 * _SLOTS)
    finally:
        os.close(fd)
    return mm, memoryview(mm).cast("q")


class MountedDrive:
    """The parent's side: mounts `backing` at `mountpoint` through the child process, steers it,
    reads its counts, and unmounts it (lazily if it must) however the test ends."""

    def __init__(
        self,
        backing: str,
        mountpoint: str,
        control: str | None = None,
        delay: float = DEFAULT_DELAY,
        kernel_cache: float = 1.0,
    ) -> None:
        self.backing = os.path.abspath(backing)
        self.mountpoint = os.path.abspath(mountpoint)
        self.control = control or self.mountpoint.rstrip("/") + ".control"
        self.kernel_cache = kernel_cache
        self._mm, self._slots = _map(self.control, create=True)
        self.set_delays(delay, delay, delay)
        self._child: subprocess.Popen[bytes] | None = None

    # -- steering --------------------------------------------------------------------------

    def set_delays(
        self, metadata: float | None = None, open: float | None = None, data: float | None = None
    ) -> None:
        """Seconds added to each operation of a class (None: unchanged)."""
        for i, value in enumerate((metadata, open, data)):
            if value is not None:
                self._slots[_DELAYS + i] = int(value * 1e6)

    def fault(self, mode: str) -> None:
        """'stall' (each operation takes STALL_SECONDS, or until healed), 'disconnect' (ENOTCONN),
        'full' (ENOSPC on writes, new files and folders), 'no-blocks' (ENOSPC on the writes of
        data only: a disk whose blocks ran out, where an empty file can still be made), or
        'ok'."""
        self._slots[_MODE] = MODES.index(mode)

    def heal(self) -> None:
        self.fault("ok")

    @property
    def mode(self) -> str:
        return MODES[self._slots[_MODE]]

    def counts(self) -> dict[str, int]:
        """Operations that reached the drive since the start (or reset_counts), by kind."""
        return {
            kind: self._slots[_COUNTS + i]
            for i, kind in enumerate(KINDS)
            if self._slots[_COUNTS + i]
        }

    def reset_counts(self) -> None:
        for i in range(len(KINDS)):
            self._slots[_COUNTS + i] = 0

    # -- mounting --------------------------------------------------------------------------

    def mount(self, timeout: float = 20.0) -> None:
        os.makedirs(self.mountpoint, exist_ok=True)
        self._child = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                self.backing,
                self.mountpoint,
                self.control,
                str(self.kernel_cache),
            ],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mountpoint):
            if self._child.poll() is not None:
                raise RuntimeError(
                    f"The FUSE passthrough exited with {self._child.returncode} before mounting"
                )
            if time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError(
                    f"The FUSE passthrough did not mount {self.mountpoint} within {timeout:.0f} s"
                )
            time.sleep(0.05)

    def unmount(self) -> None:
        """Heal (so no operation waits), unmount, lazily if the mount is busy, and end the child."""
        self.heal()
        if (
            os.path.ismount(self.mountpoint)
            and subprocess.run(
                ["fusermount3", "-u", self.mountpoint], capture_output=True, check=False
            ).returncode
        ):
            subprocess.run(
                ["fusermount3", "-u", "-z", self.mountpoint], capture_output=True, check=False
            )
        child, self._child = self._child, None
        if child is not None:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def close(self) -> None:
        self.unmount()
        self._slots.release()
        self._mm.close()

    def __enter__(self) -> MountedDrive:  # noqa: PYI034 - a final class in a test helper
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def mounted_drive(tmp_path: Any) -> Iterator[MountedDrive]:
    """A drive mounted at tmp_path/drive over tmp_path/drive-backing, 5 ms per operation;
    unmounted (lazily if busy) however the test ends. Skips where FUSE cannot mount."""
    why = fuse_available()
    if why:
        pytest.skip(f"No FUSE mount here: {why}")
    backing = tmp_path / "drive-backing"
    backing.mkdir()
    drive = MountedDrive(str(backing), str(tmp_path / "drive"))
    try:
        drive.mount()
        yield drive
    finally:
        drive.close()


def fuse_available() -> str | None:
    """Why a FUSE mount cannot be made here, or None if it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian's fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as err:
        return f"mfusepy cannot load libfuse: {err}"
    return None


# -- the child: the file system itself -----------------------------------------------------------


def _serve(backing: str, mountpoint: str, control: str, kernel_cache: float) -> None:
    import mfusepy as fuse

    mm, slots = _map(control, create=False)
    lock = threading.Lock()
    index = {kind: _COUNTS + i for i, kind in enumerate(KINDS)}
    delay_slot = {
        **{k: _DELAYS for k in METADATA_OPS},
        **{k: _DELAYS + 1 for k in OPEN_OPS},
        **{k: _DELAYS + 2 for k in DATA_OPS},
    }
    writes = {"write", "create", "mkdir", "fallocate", "mknod", "symlink", "link"}

    def enter(kind: str) -> None:
        with lock:
            slots[index[kind]] += 1
        mode = MODES[slots[_MODE]]
        if mode == "stall":
            until = time.monotonic() + STALL_SECONDS
            while MODES[slots[_MODE]] == "stall" and time.monotonic() < until:
                time.sleep(0.05)
            mode = MODES[slots[_MODE]]
        if mode == "disconnect":
            raise fuse.FuseOSError(errno.ENOTCONN)
        if mode == "full" and kind in writes:
            raise fuse.FuseOSError(errno.ENOSPC)
        if mode == "no-blocks" and kind in ("write", "fallocate"):
            raise fuse.FuseOSError(errno.ENOSPC)
        wait = slots[delay_slot[kind]]
        if wait:
            time.sleep(wait / 1e6)

    def real(path: str) -> str:
        return backing + path

    def oserror(call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except OSError as err:
            raise fuse.FuseOSError(err.errno or errno.EIO) from None

    class Passthrough(fuse.Operations):
        use_ns = True

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            enter("getattr")
            st = oserror(os.fstat, fh) if fh is not None else oserror(os.lstat, real(path))
            return {
                key: getattr(st, key)
                for key in (
                    "st_mode",
                    "st_nlink",
                    "st_uid",
                    "st_gid",
                    "st_size",
                    "st_atime_ns",
                    "st_mtime_ns",
                    "st_ctime_ns",
                    "st_ino",
                    "st_blocks",
                )
            } | {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        def access(self, path: str, amode: int) -> int:
            enter("access")
            if not os.access(real(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        def opendir(self, path: str) -> int:
            enter("opendir")
            return 0

        def releasedir(self, path: str, fh: int) -> int:
            enter("releasedir")
            return 0

        def readdir(self, path: str, fh: int) -> Iterator[str]:
            enter("readdir")
            names = oserror(os.listdir, real(path))
            return iter([".", "..", *names])

        def readlink(self, path: str) -> str:
            enter("readlink")
            return oserror(os.readlink, real(path))

        def statfs(self, path: str) -> dict[str, int]:
            enter("statfs")
            sv = oserror(os.statvfs, real(path))
            return {
                key: getattr(sv, key)
                for key in (
                    "f_bavail",
                    "f_bfree",
                    "f_blocks",
                    "f_bsize",
                    "f_favail",
                    "f_ffree",
                    "f_files",
                    "f_flag",
                    "f_frsize",
                    "f_namemax",
                )
            }

        def mkdir(self, path: str, mode: int) -> int:
            enter("mkdir")
            oserror(os.mkdir, real(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            enter("rmdir")
            oserror(os.rmdir, real(path))
            return 0

        def unlink(self, path: str) -> int:
            enter("unlink")
            oserror(os.unlink, real(path))
            return 0

        def rename(self, old: str, new: str) -> int:
            enter("rename")
            oserror(os.rename, real(old), real(new))
            return 0

        def symlink(self, target: str, source: str) -> int:
            enter("symlink")
            oserror(os.symlink, source, real(target))
            return 0

        def link(self, target: str, source: str) -> int:
            enter("link")
            oserror(os.link, real(source), real(target))
            return 0

        def mknod(self, path: str, mode: int, dev: int) -> int:
            enter("mknod")
            oserror(os.mknod, real(path), mode, dev)
            return 0

        def chmod(self, path: str, mode: int) -> int:
            enter("chmod")
            oserror(os.chmod, real(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            enter("chown")
            oserror(os.lchown, real(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            enter("utimens")
            if times is None:
                oserror(lambda: os.utime(real(path)))
            else:
                oserror(lambda: os.utime(real(path), ns=times))
            return 0

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            enter("truncate")
            oserror(os.truncate, fh if fh is not None else real(path), length)
            return 0

        def open(self, path: str, flags: int) -> int:
            enter("open")
            return oserror(os.open, real(path), flags)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            enter("create")
            return oserror(os.open, real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def flush(self, path: str, fh: int) -> int:
            enter("flush")
            return 0

        def release(self, path: str, fh: int) -> int:
            enter("release")
            os.close(fh)
            return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            enter("read")
            return oserror(os.pread, fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            enter("write")
            return oserror(os.pwrite, fh, data, offset)

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            enter("fsync")
            oserror(os.fdatasync if datasync else os.fsync, fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            enter("fsyncdir")
            return 0

    options: dict[str, Any] = {
        "foreground": True,
        "fsname": "gpuws-test-drive",
        "subtype": "passthrough",
    }
    # The kernel keeps names and attributes for `kernel_cache` seconds (1 s: libfuse's default,
    # as a mounted drive has); 0 sends every lookup to the drive.
    options.update(
        attr_timeout=kernel_cache, entry_timeout=kernel_cache, negative_timeout=kernel_cache
    )
    # Many requests at once, as a drive served over a network takes them (libfuse keeps 10).
    options.update(max_threads=64, max_idle_threads=64)
    fuse.FUSE(Passthrough(), mountpoint, **options)
    slots.release()
    mm.close()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
