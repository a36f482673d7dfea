"""DriverStack: one NVIDIADriver per (os, kernel), pinned to that kernel's nodes, or with the Driver Toolkit (OpenShift)
one per OS release."""

from __future__ import annotations

from typing import Any

import pytest

from components import labels
from gpuctl.diff import diff_plans
from tests.conftest import Plan, render_stack, stack_config

KERNEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
GPU_NODE = "feature.node.kubernetes.io/pci-10de.present"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEV_KERNEL = "5.14.0-427.87.1.el9_4.x86_64"


def drivers(plan: Plan) -> list[dict[str, Any]]:
    return plan.kind("NVIDIADriver")


def by_kernel(plan: Plan) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["annotations"]["gpu-platform.io/kernel"]: d for d in drivers(plan)}


def env(spec: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in spec["manager"]["env"]}


@pytest.fixture(scope="module", params=["dev", "prod"])
def plan(request, dev_plan: Plan, prod_plan: Plan) -> Plan:
    return dev_plan if request.param == "dev" else prod_plan


def test_one_driver_per_declared_kernel(prod_plan: Plan) -> None:
    assert sorted(by_kernel(prod_plan)) == ["6.8.0-1019-aws", "6.8.0-1021-aws"]
    assert sorted(f"{d['metadata']['annotations']['gpu-platform.io/os']}/{kernel}"
                  for kernel, d in by_kernel(prod_plan).items()) == sorted(prod_plan.outputs["kernels"])


def test_driver_is_pinned_to_its_kernel_and_os(prod_plan: Plan) -> None:
    for kernel, driver in by_kernel(prod_plan).items():
        assert driver["spec"]["nodeSelector"] == {GPU_NODE: "true", KERNEL: kernel, OS_ID: "ubuntu",
                                                  OS_VERSION: "22.04"}


def test_the_driver_toolkit_driver_selects_the_openshift_release_not_a_kernel(dev_plan: Plan) -> None:
    """The operator builds one DaemonSet per RHCOS build of whatever kernel a node boots; a kernel selector would
    drop the nodes of a z-stream the stack has not declared yet, leaving them without a driver."""
    [driver] = drivers(dev_plan)
    assert driver["metadata"]["name"] == "nvidia-driver-rhcos4-18"
    assert driver["spec"]["nodeSelector"] == {GPU_NODE: "true", OS_ID: "rhcos", OS_VERSION: "4.18"}
    assert "gpu-platform.io/kernel" not in driver["metadata"]["annotations"]


def test_precompiled_openshift_drivers_stay_per_kernel() -> None:
    """Precompiled images are built for one kernel: those drivers keep their kernel selector."""
    config = stack_config("dev")
    config["gpu-platform:driver"]["precompiled"] = True
    del config["gpu-platform:driver"]["version"]  # a precompiled driver is its branch's
    [driver] = drivers(render_stack("dev", config))
    assert driver["spec"]["nodeSelector"][KERNEL] == DEV_KERNEL


def test_driver_selectors_are_distinct(plan: Plan) -> None:
    """Two NVIDIADrivers selecting the same node would make the operator refuse both."""
    selectors = [tuple(sorted(d["spec"]["nodeSelector"].items())) for d in drivers(plan)]
    assert len(set(selectors)) == len(selectors)


def test_no_driver_is_the_default(plan: Plan) -> None:
    for driver in drivers(plan):
        assert driver["apiVersion"] == "nvidia.com/v1alpha1"
        assert driver["spec"]["default"] is False and driver["spec"]["driverType"] == "gpu"


def test_driver_is_node_critical_and_tolerates_the_gpu_taint(plan: Plan) -> None:
    for driver in drivers(plan):
        assert driver["spec"]["priorityClassName"] == "system-node-critical"
        assert GPU_TOLERATION in driver["spec"]["tolerations"]


