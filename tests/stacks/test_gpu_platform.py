"""stacks.gpu_platform: GpuPlatform's dependency graph, its stack outputs, and how kernels become NVIDIADrivers."""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
import pytest
import yaml

from components import labels
from fleet.kernels import KernelTarget, ObservedNode
from gpuctl.render import render_plan
from gpuctl.runtime import run_program
from gpuctl.stackfile import stack_file_from_config
from stacks import discovery, preconditions, program
from stacks.config import ConfigError, parse_stack_config
from tests.conftest import ROOT, Plan, config_values, render_stack, stack_config

NVIDIA_DRIVER = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"
MACHINE_SET = "kubernetes:machine.openshift.io/v1beta1:MachineSet"
MACHINE_AUTOSCALER = "kubernetes:autoscaling.openshift.io/v1beta1:MachineAutoscaler"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AUTO_SCALING_GROUP = "aws:autoscaling/group:Group"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"

DEV_KERNEL = "5.14.0-427.87.1.el9_4.x86_64"
DEV_TARGET = KernelTarget("rhcos4.18", DEV_KERNEL)
# OpenShift's driver (the Driver Toolkit builds it on each node) selects the OS release, whatever the kernel.
ANY_KERNEL = "*"
DEV_DRIVER = KernelTarget("rhcos4.18", ANY_KERNEL)
NEW_DEV_KERNEL = "5.14.0-427.91.1.el9_4.x86_64"
OLD_DEV_KERNEL = "5.14.0-427.65.1.el9_4.x86_64"
PROD_SHARED = KernelTarget("ubuntu22.04", "6.8.0-1021-aws")
PROD_H100 = KernelTarget("ubuntu22.04", "6.8.0-1019-aws")
NEW_PROD_KERNEL = "6.8.0-1024-aws"


def drivers(plan: Plan) -> dict[KernelTarget, dict[str, Any]]:
    """NVIDIADrivers by the (os, kernel) their nodeSelector pins (ANY_KERNEL where it pins none)."""
    os_by_release = {("ubuntu", "22.04"): "ubuntu22.04", ("ubuntu", "24.04"): "ubuntu24.04",
                     ("rhcos", "4.18"): "rhcos4.18", ("rhel", "9"): "rhel9"}  # RHEL: by the major alone
    found = {}
    for resource in plan.of_type(NVIDIA_DRIVER):
        selector = resource["inputs"]["spec"]["nodeSelector"]
        version = selector.get(labels.OS_VERSION_LABEL) or selector[labels.OS_VERSION_MAJOR_LABEL]
        os = os_by_release[(selector[labels.OS_ID_LABEL], version)]
        target = KernelTarget(os, selector.get(labels.KERNEL_LABEL, ANY_KERNEL))
        assert target not in found, f"two NVIDIADrivers for {target.key}"
        found[target] = resource
    return found


def depends(resource: dict[str, Any], other: dict[str, Any]) -> bool:
    return other["urn"] in resource["dependencies"]


def pool_targets(stack: str) -> dict[str, KernelTarget]:
    return {pool["name"]: KernelTarget(pool["os"], pool["kernel"]) for pool in stack_config(stack)["gpu-platform:nodePools"]}


def with_pool_kernel(stack: str, pool: str, kernel: str) -> dict[str, Any]:
    config = stack_config(stack)
    for entry in config["gpu-platform:nodePools"]:
        if entry["name"] == pool:
            entry["kernel"] = kernel
    return config


def with_cluster(stack: str, **fields: Any) -> dict[str, Any]:
    config = stack_config(stack)
    config["gpu-platform:cluster"].update(fields)
    return config


def pulled_image(driver: dict[str, Any], target: KernelTarget) -> str:
    """The image the GPU Operator derives from an NVIDIADriver spec (its tag rule, written out independently)."""
    spec = driver["inputs"]["spec"]
    tag = f"{spec['version']}-{target.kernel}-{target.os}" if spec["usePrecompiled"] else f"{spec['version']}-{target.os}"
    return f"{spec['repository']}/{spec['image']}:{tag}"


def render_with_previous(stack: str, previous: list[KernelTarget], config: dict[str, Any] | None = None,
                         observed: list[ObservedNode] | None = None) -> Plan:
    """Render through stacks.program.build with the kernels of an earlier revision."""
    values = copy.deepcopy(config if config is not None else stack_config(stack))
    return Plan(render_plan(stack_file_from_config(stack, values), observed, previous=previous))


# -- edges: NFD -> operator -> ClusterPolicy -> NVIDIADrivers -> pools ----------------------------------------------


