"""One runtime writes a workspace at a time: a lease in the store, taken and renewed by
compare-and-swap, kept alive by its own thread, and a fence before every write.

`.gpuws/lease.json` names the holder, its host, its lifetime (`ttl`) and a renewal count. Every
change to it is a conditional write (`Backend.write_if`: S3's If-None-Match / If-Match on the
ETag, a lock file on a local folder), so of two runtimes that try at once exactly one wins. The
holder renews it every `ttl / 4` from a thread of its own, so a long pass never lets it lapse; it
counts its lease valid only until `ttl - ttl / 4` after the start of its last successful renewal
(monotonic time), and writes nothing after that (`fence()`).

Nothing the lease states about time is trusted: another machine's clock may run minutes ahead
or behind, and a corrupt or hostile file may say anything. A runtime that finds the lease held
judges it by how long its record (its tag, which changes with every write: each renewal counts
up) has been unchanged: the lease is free once that reaches the lease's `ttl`. The record's age
is measured on the store's own clock where the store has one (the record's modification time,
S3's Last-Modified, against that of a file this runtime writes into the same store just then:
two readings of one clock, never this machine's clock against another's), so a successor started
after a dead holder's lease ran out takes over at once; and on this machine's monotonic clock
from the moment it first saw the record, whichever is longer. The holder stopped writing a
quarter of `ttl` before that. The stated `ttl` is bounded
(`MAX_TTL`); a lease with non-finite, negative or absurd numbers is corrupt: Take over replaces
it at once, and one that nobody changes for `MAX_TTL` is free by itself. Where the store offers
no compare-and-swap (`Backend.conditional_writes()` says why), the lease is advisory and the
status says so.
"""

from __future__ import annotations

import getpass
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .backend import PreconditionFailed
from .errors import (
    LeaseCorruptError,
    LeaseHeldError,
    LeaseLostError,
    StoreUnavailableError,
    SyncError,
)
from .layout import Store

log = logging.getLogger(__name__)

LEASE_NAME = "lease.json"
# Where the store has no compare-and-swap: wait this long after writing before reading back
# who won (a concurrent writer's lease lands meanwhile). No lock, only fewer collisions.
ADVISORY_SETTLE = 0.5
# The longest lifetime a lease may state (the largest `lease_ttl` a runtime takes): a longer one
# is corrupt, and a corrupt lease that nobody changes for this long is free.
MAX_TTL = 3600.0
# Room for rounding between a lease's stated heartbeat, expiry and ttl; and what is taken off an
# age read on the store's clock (S3 states Last-Modified to the second).
SLACK = 1.0
# Under .gpuws/: the empty file a runtime writes to read the store's clock (one for all: two
# runtimes writing it at once read times a moment apart, which SLACK covers).
CLOCK_NAME = "clock"


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
    renewals: int = 0  # counts every write, so the record changes even under a frozen clock
    released: bool = False  # given back at a clean stop: free at once

    @classmethod
    def parse(cls, data: bytes) -> LeaseInfo:
        """The lease as stored, its numbers checked; LeaseCorruptError when it is not one
        (truncated, foreign) or states what no runtime writes (a non-finite, negative or absurd
        time or lifetime)."""
        try:
            value = json.loads(data)
            if not isinstance(value, dict):
                raise TypeError(f"a JSON {type(value).__name__}, not an object")
            info = cls(**{name: value[name] for name in cls.__dataclass_fields__ if name in value})
            for name in ("holder", "host", "user"):
                if not isinstance(getattr(info, name), str):
                    raise TypeError(f"{name} is not text")
            if not info.holder:
                raise ValueError("it names no holder")
            info.pid = _whole(info.pid, "pid")
            info.renewals = _whole(info.renewals, "renewals")
            for name in ("acquired", "heartbeat", "expires", "ttl"):
                setattr(info, name, _finite(getattr(info, name), name))
            if not isinstance(info.released, bool):
                raise TypeError("released is not true or false")
            info.ttl = info.ttl or info.expires - info.heartbeat  # written before ttl was stated
            if not 0 < info.ttl <= MAX_TTL:
                raise ValueError(
                    f"its lifetime is {info.ttl:g} s, outside the (0, {MAX_TTL:g}] s any runtime uses"
                )
            if not -SLACK <= info.expires - info.heartbeat <= info.ttl + SLACK:
                raise ValueError(
                    f"it expires {info.expires - info.heartbeat:g} s after its heartbeat, "
                    f"with a lifetime of {info.ttl:g} s"
                )
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
            raise LeaseCorruptError(
                f"The workspace lease ({LEASE_NAME}) is unreadable or corrupt ({err}); take over to replace it"
            ) from None
        return info

    def who(self) -> str:
        return f"{self.user}@{self.host} (pid {self.pid})"


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} is {value!r}")
    return number


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} is {value!r}, not a whole number")
    return value


