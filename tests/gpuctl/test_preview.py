"""gpuctl preview: the PR view, against a git ref rendered in a scratch folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from benchmarks.preview import committed_project
from gpuctl import preview as preview_module
from gpuctl.preview import TENANTS_PER_PART, head_parts
from gpuctl.stackfile import StackFile
from stacks.preflight import PreflightError, RegistryUnreachable
from tests.conftest import ROOT

OLD_KERNEL = "6.8.0-1021-aws"  # prod: l4-inference and a10g-batch boot it
NEW_KERNEL = "6.8.0-1024-aws"
LONE_KERNEL = "6.8.0-1019-aws"  # prod: only h100-training boots it
NEW_DRIVER = "driver-ubuntu22-04-6-8-0-1024-aws"
OLD_IMAGE = "ami-0e1f2a3b4c5d6e7f8"  # prod: l4-inference and a10g-batch boot it
NEW_IMAGE = "ami-0a1b2c3d4e5f60789"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A repository holding the project as it is now, committed once."""
    return committed_project(tmp_path_factory.mktemp("preview") / "repo")


def preview(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuctl", "preview", *args], cwd=repo, capture_output=True,
                          text=True, timeout=600)


def stack_editor(repo: Path, stack: str) -> Iterator[Callable[[str, str], Path]]:
    """Edit a stack file in the working tree (the base stays HEAD's); edits add up, and it is restored afterwards."""
    path = repo / f"Pulumi.{stack}.yaml"
    original = path.read_text()

    def edit(old: str, new: str) -> Path:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))
        return repo

    yield edit
    path.write_text(original)


@pytest.fixture
def edit_prod(repo):
    yield from stack_editor(repo, "prod")


def test_kernel_upgrade_against_head_creates_the_driver_then_updates_the_pool(edit_prod):
    edit_prod(f"kernel: {OLD_KERNEL}", f"kernel: {NEW_KERNEL}")  # the first pool: l4-inference
    repo = edit_prod(f"image: {OLD_IMAGE}", f"image: {NEW_IMAGE}")  # an image that boots the new kernel
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
    assert "a launch-template change while this refresh runs cancels it and starts over" in human.stdout
    assert (f"ubuntu22.04/{NEW_KERNEL}: driver new, image nvcr.io/nvidia/driver:580-{NEW_KERNEL}-ubuntu22.04, "
            "preflight skipped (--offline)") in human.stdout
    assert "the driver stays while any node runs it (a10g-batch still boots it)" in human.stdout

    markdown = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith("### `gpuctl preview`: stack `prod` against `HEAD`")
    assert "```mermaid\nflowchart TD" in markdown.stdout and "<details>" in markdown.stdout


def test_a_kernel_leaving_the_config_keeps_its_driver_and_says_so(edit_prod):
    edit_prod(f"kernel: {LONE_KERNEL}", f"kernel: {NEW_KERNEL}")  # h100-training, the only pool on it
    repo = edit_prod("image: ami-0f2a3b4c5d6e7f809", f"image: {NEW_IMAGE}")
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
    """Removing a tenant in one edit deletes its protected namespace, limits, fence and binding: `pulumi up` stops
    there before it deletes anything of the tenant's, so the pull request check fails too, after the report, with the
    reason and the fix."""
    tenant = """    - name: analytics
      gpus: 8
      priorityClass: gpu-low
      group: analytics
"""
    repo = edit_prod(tenant, "")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 1
    assert "refuses this: the resource is protected" in result.stdout
    assert result.stderr.startswith("refused: pulumi up would stop at 4 protected resource(s)")
    for kept in ("namespace", "limits", "fence", "members"):
        assert f"tenant-analytics-{kept}" in result.stderr
    assert "retired: true" in result.stderr


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


