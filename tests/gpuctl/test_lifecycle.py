"""Lifecycle scenarios on real renders: each stack edit yields the minimal diff a reviewer expects."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from components import labels
from fleet.kernels import KernelTarget, ObservedNode
from gpuctl.diff import diff_plans
from gpuctl.preview import base_kernels
from gpuctl.render import render_plan, write_render
from gpuctl.stackfile import stack_file_from_config
from tests.conftest import ROOT, stack_config

UBUNTU = "ubuntu22.04"
NEW_KERNEL = "6.8.0-1024-aws"
NEW_DRIVER = "driver-ubuntu22-04-6-8-0-1024-aws"  # the logical name; the object is nvidia-driver-<slug>
NVIDIA_DRIVER = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"


def ops(diff) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for step in diff.steps:
        grouped.setdefault(step.op, []).append(step.resource["name"])
    return {op: sorted(names) for op, names in grouped.items()}


def pool(config: dict, name: str) -> dict:
    return next(p for p in config["gpu-platform:nodePools"] if p["name"] == name)


def render(stack: str, config: dict, observed=None, previous=None) -> dict:
    return render_plan(stack_file_from_config(stack, config), observed, previous=previous)


def driver_slug(kernel: str, os: str = UBUNTU) -> str:
    return KernelTarget(os, kernel).slug


def node(name: str, kernel: str) -> ObservedNode:
    return ObservedNode(name, KernelTarget(UBUNTU, kernel))


@pytest.fixture(scope="module")
def prod_base() -> dict:
    return render("prod", stack_config("prod"))


@pytest.fixture(scope="module")
def dev_base() -> dict:
    return render("dev", stack_config("dev"))


# -- a pool's kernel changes (Kubernetes: each pool's image boots its own kernel) ----------------------------------


def test_kernel_upgrade_creates_the_new_driver_before_rolling_only_that_pool(prod_base):
    config = stack_config("prod")
    old_kernel = pool(config, "l4-inference")["kernel"]
    assert pool(config, "a10g-batch")["kernel"] == old_kernel  # another pool still boots the old kernel
    pool(config, "l4-inference").update(kernel=NEW_KERNEL, image="ami-0a1b2c3d4e5f60789")
    new = render("prod", config, previous=base_kernels(prod_base))
    diff = diff_plans(prod_base, new)

    assert ops(diff) == {"create": [NEW_DRIVER],
                         "update": ["pool-l4-inference-asg", "pool-l4-inference-launch-template"]}
    created = next(step for step in diff.steps if step.op == "create").resource
    assert created["type"] == NVIDIA_DRIVER
    assert created["inputs"]["metadata"]["name"] == "nvidia-driver-ubuntu22-04-6-8-0-1024-aws"
    assert created["inputs"]["spec"]["nodeSelector"][labels.KERNEL_LABEL] == NEW_KERNEL
    assert new["outputs"]["driverImages"][f"{UBUNTU}/{NEW_KERNEL}"] == \
        "nvcr.io/nvidia/driver:580-6.8.0-1024-aws-ubuntu22.04"
    # The old kernel's driver stays: a10g-batch still boots it. Nothing is kept only for lack of evidence.
    assert f"{UBUNTU}/{old_kernel}" in new["outputs"]["kernels"] and new["outputs"]["keptKernels"] == []
    order = [step.resource["name"] for step in diff.steps]
    assert order.index(NEW_DRIVER) < order.index("pool-l4-inference-launch-template")
    assert order.index(NEW_DRIVER) < order.index("pool-l4-inference-asg")
    by_name = {step.resource["name"]: step for step in diff.steps}
    template = by_name["pool-l4-inference-launch-template"]
    assert template.replace_reasons == [] and {c.path for c in template.changes} == {
        "imageId", "tags.gpu-platform.io/kernel", "tagSpecifications[0].tags.gpu-platform.io/kernel"}
    assert sorted((c.old, c.new) for c in by_name["pool-l4-inference-asg"].changes) == [
        (old_kernel, NEW_KERNEL), ("ami-0e1f2a3b4c5d6e7f8", "ami-0a1b2c3d4e5f60789")]


@pytest.fixture(scope="module")
def h100_upgrade() -> tuple[dict, str]:
    """prod with h100-training moved off the only kernel it booted: no pool boots the old kernel any more."""
    config = stack_config("prod")
    old_kernel = pool(config, "h100-training")["kernel"]
    assert all(p["kernel"] != old_kernel for p in config["gpu-platform:nodePools"] if p["name"] != "h100-training")
    pool(config, "h100-training")["kernel"] = NEW_KERNEL
    return config, old_kernel


def test_a_kernel_no_pool_boots_keeps_its_driver_without_a_node_inventory(prod_base, h100_upgrade):
    config, old_kernel = h100_upgrade
    new = render("prod", config, previous=base_kernels(prod_base))
    diff = diff_plans(prod_base, new)

    assert new["outputs"]["keptKernels"] == [f"{UBUNTU}/{old_kernel}"]
    assert "delete" not in ops(diff)
    assert ops(diff)["create"] == [NEW_DRIVER]
    assert {r["inputs"]["metadata"]["name"] for r in new["resources"] if r["type"] == NVIDIA_DRIVER} == {
        f"nvidia-driver-{driver_slug(kernel)}" for kernel in (old_kernel, "6.8.0-1021-aws", NEW_KERNEL)}


def test_a_kernel_no_node_runs_loses_its_driver_when_the_inventory_shows_it(prod_base, h100_upgrade):
    config, old_kernel = h100_upgrade
    observed = [node("gpu-a", "6.8.0-1021-aws"), node("gpu-b", NEW_KERNEL)]
    new = render("prod", config, observed=observed, previous=base_kernels(prod_base))
    diff = diff_plans(prod_base, new)

    assert new["outputs"]["keptKernels"] == []
    assert ops(diff)["delete"] == [f"driver-{driver_slug(old_kernel)}"]
    order = [step.op for step in diff.steps]
    assert order.index("delete") > order.index("create")  # the new driver first, the old one last


def test_a_kernel_nodes_still_run_keeps_its_driver_mid_roll(prod_base, h100_upgrade):
    config, old_kernel = h100_upgrade
    mid_roll = [node("gpu-a", old_kernel), node("gpu-b", NEW_KERNEL)]
    new = render("prod", config, observed=mid_roll, previous=base_kernels(prod_base))

    assert f"{UBUNTU}/{old_kernel}" in new["outputs"]["kernels"] and new["outputs"]["keptKernels"] == []
    assert "delete" not in ops(diff_plans(prod_base, new))


def node_list(*nodes: tuple[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "NodeList", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            labels.NVIDIA_PCI_LABEL: "true", labels.KERNEL_LABEL: kernel,
            labels.OS_ID_LABEL: "ubuntu", labels.OS_VERSION_LABEL: "22.04"}}} for name, kernel in nodes]}


def test_gpuctl_diff_refuses_to_delete_a_driver_nodes_still_run(tmp_path, prod_base, h100_upgrade):
    config, old_kernel = h100_upgrade
    write_render(prod_base, tmp_path / "old")
    write_render(render("prod", config), tmp_path / "new")  # no previous revision: the old driver goes
    running = tmp_path / "running.json"
    running.write_text(json.dumps(node_list(("gpu-2", old_kernel), ("gpu-1", old_kernel), ("gpu-3", NEW_KERNEL))))
    rolled = tmp_path / "rolled.json"
    rolled.write_text(json.dumps(node_list(("gpu-1", NEW_KERNEL))))

    def diff(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gpuctl", "diff", str(tmp_path / "old"), str(tmp_path / "new"),
                               "--json", *extra], cwd=ROOT, capture_output=True, text=True)

    refused = diff("--observed-nodes", str(running))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("error: refused: ")
    assert f"nvidia-driver-{driver_slug(old_kernel)}" in refused.stderr
    assert "nodes still run: gpu-1, gpu-2; roll those nodes to the new image first" in refused.stderr
    assert "gpu-3" not in refused.stderr

    allowed = diff("--observed-nodes", str(rolled))
    assert allowed.returncode == 0, allowed.stderr
    deleted = [step["name"] for step in json.loads(allowed.stdout)["steps"] if step["op"] == "delete"]
    assert deleted == [f"driver-{driver_slug(old_kernel)}"]


# -- OpenShift: the kernel follows the cluster release -------------------------------------------------------------


def test_an_openshift_release_change_creates_the_driver_of_its_kernel(dev_base):
    config = stack_config("dev")
    cluster = config["gpu-platform:cluster"]
    old = KernelTarget(f"rhcos{cluster['release'].rsplit('.', 1)[0]}", cluster["kernel"])
    new_kernel = "5.14.0-570.28.1.el9_6.x86_64"
    cluster.update(release="4.19.10", kernel=new_kernel, nfdOperatorCsv="nfd.4.19.0-202509240837")
    new = render("dev", config, previous=base_kernels(dev_base))
    diff = diff_plans(dev_base, new)

    target = KernelTarget("rhel9", new_kernel)
    assert (dev_base["outputs"]["kubernetesVersion"], new["outputs"]["kubernetesVersion"]) == ("1.31", "1.32")
    created = [step.resource for step in diff.steps if step.op == "create"]
    # One per node OS as the operator keys it: 4.19's RHCOS reports ID=rhel, VERSION_ID=9.6, tagged rhel9.
    assert [(r["type"], r["inputs"]["metadata"]["name"]) for r in created] == [(NVIDIA_DRIVER, "nvidia-driver-rhel9")]
    selector = created[0]["inputs"]["spec"]["nodeSelector"]
    assert (selector[labels.OS_ID_LABEL], selector[labels.OS_VERSION_MAJOR_LABEL]) == ("rhel", "9")
    assert labels.OS_VERSION_LABEL not in selector
    assert new["outputs"]["driverImages"][target.key] == "nvcr.io/nvidia/driver:580.95.05-rhel9"
    assert new["outputs"]["keptKernels"] == [old.key] and "delete" not in ops(diff)
    # Both pools wait for the new release's driver; neither MachineSet itself changes.
    assert not any(step.resource["type"].endswith(":MachineSet") for step in diff.steps)


# -- other edits -----------------------------------------------------------------------------------------------------


def test_driver_bump_updates_the_drivers_in_place(dev_base):
    config = stack_config("dev")
    config["gpu-platform:driver"]["version"] = "580.105.08"
    diff = diff_plans(dev_base, render("dev", config))

    assert diff.steps and {step.resource["type"] for step in diff.steps} == {NVIDIA_DRIVER}
    assert {step.op for step in diff.steps} == {"update"}
    assert [(c.path, c.old, c.new) for step in diff.steps for c in step.changes] == [
        ("spec.version", "580.95.05", "580.105.08")] * len(diff.steps)


def test_a_branch_bump_on_precompiled_drivers_updates_every_driver(prod_base):
    config = stack_config("prod")
    config["gpu-platform:driver"].update(branch="590")
    new = render("prod", config)
    diff = diff_plans(prod_base, new)

    assert ops(diff) == {"update": sorted(r["name"] for r in prod_base["resources"] if r["type"] == NVIDIA_DRIVER)}
    assert all(image.startswith("nvcr.io/nvidia/driver:590-") for image in new["outputs"]["driverImages"].values())


def test_time_slicing_change_changes_the_pools_config_and_the_autoscalers_limit(dev_base):
    """The pool's config keeps its key, so its running nodes' label still selects it; the ConfigMap's name follows
    its contents, so the ClusterPolicy names the new one and the operator rolls the device plugin; twice the shares
    halve a share's part of a node, which the tenant pod policy holds pods to. No MachineSet change, and no autoscaler
    limit moves: shares are not GPUs to the autoscaler."""
    config = stack_config("dev")
    assert pool(config, "t4-inference")["timeSlicingReplicas"] == 4
    pool(config, "t4-inference")["timeSlicingReplicas"] = 8
    steps = {step.resource["inputs"]["kind"]: step for step in diff_plans(dev_base, render("dev", config)).steps}

    assert set(steps) == {"ConfigMap", "ClusterPolicy", "ValidatingAdmissionPolicy"}
    assert any("share of a node's cpu" in str(change.new) for change in steps["ValidatingAdmissionPolicy"].changes)
    data = [change for change in steps["ConfigMap"].changes if change.path == "data.t4-inference"]
    assert "replicas: 4" in data[0].old and "replicas: 8" in data[0].new
    assert steps["ConfigMap"].op == "replace"  # a new name: created before the old one goes
    [name] = steps["ClusterPolicy"].changes
    assert name.path == "spec.devicePlugin.config.name" and name.new.startswith("device-plugin-config-")


def test_scaling_a_pool_updates_only_that_pool(dev_base):
    config = stack_config("dev")
    pool(config, "a100-training")["maxReplicas"] = 3
    diff = diff_plans(dev_base, render("dev", config))
    # The bounds move: the pool's MachineAutoscaler, and the cluster's GPU cap (8 GPUs a node).
    assert ops(diff) == {"update": ["cluster-autoscaler", "pool-a100-training-autoscaler"]}
    by_name = {step.resource["name"]: step for step in diff.steps}
    assert [(c.path, c.new) for c in by_name["pool-a100-training-autoscaler"].changes] == [("spec.maxReplicas", 3)]
    assert [(c.old, c.new) for c in by_name["cluster-autoscaler"].changes] == [(16, 24)]

    # `replicas` is the size a pool starts with: afterwards the autoscaler owns the count, and `up` leaves it; it
    # only records the configured size, which the capacity policy judges under both runtimes.
    config = stack_config("dev")
    pool(config, "a100-training")["replicas"] = 2
    [step] = diff_plans(dev_base, render("dev", config)).steps
    assert [(c.path, c.old, c.new) for c in step.changes] == [
        (f"metadata.annotations.{labels.CONFIGURED_NODES}", "1", "2")]


def test_adding_and_removing_a_tenant_touches_only_that_tenant(dev_base):
    config = stack_config("dev")
    config["gpu-platform:tenants"].append({"name": "speech", "gpus": 0, "group": "speech-team"})
    added = diff_plans(dev_base, render("dev", config))
    assert set(ops(added)) == {"create"}
    assert all(name.startswith("tenant-speech") for name in ops(added)["create"])
    assert {"tenant-speech", "tenant-speech-namespace", "tenant-speech-gpu-quota"} <= set(ops(added)["create"])

    config = stack_config("dev")
    config["gpu-platform:tenants"] = [t for t in config["gpu-platform:tenants"] if t["name"] != "vision"]
    removed = diff_plans(dev_base, render("dev", config))
    assert set(ops(removed)) == {"delete"}
    assert all(name.startswith("tenant-vision") for name in ops(removed)["delete"])


def test_kubernetes_version_bump_changes_no_resource(prod_base):
    config = stack_config("prod")
    config["gpu-platform:cluster"]["kubernetesVersion"] = "1.32"
    diff = diff_plans(prod_base, render("prod", config))
    assert diff.steps == [] and diff.same == len(prod_base["resources"])


# -- pools roll safely and are protected -----------------------------------------------------------------------------


def test_an_ami_change_on_a_prod_pool_is_a_drained_rate_limited_roll_of_that_pool(prod_base):
    config = stack_config("prod")
    old_image = pool(config, "a10g-batch")["image"]
    pool(config, "a10g-batch").update(image="ami-0a1b2c3d4e5f60789", roll={
        "minHealthyPercentage": 75, "checkpoints": [50, 100], "checkpointDelaySeconds": 900})
    new = render("prod", config, previous=base_kernels(prod_base))
    diff = diff_plans(prod_base, new)

    # Only that pool: a new template version, which the group's instance refresh rolls out.
    assert ops(diff) == {"update": ["pool-a10g-batch-asg", "pool-a10g-batch-launch-template"]}
    by_name = {step.resource["name"]: step for step in diff.steps}
    template = by_name["pool-a10g-batch-launch-template"]
    assert template.replace_reasons == [] and [(c.path, c.old, c.new) for c in template.changes] == [
        ("imageId", old_image, "ami-0a1b2c3d4e5f60789")]
    group = by_name["pool-a10g-batch-asg"]
    assert group.replace_reasons == []
    assert {c.path.split("[")[0] for c in group.changes if c.path.startswith("instanceRefresh")} == {
        "instanceRefresh.preferences.checkpointDelay", "instanceRefresh.preferences.checkpointPercentages",
        "instanceRefresh.preferences.minHealthyPercentage"}
    assert [(c.old, c.new) for c in group.changes if c.path.startswith("tags")] == [
        (old_image, "ami-0a1b2c3d4e5f60789")]
    refresh = group.resource["inputs"]["instanceRefresh"]
    assert refresh["strategy"] == "Rolling" and refresh["preferences"] == {
        "minHealthyPercentage": 75, "maxHealthyPercentage": 100, "checkpointPercentages": [50, 100],
        "checkpointDelay": "900", "instanceWarmup": "300", "skipMatching": True, "autoRollback": False}
    # Each node is drained before it terminates: the group's termination hook holds it for the handler.
    [hook] = [r for r in new["resources"] if r["type"] == "aws:autoscaling/lifecycleHook:LifecycleHook"
              and r["inputs"]["autoscalingGroupName"] == "prod-gpu-gpu-a10g-batch"]
    assert hook["inputs"]["lifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert (hook["inputs"]["defaultResult"], hook["inputs"]["heartbeatTimeout"]) == ("CONTINUE", 1800)
    assert "a10g-batch" in hook["name"] and group.resource["urn"] in hook["dependencies"]
    rule = next(r for r in new["resources"] if r["type"] == "aws:cloudwatch/eventRule:EventRule")
    [matcher] = json.loads(rule["inputs"]["eventPattern"])["detail"]["AutoScalingGroupName"]
    assert "prod-gpu-gpu-a10g-batch".startswith(matcher["prefix"])
    handler = next(r for r in new["resources"] if r["name"] == "node-drain-handler")
    assert group.resource["urn"] not in handler["dependencies"] and handler["urn"] in group.resource["dependencies"]
    roll = new["outputs"]["pools"]["a10g-batch"]["roll"]
    assert roll["method"] == "instance-refresh" and (roll["minHealthyPercentage"], roll["checkpoints"]) == (75, [50, 100])
    assert "drains each node" in roll["drain"]
    assert new["outputs"]["pools"]["a10g-batch"]["image"] == "ami-0a1b2c3d4e5f60789"


def test_removing_a_pool_takes_retiring_it_first(prod_base):
    protected = {r["name"] for r in prod_base["resources"] if r["options"]["protect"]}
    assert {"pool-h100-training-asg", "pool-h100-training-launch-template",
            "pool-h100-training-drain-hook"} <= protected

    config = stack_config("prod")
    pool(config, "h100-training")["retired"] = True
    retired = render("prod", config)
    diff = diff_plans(prod_base, retired)
    # Retiring changes no property: it only unprotects that pool, so the next change may remove it.
    assert diff.steps == []
    now_protected = {r["name"] for r in retired["resources"] if r["options"]["protect"]}
    assert protected - now_protected == {"pool-h100-training-asg", "pool-h100-training-launch-template",
                                         "pool-h100-training-drain-hook"}
    assert retired["outputs"]["pools"]["h100-training"]["retired"] is True
