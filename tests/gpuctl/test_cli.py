"""gpuctl as an installed command: --version, and stack files found from any folder of the clone."""

from __future__ import annotations

import subprocess
import sys

from gpuctl import __version__
from gpuctl.cli import ROOT, project_root


def test_version_is_printed_and_exits_0() -> None:
    result = subprocess.run([sys.executable, "-m", "gpuctl", "--version"], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 0 and result.stdout.strip() == f"gpuctl {__version__}"


def test_stack_files_are_found_from_a_subfolder_of_a_clone(tmp_path) -> None:
    clone = tmp_path / "clone"
    (clone / "docs" / "deep").mkdir(parents=True)
    (clone / "Pulumi.yaml").write_text("name: gpu-platform\nruntime: python\n")

    assert project_root(clone / "docs" / "deep") == clone


def test_another_pulumi_project_is_not_taken_for_this_one(tmp_path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: gpu-platform-tools\nruntime: python\n")

    assert project_root(tmp_path) == ROOT