def test_a_base_with_links_out_of_the_checkout_previews_without_following_them(repo):
    # A committed link to an absolute path (a venv, a shared folder) is skipped, not a traceback.
    (repo / "shared-venv").symlink_to("/usr")
    (repo / "up-and-out").symlink_to("../../outside")
    git(repo, "add", "shared-venv", "up-and-out")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "links")
    try:
        result = preview(repo, "--stack", "dev", "--base", "HEAD", "--offline", "--no-cache", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["changeSummary"]["same"] > 50
    finally:
        git(repo, "reset", "-q", "--hard", "HEAD~1")


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
    edit_prod(f"kernel: {LONE_KERNEL}", f"kernel: {NEW_KERNEL}")
    repo = edit_prod("image: ami-0f2a3b4c5d6e7f809", f"image: {NEW_IMAGE}")
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
    edit_prod(f"kernel: {LONE_KERNEL}", f"kernel: {NEW_KERNEL}")
    repo = edit_prod("image: ami-0f2a3b4c5d6e7f809", f"image: {NEW_IMAGE}")
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
    assert len(entry.read_bytes()) > 100 and json.loads(entry.read_bytes().split(b"\n", 1)[1])["stack"] == "prod"
    entry.unlink()
    os.mkfifo(entry)  # read, it would block the preview for good
    pipe = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    entry.unlink()
    entry.symlink_to("/dev/zero")  # read, it would fill memory
    zeros = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")

    for run in (cold, warm, corrupted, pipe, zeros):
        assert (run.returncode, run.stdout, run.stderr) == (serial.returncode, serial.stdout, serial.stderr)
    assert entry.is_file() and not entry.is_symlink(), "the entry is written again"


def many_tenants() -> dict:
    """onprem in queue mode with enough tenants for the head to render in two parts, every third with a network."""
    document = yaml.safe_load((ROOT / "Pulumi.onprem.yaml").read_text())
    config = document["config"]
    config["gpu-platform:tenancy"] = {"mode": "queue", "cohort": "gpu-tenants"}
    for tenant in config["gpu-platform:tenants"]:
        tenant.pop("gpuShares", None)  # whole GPUs only: their queue is the whole-GPU pool's
        tenant.update(gpus=1, queue={"pools": ["dgx-a100"]})
    config["gpu-platform:tenants"] += [{
        "name": f"team-{index:03}", "gpus": 0, "queue": {"pools": ["l40s-inference"]}, **({"networks": [{
            "name": "collective", "type": "macvlan", "master": f"ens6f1.{100 + index}", "mode": "bridge",
            "ipam": {"type": "whereabouts", "range": f"10.30.{index}.0/24"}}]} if index % 3 == 0 else {}),
    } for index in range(2 * TENANTS_PER_PART)]
    return document


def forks_seen(process: subprocess.Popen) -> int:
    """The most forks `process` had at once, watched until it exits: children with gpuctl's command line in two polls
    in a row (a child about to run git holds it too, for the moment between its fork and its exec)."""
    most, before = 0, set()
    while process.poll() is None:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
            forks = set()
            for child in children:
                with contextlib.suppress(OSError):
                    if b"preview" in Path(f"/proc/{child}/cmdline").read_bytes():
                        forks.add(child)
            most, before = max(most, len(forks & before)), forks
        time.sleep(0.01)
    return most


def watched(repo: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`gpuctl preview ARGS`, and the most of its forks seen at once."""
    with open(tmp_path / "out", "w+") as stdout, open(tmp_path / "err", "w+") as stderr:  # pipes could fill
        process = subprocess.Popen([sys.executable, "-m", "gpuctl", "preview", *args], cwd=repo, stdout=stdout,
                                   stderr=stderr)
        forks = forks_seen(process)
    return subprocess.CompletedProcess(process.args, process.returncode, (tmp_path / "out").read_text(),
                                       (tmp_path / "err").read_text()), forks


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="watches the preview's children through /proc")
def test_a_head_rendered_in_parts_previews_as_one_render(tmp_path, base_plan_cache):
    """Tenants (quotas, queues, networks) spread over parts, each part registering the rest again: the preview
    must not tell, warnings included (each part warns; the user reads it once)."""
    document = many_tenants()
    repo = committed_project(tmp_path / "repo", {"many": document})
    tenants = document["config"]["gpu-platform:tenants"]
    del tenants[5]
    tenants[7]["gpuShares"] = 2
    tenants.append({"name": "newcomer", "gpus": 0, "queue": {"pools": ["dgx-a100"]}})
    for pool in document["config"]["gpu-platform:nodePools"]:
        pool["kernel"] = "5.15.0-130-generic"
    (repo / "Pulumi.many.yaml").write_text(yaml.safe_dump(document))
    nodes = tmp_path / "nodes.json"  # a node on a kernel no pool declares: a warning
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "feature.node.kubernetes.io/kernel-version.full": "5.15.0-119-generic",
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}}}]}))
    command = ["--stack", "many", "--base", "HEAD", "--offline", "--observed-nodes", str(nodes)]

    serial = preview(repo, *command, "--jobs", "1", "--no-cache")
    assert "kernel 5.15.0-119-generic" in serial.stderr and "newcomer" in serial.stdout
    cold = preview(repo, *command, "--jobs", "3")  # the base, and the head in two parts
    # The base cached and the code the base's: the changed tenants only render, in the standby forked as gpuctl
    # started (gpuctl/standby.py).
    reused, reused_forks = watched(repo, tmp_path, *command, "--jobs", "2")
    program = repo / "stacks" / "part.py"
    program.write_text(program.read_text() + "\n# changed: the head renders whole, in parts\n")
    warm, forks = watched(repo, tmp_path, *command, "--jobs", "2")

    assert reused_forks == 1
    assert forks == 2, "the cached base left both processes to the head, in two parts"
    assert serial.stderr.count("kernel 5.15.0-119-generic") == 1
    for run in (cold, reused, warm):
        assert (run.returncode, run.stdout, run.stderr) == (serial.returncode, serial.stdout, serial.stderr)

    tenants[-1]["networks"] = tenants[0]["networks"]  # two tenants on one interface: every part refuses it
    (repo / "Pulumi.many.yaml").write_text(yaml.safe_dump(document))
    refused = [preview(repo, *command, "--jobs", jobs) for jobs in ("1", "2")]
    assert refused[0].returncode == 2 and refused[0].stderr.count("\n") == 1, refused[0].stderr
    assert "share host interface" in refused[0].stderr
    assert (refused[1].returncode, refused[1].stdout, refused[1].stderr) == (
        refused[0].returncode, refused[0].stdout, refused[0].stderr)


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
                                "--offline", "--jobs", "2"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True,
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


def lines_of(text: str, start: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(start)]


def commit_branch(repo: Path, branch: str, old: str, new: str) -> None:
    """Commit prod's stack file with `old` replaced by `new` on a new branch, and go back to main: a base."""
    stack = repo / "Pulumi.prod.yaml"
    original = stack.read_text()
    assert old in original
    git(repo, "checkout", "-q", "-b", branch)
    stack.write_text(original.replace(old, new, 1))
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-am", branch)
    git(repo, "checkout", "-q", "main")


def test_a_kernel_change_without_a_new_image_is_refused(edit_prod):
    """The same image boots the old kernel: the preview would promise an upgrade and a roll that change nothing."""
    repo = edit_prod(f"kernel: {OLD_KERNEL}", f"kernel: {NEW_KERNEL}")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert "nodePools[l4-inference].kernel and .image" in line and f"image stays {OLD_IMAGE}" in line


L4_POOL = f"""    - name: l4-inference
      instanceType: g6.xlarge
      replicas: 8
      minReplicas: 4
      maxReplicas: 16
      os: ubuntu22.04
      kernel: {OLD_KERNEL}
      image: {OLD_IMAGE}
"""


def test_removing_a_retired_pool_drains_its_nodes_before_they_terminate(repo, edit_prod):
    """The engine deletes dependents first and runs updates before deletes: the hook must not go before the group,
    nor may the drain's rule and policy drop the group in an update, or its nodes terminate undrained."""
    commit_branch(repo, "retire-l4", L4_POOL, L4_POOL + "      retired: true\n")
    repo = edit_prod(L4_POOL, "")
    result = preview(repo, "--stack", "prod", "--base", "retire-l4", "--offline", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    steps = {step["name"]: step for step in document["steps"]}
    assert not [name for name in steps if name.startswith("node-drain")], "the drain is not touched"
    assert {name for name, step in steps.items() if step["op"] == "delete"} == {
        "pool-l4-inference", "pool-l4-inference-launch-template", "pool-l4-inference-asg",
        "pool-l4-inference-drain-hook"}
    assert steps["pool-l4-inference-drain-hook"]["retainOnDelete"] is True
    assert steps["pool-l4-inference-asg"]["retainOnDelete"] is False
    [pool] = [pool for pool in document["summary"]["pools"] if pool["name"] == "l4-inference"]
    assert pool["roll"].startswith("removed: the group is scaled to zero with its drain hook still in place")
    assert "node termination handler cordons and drains each node" in pool["roll"]


def test_a_driver_branch_change_rolls_every_pool_through_the_operator(edit_prod):
    repo = edit_prod('branch: "580"', 'branch: "570"')
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 0, result.stderr
    rolls = lines_of(result.stdout, "roll:")
    assert len(rolls) == 3 and not [roll for roll in rolls if "no roll" in roll]
    for roll in rolls:
        assert "driver roll by the GPU Operator" in roll
        assert "1 node at a time (maxParallelUpgrades 1, maxUnavailable 25%)" in roll
        assert "its GPU pods evicted and the driver reloaded" in roll
    evicted = lines_of(result.stdout, "! pool ")
    assert len(evicted) == 3 and all("driver roll" in line and "its GPU pods evicted" in line for line in evicted)


def test_a_region_change_is_destructive_and_refused(edit_prod):
    """A new region replaces the AWS provider and with it every AWS resource, the protected pools among them."""
    repo = edit_prod("region: us-east-1", "region: us-west-2")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 1
    assert "Destructive: nothing" not in result.stdout
    [provider] = lines_of(result.stdout, "! aws provider replaced")
    assert "(region us-east-1 -> us-west-2)" in provider and "every pool's nodes among them" in provider
    assert len(lines_of(result.stdout, "! pool-l4-inference-asg replaced")) == 1
    assert "refused: pulumi up would stop at" in result.stderr


def test_lowering_a_maximum_reads_the_same_in_the_roll_and_the_destructive_list(edit_prod):
    repo = edit_prod("replicas: 4\n      maxReplicas: 8", "replicas: 2\n      maxReplicas: 2")  # a10g-batch
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 0, result.stderr
    [destructive] = lines_of(result.stdout, "! pool a10g-batch maximum 8 -> 2")
    assert "any running nodes above the new maximum" in destructive
    roll = lines_of(result.stdout, "roll:")[0]  # a10g-batch comes first
    assert "running nodes above it are terminated (each drained first)" in roll
    assert "leaves the running nodes as they are" not in result.stdout


def test_retired_pools_and_tenants_are_in_the_summary(edit_prod):
    edit_prod("      fabric: efa\n", "      fabric: efa\n      retired: true\n")  # h100-training
    repo = edit_prod("      group: analytics\n", "      group: analytics\n      retired: true\n")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 0, result.stderr
    retired = result.stdout.split("Retired:\n", 1)[1].split("Capacity:", 1)[0]
    assert "pool h100-training: newly retired: unprotected, so a later change may remove it" in retired
    assert "tenant analytics: retired: its namespace is unprotected" in retired
    assert "deleting the namespace and everything in it" in retired


PULL_SECRET = '{"auths": {"nvcr.io": {"auth": "c2VjcmV0LXRva2VuLTQyOnh5eg=="}}}'


def test_the_file_and_environment_routes_of_the_pull_secret_give_the_same_plan(repo, tmp_path):
    secret_file = tmp_path / "config.json"
    secret_file.write_text(PULL_SECRET)
    by_file = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json",
                      "--registry-pull-secret-file", str(secret_file))
    by_env = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "prod", "--base", "HEAD",
                             "--offline", "--json"], cwd=repo, capture_output=True, text=True,
                            env={**os.environ, "GPU_PLATFORM_REGISTRY_PULL_SECRET": PULL_SECRET})
    assert by_file.returncode == by_env.returncode == 0, by_file.stderr + by_env.stderr
    assert json.loads(by_file.stdout)["steps"] == json.loads(by_env.stdout)["steps"] == []
    assert "c2VjcmV0" not in by_file.stdout + by_env.stdout


