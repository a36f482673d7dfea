"""gpuctl preview: the PR view, against a git ref rendered in a scratch folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

OLD_KERNEL = "6.8.0-1021-aws"  # prod: l4-inference and a10g-batch boot it
NEW_KERNEL = "6.8.0-1024-aws"
LONE_KERNEL = "6.8.0-1019-aws"  # prod: only h100-training boots it
NEW_DRIVER = "driver-ubuntu22-04-6-8-0-1024-aws"


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
def edit_prod(repo):
    """Edit prod's stack file in the working tree (the base stays HEAD's); restored afterwards."""
    stack = repo / "Pulumi.prod.yaml"
    original = stack.read_text()

    def edit(old: str, new: str) -> Path:
        assert old in original
        stack.write_text(original.replace(old, new, 1))
        return repo

    yield edit
    stack.write_text(original)


def test_kernel_upgrade_against_head_creates_the_driver_then_updates_the_pool(edit_prod):
    repo = edit_prod(f"kernel: {OLD_KERNEL}", f"kernel: {NEW_KERNEL}")  # the first pool: l4-inference
    status_before = git(repo, "status", "--porcelain")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    ops = [(step["op"], step["name"]) for step in document["steps"]]
    new_driver = ("create", NEW_DRIVER)
    assert sorted(ops) == sorted([new_driver, ("update", "pool-l4-inference-launch-template"),
                                  ("update", "pool-l4-inference-asg")])
    assert ops.index(new_driver) < ops.index(("update", "pool-l4-inference-launch-template"))
    assert ops.index(new_driver) < ops.index(("update", "pool-l4-inference-asg"))
    assert document["keptDrivers"] == []  # a10g-batch still boots the old kernel
    assert git(repo, "status", "--porcelain") == status_before
    assert "worktree" not in git(repo, "worktree", "list").split("\n", 1)[-1]

    human = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert human.returncode == 0, human.stderr
    assert f'~ tags.gpu-platform.io/kernel: "{OLD_KERNEL}" => "{NEW_KERNEL}"' in human.stdout
    assert "Driver image preflight: skipped (--offline)" in human.stdout
    assert "kept:" not in human.stdout
    # The fleet summary comes first: the pool, its counts, both kernels, the roll, the new driver image.
    assert human.stdout.index("Fleet:") < human.stdout.index("Changes:")
    assert (f"pool l4-inference: g6.xlarge, nodes 8, GPUs 8, ubuntu22.04 {OLD_KERNEL} -> ubuntu22.04 {NEW_KERNEL}"
            in human.stdout)
    assert "roll: instance refresh of 8 nodes: 90% stay healthy, so 1 node (1 GPU) at a time" in human.stdout
    assert (f"ubuntu22.04/{NEW_KERNEL}: driver new, image nvcr.io/nvidia/driver:580-{NEW_KERNEL}-ubuntu22.04, "
            "preflight skipped (--offline)") in human.stdout
    assert "the driver stays while any node runs it (a10g-batch still boots it)" in human.stdout

    markdown = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith("### `gpuctl preview`: stack `prod` against `HEAD`")
    assert "```mermaid\nflowchart TD" in markdown.stdout and "<details>" in markdown.stdout


def test_a_kernel_leaving_the_config_keeps_its_driver_and_says_so(edit_prod):
    repo = edit_prod(f"kernel: {LONE_KERNEL}", f"kernel: {NEW_KERNEL}")  # h100-training, the only pool on it
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["keptDrivers"] == [f"ubuntu22.04/{LONE_KERNEL}"]
    assert document["changeSummary"]["delete"] == 0
    assert ("create", NEW_DRIVER) in [(step["op"], step["name"]) for step in document["steps"]]

    human = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert human.returncode == 0, human.stderr
    [kept] = [line for line in human.stdout.splitlines() if line.startswith("kept:")]
    assert f"ubuntu22.04/{LONE_KERNEL}" in kept and "--observed-nodes" in kept


def test_a_step_the_engine_refuses_fails_the_preview(edit_prod):
    """Removing a tenant in one edit deletes its protected namespace: `pulumi up` would stop there, so the pull
    request check fails too, after the report, with the reason and the fix."""
    tenant = """    - name: analytics
      gpus: 8
      priorityClass: gpu-low
      group: analytics