def test_kubernetes_runs_precompiled_drivers_of_the_branch(prod_plan: Plan) -> None:
    for driver in drivers(prod_plan):
        spec = driver["spec"]
        assert spec["usePrecompiled"] is True
        assert (spec["repository"], spec["image"], spec["version"]) == ("nvcr.io/nvidia", "driver", "580")


def test_openshift_builds_the_full_version_with_the_driver_toolkit(dev_plan: Plan) -> None:
    [driver] = drivers(dev_plan)
    assert driver["spec"]["usePrecompiled"] is False
    assert driver["spec"]["version"] == "580.95.05"
    policy = dev_plan.manifest("ClusterPolicy", "cluster-policy")
    assert policy["spec"]["operator"]["use_ocp_driver_toolkit"] is True


def test_precompiled_can_be_turned_off_on_kubernetes(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:driver"]["precompiled"] = False
    plan = render("prod", config)
    for driver in drivers(plan):
        assert driver["spec"]["usePrecompiled"] is False
        assert driver["spec"]["version"] == "580.95.05"
    assert set(plan.outputs["driverImages"].values()) == {"nvcr.io/nvidia/driver:580.95.05-ubuntu22.04"}


def test_driver_images_output_names_what_the_operator_pulls(dev_plan: Plan, prod_plan: Plan) -> None:
    assert prod_plan.outputs["driverImages"] == {
        "ubuntu22.04/6.8.0-1019-aws": "nvcr.io/nvidia/driver:580-6.8.0-1019-aws-ubuntu22.04",
        "ubuntu22.04/6.8.0-1021-aws": "nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04",
    }
    assert dev_plan.outputs["driverImages"] == {
        f"rhcos4.18/{DEV_KERNEL}": "nvcr.io/nvidia/driver:580.95.05-rhcos4.18"}


def test_driver_images_follow_the_release(dev_plan: Plan, prod_plan: Plan) -> None:
    """The output is DriverRelease.image, and the NVIDIADriver's fields compose into the same reference."""
    from fleet.kernels import DriverRelease, KernelTarget

    for plan, precompiled in ((dev_plan, False), (prod_plan, True)):
        release = DriverRelease("nvcr.io/nvidia", "580", "580.95.05", precompiled)
        for key, image in plan.outputs["driverImages"].items():
            os_, kernel = key.split("/", 1)
            assert image == release.image(KernelTarget(os_, kernel))
            spec = by_kernel(plan)[kernel]["spec"] if precompiled else drivers(plan)[0]["spec"]
            assert image.startswith(f"{spec['repository']}/{spec['image']}:{spec['version']}-")


def test_a_changed_repository_moves_every_driver(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:driver"]["repository"] = "registry.example.com/mirror/nvidia"
    plan = render("prod", config)
    assert {d["spec"]["repository"] for d in drivers(plan)} == {"registry.example.com/mirror/nvidia"}
    assert all(image.startswith("registry.example.com/mirror/nvidia/driver:580-")
               for image in plan.outputs["driverImages"].values())


def test_nodes_give_up_only_gpu_pods_by_default(plan: Plan) -> None:
    for driver in drivers(plan):
        spec = driver["spec"]
        assert env(spec)["ENABLE_GPU_POD_EVICTION"] == "true"
        assert env(spec)["ENABLE_AUTO_DRAIN"] == "false"
        assert env(spec)["DRAIN_USE_FORCE"] == "false"
        policy = spec["upgradePolicy"]
        assert policy["autoUpgrade"] is True
        assert policy["drain"]["enable"] is False
        assert (policy["maxParallelUpgrades"], policy["maxUnavailable"]) == (1, "25%")
        assert policy["podDeletion"]["force"] is False and policy["drain"]["force"] is False


def test_manager_runs_the_pinned_driver_manager(plan: Plan) -> None:
    for driver in drivers(plan):
        manager = driver["spec"]["manager"]
        assert f"{manager['repository']}/{manager['image']}:{manager['version']}" == \
            labels.OPERAND_IMAGES["driverManager"]


@pytest.fixture(scope="module")
def prod_draining() -> Plan:
    config = stack_config("prod")
    config["gpu-platform:driver"].update(drain=True, maxParallelUpgrades=3, maxUnavailable="2")
    config["gpu-platform:images"] = {"driverManager": "registry.example.com/nvidia/k8s-driver-manager:v0.12.1"}
    return render_stack("prod", config)


def test_upgrades_follow_the_driver_config(prod_draining: Plan) -> None:
    for driver in drivers(prod_draining):
        spec = driver["spec"]
        assert env(spec)["ENABLE_AUTO_DRAIN"] == "true"
        policy = spec["upgradePolicy"]
        assert policy["drain"]["enable"] is True
        assert (policy["maxParallelUpgrades"], policy["maxUnavailable"]) == (3, "2")


def test_driver_manager_image_can_be_overridden(prod_draining: Plan) -> None:
    for driver in drivers(prod_draining):
        manager = driver["spec"]["manager"]
        assert (manager["repository"], manager["image"], manager["version"]) == (
            "registry.example.com/nvidia", "k8s-driver-manager", "v0.12.1")


@pytest.fixture(scope="module")
def prod_with_pull_secret() -> Plan:
    """prod as a team runs it after `pulumi config set --secret registryPullSecret ...` (an encrypted value)."""
    config = stack_config("prod")
    config["gpu-platform:registryPullSecret"] = {"secure": "v1:ciphertext-the-secrets-provider-decrypts"}
    return render_stack("prod", config)


def test_driver_pulls_with_the_registry_secret_when_one_is_set(prod_with_pull_secret: Plan, prod_plan: Plan) -> None:
    secret = prod_with_pull_secret.manifest("Secret", "nvidia-registry", "gpu-operator")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert drivers(prod_with_pull_secret)
    assert all(d["spec"]["imagePullSecrets"] == ["nvidia-registry"] for d in drivers(prod_with_pull_secret))
    assert all("imagePullSecrets" not in d["spec"] for d in drivers(prod_plan))
    assert not prod_plan.of_type("kubernetes:core/v1:Secret")


def test_pull_secret_exists_before_the_drivers_use_it(prod_with_pull_secret: Plan) -> None:
    secret = prod_with_pull_secret.object("Secret", "nvidia-registry", "gpu-operator")
    assert prod_with_pull_secret.depends_on(secret, "gpu-operator-release")  # its namespace is the operator's


def test_registry_secret_value_never_reaches_the_plan(prod_with_pull_secret: Plan) -> None:
    secret = prod_with_pull_secret.manifest("Secret", "nvidia-registry", "gpu-operator")
    assert set(secret["stringData"].values()) == {"[secret]"}


def test_drivers_wait_for_the_cluster_policy(plan: Plan) -> None:
    for resource in plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver"):
        assert plan.depends_on(resource, "cluster-policy-cluster-policy")


def test_kept_kernel_keeps_its_driver(render) -> None:
    """A kernel no pool declares any more, but live nodes still run, keeps its NVIDIADriver."""
    from fleet.kernels import KernelTarget, ObservedNode

    old = KernelTarget("ubuntu22.04", "6.8.0-1017-aws")
    plan = render("prod", observed=[ObservedNode("ip-10-0-0-1", old),
                                    ObservedNode("ip-10-0-0-2", KernelTarget("ubuntu22.04", "6.8.0-1021-aws"))])
    assert sorted(by_kernel(plan)) == ["6.8.0-1017-aws", "6.8.0-1019-aws", "6.8.0-1021-aws"]
    assert by_kernel(plan)["6.8.0-1017-aws"]["spec"]["nodeSelector"][KERNEL] == "6.8.0-1017-aws"


def test_driver_names_are_short_dns_labels(plan: Plan) -> None:
    for driver in drivers(plan):
        name = driver["metadata"]["name"]
        assert name.startswith("nvidia-driver-")
        assert len(name) <= 63 and name == name.lower() and name.replace("-", "").isalnum(), name


def test_toggling_precompiled_replaces_the_driver_rather_than_an_update_the_api_server_refuses() -> None:
    # The NVIDIADriver CRD makes usePrecompiled and driverType immutable (e2e/test_stacks.py shows the API server's
    # refusal): the program asks for a replace, deleting first since the old and the new select the same nodes. The
    # new one has a name of its own: under the old name, the engine's preview (a server-side dry run of the new
    # object) met the old object and failed on the immutable field (e2e/test_engine_lifecycle.py).
    base = render_stack("staging").document
    config = stack_config("staging")
    config["gpu-platform:driver"]["precompiled"] = False
    new = render_stack("staging", config).document
    [step] = [s for s in diff_plans(base, new).steps if s.resource["type"].endswith(":NVIDIADriver")]
    assert step.op == "replace"
    assert step.resource["options"]["deleteBeforeReplace"] is True
    assert {"spec.usePrecompiled", "spec.driverType"} <= set(step.resource["options"]["replaceOnChanges"])
    old_name, new_name = step.old["inputs"]["metadata"]["name"], step.resource["inputs"]["metadata"]["name"]
    assert new_name == f"{old_name}-built"


def _release_config(minor: str, precompiled: bool) -> dict[str, Any]:
    from fleet.catalog import OPENSHIFT_RELEASES

    config = stack_config("dev")
    config["gpu-platform:cluster"].update(release=f"{minor}.3", kernel=OPENSHIFT_RELEASES[minor].kernel_example,
                                          nfdOperatorCsv="nfd.4.18.0-202509240837")
    if precompiled:
        config["gpu-platform:driver"]["precompiled"] = True
        del config["gpu-platform:driver"]["version"]
    return config


@pytest.mark.parametrize("precompiled", [False, True], ids=["driver-toolkit", "precompiled"])
@pytest.mark.parametrize("minor", ["4.18", "4.19", "4.20", "4.21", "4.22"])
def test_each_release_s_nodes_get_exactly_one_driver_and_the_image_the_preflight_checks(
        minor: str, precompiled: bool) -> None:
    """Nodes labelled as NFD labels that release's nodes: the operator finds exactly one NVIDIADriver for each, and
    derives from the node's labels the image the preflight checks (the rules: tests/operator_rules.py)."""
    from fleet.catalog import OPENSHIFT_RELEASES
    from tests import operator_rules

    release = OPENSHIFT_RELEASES[minor]
    plan = render_stack("dev", _release_config(minor, precompiled))
    node = {GPU_NODE: "true", KERNEL: release.kernel_example, **release.nfd_labels()}

    [owner] = operator_rules.owners(drivers(plan), node)
    driver = next(d for d in drivers(plan) if d["metadata"]["name"] == owner)
    [checked] = plan.outputs["driverImages"].values()
    assert operator_rules.image(driver, node) == checked
    tag = "rhcos4.18" if minor == "4.18" else "rhel9"  # gpu-operator getOSTag: the major alone for rhel
    assert checked.endswith(f"-{release.kernel_example}-{tag}" if precompiled else f"580.95.05-{tag}")


def test_4_19_to_4_22_share_one_driver_toolkit_driver() -> None:
    """RHEL-based RHCOS is keyed by the major version: one driver, nvidia-driver-rhel9, for 4.19 to 4.22; a driver
    per release would select the same nodes, which the operator's validator refuses."""
    names = {minor: [d["metadata"]["name"] for d in drivers(render_stack("dev", _release_config(minor, False)))]
             for minor in ("4.19", "4.22")}
    assert names == {"4.19": ["nvidia-driver-rhel9"], "4.22": ["nvidia-driver-rhel9"]}