def test_a_rotated_pull_secret_shows_a_changed_fingerprint_not_its_value(repo, edit_prod):
    commit_branch(repo, "pull-secret", "config:\n", "config:\n  gpu-platform:registryPullSecret:\n"
                  "    secure: v1:OLDCIPHERTEXT\n")
    repo = edit_prod("config:\n", "config:\n  gpu-platform:registryPullSecret:\n    secure: v1:NEWCIPHERTEXT\n")
    result = preview(repo, "--stack", "prod", "--base", "pull-secret", "--offline")
    assert result.returncode == 0, result.stderr
    [change] = lines_of(result.stdout, "+- stringData..dockerconfigjson:")
    before, after = change.split(": ", 1)[1].split(" => ")
    assert before.startswith('"[secret ') and after.startswith('"[secret ') and before != after
    assert "CIPHERTEXT" not in result.stdout and "registry-pull-secret" in result.stdout
    # The same ciphertext on both sides: no change.
    same = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json")
    assert "CIPHERTEXT" not in same.stdout


def test_a_secure_value_nested_in_structured_config_is_refused_not_shown(edit_prod):
    repo = edit_prod("instanceProfile: prod-gpu-node", "instanceProfile:\n      secure: v1:NESTEDCIPHERTEXT")
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline")
    assert result.returncode == 2 and "NESTEDCIPHERTEXT" not in result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: gpu-platform:cluster.instanceProfile: is encrypted (secure:)")