def test_openshift_operator_install_waits_for_nfd(dev_plan: Plan) -> None:
    nfd = dev_plan.object("NodeFeatureDiscovery", "nfd-instance", "openshift-nfd")
    for kind, name in [("Namespace", "nvidia-gpu-operator"), ("Subscription", "gpu-operator-certified"),
                       ("OperatorGroup", "gpu-operator-certified-group")]:
        assert depends(dev_plan.object(kind, name), nfd), name
    # The NFD instance waits for its own operator's pinned install.
    assert depends(nfd, dev_plan.named("nfd-operator-approve-install-plan"))


def test_kubernetes_operator_release_waits_for_nfd(prod_plan: Plan) -> None:
    releases = {r["name"]: r for r in prod_plan.of_type(HELM_RELEASE)}

    assert depends(releases["gpu-operator-release"], releases["nfd-release"])
    assert not depends(releases["nfd-release"], releases["gpu-operator-release"])


@pytest.mark.parametrize(("stack", "installed"), [
    ("dev", "gpu-operator-olm-approve-install-plan"), ("prod", "gpu-operator-release")])
def test_cluster_policy_waits_for_the_operator_install(stack: str, installed: str, dev_plan: Plan,
                                                       prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan

    assert depends(plan.object("ClusterPolicy", "cluster-policy"), plan.named(installed))


def test_cluster_policy_waits_for_the_device_plugin_config(dev_plan: Plan) -> None:
    [config_map] = [r for r in dev_plan.of_type("kubernetes:core/v1:ConfigMap")
                    if r["inputs"]["metadata"]["name"].startswith("device-plugin-config-")]
    assert depends(dev_plan.object("ClusterPolicy", "cluster-policy"), config_map)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_nvidia_driver_waits_for_the_cluster_policy(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    policy = plan.object("ClusterPolicy", "cluster-policy")

    assert drivers(plan)
    for target, driver in drivers(plan).items():
        assert depends(driver, policy), target.key


@pytest.mark.parametrize("type_", [MACHINE_SET, MACHINE_AUTOSCALER])
def test_openshift_pools_wait_for_the_cluster_releases_driver(dev_plan: Plan, type_: str) -> None:
    driver = drivers(dev_plan)[DEV_DRIVER]
    resources = dev_plan.of_type(type_)
    assert len(resources) == 2

    assert all(depends(resource, driver) for resource in resources)


def test_a_node_on_an_undeclared_openshift_kernel_keeps_the_releases_driver(observed_old: Plan) -> None:
    """A z-stream kernel the stack has not declared yet: the release's one driver still selects the node (a kernel
    selector would leave it without one), and the pools wait for that driver."""
    [(target, driver)] = drivers(observed_old).items()
    assert target == DEV_DRIVER
    for machine_set in observed_old.of_type(MACHINE_SET):
        assert depends(machine_set, driver)


@pytest.mark.parametrize("type_", [LAUNCH_TEMPLATE, AUTO_SCALING_GROUP])
def test_each_aws_pool_resource_waits_for_its_kernels_driver_only(prod_plan: Plan, type_: str) -> None:
    by_target = drivers(prod_plan)
    resources = {r["inputs"]["name"]: r for r in prod_plan.of_type(type_)}
    assert len(resources) == 3

    for pool, target in pool_targets("prod").items():
        resource = resources[f"prod-gpu-gpu-{pool}"]
        assert depends(resource, by_target[target]), pool
        assert not any(depends(resource, driver) for t, driver in by_target.items() if t != target), pool


def test_auto_scaling_group_uses_its_launch_template(prod_plan: Plan) -> None:
    templates = {r["inputs"]["name"]: r for r in prod_plan.of_type(LAUNCH_TEMPLATE)}
    for group in prod_plan.of_type(AUTO_SCALING_GROUP):
        assert depends(group, templates[group["inputs"]["name"]])


@pytest.mark.parametrize(("stack", "installed"), [
    ("dev", "gpu-operator-olm-approve-install-plan"), ("prod", "gpu-operator-release")])
def test_monitoring_waits_for_the_operator_install(stack: str, installed: str, dev_plan: Plan,
                                                   prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    for kind, name in [("NetworkPolicy", "dcgm-exporter-scrapers-only"), ("ConfigMap", "gpu-dashboard"),
                       ("PrometheusRule", "gpu-alerts")]:
        assert depends(plan.object(kind, name), plan.named(installed)), name


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_tenant_objects_wait_for_priority_classes_and_admission(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    before = [plan.object("PriorityClass", "gpu-high"), plan.object("PriorityClass", "gpu-low"),
              plan.object("ValidatingAdmissionPolicy", "gpu-platform-tenant-pods"),
              plan.object("ValidatingAdmissionPolicyBinding", "gpu-platform-tenant-pods"),
              plan.object("ValidatingAdmissionPolicyBinding", "gpu-platform-tenant-networks")]
    tenants = [t["name"] for t in stack_config(stack)["gpu-platform:tenants"]]

    for tenant in tenants:
        namespace = plan.object("Namespace", tenant)
        assert all(depends(namespace, other) for other in before), tenant
        # What is in the namespace waits for it, so for those too; it names the namespace alone.
        for kind, name in (("ResourceQuota", "gpu-quota"), ("ResourceQuota", "compute-quota"),
                           ("LimitRange", "default-limits"), ("NetworkPolicy", "tenant-fence")):
            assert plan.object(kind, name, tenant)["dependencies"] == [namespace["urn"]], (tenant, kind)


def test_every_child_has_a_parent_in_the_plan(dev_plan: Plan) -> None:
    # The platform and the providers it is handed are the stack's own children.
    top = [r for r in dev_plan.resources if r["type"] == "gpu-platform:index:GpuPlatform"
           or r["type"].startswith("pulumi:providers:")]
    assert sorted(r["type"] for r in top) == ["gpu-platform:index:GpuPlatform", "pulumi:providers:kubernetes"]
    for resource in dev_plan.resources:
        if resource not in top:
            assert resource["parent"] in dev_plan.by_urn, resource["urn"]
        assert all(dep in dev_plan.by_urn for dep in resource["dependencies"]), resource["urn"]


# -- outputs ------------------------------------------------------------------------------------------------------


def test_dev_outputs(dev_plan: Plan) -> None:
    outputs = dev_plan.outputs

    assert outputs["cluster"] == "dev-ocp"
    assert outputs["kubernetesVersion"] == "1.31"  # derived from OpenShift 4.18
    assert outputs["capacity"] == {"t4-inference": 2, "a100-training": 8}
    assert outputs["totalGpus"] == 10
    assert outputs["kernels"] == [DEV_TARGET.key]
    assert outputs["keptKernels"] == []
    # OpenShift builds the driver on the node (Driver Toolkit): the image carries the version, not the kernel.
    assert outputs["driverImages"] == {DEV_TARGET.key: "nvcr.io/nvidia/driver:580.95.05-rhcos4.18"}
    assert outputs["tenants"] == {
        "vision": {"gpus": 4, "grants": {"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 4}, "priorityClass": "gpu-high",
                   "retired": False},
        "nlp-research": {"gpus": 1, "grants": {"nvidia.com/gpu": 1, "nvidia.com/gpu.shared": 4},
                         "priorityClass": "gpu-low", "retired": False}}
    # each pool counted as what it advertises: the T4s' shares are not GPUs
    assert outputs["advertised"] == {"t4-inference": {"nvidia.com/gpu.shared": 8}, "a100-training": {"nvidia.com/gpu": 8}}
    assert outputs["pools"]["t4-inference"]["partitioning"] == "time-sliced x4"


def test_prod_outputs(prod_plan: Plan) -> None:
    outputs = prod_plan.outputs

    assert outputs["cluster"] == "prod-gpu"
    assert outputs["kubernetesVersion"] == "1.31"
    assert outputs["capacity"] == {"l4-inference": 8 * 1, "a10g-batch": 4 * 4, "h100-training": 2 * 8}
    assert outputs["totalGpus"] == 40
    assert outputs["kernels"] == [PROD_H100.key, PROD_SHARED.key]
    assert outputs["keptKernels"] == []
    assert outputs["driverImages"] == {
        PROD_H100.key: "nvcr.io/nvidia/driver:580-6.8.0-1019-aws-ubuntu22.04",
        PROD_SHARED.key: "nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04",
    }
    assert set(outputs["tenants"]) == {"search-ranking", "llm-training", "analytics"}
    assert outputs["tenants"]["llm-training"]["gpus"] == 16


def test_pools_output_says_how_each_pool_rolls(dev_plan: Plan, prod_plan: Plan) -> None:
    h100 = prod_plan.outputs["pools"]["h100-training"]
    assert {key: h100[key] for key in ("instanceType", "nodes", "minNodes", "maxNodes", "gpusPerNode", "gpus", "os",
                                       "kernel", "image", "retired")} == {
        "instanceType": "p5.48xlarge", "nodes": 2, "minNodes": 0, "maxNodes": 4, "gpusPerNode": 8, "gpus": 16,
        "os": "ubuntu22.04", "kernel": "6.8.0-1019-aws", "image": "ami-0f2a3b4c5d6e7f809", "retired": False}
    assert h100["roll"]["method"] == "instance-refresh"
    assert (h100["roll"]["minHealthyPercentage"], h100["roll"]["checkpoints"]) == (90, [25, 50, 100])
    assert "heartbeat 1800 s" in h100["roll"]["drain"]
    assert prod_plan.outputs.get("release") is None  # Kubernetes: each pool names its kernel

    t4 = dev_plan.outputs["pools"]["t4-inference"]
    assert t4["roll"]["method"] == "machineset" and "new machines only" in t4["roll"]["note"]
    assert t4.get("kernel") is None and t4["os"] == "rhcos4.18"
    assert dev_plan.outputs["release"] == "4.18.24"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_driver_images_output_is_what_the_operator_pulls(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan

    by_os = {target.os: driver for target, driver in drivers(plan).items() if target.kernel == ANY_KERNEL}
    pulled = {target.key: pulled_image(driver, target) for target, driver in drivers(plan).items()
              if target.kernel != ANY_KERNEL}
    pulled |= {key: pulled_image(by_os[os], KernelTarget(os, kernel))
               for key in plan.outputs["driverImages"] for os, kernel in [key.split("/", 1)] if os in by_os}

    assert pulled == plan.outputs["driverImages"]


def test_precompiled_on_openshift_changes_the_driver_images() -> None:
    config = stack_config("dev")
    config["gpu-platform:driver"]["precompiled"] = True
    del config["gpu-platform:driver"]["version"]  # a precompiled driver is its branch's

    plan = render_stack("dev", config)

    [driver] = drivers(plan).values()
    assert driver["inputs"]["spec"]["usePrecompiled"] is True
    assert driver["inputs"]["spec"]["version"] == "580"
    assert plan.outputs["driverImages"] == {DEV_TARGET.key: f"nvcr.io/nvidia/driver:580-{DEV_KERNEL}-rhcos4.18"}


# -- kernels -> NVIDIADrivers -------------------------------------------------------------------------------------


def test_one_nvidia_driver_per_distinct_kernel_or_openshift_release(prod_plan: Plan, dev_plan: Plan) -> None:
    # prod: three pools, two of them on the same kernel; dev: one driver for the release's RHCOS.
    assert set(drivers(prod_plan)) == set(pool_targets("prod").values()) == {PROD_SHARED, PROD_H100}
    assert set(drivers(dev_plan)) == {DEV_DRIVER}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_nvidia_driver_is_named_for_its_kernel_or_openshift_release(stack: str, dev_plan: Plan,
                                                                    prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    for target, driver in drivers(plan).items():
        name = "nvidia-driver-rhcos4-18" if target == DEV_DRIVER else f"nvidia-driver-{target.slug}"
        assert driver["inputs"]["metadata"]["name"] == name


@pytest.fixture(scope="module")
def prod_kernel_bump() -> Plan:
    """prod with l4-inference moved to a new kernel, off the one a10g-batch still boots."""
    return render_stack("prod", with_pool_kernel("prod", "l4-inference", NEW_PROD_KERNEL))


def test_kernel_change_adds_only_that_kernels_driver(prod_plan: Plan, prod_kernel_bump: Plan) -> None:
    before, after = drivers(prod_plan), drivers(prod_kernel_bump)
    new = KernelTarget("ubuntu22.04", NEW_PROD_KERNEL)

    assert set(after) == {new, PROD_SHARED, PROD_H100}
    # The drivers of kernels other pools boot are untouched: same logical resource, same inputs.
    for target in (PROD_SHARED, PROD_H100):
        assert after[target]["urn"] == before[target]["urn"]
        assert after[target]["inputs"] == before[target]["inputs"]
    spec = after[new]["inputs"]
    assert spec["metadata"]["name"] == f"nvidia-driver-{new.slug}"
    assert spec["spec"]["nodeSelector"][labels.KERNEL_LABEL] == NEW_PROD_KERNEL
    assert prod_kernel_bump.outputs["driverImages"][new.key] == f"nvcr.io/nvidia/driver:580-{NEW_PROD_KERNEL}-ubuntu22.04"


def test_kernel_change_moves_the_pool_to_the_new_driver(prod_kernel_bump: Plan) -> None:
    by_target = drivers(prod_kernel_bump)
    [group] = [g for g in prod_kernel_bump.of_type(AUTO_SCALING_GROUP) if g["inputs"]["name"] == "prod-gpu-gpu-l4-inference"]

    assert depends(group, by_target[KernelTarget("ubuntu22.04", NEW_PROD_KERNEL)])
    assert not depends(group, by_target[PROD_SHARED])


def test_an_openshift_kernel_change_keeps_the_releases_driver(dev_plan: Plan) -> None:
    """A z-stream within the release: the same driver, unchanged, covers nodes on either kernel while they roll."""
    plan = render_stack("dev", with_cluster("dev", kernel=NEW_DEV_KERNEL))

    assert set(drivers(plan)) == {DEV_DRIVER}
    assert drivers(plan)[DEV_DRIVER]["urn"] == drivers(dev_plan)[DEV_DRIVER]["urn"]
    assert drivers(plan)[DEV_DRIVER]["inputs"] == drivers(dev_plan)[DEV_DRIVER]["inputs"]
    assert plan.outputs["kernels"] == [KernelTarget("rhcos4.18", NEW_DEV_KERNEL).key]  # the preview still shows it


def test_openshift_release_upgrade_moves_the_driver_to_the_new_rhcos() -> None:
    kernel = "5.14.0-570.28.1.el9_6.x86_64"
    config = with_cluster("dev", release="4.19.10", kernel=kernel, nfdOperatorCsv="nfd.4.19.0-202510011234")

    plan = render_stack("dev", config)

    target = KernelTarget("rhel9", kernel)
    assert set(drivers(plan)) == {KernelTarget("rhel9", ANY_KERNEL)}
    assert plan.outputs["kubernetesVersion"] == "1.32"
    assert plan.outputs["driverImages"] == {target.key: "nvcr.io/nvidia/driver:580.95.05-rhel9"}


@pytest.fixture(scope="module")
def observed_old() -> Plan:
    """dev where one live node still runs an older RHCOS kernel."""
    return render_stack("dev", observed=[ObservedNode("gpu-node-9", KernelTarget("rhcos4.18", OLD_DEV_KERNEL))])


def test_observed_kernel_outside_the_config_is_in_the_inventory(observed_old: Plan) -> None:
    old = KernelTarget("rhcos4.18", OLD_DEV_KERNEL)

    assert set(drivers(observed_old)) == {DEV_DRIVER}  # on OpenShift the release's driver covers it
    assert observed_old.outputs["kernels"] == [old.key, DEV_TARGET.key]
    assert observed_old.outputs["keptKernels"] == []  # there is evidence: it is observed, not kept


# -- kept kernels: stacks.program.build with `previous` -------------------------------------------------------------


def test_previous_kernels_keep_their_drivers_offline() -> None:
    """A kernel leaving the config keeps its driver while no node inventory shows no node on it."""
    config = stack_config("prod")
    for entry in config["gpu-platform:nodePools"]:
        if entry["kernel"] == PROD_SHARED.kernel:
            entry["kernel"] = NEW_PROD_KERNEL
    previous = [PROD_SHARED, PROD_H100]

    plan = render_with_previous("prod", previous, config)

    new = KernelTarget("ubuntu22.04", NEW_PROD_KERNEL)
    assert set(drivers(plan)) == {new, PROD_SHARED, PROD_H100}
    assert plan.outputs["keptKernels"] == [PROD_SHARED.key]
    assert PROD_SHARED.key in plan.outputs["kernels"] and PROD_SHARED.key in plan.outputs["driverImages"]
    # No pool waits for the kept driver.
    for group in plan.of_type(AUTO_SCALING_GROUP):
        assert not depends(group, drivers(plan)[PROD_SHARED])


def test_previous_kernels_still_declared_are_not_reported_as_kept() -> None:
    plan = render_with_previous("prod", [PROD_SHARED, PROD_H100])

    assert set(drivers(plan)) == {PROD_SHARED, PROD_H100}
    assert plan.outputs["keptKernels"] == []


def test_observed_nodes_drop_previous_kernels_no_node_runs() -> None:
    config = with_cluster("dev", kernel=NEW_DEV_KERNEL)
    new = KernelTarget("rhcos4.18", NEW_DEV_KERNEL)
    previous = [DEV_TARGET, KernelTarget("rhcos4.18", OLD_DEV_KERNEL)]

    rolled = render_with_previous("dev", previous, config, observed=[ObservedNode("gpu-1", new)])
    rolling = render_with_previous("dev", previous, config, observed=[ObservedNode("gpu-1", new),
                                                                      ObservedNode("gpu-2", DEV_TARGET)])

    assert rolled.outputs["kernels"] == [new.key]
    assert rolled.outputs["keptKernels"] == []
    assert rolling.outputs["kernels"] == sorted([new.key, DEV_TARGET.key])  # a node still runs it
    assert rolling.outputs["keptKernels"] == []
    assert set(drivers(rolled)) == set(drivers(rolling)) == {DEV_DRIVER}


# -- stacks.program.run -------------------------------------------------------------------------------------------


def run_with_discovery(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[Any]]:
    """Run stacks.program.run for prod under the mock runtime; return the warnings and the discovery reads."""
    warnings: list[str] = []
    reads: list[Any] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warnings.append(message))
    # The program imports them when it reads the cluster, from their modules
    monkeypatch.setattr(discovery, "read_live_nodes", lambda discovery, deadline=None: reads.append(discovery) or [])
    monkeypatch.setattr(preconditions, "check_crds", lambda discovery, needed, deadline=None: reads.append(needed))
    config = stack_config("prod")
    config["gpu-platform:cluster"]["discovery"] = {"enabled": enabled}
    config["gpu-platform:preflight"] = False
    stack_file = stack_file_from_config("prod", config)
    run_program(stack_file.stack, stack_file.config, stack_file.secret_keys, program.run)
    return warnings, reads


def test_run_warns_when_discovery_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings, reads = run_with_discovery(False, monkeypatch)

    assert reads == []
    assert any("live discovery is off" in warning and "cluster.discovery.enabled" in warning for warning in warnings)


def test_run_reads_live_nodes_without_warning_when_discovery_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings, reads = run_with_discovery(True, monkeypatch)

    crds, nodes = reads  # the CRD preconditions first, then the nodes
    assert {precondition.kind for precondition in crds} == {"PrometheusRule", "ServiceMonitor"}
    assert nodes.enabled is True
    assert not any("live discovery is off" in warning for warning in warnings)


# -- providers: explicit, from the stack config ------------------------------------------------------------------

AWS_PROVIDER = "pulumi:providers:aws"
K8S_PROVIDER = "pulumi:providers:kubernetes"


def provider_of(plan: Plan, resource: dict[str, Any]) -> dict[str, Any]:
    """The provider resource a resource's provider reference (`<urn>::<id>`) names."""
    assert resource["provider"], f"{resource['name']} uses a default provider"
    return plan.by_urn[resource["provider"].rsplit("::", 1)[0]]


def test_every_resource_uses_an_explicit_provider_built_from_the_stack_config(prod_plan: Plan) -> None:
    cluster = stack_config("prod")["gpu-platform:cluster"]
    [aws_provider], [k8s_provider] = prod_plan.of_type(AWS_PROVIDER), prod_plan.of_type(K8S_PROVIDER)
    assert aws_provider["inputs"]["region"] == cluster["region"]
    assert k8s_provider["inputs"]["clusterIdentifier"] == cluster["name"]
    for resource in prod_plan.resources:
        if not resource["custom"] or resource["type"].startswith("pulumi:providers:"):
            continue
        package = resource["type"].split(":", 1)[0]
        assert provider_of(prod_plan, resource) is {"aws": aws_provider, "kubernetes": k8s_provider}[package], \
            resource["name"]


@pytest.mark.parametrize("stack", ["dev", "onprem"])
def test_openshift_and_bring_your_own_stacks_register_nothing_of_aws(stack: str) -> None:
    # MachineSets are Kubernetes objects and bring-your-own nodes are provisioned elsewhere: such a stack runs
    # with no AWS provider, plugin or credentials.
    plan = render_stack(stack)
    assert not [r["type"] for r in plan.resources if r["type"].startswith(("aws:", AWS_PROVIDER))]
    [k8s_provider] = plan.of_type(K8S_PROVIDER)
    for resource in plan.resources:
        if resource["custom"] and not resource["type"].startswith("pulumi:providers:"):
            assert provider_of(plan, resource) is k8s_provider, resource["name"]


def test_a_bring_your_own_pool_provisions_nothing_and_carries_its_capacity() -> None:
    plan = render_stack("onprem")
    pool = plan.named("pool-l40s-inference")
    assert not [r for r in plan.resources if r["parent"] == pool["urn"]]
    assert pool["inputs"]["bringYourOwn"] == {"nodes": 4, "gpusPerNode": 4,
                                              "advertisedPerNode": {"nvidia.com/gpu.shared": 8},
                                              "nodeSelector": {"example.com/gpu-pool": "l40s-inference"},
                                              "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
    # Its driver is declared for the kernel its nodes boot, and the pool waits for it.
    [driver] = plan.kind("NVIDIADriver")
    assert driver["spec"]["nodeSelector"][labels.KERNEL_LABEL] == "5.15.0-125-generic"
    assert plan.depends_on(pool, "driver-ubuntu22-04-5-15-0-125-generic")
    assert plan.outputs["pools"]["l40s-inference"]["roll"]["method"] == "bring-your-own"
    # Shared: the device plugin has its pool's config, which the nodes select by label (checked live).
    [config_map] = [c for c in plan.kind("ConfigMap") if c["metadata"]["name"].startswith("device-plugin-config-")]
    assert "l40s-inference" in config_map["data"]


def test_aws_resources_are_tagged_with_cluster_and_stack(prod_plan: Plan) -> None:
    [aws_provider] = prod_plan.of_type(AWS_PROVIDER)
    tags = json.loads(aws_provider["inputs"]["defaultTags"])["tags"]
    assert tags == {program.CLUSTER_TAG: "prod-gpu", program.STACK_TAG: "prod"}


def test_kubeconfig_and_context_reach_provider_and_discovery_and_the_kubeconfig_stays_secret() -> None:
    config = with_cluster("prod", kubeconfig="~/.kube/prod", context="prod-admin")
    plan = render_stack("prod", config)
    [k8s_provider] = plan.of_type(K8S_PROVIDER)

    assert k8s_provider["inputs"]["context"] == "prod-admin"
    assert k8s_provider["inputs"]["kubeconfig"] == "[secret]"
    assert "~/.kube/prod" not in json.dumps(plan.document)


def test_older_stack_files_keep_kubeconfig_under_discovery() -> None:
    values = config_values("prod")
    values["cluster"]["discovery"] = {"kubeconfig": "~/.kube/prod", "context": "prod"}
    cluster = parse_stack_config(values).cluster
    assert (cluster.kubeconfig, cluster.context) == ("~/.kube/prod", "prod")
    assert (cluster.discovery.kubeconfig, cluster.discovery.context) == ("~/.kube/prod", "prod")


def test_two_different_contexts_are_refused() -> None:
    values = config_values("prod")
    values["cluster"]["context"] = "prod"
    values["cluster"]["discovery"] = {"context": "staging"}
    with pytest.raises(ConfigError, match=r"cluster: context is set twice.*keep cluster.context only"):
        parse_stack_config(values)


@pytest.mark.parametrize(("key", "value"), [("aws:region", "eu-west-1"), ("kubernetes:context", "other")])
def test_provider_keys_that_the_program_would_ignore_are_refused(key: str, value: str) -> None:
    config = stack_config("prod")
    config[key] = value
    with pytest.raises(ConfigError, match=rf"^{key}: the program's .* provider takes it from gpu-platform:cluster"):
        render_stack("prod", config)


def test_a_provider_key_equal_to_the_cluster_s_is_accepted() -> None:
    config = stack_config("prod")
    config["aws:region"] = config["gpu-platform:cluster"]["region"]
    assert render_stack("prod", config).of_type(AWS_PROVIDER)


# -- ordering on an empty cluster ----------------------------------------------------------------------------------

INSTALLERS = {"nvidia.com": "gpu-operator", "nfd.openshift.io": "nfd"}  # CRD group -> the component installing it


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_custom_resources_depend_on_what_installs_their_crd(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = {"dev": dev_plan, "prod": prod_plan}[stack]
    installers = {"gpu-operator": {"gpu-operator-release", "gpu-operator-olm-approve-install-plan"},
                  "nfd": {"nfd-release", "nfd-operator-approve-install-plan"}}
    checked = 0
    for resource in plan.resources:
        group = resource["type"].split(":")[1].split("/")[0] if resource["type"].startswith("kubernetes:") else ""
        if group in INSTALLERS:
            names = {plan.by_urn[urn]["name"] for urn in resource["dependencies"]}
            assert names & installers[INSTALLERS[group]], f"{resource['name']} does not wait for its CRD's install"
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_workloads_depend_on_their_bindings(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    """A pod's service account and its RoleBindings (in any namespace) exist before the workload that runs as it."""
    plan = {"dev": dev_plan, "prod": prod_plan}[stack]
    workloads = [r for r in plan.resources if r["type"].split(":")[-1] in ("Job", "Deployment", "DaemonSet",
                                                                            "StatefulSet", "CronJob")]
    for workload in workloads:
        namespace = workload["inputs"]["metadata"]["namespace"]
        account = workload["inputs"]["spec"]["template"]["spec"].get("serviceAccountName")
        if not account:
            continue
        bindings = [r for r in plan.resources if r["type"].endswith(":RoleBinding")
                    and any(s.get("kind") == "ServiceAccount" and s.get("name") == account
                            and s.get("namespace", r["inputs"]["metadata"].get("namespace")) == namespace
                            for s in r["inputs"].get("subjects", []))]
        accounts = [r for r in plan.resources if r["type"].endswith(":ServiceAccount")
                    and r["inputs"]["metadata"] == {**r["inputs"]["metadata"], "name": account,
                                                    "namespace": namespace}]
        assert bindings and accounts, f"{workload['name']} runs as {account}, which the stack does not bind"
        for needed in (*bindings, *accounts):
            assert depends(workload, needed), f"{workload['name']} does not wait for {needed['name']}"
    if stack == "dev":
        assert len(workloads) >= 3  # the install-plan approvers, the admission gate


def test_drivers_wait_for_the_pull_secret_they_name() -> None:
    config = stack_config("prod")
    config["gpu-platform:registryPullSecret"] = {"secure": "v1:placeholder"}
    plan = render_stack("prod", config)
    secret = plan.object("Secret", "nvidia-registry", "gpu-operator")
    for driver in plan.of_type(NVIDIA_DRIVER):
        assert driver["inputs"]["spec"]["imagePullSecrets"] == ["nvidia-registry"]
        assert depends(driver, secret)


# -- what `pulumi up` waits for ------------------------------------------------------------------------------------

# Kinds whose readiness needs (GPU) nodes or is an operator's business: `pulumi up` must never wait for it.
NODE_BOUND_KINDS = {"ClusterPolicy", "NVIDIADriver", "NodeFeatureDiscovery", "MachineSet"}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_wait_can_hang_on_absent_nodes(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = {"dev": dev_plan, "prod": prod_plan}[stack]
    for resource in plan.resources:
        kind = resource["type"].rsplit(":", 1)[-1]
        annotations = (resource["inputs"].get("metadata") or {}).get("annotations") or {}
        if kind in NODE_BOUND_KINDS:
            assert annotations.get(labels.SKIP_AWAIT) == "true" and labels.WAIT_FOR not in annotations, \
                resource["name"]
        if labels.WAIT_FOR in annotations or kind in ("Job", "Deployment", "DaemonSet", "StatefulSet") \
                and annotations.get(labels.SKIP_AWAIT) != "true":
            # pulumi-kubernetes waits up to this; a Job also stops itself at its deadline
            assert int(annotations[labels.TIMEOUT_SECONDS]) <= 1200, resource["name"]
        if kind == "Job" and annotations.get(labels.SKIP_AWAIT) != "true" and labels.WAIT_FOR not in annotations:
            # awaited to its completion
            assert resource["inputs"]["spec"]["activeDeadlineSeconds"] <= int(annotations[labels.TIMEOUT_SECONDS])
        if resource["type"] == HELM_RELEASE:
            assert 0 < resource["inputs"]["timeout"] <= 600 and not resource["inputs"].get("waitForJobs")
        if resource["type"] == AUTO_SCALING_GROUP:
            assert resource["inputs"]["waitForCapacityTimeout"] == "0", resource["name"]


def test_subscriptions_wait_for_olm_to_resolve_the_pinned_csv(dev_plan: Plan) -> None:
    subscriptions = dev_plan.kind("Subscription")
    assert subscriptions
    for subscription in subscriptions:
        annotations = subscription["metadata"]["annotations"]
        assert annotations[labels.WAIT_FOR] == f"jsonpath={{.status.currentCSV}}={subscription['spec']['startingCSV']}"
        assert int(annotations[labels.TIMEOUT_SECONDS]) == 600


@pytest.mark.parametrize(("mirror", "chart", "repository"), [
    ("https://harbor.lab.example/chartrepo/gpu/", "gpu-operator", "https://harbor.lab.example/chartrepo/gpu"),
    ("oci://harbor.lab.example/gpu", "oci://harbor.lab.example/gpu/gpu-operator", None),
])
def test_a_chart_mirror_serves_every_pinned_chart_at_its_version(mirror: str, chart: str, repository: str | None):
    config = stack_config("prod")
    config["gpu-platform:charts"] = {"mirror": mirror}
    releases = [r for r in render_stack("prod", config).resources if r["type"] == "kubernetes:helm.sh/v3:Release"]
    public = {labels.GPU_OPERATOR_CHART.chart: labels.GPU_OPERATOR_CHART, labels.NFD_CHART.chart: labels.NFD_CHART}
    assert len(releases) >= 3  # the operator, NFD and the node termination handler
    for release in releases:
        name = release["inputs"]["name"]
        assert release["inputs"]["chart"] == chart.replace("gpu-operator", name)
        assert release["inputs"].get("repositoryOpts", {}).get("repo") == repository
        if name in public:
            assert release["inputs"]["version"] == public[name].version


@pytest.mark.parametrize("stack", ["dev", "onprem", "prod", "staging", "queue", "partitioned", "karpenter"])
def test_every_kubernetes_object_and_release_has_a_name_of_its_own(stack: str) -> None:
    """After a killed update the next one's creates take over what it made, by name (docs/deploying.md): an object
    named by the engine (a random suffix) would be made again under another name and the first left unmanaged."""
    example = ROOT / "examples" / f"Pulumi.{stack}.yaml"
    plan = render_stack(stack, yaml.safe_load(example.read_text())["config"] if example.is_file() else None)
    kubernetes = [r for r in plan.document["resources"] if r["custom"] and r["type"].startswith("kubernetes:")]

    assert kubernetes
    unnamed = [r["urn"] for r in kubernetes
               if not (r["inputs"]["name"] if r["type"] == "kubernetes:helm.sh/v3:Release"
                       else r["inputs"].get("metadata", {}).get("name"))]
    assert unnamed == []
