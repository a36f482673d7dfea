"""The preview benchmark runs end to end at a smoke size (its numbers are printed, never asserted here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from benchmarks import preview
from benchmarks.preview import HEADER, table_row, tree_pss


def test_smoke_size_times_render_preview_and_floor(monkeypatch, capsys) -> None:
    monkeypatch.setattr(preview, "REPEATS", 1)
    rows = preview.report([150], fleet_resources=150, shipped=())

    (row,) = rows.values()
    assert row["stack"] == "fleet-150" and row["resources"] >= 150
    for run in (row["render"], row["cold"], row["warm"], row["floor"], row["serial"]):
        assert run.wall > 0 and run.cpu > 0 and run.largest > 0 and run.together > 0
    printed = capsys.readouterr().out
    assert HEADER in printed and table_row(row) in printed
    assert table_row(row).count("|") == HEADER.splitlines()[0].count("|")


def test_the_memory_of_all_processes_counts_the_children() -> None:
    grandchild = "import time; x = b'x' * (200 * 2**20); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
                               f"{grandchild!r}])"], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while tree_pss(parent.pid) < 200 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree_pss(parent.pid) >= 200 * 1024  # kB: the grandchild's 200 MB are in the sum
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