def test_the_comment_for_1200_new_tenants_fits_github(edit_prod, tmp_path):
    tenants = "".join(f"    - name: team-{index:04d}\n      gpus: 0\n      priorityClass: gpu-low\n"
                      f"      group: team-{index:04d}\n" for index in range(1200))
    repo = edit_prod("  gpu-platform:tenants:\n", "  gpu-platform:tenants:\n" + tenants)
    review = tmp_path / "review.json"
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--format", "markdown",
                     "--json-file", str(review))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) + 200 <= 65536  # with room for the line the workflow adds
    assert "... 1100 more changed tenants not shown" in result.stdout
    assert "`gpuctl-preview-<stack>` JSON artifact" in result.stdout
    added = [t for t in json.loads(review.read_text())["summary"]["tenants"] if t["name"].startswith("team-")]
    assert len(added) == 1200


@pytest.fixture
def edit_dev(repo):
    yield from stack_editor(repo, "dev")


def test_an_openshift_release_rolls_when_you_start_the_upgrade_and_an_image_reaches_new_machines(edit_dev):
    edit_dev('release: "4.18.24"\n    kernel: 5.14.0-427.87.1.el9_4.x86_64',
             'release: "4.19.10"\n    kernel: 5.14.0-570.28.1.el9_6.x86_64\n'
             '    nfdOperatorCsv: nfd.4.19.0-202509240837')
    repo = edit_dev("image: ami-0a6c2d1e5f3b7c9d1", "image: ami-0c8e4f3a7b5d9f1a3")  # t4-inference
    result = preview(repo, "--stack", "dev", "--base", "HEAD", "--offline")
    assert result.returncode == 0, result.stderr
    rolls = lines_of(result.stdout, "roll:")
    assert rolls and all("OpenShift release 4.18.24 -> 4.19.10: this stack only declares it" in roll
                         and "when you start the cluster upgrade, the Machine Config Operator reboots each node"
                         in roll for roll in rolls)
    [t4] = [roll for roll in rolls if "MachineSet template" in roll]
    assert "reaches only machines created from now on; the 2 running nodes keep their image" in t4