"""
    repo = edit_prod(tenant, "")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 1
    assert "refuses this: the resource is protected" in result.stdout
    assert result.stderr.startswith("refused: pulumi up would stop at 1 protected resource(s)")
    assert "tenant-analytics-namespace" in result.stderr and "retired: true" in result.stderr


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


@pytest.mark.parametrize("base", ["", " "])
def test_an_empty_base_is_bad_input_not_a_new_deployment(repo, base):
    # `--base "$BASE_REF"` with the variable unset must not quietly preview everything as a create.
    result = preview(repo, "--stack", "dev", "--base", base, "--offline")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "error: --base: empty; pass a branch, tag or commit, or leave --base out to preview a " \
                            "new deployment\n"


def test_unknown_base_ref_is_bad_input(repo):
    result = preview(repo, "--stack", "dev", "--base", "no-such-branch", "--offline")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --base no-such-branch: not a commit in this repository; " \
                                    "use a branch, tag or commit"


def _extracting(scratch: Path, pid: int) -> bool:
    return bool(list(scratch.glob("gpuctl-base-*/tree/Pulumi.yaml")))


def _rendering_the_base(scratch: Path, pid: int) -> bool:
    try:  # the preview or its child may exit between the reads
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return any(b"render" in Path(f"/proc/{child}/cmdline").read_bytes() for child in children)
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="watches the preview's child through /proc")
@pytest.mark.parametrize("phase", [_extracting, _rendering_the_base], ids=["extracting", "rendering-the-base"])
def test_a_terminated_preview_leaves_nothing_behind(tmp_path, phase) -> None:
    def worktrees() -> str:
        return subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=ROOT, capture_output=True,
                              text=True).stdout

    before = worktrees()
    process = subprocess.Popen([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--base", "HEAD",
                                "--offline"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp_path)})
    deadline = time.monotonic() + 120
    while not phase(tmp_path, process.pid) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    started = list(tmp_path.glob("gpuctl-base-*"))
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)

    assert started, "the preview was not stopped while it worked on the base revision"
    assert process.returncode == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
    assert worktrees() == before


def test_with_a_node_inventory_the_driver_no_node_runs_is_deleted(edit_prod, tmp_path):
    repo = edit_prod(f"kernel: {LONE_KERNEL}", f"kernel: {NEW_KERNEL}")
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "feature.node.kubernetes.io/kernel-version.full": kernel,
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}}}
        for name, kernel in (("gpu-1", OLD_KERNEL), ("gpu-2", NEW_KERNEL))]}))
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json", "--observed-nodes", str(nodes))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["keptDrivers"] == []
    assert [step["name"] for step in document["steps"] if step["op"] == "delete"] == [
        "driver-ubuntu22-04-6-8-0-1019-aws"]


def test_the_output_is_the_same_with_and_without_the_cache_and_concurrency(edit_prod, base_plan_cache):
    """The kernel leaving the config makes the head depend on the base (its driver is kept): the head renders
    while the base does, from what the base's stack file declares, and the result must not tell."""
    repo = edit_prod(f"kernel: {LONE_KERNEL}", f"kernel: {NEW_KERNEL}")
    serial = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--jobs", "1", "--no-cache")
    assert serial.returncode == 0, serial.stderr
    assert "kept: the driver for ubuntu22.04/6.8.0-1019-aws" in serial.stdout
    assert list(base_plan_cache.iterdir()) == []

    cold = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert len(list(base_plan_cache.glob("*.json"))) == 1
    warm = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    (entry,) = base_plan_cache.glob("*.json")
    entry.write_bytes(entry.read_bytes()[:-100])  # a truncated entry is not trusted, and is written again
    corrupted = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")

    for run in (cold, warm, corrupted):
        assert (run.returncode, run.stdout, run.stderr) == (serial.returncode, serial.stdout, serial.stderr)
    assert len(entry.read_bytes()) > 100 and json.loads(entry.read_bytes().split(b"\n", 1)[1])["stack"] == "prod"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="watches the preview's children through /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["term", "int", "kill"])
def test_a_stopped_preview_takes_both_renders_with_it(repo, tmp_path, signum) -> None:
    # Ctrl-C as a terminal sends it: Python ignores SIGINT when started with it ignored (a background job's)
    process = subprocess.Popen([sys.executable, "-m", "gpuctl", "preview", "--stack", "prod", "--base", "HEAD",
                                "--offline"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp_path)},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children: list[str] = []
    deadline = time.monotonic() + 120
    while len(children) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    assert len(children) == 2, "the preview did not render the base and the head at once"

    started = time.monotonic()
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    while any(_alive(int(child)) for child in children) and time.monotonic() < started + 10:
        time.sleep(0.05)

    assert not [child for child in children if _alive(int(child))], "a render outlived the preview"
    assert process.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum)
    assert time.monotonic() - started < 10, f"{time.monotonic() - started:.1f} s, {stderr}"
    if signum != signal.SIGKILL:
        assert len(stderr.strip().splitlines()) <= 1, stderr
        assert list(tmp_path.iterdir()) == []
