"""One runtime writes a workspace at a time: a lease in the store, taken and renewed by
compare-and-swap, kept alive by its own thread, and a fence before every write.

`.gpuws/lease.json` names the holder, its host and its heartbeat. Every change to it is a
conditional write (`Backend.write_if`: S3's If-None-Match / If-Match on the ETag, a lock file on
a local folder), so of two runtimes that try at once exactly one wins. The holder renews it every
`ttl / 4` from a thread of its own, so a long pass never lets it lapse; it counts its lease valid
only until `ttl - ttl / 4` after the start of its last successful renewal (monotonic time), and
writes nothing after that (`fence()`). A runtime that finds the lease held waits, and takes it
over by itself once the holder's heartbeat is older than `ttl`: the holder stopped writing a
quarter of `ttl` before that, which is the room left for clocks that disagree. Where the store
offers no compare-and-swap (`Backend.conditional_writes()` says why), the lease is advisory and
the status says so.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from .backend import PreconditionFailed
from .errors import LeaseCorruptError, LeaseHeldError, LeaseLostError, SyncError
from .store import Store

log = logging.getLogger(__name__)

LEASE_NAME = "lease.json"
# Where the store has no compare-and-swap: wait this long after writing before reading back
# who won (a concurrent writer's lease lands meanwhile). No lock, only fewer collisions.
ADVISORY_SETTLE = 0.5


@dataclass
class LeaseInfo:
    holder: str
    host: str
    pid: int
    user: str
    acquired: float
    heartbeat: float
    expires: float
    ttl: float = 0.0

    @classmethod
    def parse(cls, data: bytes) -> LeaseInfo:
        """The lease as stored; LeaseCorruptError when it is not one (truncated, foreign)."""
        try:
            value = json.loads(data)
            info = cls(**{name: value[name] for name in cls.__dataclass_fields__ if name in value})
            info.pid, info.expires, info.heartbeat = int(info.pid), float(info.expires), float(info.heartbeat)
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise LeaseCorruptError(
                f"The workspace lease ({LEASE_NAME}) is unreadable ({type(err).__name__}: {err}); "
                "take over to replace it"
            ) from None
        return info

    def who(self) -> str:
        return f"{self.user}@{self.host} (pid {self.pid})"

    def describe(self, now: float) -> str:
        left = self.expires - now
        state = f"expires in {left:.0f} s" if left > 0 else f"expired {-left:.0f} s ago"
        return f"{self.who()}, {state}"


class Lease:
    def __init__(self, store: Store, ttl: float = 20.0, clock: Callable[[], float] = time.time,
                 host: str | None = None) -> None:
        if ttl <= 0:
            raise ValueError("lease_ttl must be positive")
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self.host = host or socket.gethostname()
        self.holder = uuid.uuid4().hex
        self.held = False
        # The tag (ETag) of our last write: a renewal succeeds only if nobody wrote since.
        self._tag: str | None = None
        self._acquired: float | None = None
        # Monotonic times: writes are allowed from `write_after` until `valid_until`.
        self.valid_until = 0.0
        self.write_after = 0.0
        self._lock = threading.Lock()
        self._advisory: str | None = None
        self._advisory_checked = False
        self.info: LeaseInfo | None = None  # what we last wrote

    @property
    def margin(self) -> float:
        """How long before the lease's expiry the holder stops writing: a renewal interval."""
        return self.ttl / 4

    @property
    def advisory(self) -> str | None:
        """Why this lease cannot stop another runtime from writing (no compare-and-swap in the
        store), or None when it is exclusive."""
        if not self._advisory_checked:
            self._advisory = self.store.backend.conditional_writes()
            self._advisory_checked = True
        return self._advisory

    # -- reading ---------------------------------------------------------------------------------

    def current(self) -> LeaseInfo | None:
        found = self._read()
        return None if found is None else found[0]

    def _read(self) -> tuple[LeaseInfo, str] | None:
        raw = self.store.backend.read_tagged(self.store.state_key(LEASE_NAME))
        if raw is None:
            return None
        data, tag = raw
        try:
            return LeaseInfo.parse(data), tag
        except LeaseCorruptError as err:
            err.tag = tag  # type: ignore[attr-defined]  # what an explicit take-over replaces
            raise

    def takeover_at(self, info: LeaseInfo) -> float | None:
        """When (wall clock) this runtime may take the lease over by itself; None: now."""
        if self._dead_here(info):
            return None
        return info.expires

    # -- taking, renewing, releasing ---------------------------------------------------------------

    def acquire(self, take_over: bool = False) -> LeaseInfo:
        """Take the lease if it is free, ours, expired, or held by a dead process of this host;
        with `take_over` (the user's word) also from a live holder: then nothing is written
        until that holder's lease would have expired, by which time it has stopped writing.
        Raises LeaseHeldError (held by another), LeaseCorruptError (unreadable, and no
        `take_over`)."""
        with self._lock:
            self.advisory  # noqa: B018 - asks the store once, before the first write
            try:
                found = self._read()
            except LeaseCorruptError as err:
                if not take_over:
                    raise
                found, tag = None, getattr(err, "tag", None)
            else:
                tag = found[1] if found else None
            now = self.clock()
            wait = 0.0
            if found is not None:
                info = found[0]
                if info.holder != self.holder and now < info.expires and not self._dead_here(info):
                    if not take_over:
                        raise LeaseHeldError(
                            f"Another runtime is writing this workspace: {info.who()}. This one is read-only "
                            "and takes over by itself once that runtime stops renewing its lease."
                        )
                    wait = info.expires - now
            info = self._write(now, tag, acquired=None)
            self.write_after = time.monotonic() + wait
            return info

    def renew(self) -> LeaseInfo:
        """Heartbeat. Raises LeaseLostError when another runtime wrote the lease since ours."""
        with self._lock:
            if not self.held and self._tag is None:
                raise LeaseLostError("This runtime does not hold the workspace lease")
            return self._write(self.clock(), self._tag, acquired=self._acquired)

    def _write(self, now: float, tag: str | None, acquired: float | None) -> LeaseInfo:
        try:
            user = getpass.getuser()
        except Exception:
            user = "unknown"
        info = LeaseInfo(holder=self.holder, host=self.host, pid=os.getpid(), user=user,
                         acquired=acquired if acquired is not None else now, heartbeat=now,
                         expires=now + self.ttl, ttl=self.ttl)
        started = time.monotonic()
        data = json.dumps(asdict(info), indent=1).encode()
        key = self.store.state_key(LEASE_NAME)
        for attempt in range(2):
            try:
                self._tag = self.store.backend.write_if(key, data, tag)
                if self.advisory:
                    self._tag = self._confirm_advisory(key)
                break
            except PreconditionFailed:
                # Our own earlier write may have landed with its reply lost (the tag we know is
                # stale): then the lease still names us, and its tag is the one to write over.
                found = self._read() if attempt == 0 else None
                if found is not None and found[0].holder == self.holder:
                    tag = found[1]
                    continue
                self._lost()
                who = found[0].who() if found else "another runtime"
                raise LeaseLostError(f"Another runtime took the workspace lease: {who}. "
                                     "This one is read-only.") from None
        self.held = True
        self._acquired = info.acquired
        self.valid_until = started + self.ttl - self.margin
        self.info = info
        return info

    def _confirm_advisory(self, key: str) -> str:
        """No compare-and-swap: let a concurrent writer's lease land, then see who won."""
        time.sleep(ADVISORY_SETTLE)
        raw = self.store.backend.read_tagged(key)
        if raw is None or LeaseInfo.parse(raw[0]).holder != self.holder:
            raise PreconditionFailed(key)
        return raw[1]

    def release(self) -> None:
        """Expire the lease at once, so the next runtime need not wait."""
        with self._lock:
            if not self.held:
                return
            now = self.clock()
            try:
                found = self._read()
                if found is not None and found[0].holder == self.holder:
                    info = found[0]
                    info.heartbeat = info.expires = now
                    self.store.backend.write_if(self.store.state_key(LEASE_NAME),
                                                json.dumps(asdict(info), indent=1).encode(), found[1])
            except (PreconditionFailed, SyncError) as err:
                log.debug("Sync: lease not released (%s); it expires by itself", err)
            self._lost()

    def _lost(self) -> None:
        self.held = False
        self._tag = None
        self.valid_until = 0.0

    # -- the fence -------------------------------------------------------------------------------

    def valid(self) -> bool:
        now = time.monotonic()
        return self.held and self.write_after <= now < self.valid_until

    def fence(self) -> None:
        """Before every write to the store: raises LeaseLostError unless the lease is ours and
        was renewed recently enough that no other runtime can have taken it."""
        if self.valid():
            return
        now = time.monotonic()
        if not self.held:
            raise LeaseLostError("This runtime no longer holds the workspace lease: writing stopped")
        if now < self.write_after:
            raise LeaseLostError(f"Taking over the workspace: writing starts in {self.write_after - now:.0f} s, "
                                 "once the previous runtime's lease has run out")
        raise LeaseLostError("The workspace lease could not be renewed in time (is the store answering?): "
                             "writing paused until it is")

    def _dead_here(self, info: LeaseInfo) -> bool:
        """A lease held by a process of this machine that no longer exists (a crashed server
        restarted on the same machine) need not be waited for."""
        if info.host != self.host or info.pid == os.getpid():
            return False
        try:
            os.kill(info.pid, 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OverflowError):
            return False
        return False