def test_a_base_with_fingerprinted_secrets_is_not_cached_so_a_later_run_shows_no_change(repo, tmp_path,
                                                                                       base_plan_cache):
    # Each run fingerprints secrets under a key of its own: a base plan kept from an earlier run would show the
    # pull secret as replaced.
    secret_file = tmp_path / "config.json"
    secret_file.write_text(PULL_SECRET)
    runs = [preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--json",
                    "--registry-pull-secret-file", str(secret_file)) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr
    assert [json.loads(run.stdout)["steps"] for run in runs] == [[], []]
    assert list(base_plan_cache.glob("*.json")) == []


@pytest.mark.parametrize(("tenants", "processes", "parts"), [
    (2 * TENANTS_PER_PART, 2, 2), (2 * TENANTS_PER_PART - 1, 2, 1), (10 * TENANTS_PER_PART, 3, 3),
    (10 * TENANTS_PER_PART, 1, 1), (0, 4, 1), ("not a list", 4, 1)])
def test_the_head_renders_in_parts_of_at_least_a_hundred_tenants(tenants, processes, parts) -> None:
    names = [{"name": f"t{index}"} for index in range(tenants)] if isinstance(tenants, int) else tenants
    head = StackFile("many", {"gpu-platform:tenants": names}, [])
    assert head_parts(head, processes) == parts


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_jobs_takes_one_or_more_processes(repo, jobs) -> None:
    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--offline", "--jobs", jobs)
    assert result.returncode == 2
    assert result.stderr == (f"error: gpuctl preview: argument --jobs: '{jobs}': pass a whole number of processes, "
                             "1 or more\n")


