"""A job's supervisor: it starts the job's command as its child and, as Linux's child subreaper for
every process the command starts (a `setsid` daemon, a double fork), ends all of them when the
job's main process ends, when the job is stopped and when the server is gone; then it exits as
the command did (its exit code, or killed by the same signal), which is what the server reads.

The job manager runs it in the job's new session, so it leads the job's process group: the
manager's SIGTERM to the group reaches the command and its ranks as before. Its arguments:

    python -I -S reaper.py GRACE SERVER_PID REPORT_FD COMMAND...

GRACE: seconds the job has to end after a SIGTERM before everything left gets SIGKILL (the
processes left behind by a main process that ended get SIGTERM, then SIGKILL after the same
grace). SERVER_PID: its parent, the server; SIGUSR1 from it means "end everything now" (its own,
possibly shorter, grace is over). REPORT_FD: the write end of a pipe, closed once the command
runs, or given the errno of an exec that failed (the manager raises it as Popen would).

It starts with every job, so it imports only the lightest of the standard library."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

NOW = signal.SIGUSR1
# Blocked here and taken one by one: none of them ends the supervisor behind the job's back (a
# `kill -INT 0` in a job's script reaches it too). The command starts with the mask it was given.
WATCHED = {
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
}
# While processes end: how often the tree is looked at again (new forks may appear).
POLL = 0.02


class Supervisor:
    def __init__(self, grace: float, server: int) -> None:
        self.grace = grace
        self.server = server
        self.child = 0
        self.status: int | None = None  # the command's wait status, once reaped
        self.deadline: float | None = None  # stopped: when everything left gets SIGKILL
        self.now = False  # the server's word: everything ends at once
        self.termed: set[int] = set()  # the processes this one sent SIGTERM

    def run(self, command: list[str], report: int, libc: ctypes.CDLL) -> int:
        # Only what this process waits for is blocked here, and nothing in the command: a job
        # starts with no signal blocked, as from a shell, whatever the mask of the server's
        # thread that started this process (one with every signal blocked made a job that no
        # SIGTERM could stop at its checkpoint).
        signal.pthread_sigmask(signal.SIG_SETMASK, WATCHED)
        mask: set[int] = set()
        os.set_inheritable(report, False)  # the command's exec closes it
        # Orphans of the job come here, not to init, where they would run on; the server's end
        # comes here too (a SIGTERM, passed on to the job as the job got it before).
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != self.server:  # gone before this process could know: nothing starts
            return 1
        self.child = _start(command, mask, report, libc)
        os.close(report)
        self._wait_for_the_command()
        self._end_the_rest()
        assert self.status is not None
        return os.waitstatus_to_exitcode(self.status)

    def _wait_for_the_command(self) -> None:
        while self.status is None and not self.now:
            if self.deadline is None:
                self._take(signal.sigwaitinfo(WATCHED))
                continue
            info = signal.sigtimedwait(WATCHED, max(0.0, self.deadline - time.monotonic()))
            if info is None:  # the grace is over
                return
            self._take(info)

    def _take(self, info: signal.struct_siginfo) -> None:
        if info.si_signo == signal.SIGCHLD:
            self._reap()
        elif info.si_signo == signal.SIGTERM and self.deadline is None:
            self.deadline = time.monotonic() + self.grace
            if not self._group_has_it(info):
                os.killpg(0, signal.SIGTERM)  # this process's own copy is taken and passed over
            # And to the orphans that left the group (a daemon): no parent passes it on to them,
            # as torchrun does to its ranks (a second SIGTERM would end those before their save).
            group, me = os.getpgrp(), os.getpid()
            orphans = [
                p.pid for p in _below() if p.ppid == me and p.pid != self.child and p.pgid != group
            ]
            _signal(orphans, signal.SIGTERM)
            self.termed.update(orphans)
        elif info.si_signo == NOW and info.si_pid == self.server:
            self.now = True

    def _group_has_it(self, info: signal.struct_siginfo) -> bool:
        """A SIGTERM the job's processes got too: one of the job's own to its group. The server's
        comes to this process alone (a stop), and so does the kernel's parent-death signal when
        the server dies, in the server's name: both are passed on to the group."""
        if info.si_pid == self.server:
            return False
        try:
            return os.getpgid(info.si_pid) == os.getpgrp()
        except OSError:
            return False

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.status = status

    def _end_the_rest(self) -> None:
        """The command has ended (or its grace is over: then SIGKILL to all at once): SIGTERM to
        every process of the job still there that has not had one from this stop, SIGKILL to
        what is left at the deadline, until none is left; all reaped."""
        stopped = self.deadline is not None  # the group had its SIGTERM
        if self.deadline is None:
            self.deadline = time.monotonic() + self.grace
        if self.status is None:  # the command outlived its grace: no more of it
            self.now = True
        group = os.getpgrp()
        while not self.now and (left := _below()):
            fresh = [
                p.pid
                for p in left
                if p.pid not in self.termed and not (stopped and p.pgid == group)
            ]
            _signal(fresh, signal.SIGTERM)
            self.termed.update(fresh)
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                break
            info = signal.sigtimedwait(WATCHED, min(POLL, wait))
            if info is not None:
                self._take(info)
        while left := _below():
            _signal([p.pid for p in left], signal.SIGKILL)
            self._reap()
            signal.sigtimedwait({signal.SIGCHLD}, POLL)
        # None is left alive: what remains are zombies, all this process's children by now.
        self._reap()
        if self.status is None:
            self.status = os.waitpid(self.child, 0)[1]