class _Sighting:
    """What this runtime has seen of the lease record: its tag, and since when (monotonic) it
    has been that tag. The record's age, as measured here, is all that says it is left alone."""

    def __init__(self) -> None:
        self.tag: str | None = None
        self.since = 0.0

    def saw(self, tag: str | None) -> bool:
        """Note the tag read now; True when it is not the one seen before."""
        if tag == self.tag:
            return False
        self.tag, self.since = tag, time.monotonic()
        return True

    def aged(self, seconds: float) -> None:
        """The record was already this old when first seen here (by the store's clock)."""
        self.since = min(self.since, time.monotonic() - seconds)


class Lease:
    def __init__(
        self,
        store: Store,
        ttl: float = 20.0,
        clock: Callable[[], float] = time.time,
        host: str | None = None,
    ) -> None:
        if not 0 < ttl <= MAX_TTL:
            raise ValueError(f"lease_ttl must be positive and at most {MAX_TTL:g} s")
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self.host = host or socket.gethostname()
        self.holder = uuid.uuid4().hex
        self.held = False
        # The tag (ETag) of our last write: a renewal succeeds only if nobody wrote since.
        self._tag: str | None = None
        self._acquired: float | None = None
        self._renewals = 0
        # Monotonic times: writes are allowed from `write_after` until `valid_until`.
        self.valid_until = 0.0
        self.write_after = 0.0
        self._lock = threading.Lock()
        self._advisory: str | None = None
        self._advisory_checked = False
        self._seen = _Sighting()
        self._dated = False  # the lease record's age read on the store's clock (once)
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
            self._seen.saw(None)
            return None
        data, tag = raw
        new = self._seen.saw(tag)
        try:
            info = LeaseInfo.parse(data)
        except LeaseCorruptError as err:
            err.tag = tag  # type: ignore[attr-defined]  # what a take-over replaces
            raise
        # Dated by the store once, at this runtime's first look: later records are seen change
        # here (a renewal every ttl/4), and a read-only runtime writes nothing more to tell.
        if new and not self._dated and info.holder != self.holder and not info.released:
            self._dated = True
            self._seen.aged(self.store_age())
        return info, tag

    def store_age(self) -> float:
        """How long ago, by the store's own clock, the lease record was last written: its
        modification time against that of a file written into the same store now (less SLACK).
        0 where the store cannot say (it keeps no such time, or does not answer): then this
        machine's own sighting alone decides, as before."""
        backend = self.store.backend
        probe = self.store.state_key(CLOCK_NAME)
        try:
            written = backend.stat(self.store.state_key(LEASE_NAME))
            backend.write_bytes(probe, b"")
            now = backend.stat(probe)
        except (SyncError, OSError) as err:
            log.debug("Sync: the store's clock was not read: %s", err)
            return 0.0
        if written is None or now is None or not (written.mtime and now.mtime):
            return 0.0
        age = now.mtime - written.mtime - SLACK
        return min(max(0.0, age), MAX_TTL)

    def free_in(self, info: LeaseInfo | None) -> float:
        """Seconds, on this machine's clock, until the lease last read is free for this runtime:
        0 for none, ours, a released one, one of a dead process of this host, or one whose record
        has been unchanged for its lifetime since this runtime first saw it; None-safe."""
        if info is None or info.holder == self.holder or info.released or self._dead_here(info):
            return 0.0
        return max(0.0, info.ttl - (time.monotonic() - self._seen.since))

    def unchanged_for(self) -> float:
        """Seconds the lease record last read has been unchanged (by the store's clock where it
        dated it, else since this runtime first saw it)."""
        return max(0.0, time.monotonic() - self._seen.since)

    def corrupt_free_in(self) -> float:
        """Seconds until a corrupt lease that nobody changes is free by itself (MAX_TTL after it
        was first seen as it is)."""
        return max(0.0, MAX_TTL - (time.monotonic() - self._seen.since))

    def takeover_at(self, info: LeaseInfo) -> float | None:
        """When (this machine's wall clock) this runtime takes the lease over by itself if its
        holder renews it no more; None: now."""
        left = self.free_in(info)
        return None if left <= 0 else self.clock() + left

    # -- taking, renewing, releasing ---------------------------------------------------------------

    def acquire(self, take_over: bool = False) -> LeaseInfo:
        """Take the lease if it is free (see free_in); with `take_over` (the user's word) also
        from a live holder, writing nothing until that holder has stopped (the rest of its
        lifetime as measured here), and a corrupt lease is replaced at once. Raises
        LeaseHeldError (held by another), LeaseCorruptError (corrupt, and no `take_over`)."""
        with self._lock:
            self.advisory  # noqa: B018 - asks the store once, before the first write
            try:
                found = self._read()
            except LeaseCorruptError as err:
                if not take_over and self.corrupt_free_in() > 0:
                    raise
                found, tag = None, getattr(err, "tag", None)
            else:
                tag = found[1] if found else None
            wait = 0.0
            if found is not None:
                info = found[0]
                wait = self.free_in(info)
                if wait > 0 and not take_over:
                    raise LeaseHeldError(
                        f"Another runtime is writing this workspace: {info.who()}. This one is read-only, "
                        f"and takes over by itself in {wait:.0f} s if that runtime renews its lease no "
                        f"more (its lease runs out {info.ttl:.0f} s after its last renewal, as the "
                        "store's clock dates it)."
                    )
            self._renewals = found[0].renewals + 1 if found is not None else 0
            info = self._write(self.clock(), tag, acquired=None)
            self.write_after = time.monotonic() + wait
            return info

    def renew(self) -> LeaseInfo:
        """Heartbeat. Raises LeaseLostError when another runtime wrote the lease since ours, or
        it vanished from the store."""
        with self._lock:
            if not self.held and self._tag is None:
                raise LeaseLostError("This runtime does not hold the workspace lease")
            self._renewals += 1
            return self._write(self.clock(), self._tag, acquired=self._acquired)

    def _write(self, now: float, tag: str | None, acquired: float | None) -> LeaseInfo:
        try:
            user = getpass.getuser()
        except Exception:
            user = "unknown"
        info = LeaseInfo(
            holder=self.holder,
            host=self.host,
            pid=os.getpid(),
            user=user,
            acquired=acquired if acquired is not None else now,
            heartbeat=now,
            expires=now + self.ttl,
            ttl=self.ttl,
            renewals=self._renewals,
        )
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
                try:
                    found = self._read()
                except LeaseCorruptError as err:
                    if attempt > 0 or not self.held:
                        raise
                    # Our own lease made unreadable under us (truncated, or overwritten by a tool
                    # or a copy): no runtime can hold the workspace by a record nobody can read,
                    # so its holder writes it anew, over that record, and nothing waits an hour.
                    log.warning("Sync: %s; this runtime holds it and wrote it anew", err)
                    tag = getattr(err, "tag", None)
                    continue
                if found is not None and found[0].holder == self.holder:
                    if attempt == 0:
                        tag = found[1]
                        continue
                    # Refused twice though the lease is still ours, with its own tag: the store
                    # (or a proxy in front of it) mishandles conditional writes. Not lost: the
                    # keeper retries, and fence() stops writes if the lease may run out.
                    raise StoreUnavailableError(
                        "The store refused this runtime's own conditional write of its lease "
                        "(412 Precondition Failed) although the lease is still this runtime's: "
                        "the store or a proxy in front of it mishandles If-Match; retrying"
                    ) from None
                self._lost()
                if found is None:
                    raise LeaseLostError(
                        "The workspace lease vanished from the store (was the store emptied, "
                        "replaced or remounted?): this runtime stopped writing"
                    ) from None
                who = found[0].who() if found else "another runtime"
                raise LeaseLostError(
                    f"Another runtime took the workspace lease: {who}. This one is read-only."
                ) from None
        self._seen.saw(self._tag)
        self.held = True
        self._acquired = info.acquired
        self.valid_until = started + self.ttl - self.margin
        self.info = info
        return info

    def _confirm_advisory(self, key: str) -> str:
        """No compare-and-swap: let a concurrent writer's lease land, then see who won."""
        time.sleep(ADVISORY_SETTLE)
        raw = self.store.backend.read_tagged(key)
        try:
            won = raw is not None and LeaseInfo.parse(raw[0]).holder == self.holder
        except LeaseCorruptError:
            won = False
        if not won or raw is None:
            raise PreconditionFailed(key)
        return raw[1]

    def release(self) -> None:
        """Give the lease back at once, so the next runtime need not wait."""
        with self._lock:
            if not self.held:
                return
            now = self.clock()
            try:
                found = self._read()
                if found is not None and found[0].holder == self.holder:
                    info = found[0]
                    info.heartbeat = info.expires = now
                    info.renewals += 1
                    info.released = True
                    self.store.backend.write_if(
                        self.store.state_key(LEASE_NAME),
                        json.dumps(asdict(info), indent=1).encode(),
                        found[1],
                    )
            except (PreconditionFailed, SyncError) as err:
                log.debug("Sync: lease not released (%s); it runs out by itself", err)
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
            raise LeaseLostError(
                "This runtime no longer holds the workspace lease: writing stopped"
            )
        if now < self.write_after:
            raise LeaseLostError(
                f"Taking over the workspace: writing starts in {self.write_after - now:.0f} s, "
                "once the previous runtime has stopped writing"
            )
        raise LeaseLostError(
            "The workspace lease could not be renewed in time (is the store answering?): "
            "writing paused until it is"
        )

    def _dead_here(self, info: LeaseInfo) -> bool:
        """A lease held by a process of this machine that no longer exists (a crashed server
        restarted on the same machine) need not be waited for."""
        if info.host != self.host or info.pid == os.getpid():
            return False
        try:
            os.kill(info.pid, 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OverflowError, ValueError):
            return False
        return False


