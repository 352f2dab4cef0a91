"""Bytes from a socket into a file without passing through this process (Linux splice).

recv and pwrite copy every byte twice: from the socket's buffers into this process, then into
the file's page cache. splice(2) hands the socket's pages to a pipe and copies them once, into
the page cache, with no Python work per chunk. Measured by bench/restore_bench.py on a
restore of 4 x 512 MiB from SeaweedFS on two cores, the engine's CPU went from 1.18 s to
0.92 s (1.36 s to 1.00 s with 20 ms of round trip), below `s5cmd cp`'s 1.2-1.4 s; on a
machine the store and the client share, that is time the copy gets back (docs/benchmarks.md).

Only for a plain TCP socket (TLS keeps its bytes in the process) and a file that takes a
splice; where the kernel says it cannot (`EINVAL` and kin: a file system without splice
support, a file opened for appending), what is in the pipe is written by read and pwrite,
and the caller goes on with reads and writes from there (one failed call per body: nothing
is remembered).
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
from typing import Callable

from ..diskio import pwrite_all, turn

# Each move takes up to PIPE bytes: the pipe is made that large where the system allows (a
# user's pipes may hold 64 MiB in all), else it keeps its default, 64 KiB.
PIPE = 1 << 20
SPARE_PIPES = 16
_CANNOT = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}

# False: never splice (a system without it; or to measure the difference, bench/).
ENABLED = hasattr(os, "splice")

_pipes: queue.SimpleQueue[tuple[int, int, int]] = queue.SimpleQueue()  # (read end, write end, size)


def socket_into_file(sock: int, fd: int, offset: int, count: int,
                     told: Callable[[int], None] | None, every: int) -> tuple[int, bool]:
    """Move up to `count` bytes from the connected socket `sock` into `fd` at `offset` (never
    more: a kept-alive connection's next answer stays in the socket). `told(n)` after each
    `every` bytes are in the file (every > 0; else once, at the end), and for the rest at the end (it may raise: the move
    stops there). Returns the bytes written and whether splicing went on to the end: (n,
    False) means the kernel cannot splice this pair, and bytes from offset + n are still to
    come by other means. Fewer than `count` with True: the connection closed first.

    A read that runs past the socket's timeout raises BlockingIOError (EAGAIN), as recv does
    on a socket whose timeout the kernel keeps; a full disk raises as pwrite would."""
    if not ENABLED:
        return 0, False
    every = every if every > 0 else count
    pipe = _pipe()
    if pipe is None:
        return 0, False
    r, w, size = pipe
    clean = True
    written = untold = 0
    try:
        while written < count:
            clean = False
            try:
                n = os.splice(sock, w, min(size, count - written, every - untold))
            except OSError as err:
                if err.errno in _CANNOT and written == 0:
                    clean = True
                    return 0, False
                raise
            if n == 0:
                clean = True
                break  # the connection closed
            spliced = _drain(r, fd, offset + written, n)
            clean = True
            written += n
            untold += n
            if not spliced:  # this file takes no splice: the caller goes on without
                if told is not None:
                    told(untold)
                return written, False
            if untold >= every:
                if told is not None:
                    told(untold)
                untold = 0
        if told is not None and untold:
            told(untold)
        return written, True
    finally:
        if clean and _pipes.qsize() < SPARE_PIPES:
            _pipes.put(pipe)
        else:
            os.close(r)
            os.close(w)


def _drain(r: int, fd: int, offset: int, n: int) -> bool:
    """The `n` bytes in the pipe into `fd` at `offset`, in turn with the file's other writers,
    the pipe left empty. False: the file takes no splice, and (the rest of) them went by read
    and pwrite."""
    done = 0
    with turn(fd):
        while done < n:
            try:
                k = os.splice(r, fd, n - done, offset_dst=offset + done)
            except OSError as err:
                if err.errno not in _CANNOT:
                    raise
                while done < n:
                    data = os.read(r, n - done)
                    if not data:
                        raise OSError(errno.EIO, "a pipe gave back fewer bytes than it was given") from err
                    pwrite_all(fd, data, offset + done)
                    done += len(data)
                return False
            if k == 0:
                raise OSError(errno.EIO, "a splice into the file moved nothing")
            done += k
    return True


def _pipe() -> tuple[int, int, int] | None:
    try:
        return _pipes.get_nowait()
    except queue.Empty:
        pass
    try:
        r, w = os.pipe2(os.O_CLOEXEC)
    except OSError:
        return None  # out of file descriptors: the caller reads and writes
    try:
        size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE)
    except (OSError, AttributeError):
        size = 64 << 10  # more than the system allows a pipe: its default
    return r, w, size
