"""SIGTERM in a process that tracks its training: a checkpoint at the next safe step, then the end
the signal would have made (or the handler the program had), within the grace that Kubernetes,
torchrun and Jupyter give before SIGKILL.

One per process, installed by `track()` from the main thread (only it may set a handler), used by
the plain tracker and the distributed one alike:

- the signal asks the tracker for a checkpoint at its next `step()`; that step saves, waits until
  the checkpoint is complete, and then ends the process as SIGTERM would have (killed by it), or
  calls the program's own handler and goes on, or goes on where the program ignores SIGTERM;
- no save within STEP_WAIT seconds of the signal (the loop has ended, or hangs): the process ends
  without a checkpoint, and says so in one line;
- a second SIGTERM ends it at once;
- a SIGTERM within JUST_REQUESTED seconds of a checkpoint the server asked for (the server asks
  before it stops a job) ends the process without another, in one process (not a torchrun rank);
- in an IPython kernel, a kernel with no cell running saves now (the state is the last cell's),
  and a cell that ends without a step after the signal saves at its end; then the kernel ends;
- a process forked from this one (a DataLoader worker) ends on SIGTERM as it would have.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Without a save this long after SIGTERM (the loop has ended, or hangs), the process ends as
# SIGTERM would have ended it: torchrun and Kubernetes give about 30 s before SIGKILL.
STEP_WAIT = 15.0
# How long the end waits for the checkpoint taken for SIGTERM to be written (SIGKILL may come first).
WRITE_WAIT = 300.0
# A SIGTERM this soon after a checkpoint the server asked for ends without another: the server
# asks before it stops a job (and its emergency persist asks every run before its jobs stop),
# records that checkpoint's step and carries it to the store; one taken after it would not be
# the one recorded, and would take the grace's time.
JUST_REQUESTED = 30.0
# After passing the end on to the main thread: a main thread stuck in C (a collective) never runs
# a Python handler, so the process exits from the watcher this much later.
MAIN_THREAD_WAIT = 2.0


class Tracked(Protocol):
    """What of a tracker (tracker.py, distributed.py) the end by SIGTERM uses."""

    objects: dict[str, Any]
    last: Any  # the newest CheckpointInfo, or None
    last_error: str | None
    last_save_started: float  # monotonic
    requested_saved_at: float  # monotonic: a checkpoint a request of the server asked for

    @property
    def saves_alone(self) -> bool: ...
    @property
    def sigterm_label(self) -> str: ...
    @property
    def pending(self) -> Any: ...
    @property
    def writing(self) -> bool: ...
    def ask_on_sigterm(self) -> None: ...
    def checkpoint(self, wait: bool = False) -> Any: ...
    def wait(self, timeout: float | None = None) -> bool: ...


class Termination:
    """The SIGTERM handler of this process and the watcher thread that bounds its wait."""

    def __init__(self) -> None:
        self.tracker: Tracked | None = None
        self.previous: Any = signal.SIG_DFL  # the program's handler before ours
        self.signalled: float | None = None  # when the SIGTERM being handled arrived
        self.saved_for_the_server = False  # it came just after a checkpoint the server asked for
        self.pid = os.getpid()
        self.shell: Any = None  # the IPython shell, in a kernel
        self.cell_running = False
        self.exiting = False
        self._woken = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- set-up (the main thread) ----------------------------------------------------------------

    def install(self, tracker: Tracked) -> None:
        """Save `tracker`'s state on SIGTERM. Again in the same process: the newest tracker is
        the one saved; a handler the program set after ours is chained in its turn."""
        self.tracker = tracker
        if threading.current_thread() is not threading.main_thread():
            log.info("gpuws: track() outside the main thread: a SIGTERM will not save first")
            return
        current = signal.getsignal(signal.SIGTERM)
        if current != self._on_sigterm:  # ours already (a forked child's too): keep its previous
            try:
                signal.signal(signal.SIGTERM, self._on_sigterm)
            except ValueError:  # not the main interpreter
                return
            self.previous = current
        if self._watcher is None:
            atexit.register(self._at_exit)
        if self.pid != os.getpid() or self._watcher is None or not self._watcher.is_alive():
            # The first time, or in a forked child (which has no thread but the one that forked).
            self.pid, self.signalled, self._woken = os.getpid(), None, threading.Event()
            self._watcher = threading.Thread(target=self._watch, name="gpuws-sigterm", daemon=True)
            self._watcher.start()
        self._follow_cells()

    def _follow_cells(self) -> None:
        """In an IPython kernel: know whether a cell runs (the loop that will step)."""
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None or shell is self.shell:
            return
        self.shell = shell
        # track() runs inside a cell whose pre_run_cell has passed.
        self.cell_running = getattr(shell.displayhook, "exec_result", None) is not None
        shell.events.register("pre_run_cell", self._pre_run)
        shell.events.register("post_run_cell", self._post_run)

    def _at_exit(self) -> None:
        self.exiting = True  # the interpreter ends (a kernel shut down): no save starts now

    # -- the signal ------------------------------------------------------------------------------

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # A handler interrupts the loop anywhere, maybe holding a lock: it takes none and starts
        # nothing (the watcher thread, waiting already, says what happens).
        tracker = self.tracker
        if self.signalled is not None or os.getpid() != self.pid or tracker is None:
            self._end(frame)  # a second SIGTERM, or a forked child's: now
            return
        self.signalled = now = time.monotonic()
        # Attributes and an event's flag read, no lock taken: safe in a handler.
        self.saved_for_the_server = (
            tracker.saves_alone
            and now - tracker.requested_saved_at < JUST_REQUESTED
            and tracker.pending is None
            and not tracker.writing
        )
        if not self.saved_for_the_server:
            tracker.ask_on_sigterm()
        self._woken.set()

    def end_if_saved(self, tracker: Tracked) -> None:
        """At the step that saved (the main thread): once the checkpoint asked for by a SIGTERM is
        complete, end as the signal would have."""
        signalled = self.signalled
        if signalled is None or tracker.last_save_started < signalled or self.pid != os.getpid():
            return
        tracker.wait(WRITE_WAIT)
        if self.signalled == signalled:
            self._say_saved(tracker)
            self._end(sys._getframe(1))

    def _end(self, frame: FrameType | None) -> None:
        """End as SIGTERM would have without us: killed by it, the program's handler run (then
        the next SIGTERM saves again), or nothing where the program ignores it. The main thread."""
        previous, self.signalled = self.previous, None
        if previous is signal.SIG_IGN:
            return
        if callable(previous):
            previous(signal.SIGTERM, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _say_saved(self, tracker: Tracked) -> None:
        if self.previous is signal.SIG_IGN:
            then = "going on (this program ignores SIGTERM)"
        elif callable(self.previous):
            then = "passing SIGTERM on to the program's own handler"
        else:
            then = "ending"
        last = tracker.last
        if tracker.last_error or last is None:
            log.error("gpuws: no checkpoint after SIGTERM (%s): %s", tracker.last_error, then)
        else:
            log.warning("gpuws: checkpoint at step %d complete after SIGTERM: %s", last.step, then)

    # -- the watcher thread ----------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            self._woken.wait()
            self._woken.clear()
            signalled, tracker = self.signalled, self.tracker
            if signalled is None or tracker is None:
                continue
            if self.saved_for_the_server:
                log.warning(
                    "gpuws: SIGTERM %.1f s after the checkpoint the server asked for (step %s): "
                    "ending without another",
                    signalled - tracker.requested_saved_at,
                    tracker.last.step if tracker.last is not None else "?",
                )
                self._end_from_here(signalled, tracker)
                continue
            if self.shell is not None and not self.cell_running:
                self._save_outside_the_loop(tracker, "no cell runs")
                self._end_from_here(signalled, tracker)
                continue
            log.warning(
                "gpuws: SIGTERM%s: saving at the next step, then ending", tracker.sigterm_label
            )
            time.sleep(max(0.0, signalled + STEP_WAIT - time.monotonic()))
            if self.signalled != signalled:
                continue  # ended, or handled and gone on (the program's handler, SIG_IGN)
            if tracker.last_save_started < signalled:
                log.error(
                    "gpuws: no step() within %.0f s of SIGTERM: ending without a checkpoint",
                    STEP_WAIT,
                )
            else:  # saved, and still being written: the step that saved waits for it too
                tracker.wait(WRITE_WAIT)
            self._end_from_here(signalled, tracker)

    def _save_outside_the_loop(self, tracker: Tracked, why: str) -> None:
        """No loop to step (a kernel between cells, a cell that has ended): the state is still,
        so a save here is safe, as the kernel's agent saves for a request then. A distributed
        run's ranks save together, at a step: not here."""
        if self.exiting or not tracker.objects or not tracker.saves_alone:
            log.warning("gpuws: SIGTERM, and %s: ending without a checkpoint", why)
            return
        log.warning("gpuws: SIGTERM, and %s: saving now, then ending", why)
        try:
            tracker.checkpoint(wait=True)
        except Exception as err:  # the end goes on; the failure is said
            log.error("gpuws: no checkpoint after SIGTERM: %s", err)
        else:
            self._say_saved(tracker)

    def _end_from_here(self, signalled: float, tracker: Tracked) -> None:
        """End from the watcher: through our handler in the main thread (a SIGTERM after the first
        ends at once), or, where the main thread runs no Python, as SIGTERM's own action would."""
        if self.signalled != signalled:
            return
        if self.previous is signal.SIG_IGN:
            self.signalled = None
            return
        os.kill(os.getpid(), signal.SIGTERM)
        if self.previous in (signal.SIG_DFL, None):
            time.sleep(MAIN_THREAD_WAIT)
            os._exit(128 + signal.SIGTERM)

    # -- a kernel's cells (the main thread) ------------------------------------------------------

    def _pre_run(self, info: Any) -> None:
        self.cell_running = True

    def _post_run(self, result: Any) -> None:
        self.cell_running = False
        signalled, tracker = self.signalled, self.tracker
        if signalled is None or tracker is None or os.getpid() != self.pid:
            return
        if self.saved_for_the_server:  # the server's checkpoint is the one (the watcher says so)
            tracker.wait(WRITE_WAIT)
        elif tracker.last_save_started < signalled:
            self._save_outside_the_loop(tracker, "the cell ended without a step()")
        else:
            tracker.wait(WRITE_WAIT)
            self._say_saved(tracker)
        if self.signalled == signalled:
            self._end(None)

    def terminating(self) -> bool:
        return self.signalled is not None


_termination = Termination()


def install(tracker: Tracked) -> None:
    """Save `tracker` on SIGTERM (from `track()`; does nothing outside the main thread)."""
    _termination.install(tracker)


def end_if_saved(tracker: Tracked) -> None:
    """Call after a save at a step: ends the process once a SIGTERM's checkpoint is complete."""
    _termination.end_if_saved(tracker)


def terminating() -> bool:
    """Whether a SIGTERM is being handled (its checkpoint not yet taken or not yet complete)."""
    return _termination.terminating()
