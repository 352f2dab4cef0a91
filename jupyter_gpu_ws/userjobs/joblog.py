"""A job's output on disk: read from its pipe by a thread, written line by line into a log that is
rotated at a size, so a job that prints without pause keeps the disk bounded and never waits on us.
A log that cannot be written (a full disk) is no reason to stop reading: the output is counted
as dropped, and written again as soon as the disk takes it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .files import READ_FLAGS

# A line longer than this is cut: a progress bar redrawn with "\r" for hours, or a tensor printed
# whole, would otherwise be one "line" as large as the log, and the tail would be that line.
LINE_LIMIT = 64 * 2**10
CUT_MARKER = b" [\xe2\x80\xa6 line cut at 64 KiB]\n"
_READ_SIZE = 64 * 2**10
_TAIL_BLOCK = 8 * 2**10
# After a write failed, how long output is dropped before the log is opened and written again.
RETRY_SECONDS = 1.0
# At most this much of a log in one answer to "what is new since": a follower asks again at once.
SINCE_BYTES = 2**20
_FINGERPRINT_BYTES = 64
ROTATED_AWAY = "[\u2026 output rotated away before it was read]"


@dataclass
class LogText:
    """Lines of a job's output, oldest first; `open`: the last one is not ended yet (what comes
    next continues it); `next`: where the output goes on from them, for `JobLog.since`."""

    lines: list[str]
    open: bool
    next: str


class JobLog:
    """`path` (the newest output) and `path.1` … `path.keep` (older, `path.keep` the oldest), each
    at most `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int = 8 * 2**20, keep: int = 2) -> None:
        if max_bytes < 1 or keep < 0:
            raise ValueError(
                f"a job log needs max_bytes >= 1 and keep >= 0, not {max_bytes} and {keep}"
            )
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._open_line: object = None  # the stream whose last line is not ended yet, if any
        # Streams whose open line was ended for them, when the other stream wrote: the newline
        # that really ends it, which may come in a write of its own (print writes its end apart),
        # is then already in the log.
        self._ended_for: set[object] = set()
        # Output not written since the last write that failed (0: the log is written), why, and
        # when the log may be tried again.
        self.dropped = 0
        self.failure: OSError | None = None
        self._retry_at = 0.0
        self._written = 0  # bytes written since the start (what a failed write got through)
        self._line_ended = True  # the file ends with a whole line
        self._closed = False
        self._fd: int | None = None
        self._size = 0
        try:
            self._open()
        except OSError as err:  # a full disk at the start: the job runs, its output is dropped
            self._failed(err)

    def follow(self, stream: IO[bytes]) -> threading.Thread:
        """Start a thread that reads `stream` until its end and writes what it reads."""
        thread = threading.Thread(
            target=self._drain, args=(stream,), name=f"joblog {self.path.name}", daemon=True
        )
        self._threads.append(thread)
        thread.start()
        return thread

    def _drain(self, stream: IO[bytes]) -> None:
        # Read whatever the pipe holds (not a full buffer, nor a whole line): a partial line, a
        # progress bar without newline, reaches the file as soon as it is printed.
        read: Callable[[int], bytes] = getattr(stream, "read1", None) or stream.read
        line_length = 0  # bytes of the current line already written
        skipping = False  # the current line was cut: drop it up to its newline
        try:
            while chunk := read(_READ_SIZE):
                out = bytearray()
                for piece in _pieces(chunk):
                    ends = piece.endswith(b"\n")
                    if skipping:
                        skipping = not ends
                        continue
                    if line_length + len(piece) - ends > LINE_LIMIT:
                        out += piece[: LINE_LIMIT - line_length] + CUT_MARKER
                        line_length, skipping = 0, not ends
                        continue
                    out += piece
                    line_length = 0 if ends else line_length + len(piece)
                self._write(bytes(out), stream)
        except (OSError, ValueError):
            pass  # the pipe was closed under us (the job's process is gone): nothing more to read

    def note(self, text: str) -> None:
        """A line of the log's own (not the job's output) on a line by itself, written before
        the output is followed: where an attempt begins, so that a tail never passes an earlier
        attempt's last lines off as this one's."""
        line = f"\u2500\u2500 {text} \u2500\u2500\n".encode()
        self._write(line if self._line_ended else b"\n" + line, self)

    def trouble(self) -> str | None:
        """Why the output is not reaching the log now, in the user's words, or None."""
        failure, dropped = self.failure, self.dropped
        if failure is None:
            return None
        return f"log not written: {_why(failure)} ({dropped:,} bytes of output dropped)"

    def _write(self, data: bytes, stream: object) -> None:
        with self._lock:
            if stream in self._ended_for:
                self._ended_for.discard(stream)
                if data.startswith(b"\n"):
                    data = data[1:]
            # stdout and stderr followed apart: a line one of them left open is ended before the
            # other writes, so their lines are never mixed into one.
            if data and self._open_line is not None and self._open_line is not stream:
                self._ended_for.add(self._open_line)
                data = b"\n" + data
            if data:
                self._open_line = None if data.endswith(b"\n") else stream
            if not data or self._closed:
                return
            if self.failure is not None and time.monotonic() < self._retry_at:
                self.dropped += len(data)
                return
            gap = self._gap() if self.failure is not None and self.dropped else b""
            before = self._written
            try:
                if self._fd is None:
                    self._open()
                self._rotating(gap + data)
            except OSError as err:
                # The disk is full, or the file is gone: the output is dropped, never waited on,
                # and the file opened anew at the retry (it may have gone away, or its disk too).
                self._failed(err)
                written = self._written - before
                if gap and written >= len(gap):  # the last gap is told in the log: a new one
                    self.dropped = 0
                self.dropped += len(data) - max(0, written - len(gap))
                return
            self.failure, self.dropped = None, 0

    def _failed(self, err: OSError) -> None:
        if self._fd is not None:
            _close(self._fd)
            self._fd = None
        self.failure, self._retry_at = err, time.monotonic() + RETRY_SECONDS

    def _gap(self) -> bytes:
        """What the log says where output is missing, on a line of its own."""
        assert self.failure is not None
        words = f"[\u2026 {self.dropped:,} bytes of output not written: {_why(self.failure)}]\n"
        return (b"" if self._line_ended else b"\n") + words.encode()

    def _rotating(self, data: bytes) -> None:
        """Write `data`, rotating the file where it would grow past max_bytes."""
        while data:
            room = self.max_bytes - self._size
            if len(data) <= room:
                self._append(data)
                return
            # Rotate at a line's end where one fits, so each file starts with a whole line.
            cut = data.rfind(b"\n", 0, room) + 1 if room > 0 else 0
            if cut == 0 and self._size == 0:
                cut = room  # a line longer than a whole file: the file takes what fits
            if cut:
                self._append(data[:cut])
                data = data[cut:]
            self._rotate()

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            self._size += written
            self._written += written
            if written:
                self._line_ended = view[written - 1] == ord("\n")
            view = view[written:]

    def _open(self) -> None:
        # Appending: a retried attempt's output follows the one before it.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Read too, for its last byte: a line the log ends with open is ended before a gap's note.
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._line_ended = _ended_by_newline_at(self._fd, self._size)

    def _rotate(self) -> None:
        assert self._fd is not None
        _close(self._fd)
        self._fd = None
        if self.keep:
            for n in range(self.keep - 1, 0, -1):
                older = self._numbered(n)
                if older.exists():
                    os.replace(older, self._numbered(n + 1))
            os.replace(self.path, self._numbered(1))
        else:
            self.path.unlink(missing_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        self._size, self._line_ended = 0, True

    def _numbered(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def tail(self, lines: int = 20) -> list[str]:
        """The newest `lines` lines, oldest first, across a rotation; read from the files' ends."""
        return self.tail_text(lines).lines

    def tail_text(self, lines: int) -> LogText:
        """The newest `lines` lines, and where the output goes on from them (for `since`)."""
        files = self._open_files()
        found: list[bytes] = []
        try:
            if not files:
                return LogText([], False, "")
            end = files[0].seek(0, os.SEEK_END)
            more = LogText([], not _ended_by_newline(files[0]), _cursor(files[0], end))
            for index, file in enumerate(files):
                if len(found) > lines or lines <= 0:
                    break
                # A file's last line has no newline yet, or it continues in the newer file: either
                # way it is glued to what was found so far.
                newer = found.pop(0) if found and not _ended_by_newline(file) else None
                block = _last_lines(file, lines + 1 - len(found), end if index == 0 else None)
                if newer is not None:
                    block[-1:] = [(block[-1] if block else b"") + newer]
                found = block + found
        finally:
            for file in files:
                file.close()
        more.lines = (
            [line.decode("utf-8", errors="replace") for line in found[-lines:]] if lines > 0 else []
        )
        return more

    def since(self, cursor: str, max_bytes: int = SINCE_BYTES) -> LogText:
        """The output written after `cursor` (a LogText's `next`), across rotations, at most about
        `max_bytes` of it (cut at a line's end where one is in it). A cursor whose file was
        rotated away starts at the oldest output kept. ValueError for a cursor that is none."""
        inode, offset, first_bytes = _parse_cursor(cursor)
        files = self._open_files()
        try:
            if not files:
                return LogText([], False, cursor)
            index = next(
                (
                    i
                    for i, f in enumerate(files)
                    if os.fstat(f.fileno()).st_ino == inode
                    and offset <= f.seek(0, os.SEEK_END)
                    and _first_bytes_sum(f, offset) == first_bytes
                ),
                None,
            )
            # Output rotated away before it was asked for: said, not silently skipped.
            gap = [ROTATED_AWAY] if cursor and index is None else []
            if index is None:
                index, offset = len(files) - 1, 0
            data = b""
            while True:
                file = files[index]
                file.seek(offset)
                chunk = file.read(max_bytes - len(data))
                offset += len(chunk)
                if len(data) + len(chunk) >= max_bytes:  # the rest next time, from a line's end
                    cut = chunk.rfind(b"\n") + 1
                    if cut:
                        offset -= len(chunk) - cut
                        chunk = chunk[:cut]
                    data += chunk
                    break
                data += chunk
                if index == 0:
                    break
                index, offset = index - 1, 0
            text = LogText(
                [], bool(data) and not data.endswith(b"\n"), _cursor(files[index], offset)
            )
            if data:
                pieces = data[: -1 if data.endswith(b"\n") else None].split(b"\n")
                text.lines = [piece.decode("utf-8", errors="replace") for piece in pieces]
            text.lines[:0] = gap
            return text
        finally:
            for file in files:
                file.close()

    def _open_files(self) -> list[IO[bytes]]:
        """The log's files, newest first. Opened at once under the lock: a rotation after that
        renames them but the open files stay the same ones, so what is read is consecutive."""
        with self._lock:
            files = []
            for candidate in [self.path] + [self._numbered(n) for n in range(1, self.keep + 1)]:
                file = _open_log(candidate)
                if file is None:
                    break
                files.append(file)
        return files

    def close(self) -> None:
        """Wait for the threads to read their streams to the end (the job's process has ended),
        then close the file; output after this is not written."""
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            self._closed = True
            if self._fd is not None:
                _close(self._fd)
                self._fd = None


def _open_log(path: Path) -> IO[bytes] | None:
    """One of the log's files for reading, or None where there is none: a request reads it, so
    whatever else stands at its name (a link, a named pipe someone made there) is not opened or
    waited on, and reads as no more log."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError:  # missing, or a link (O_NOFOLLOW)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _cursor(file: IO[bytes], offset: int) -> str:
    """A place in the log: the file (its inode, which a rotation keeps, and a checksum of its first
    bytes, which tells it from a newer file given the same inode once it was deleted) and the
    offset in it."""
    return f"{os.fstat(file.fileno()).st_ino}:{offset}:{_first_bytes_sum(file, offset):08x}"


def _first_bytes_sum(file: IO[bytes], offset: int) -> int:
    """The CRC-32 of the file's bytes before `offset`, the first 64 at most: written once and
    never changed, so the same for every place in the same file."""
    file.seek(0)
    return zlib.crc32(file.read(min(offset, _FINGERPRINT_BYTES)))


def _parse_cursor(cursor: str) -> tuple[int, int, int]:
    if not cursor:  # before any output: from the oldest kept
        return -1, 0, 0
    match = re.fullmatch(r"([0-9]{1,30}):([0-9]{1,20}):([0-9a-f]{8})", cursor)
    if match is None:
        raise ValueError(f"{cursor!r} is not a place in a job's log (an earlier answer's next)")
    return int(match[1]), int(match[2]), int(match[3], 16)


def _why(failure: OSError) -> str:
    if failure.errno == errno.ENOSPC:
        return "the disk is full"
    if failure.errno == errno.EDQUOT:
        return "the disk quota is used up"
    return (failure.strerror or str(failure)).lower()


def _close(fd: int) -> None:
    try:
        os.close(fd)  # closed even where it reports an error (Linux): the last write's, told before
    except OSError:
        pass


def _ended_by_newline_at(fd: int, size: int) -> bool:
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


def _pieces(chunk: bytes) -> list[bytes]:
    """`chunk` split after each newline (a carriage return ends no line: a progress bar redraws with it)."""
    pieces = chunk.split(b"\n")
    last = pieces.pop()
    return [piece + b"\n" for piece in pieces] + ([last] if last else [])


def _ended_by_newline(file: IO[bytes]) -> bool:
    end = file.seek(0, os.SEEK_END)
    if end == 0:
        return True
    file.seek(end - 1)
    return file.read(1) == b"\n"


def _last_lines(file: IO[bytes], count: int, end: int | None = None) -> list[bytes]:
    """The last `count` lines of `file` up to `end` (its end by default; without their newlines),
    reading blocks backwards until enough newlines are seen."""
    if end is None:
        end = file.seek(0, os.SEEK_END)
    data = b""
    position = end
    while position > 0 and data.count(b"\n") <= count:
        step = min(_TAIL_BLOCK, position)
        position -= step
        file.seek(position)
        data = file.read(step) + data
    if data.endswith(b"\n"):
        data = data[:-1]
    if not data and position == 0:
        return []
    found = data.split(b"\n")
    if position > 0:
        found = found[1:]  # the first piece is the end of a line that began before the block
    return found[-count:] if count > 0 else []
