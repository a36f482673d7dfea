"""A signal that lands the moment a child has started still finds it recorded, so the child is stopped with its
work (an unrecorded child outlived the preview's scratch folder and wrote in it as it was removed)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from gpuctl.children import Group, signals_held


class Unwound(Exception):
    pass


@pytest.fixture
def sigterm_unwinds():
    def unwind(signum: int, frame: object) -> None:
        raise Unwound

    previous = signal.signal(signal.SIGTERM, unwind)
    yield
    signal.signal(signal.SIGTERM, previous)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's state through /proc")
@pytest.mark.parametrize("start", ["command", "fork"])
def test_a_signal_as_a_child_starts_still_stops_the_child(tmp_path, sigterm_unwinds, start):
    group = Group()
    with pytest.raises(Unwound), group:
        with signals_held():  # the signal waits, as one does while a child starts, and lands as the start returns
            os.kill(os.getpid(), signal.SIGTERM)
            if start == "command":
                group.command([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path,
                              stderr=tmp_path / "stderr")
            else:
                group.fork(lambda: os.pause() or 0)
    assert [child.returncode for child in group.children] == [-signal.SIGKILL]
    assert not _alive(group.children[0].pid)