class LeaseKeeper:
    """The lease's own thread: renews it while held (so a long pass never lets it lapse), and
    while another runtime holds it, watches for that runtime to stop and takes over by itself.

    `on_change(held, reason)` is told whenever this runtime starts or stops being the writer.
    """

    def __init__(self, lease: Lease, on_change: Callable[[bool, str | None], None]) -> None:
        self.lease = lease
        self.on_change = on_change
        self.error: str | None = None  # the last renewal or take-over failure, for the status
        self.waiting_for: LeaseInfo | None = None  # the other holder, while read-only
        self.corrupt: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuws-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._step())
            self._wake.clear()

    def _step(self) -> float:
        """One look at the lease; returns how long to sleep until the next."""
        lease = self.lease
        interval = lease.ttl / 4
        if lease.held:
            try:
                lease.renew()
                self.error = None
                return interval
            except LeaseLostError as err:
                self.error = None
                self.on_change(False, str(err))
                return min(1.0, interval)
            except SyncError as err:
                # The store does not answer: keep trying; fence() stops the writes once the lease
                # may have run out, and a later renewal resumes them if nobody took it meanwhile.
                self.error = f"Cannot renew the workspace lease: {err}"
                return min(1.0, interval)
        try:
            info = lease.current()
            self.corrupt = None
        except LeaseCorruptError as err:
            self.corrupt = str(err)
            return interval
        except SyncError as err:
            self.error = f"Cannot read the workspace lease: {err}"
            return min(1.0, interval)
        self.waiting_for = info
        now = lease.clock()
        due = None if info is None else lease.takeover_at(info)
        if due is not None and info is not None and info.holder != lease.holder and now < due:
            # Look again a little after it is due, or sooner: its holder may have released it.
            return max(0.05, min(due - now + 0.05, interval))
        try:
            lease.acquire()
        except LeaseHeldError:
            return min(1.0, interval)
        except (LeaseLostError, LeaseCorruptError, SyncError) as err:
            self.error = str(err)
            return min(1.0, interval)
        self.error = None
        self.waiting_for = None
        log.info("Sync: took over the workspace lease from %s", info.who() if info else "nobody")
        self.on_change(True, None)
        return interval


def lease_status(lease: Lease, keeper: LeaseKeeper) -> dict[str, Any]:
    """What the panel shows about the lease: who holds it, until when, and whether it is
    exclusive; from what the lease's thread last wrote or read (no request to the store)."""
    info = lease.info if lease.held else keeper.waiting_for
    error = keeper.corrupt or keeper.error
    now_mono = time.monotonic()
    return {
        "lease": asdict(info) if info else None,
        "lease_held": lease.held,
        "lease_writing": lease.valid(),
        "lease_error": error or (keeper.error if keeper else None),
        "lease_exclusive": lease._advisory_checked and lease._advisory is None,
        "lease_note": lease._advisory,
        "takeover_at": None if info is None or info.holder == lease.holder else lease.takeover_at(info),
        "writes_start_in": max(0.0, lease.write_after - now_mono) if lease.held else None,
    }
