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


def test_check_and_diff_load_no_pulumi_provider_nor_kubernetes_client(tmp_path) -> None:
    out = tmp_path / "dev"
    subprocess.run([sys.executable, "-m", "gpuctl", "render", "--stack", "dev", "--out", str(out), "--offline"],
                   cwd=ROOT, check=True, capture_output=True)
    probe = (
        "import sys\n"
        "from gpuctl.__main__ import main\n"
        f"main(['check', {str(out)!r}]); main(['diff', {str(out)!r}, {str(out)!r}])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pulumi_aws', 'pulumi_kubernetes', 'kubernetes'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"