class LeaseKeeper:
    """The lease's own thread: renews it while held (so a long pass never lets it lapse), and
    while another runtime holds it, watches for that runtime to stop and takes over by itself.

    `on_change(held, reason)` is told whenever this runtime starts or stops being the writer;
    `on_gap()` when a renewal succeeds again after failing (the store was away meanwhile).
    """

    def __init__(
        self,
        lease: Lease,
        on_change: Callable[[bool, str | None], None],
        on_gap: Callable[[], None] | None = None,
    ) -> None:
        self.lease = lease
        self.on_change = on_change
        self.on_gap = on_gap
        self.error: str | None = None  # the last renewal or take-over failure, for the status
        self.cause: Exception | None = None  # the error behind it (a store gone missing, …)
        self.waiting_for: LeaseInfo | None = None  # the other holder, while read-only
        self.corrupt: str | None = None
        # Monotonic time the thread's request to the store began, while one is in flight: a
        # renewal that hangs on a stalled store is work waiting on it, like a pass.
        self.asking_since: float | None = None
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
            self.asking_since = time.monotonic()
            try:
                delay = self._step()
            except Exception as err:  # noqa: BLE001 - the lease's thread must live on
                log.exception("Sync: the lease's thread failed")
                self.error = f"The workspace lease could not be looked at: {err}"
                delay = 1.0
            finally:
                self.asking_since = None
            self._wake.wait(delay)
            self._wake.clear()

    def _step(self) -> float:
        """One look at the lease; returns how long to sleep until the next."""
        lease = self.lease
        interval = lease.ttl / 4
        if lease.held:
            try:
                lease.renew()
            except LeaseLostError as err:
                self.error = None
                self.on_change(False, str(err))
                return min(1.0, interval)
            except SyncError as err:
                # The store does not answer: keep trying; fence() stops the writes once the lease
                # may have run out, and a later renewal resumes them if nobody took it meanwhile.
                self.error, self.cause = f"Cannot renew the workspace lease: {err}", err
                return min(1.0, interval)
            if self.error is not None:
                self.error = self.cause = None
                if self.on_gap is not None:
                    self.on_gap()
            return interval
        try:
            info = lease.current()
            self.corrupt = None
            if isinstance(self.cause, StoreUnavailableError):
                self.error = self.cause = None  # the store answers again
        except LeaseCorruptError as err:
            left = lease.corrupt_free_in()
            self.corrupt = f"{err}. Unchanged, it is replaced by itself in {left:.0f} s."
            self.waiting_for = None
            if left > 0:
                return min(max(0.05, left + 0.05), max(interval, 1.0))
            info = None
        except SyncError as err:
            self.error, self.cause = f"Cannot read the workspace lease: {err}", err
            return min(1.0, interval)
        self.waiting_for = info
        left = lease.free_in(info)
        if left > 0:
            # Look again a little after it is due, or sooner: its holder may renew or release it.
            return max(0.05, min(left + 0.05, interval))
        try:
            lease.acquire()
        except LeaseHeldError:
            return min(1.0, interval)
        except (LeaseCorruptError, SyncError) as err:
            self.error, self.cause = str(err), err
            return min(1.0, interval)
        self.error = self.corrupt = self.cause = None
        self.waiting_for = None
        log.info("Sync: took over the workspace lease from %s", info.who() if info else "nobody")
        self.on_change(True, None)
        return interval


def lease_status(lease: Lease, keeper: LeaseKeeper) -> dict[str, Any]:
    """What the panel shows about the lease: who holds it, whether it is exclusive, and when
    this runtime takes it over by itself if its holder renews it no more (this machine's clock:
    what will actually happen); from what the lease's thread last wrote or read (no request)."""
    info = lease.info if lease.held else keeper.waiting_for
    now_mono = time.monotonic()
    other = info is not None and info.holder != lease.holder
    return {
        "lease": asdict(info) if info else None,
        "lease_held": lease.held,
        "lease_writing": lease.valid(),
        "lease_error": keeper.corrupt or keeper.error,
        "lease_exclusive": lease._advisory_checked and lease._advisory is None,
        "lease_note": lease._advisory,
        "takeover_at": lease.takeover_at(info) if other and info is not None else None,
        # Seconds since this runtime last saw the other holder's lease change (its renewal).
        "lease_unchanged_for": lease.unchanged_for() if other else None,
        "writes_start_in": max(0.0, lease.write_after - now_mono) if lease.held else None,
    }