def _start(command: list[str], mask: set[int], report: int, libc: ctypes.CDLL) -> int:
    """The command, as the job's main process: this process's environment as the server gave it,
    no signal blocked, and the dispositions a job had before (Python ignores SIGPIPE and SIGXFSZ;
    the server's Popen restored them)."""
    environment = _given_environment()
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # this process killed: the command is not left
        os.execvpe(command[0], command, environment)
    except OSError as err:
        os.write(report, str(err.errno or errno.EIO).encode())
    finally:
        os._exit(127)


def _given_environment() -> dict[bytes, bytes]:
    """The environment this process was started with, before Python's start-up changed any of it
    (PEP 538's locale coercion sets LC_CTYPE)."""
    try:
        with open("/proc/self/environ", "rb") as file:
            entries = file.read().split(b"\0")
    except OSError:
        return dict(os.environb)
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


class Process:
    """A process below the supervisor: its pid, its parent's, its process group."""

    __slots__ = ("pgid", "pid", "ppid")

    def __init__(self, pid: int, ppid: int, pgid: int) -> None:
        self.pid, self.ppid, self.pgid = pid, ppid, pgid


def _below() -> list[Process]:
    """Every live process below this one, through the parent links /proc shows."""
    children: dict[int, list[Process]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 512)
        except OSError:
            continue
        finally:
            os.close(fd)
        # "pid (name) state ppid pgrp …": the name may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split(maxsplit=3)
        if len(fields) < 3 or fields[0] in (b"Z", b"X"):
            continue  # a zombie is reaped, not signalled
        process = Process(int(name), int(fields[1]), int(fields[2]))
        children.setdefault(process.ppid, []).append(process)
    found: list[Process] = []
    todo = [os.getpid()]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += [p.pid for p in below]
    return found


def _signal(pids: list[int] | set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass  # already gone


def _exit_as(code: int, libc: ctypes.CDLL) -> int:
    """Exit with `code` as Popen gives it: a negative one is the signal that ended the command,
    raised here with its default action, so the server reads the same -9 or -11."""
    if code >= 0:
        return code
    sig = -code
    libc.prctl(PR_SET_DUMPABLE, 0)  # a core dump, if any, is the command's: none of this process
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    return 128 + sig  # a signal whose default does not end a process: never a job's end


def main(argv: list[str]) -> int:
    grace, server, report, *command = argv
    libc = ctypes.CDLL(None, use_errno=True)
    supervisor = Supervisor(float(grace), int(server))
    return _exit_as(supervisor.run(command, int(report), libc), libc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