# -- --config-file: a stack file not named Pulumi.<stack>.yaml in the checkout's root ---------------------------


@pytest.fixture
def edit_queue_example(repo):
    path = repo / "examples" / "Pulumi.queue.yaml"
    original = path.read_text()
    yield path
    path.write_text(original)


def test_a_config_file_previews_against_the_same_path_at_the_base(repo, edit_queue_example, base_plan_cache):
    edit_queue_example.write_text(edit_queue_example.read_text().replace("borrowingLimit: 2", "borrowingLimit: 1"))

    result = preview(repo, "--config-file", "examples/Pulumi.queue.yaml", "--base", "HEAD", "--offline", "--json")

    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    # Its queue borrows less, and so its ceiling is lower.
    assert [(step["op"], step["name"]) for step in document["steps"]] == [
        ("update", "tenant-search-ranking-gpu-quota"), ("update", "tenant-search-ranking-queue-cluster-queue")]
    assert "newStack" not in document
    again = preview(repo, "--config-file", "examples/Pulumi.queue.yaml", "--base", "HEAD", "--offline", "--json")
    assert again.stdout == result.stdout and len(list(base_plan_cache.glob("*.json"))) == 1


def test_a_config_file_the_base_does_not_hold_is_previewed_as_a_new_stack_and_said_so(repo, tmp_path):
    stack = tmp_path / "Pulumi.qa.yaml"
    stack.write_text((repo / "examples" / "Pulumi.queue.yaml").read_text())

    text = preview(repo, "--config-file", str(stack), "--base", "HEAD", "--offline")
    document = json.loads(preview(repo, "--config-file", str(stack), "--base", "HEAD", "--offline", "--json").stdout)

    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == f"Previewing stack qa against HEAD ({stack} is not there: a new stack):"
    assert document["newStack"] == str(stack) and {step["op"] for step in document["steps"]} == {"create"}


def test_a_preview_against_a_commit_says_its_base_is_a_re_render_and_what_that_cannot_see(repo):
    result = preview(repo, "--stack", "dev", "--base", "HEAD", "--offline")
    assert result.returncode == 0, result.stderr
    [note] = [line for line in result.stdout.splitlines() if "re-rendered" in line]
    assert note.strip().startswith("? the base is HEAD re-rendered with today's nodes, not the state last deployed")
    assert "because nodes changed kernel or OS release since the last deploy" in note

    new = preview(repo, "--stack", "dev", "--offline")  # a new deployment compares with nothing: no such note
    assert new.returncode == 0, new.stderr
    assert "re-rendered" not in new.stdout


def test_an_openshift_release_that_skips_a_minor_is_refused_in_one_line(edit_dev):
    repo = edit_dev('release: "4.18.24"\n    kernel: 5.14.0-427.87.1.el9_4.x86_64',
                    'release: "4.20.8"\n    kernel: 5.14.0-570.49.1.el9_6.x86_64\n'
                    '    nfdOperatorCsv: nfd.4.20.0-202607290013')
    result = preview(repo, "--stack", "dev", "--base", "HEAD", "--offline")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: gpu-platform:cluster.release: 4.18.24 -> 4.20.8 skips 4.19")


@pytest.mark.parametrize(("raised", "expected"), [
    (RegistryUnreachable("nvcr.io could not be reached"), {"not verified"}),
    (PreflightError("an image is missing", missing=frozenset({"first"})), {"missing", "verified"}),
])
def test_a_registry_that_fails_the_preflight_is_reported_per_image(prod_plan, monkeypatch, raised, expected) -> None:
    """Online, the preflight's verdict reaches each image of the review: unreachable is not verified, a missing image
    is missing and the others found; the command goes on to show the review (exit 2 comes after it)."""
    images = sorted(set(prod_plan.outputs["driverImages"].values()))
    if raised.missing:
        raised.missing = frozenset({images[0]})

    def check(_images) -> None:
        raise raised

    monkeypatch.setattr(preview_module, "check_driver_images", check)
    line, statuses, error = preview_module.preflight_images(prod_plan.document, offline=False)

    assert set(statuses) == set(images) and set(statuses.values()) == expected
    assert (error is None) == isinstance(raised, RegistryUnreachable) and str(raised) in line
