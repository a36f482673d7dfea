"""A temporary folder ($TMPDIR) too full for a preview's scratch is bad input in one line, with nothing left in it."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpuctl import preview
from gpuctl.__main__ import main
from tests.conftest import ROOT


@pytest.fixture
def tiny_tmpfs(tmp_path: Path, request) -> Path:
    """A real file system of request.param bytes (a tmpfs: needs root, as CI and the developers' machines run)."""
    folder = tmp_path / "tmpfs"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


# 1 MiB: the base revision's files do not fit; 2600 KiB: they do, but the base's plan does not.
@pytest.mark.parametrize("tiny_tmpfs", ["1m", "2600k"], indirect=True)
def test_a_full_temporary_folder_is_one_line_and_leaves_nothing(tiny_tmpfs: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "prod", "--base", "HEAD",
                             "--offline", "--no-cache", "--jobs", "1"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TMPDIR": str(tiny_tmpfs)})

    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr == (f"error: the temporary folder {tiny_tmpfs}: No space left on device; free space "
                             "there, or set TMPDIR to a folder with room (a preview with --base writes the base "
                             "revision and its plan there)\n")
    assert list(tiny_tmpfs.iterdir()) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_scratch_write_that_fails_for_want_of_space_is_bad_input(tmp_path: Path, monkeypatch, capsys,
                                                                   code: int) -> None:
    """The same, simulated where no tmpfs can be mounted: the base's files fail to extract."""
    def full(commit: str, tree: Path) -> None:
        tree.mkdir()
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(preview, "_extract", full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    assert main(["preview", "--stack", "dev", "--base", "HEAD", "--offline", "--no-cache", "--jobs", "1"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: the temporary folder {tmp_path}: {os.strerror(code)}; free space there")
    assert error.count("\n") == 1 and list(tmp_path.iterdir()) == []
