"""gpuctl preview: the PR view, against a git ref rendered in a throwaway worktree."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

OLD_KERNEL = "5.14.0-427.50.1.el9_4.x86_64"
NEW_KERNEL = "5.14.0-427.55.1.el9_4.x86_64"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A repository holding the project as it is now, committed once."""
    repo = tmp_path_factory.mktemp("preview") / "repo"
    files = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard").split()
    for name in files:
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
    return repo


def preview(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuctl", "preview", *args], cwd=repo, capture_output=True,
                          text=True)


@pytest.fixture
def kernel_upgrade(repo):
    stack = repo / "Pulumi.dev.yaml"
    original = stack.read_text()
    stack.write_text(original.replace(OLD_KERNEL, NEW_KERNEL))
    yield repo
    stack.write_text(original)


def test_kernel_upgrade_against_head_creates_the_driver_then_updates_the_pool(kernel_upgrade):
    status_before = git(kernel_upgrade, "status", "--porcelain")
    result = preview(kernel_upgrade, "--stack", "dev", "--base", "HEAD", "--offline", "--json")
    assert result.returncode == 0, result.stderr
    steps = json.loads(result.stdout)["steps"]
    ops = [(step["op"], step["name"]) for step in steps]
    new_driver = ("create", "driver-rhcos4-16-5-14-0-427-55-1-el9-4-x86-64")
    assert new_driver in ops
    assert ops.index(new_driver) < ops.index(("update", "pool-t4-inference"))
    assert {op for op, name in ops if "a100" in name} == set()
    assert git(kernel_upgrade, "status", "--porcelain") == status_before
    assert "worktree" not in git(kernel_upgrade, "worktree", "list").split("\n", 1)[-1]

    human = preview(kernel_upgrade, "--stack", "dev", "--base", "HEAD", "--offline")
    assert human.returncode == 0, human.stderr
    assert f'~ metadata.annotations.gpu-platform.io/kernel: "{OLD_KERNEL}" => "{NEW_KERNEL}"' in human.stdout
    assert "Driver image preflight: skipped (--offline)" in human.stdout


def test_without_changes_nothing_changes(repo):
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["steps"] == [] and document["changeSummary"]["same"] > 50


def test_a_stack_new_since_the_base_is_all_creates(repo):
    new_stack = repo / "Pulumi.qa.yaml"
    new_stack.write_text((repo / "Pulumi.dev.yaml").read_text())
    try:
        result = preview(repo, "--stack", "qa", "--base", "HEAD", "--offline", "--json")
    finally:
        new_stack.unlink()
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["changeSummary"]
    assert summary["create"] > 50 and summary["same"] == summary["delete"] == 0


def test_unknown_base_ref_is_bad_input(repo):
    result = preview(repo, "--stack", "dev", "--base", "no-such-branch", "--offline")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --base no-such-branch: not a commit in this repository; " \
                                    "use a branch, tag or commit"


def test_a_terminated_preview_leaves_no_base_worktree_behind() -> None:
    def base_worktrees() -> set[str]:
        listing = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=ROOT, capture_output=True,
                                 text=True).stdout
        return {line for line in listing.splitlines() if "gpuctl-base-" in line}

    before = base_worktrees()
    process = subprocess.Popen([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--base", "HEAD",
                                "--offline"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not base_worktrees() - before and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    started = base_worktrees() - before
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)

    assert started, "the preview never created its base worktree"
    assert process.returncode == 128 + signal.SIGTERM
    assert base_worktrees() == before
    assert not any(Path(line.removeprefix("worktree ")).exists() for line in started)
