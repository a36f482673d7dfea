"""A signal that lands the moment a child has started still finds it recorded, so the child is stopped with its
work (an unrecorded child outlived the preview's scratch folder and wrote in it as it was removed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpuctl import children, interrupts
from gpuctl.children import Group
from stacks.config import ConfigError


@pytest.fixture
def signal_as_a_child_starts(monkeypatch):
    """gpuctl's signal handling, with SIGTERM sent to gpuctl the moment each start (a command's, a fork's) returns,
    while another thread runs (as the runtime's do: the kernel may hand the signal to any thread not holding it)."""
    real_popen, real_fork = subprocess.Popen, os.fork

    def popen(*args, **kwargs):
        started = real_popen(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return started

    def fork() -> int:
        pid = real_fork()
        if pid:
            os.kill(os.getpid(), signal.SIGTERM)
        return pid
    monkeypatch.setattr(children.subprocess, "Popen", popen)
    monkeypatch.setattr(children.os, "fork", fork)
    idle = threading.Event()
    other = threading.Thread(target=idle.wait)
    other.start()
    interrupts.install()
    try:
        yield
    finally:
        interrupts.settle()
        idle.set()
        other.join()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's state through /proc")
@pytest.mark.parametrize("start", ["command", "fork"])
def test_a_signal_as_a_child_starts_still_stops_the_child(tmp_path, signal_as_a_child_starts, start):
    group = Group()
    with pytest.raises(SystemExit) as ended, group:
        if start == "command":
            group.command([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path,
                          stderr=tmp_path / "stderr")
        else:
            group.fork(lambda: signal.pause() or 0)
        pytest.fail("the signal did not end the start")
    assert ended.value.code == 128 + signal.SIGTERM
    assert [child.returncode for child in group.children] == [-signal.SIGKILL]
    assert not _alive(group.children[0].pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's state through /proc")
def test_a_signal_while_the_children_are_stopped_waits_until_each_is_reaped(monkeypatch):
    real_kill = children.os.kill

    def kill(pid: int, signum: int) -> None:
        real_kill(os.getpid(), signal.SIGTERM)  # gpuctl is told to stop just as it stops the child
        real_kill(pid, signum)
    interrupts.install()
    try:
        group = Group()
        with pytest.raises(SystemExit) as ended:
            with group:
                group.fork(lambda: signal.pause() or 0)
                monkeypatch.setattr(children.os, "kill", kill)
    finally:
        interrupts.settle()
    assert ended.value.code == 128 + signal.SIGTERM
    assert [child.returncode for child in group.children] == [-signal.SIGKILL]
    assert not _alive(group.children[0].pid)


def test_work_ahead_in_a_fork_gives_its_result_or_raises_what_it_raised():
    parent = os.getpid()
    with Group() as group:
        result = children.ahead(group, lambda: ("in a fork", os.getpid() != parent))
        refusal = children.ahead(group, lambda: (_ for _ in ()).throw(ConfigError("policy config: bad level")))
        assert result() == ("in a fork", True)
        with pytest.raises(ConfigError, match="policy config: bad level"):
            refusal()


def test_work_ahead_runs_here_when_its_fork_gives_no_answer(monkeypatch, capfd):
    """No fork to spare, a fork that dies, a result that cannot be sent back: the caller still gets the result,
    and nothing is said about it."""
    parent = os.getpid()
    lock = threading.Lock()  # an object pickle cannot send

    def dies_in_the_fork() -> str:
        if os.getpid() != parent:
            os._exit(9)
        return "here"
    with Group() as group:
        died = children.ahead(group, dies_in_the_fork)
        unsendable = children.ahead(group, lambda: lock)
        assert died() == "here"
        assert unsendable() is lock
        monkeypatch.setattr(children.os, "fork", lambda: (_ for _ in ()).throw(OSError(11, "no process")))
        refused = children.ahead(group, lambda: os.getpid())
        assert refused() == parent
    assert capfd.readouterr() == ("", "")
