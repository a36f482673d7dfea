"""SIGTERM and SIGINT end gpuctl promptly, in one line, with 128 + the signal, leaving an earlier render intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuctl.cli import ROOT

# Stand-ins for the program where a signal used to leave gpuctl waiting forever or printing a traceback: code that
# swallows the unwinding, code that turns it into an error of its own (as the SDK's runtime did), and an output
# that never resolves, which the mock runtime's final wait waits for.
STALLS = {
    "converting": """
def build(*args, **kwargs):
    started.write_text("stalled")
    try:
        time.sleep(60)
    except BaseException:
        raise RuntimeError("the runtime's own error for the interrupted program") from None
""",
    "swallowing": """
def build(*args, **kwargs):
    started.write_text("stalled")
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
""",
    "final-wait": """
def build(*args, **kwargs):
    import asyncio
    import pulumi
    pulumi.export("never", pulumi.Output.from_input(asyncio.get_event_loop().create_future()))
    started.write_text("stalled")
""",
}
DRIVER = """
import sys, time
from pathlib import Path
from stacks import program
started = Path(sys.argv[1])
{stall}
program.build = build
sys.argv = ["gpuctl", *sys.argv[2:]]
from gpuctl.__main__ import run
run()
"""


def stalled(tmp_path: Path, stall: str, *command: str,
            env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    started = tmp_path / "started"
    process = subprocess.Popen([sys.executable, "-c", DRIVER.format(stall=STALLS[stall]), str(started), *command],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 120
    while not started.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the stand-in program never ran"
        time.sleep(0.05)
    return process, started


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stall", ["swallowing", "final-wait"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_a_stalled_render_promptly_and_keeps_the_earlier_render(tmp_path, stall: str,
                                                                            signum: int) -> None:
    out = tmp_path / "render" / "out"
    subprocess.run([sys.executable, "-m", "gpuctl", "render", "--stack", "dev", "--offline", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    before = snapshot(out)
    process, _ = stalled(tmp_path, stall, "render", "--stack", "dev", "--offline", "--out", str(out))

    sent = time.monotonic()
    stdout, stderr = signalled(process, signum)

    assert process.returncode == 128 + signum and time.monotonic() - sent < 10
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    assert stderr == f"error: {word}; nothing was changed\n" and stdout == ""
    assert snapshot(out) == before and [p.name for p in out.parent.iterdir()] == ["out"]


def signalled(process: subprocess.Popen, number: int) -> tuple[str, str]:
    """Send the signal and wait for the run to end: its stdout and stderr."""
    process.send_signal(number)
    try:
        return process.communicate(timeout=15)
    finally:
        process.kill()


def test_sigint_during_preview_prints_one_line_and_no_traceback(tmp_path) -> None:
    process, _ = stalled(tmp_path, "converting", "preview", "--stack", "dev", "--offline")

    stdout, stderr = signalled(process, signal.SIGINT)

    assert process.returncode == 130 and stderr == "error: interrupted; nothing was changed\n" and stdout == ""


def test_sighup_ends_a_preview_in_one_line_and_removes_its_scratch_folders(tmp_path) -> None:
    """The terminal a preview runs in is closed while the head renders, the base's tree still in scratch."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process, _ = stalled(tmp_path, "converting", "preview", "--stack", "dev", "--offline", "--base", "HEAD",
                         "--no-cache", "--jobs", "1", env={"TMPDIR": str(scratch)})
    assert [path.name[:len("gpuctl-base-")] for path in scratch.iterdir()].count("gpuctl-base-") == 1

    stdout, stderr = signalled(process, signal.SIGHUP)

    assert process.returncode == 128 + signal.SIGHUP and stdout == ""
    assert stderr == "error: hung up; nothing was changed\n"
    assert list(scratch.iterdir()) == []


def handlers_installed(pid: int) -> bool:
    """gpuctl's first line has run: the process catches SIGTERM (Python alone catches only SIGINT)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="watches gpuctl's signal handlers through /proc")
@pytest.mark.parametrize("delay", [0.0, 0.2, 0.5])
def test_a_signal_while_gpuctl_starts_is_one_line(tmp_path, delay: float) -> None:
    """Ctrl-C while the commands load (well inside the first second: on an idle machine the whole render of dev can
    end within one) ends the run as it would later.

    The clock starts at gpuctl's first line, not at the exec: before it, Python is still starting (site-packages,
    about 0.1 s idle and several times that on a loaded machine) and a Ctrl-C there is Python's own, as for any
    Python command.
    """
    process = subprocess.Popen([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--offline"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not handlers_installed(process.pid):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.005)
    time.sleep(delay)
    stdout, stderr = signalled(process, signal.SIGINT)

    assert process.returncode == 130 and stderr == "error: interrupted; nothing was changed\n" and stdout == ""
