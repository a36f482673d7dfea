"""Child processes that never outlive gpuctl: each render of a preview runs in one (the mock runtime is
process-global), and an interrupted or killed preview takes them with it."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gpuctl import interrupts

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL = 0.05  # seconds between looks at running children


def die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when `parent` dies, even by SIGKILL (elsewhere: nothing to ask); if it died
    before the asking, die now."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)


HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while forking: Python runs its after-fork hooks (logging's, for one) in the parent,
    and a signal handled in one of them is reported as ignored and lost. Held, it arrives right after."""
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)


def _command_setup(parent: int) -> None:
    """In a command's child, before it runs the command: the signals held for the fork reach it again."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
    die_with_parent(parent)


class Child:
    """A running child: a command, or a function of this process run in a fork (started through a `Group`)."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None) -> None:
        self.pid, self.popen, self.returncode = pid, popen, None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.popen is not None:
                self.returncode = self.popen.poll()
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        """Stop the child now and reap it (its work is thrown away, so it gets no time to tidy up)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.popen is not None:
                self.returncode = self.popen.wait()
            else:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


class Group:
    """The children started for one piece of work, all stopped and reaped when the block ends. Each is started and
    recorded in a shielded block (a signal takes effect once it is recorded, on whichever thread it arrived), so a
    signal that unwinds the starter cannot leave one out (it would outlive the scratch folder it writes in)."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        # Shielded: a signal that arrives while they are stopped takes effect once every one is killed and reaped.
        with interrupts.shielded():
            for child in self.children:
                child.kill()

    def command(self, argv: Sequence[str], cwd: Path, stderr: Path) -> Child:
        """Run `argv` in `cwd`, its output to `stderr` (a file: two children writing pipes nobody reads could
        block)."""
        with interrupts.shielded(), open(stderr, "wb") as errors, signals_held():
            popen = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=errors, preexec_fn=functools.partial(_command_setup, os.getpid()))
            child = Child(popen.pid, popen)
            self.children.append(child)
        return child

    def fork(self, work: Callable[[], int]) -> Child:
        """`fork(work)`, the child recorded in this group."""
        with interrupts.shielded():
            child = fork(work)
            self.children.append(child)
        return child


def ahead(group: Group, work: Callable[[], Any]) -> Callable[[], Any]:
    """Start `work()` in a fork of this process (recorded in `group`) while the caller goes on; the function returned
    waits for its result, or raises what it raised. When no pipe or process is to spare, or the fork ends without
    an answer, `work()` runs here instead, when the result is asked for."""
    try:
        answers, answering = os.pipe()
    except OSError:
        return work
    try:
        child = group.fork(functools.partial(_answer, work, answers, answering))
    except OSError:
        os.close(answers)
        return work
    finally:
        os.close(answering)

    def result() -> Any:
        try:
            with os.fdopen(answers, "rb") as stream:
                raised, value = pickle.load(stream)
        except (OSError, EOFError, pickle.UnpicklingError):
            child.kill()
            return work()
        if raised:
            raise value
        return value
    return result


def _answer(work: Callable[[], Any], answers: int, answering: int) -> int:
    """In the fork of `ahead`: `work()`'s result, or the exception it raised, sent back whole."""
    os.close(answers)
    try:
        answer = (False, work())
    except Exception as error:  # raised again in gpuctl, as if it had been raised there
        answer = (True, error)
    try:
        data = pickle.dumps(answer)
    except Exception:  # nothing sent: gpuctl runs `work()` itself
        return 1
    with os.fdopen(answering, "wb") as stream:
        stream.write(data)
    return 0


def fork(work: Callable[[], int]) -> Child:
    """Run `work()` in a fork of this process; its return value is the child's exit code. Signals are the parent's
    to handle: the child ignores Ctrl-C (the terminal sends it to both) and dies on SIGTERM and SIGHUP, and with
    the parent."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    with signals_held():
        pid = os.fork()
        if not pid:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if pid:
        return Child(pid)
    _run(work, parent)  # the child ends in it, never returning to the caller


def _run(work: Callable[[], int], parent: int) -> NoReturn:
    """In a fork: `work()`, then exit with its code."""
    code = 70  # EX_SOFTWARE, when `work` raises: its traceback is on stderr
    try:
        die_with_parent(parent)
        code = work()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def wait_all(children: Sequence[Child]) -> None:
    """Wait until every child has exited (a signal to gpuctl interrupts the wait as it would a render)."""
    while None in [child.poll() for child in children]:  # each looked at: one done early is reaped
        time.sleep(POLL)
