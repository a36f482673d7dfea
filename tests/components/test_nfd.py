"""NfdStack: Node Feature Discovery labels GPU nodes with their PCI vendor, kernel and OS release."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from components import labels
from tests.conftest import Plan, stack_config

NAMESPACE = "node-feature-discovery"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def nfd_release(plan: Plan) -> dict[str, Any]:
    [release] = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release")
                 if r["inputs"]["name"] == "node-feature-discovery"]
    return release


def assert_labels_nvidia_gpus_by_vendor(config: dict[str, Any]) -> None:
    """Vendor-only PCI labels give `feature.node.kubernetes.io/pci-10de.present` on NVIDIA GPU nodes."""
    pci = config["sources"]["pci"]
    assert pci["deviceLabelFields"] == ["vendor"]
    # NVIDIA data-center GPUs are 3D controllers (class 0302), others VGA controllers (0300).
    assert {"0300", "0302"} <= set(pci["deviceClassWhitelist"])


# -- Kubernetes: the pinned chart as a Helm release -----------------------------------------------------------------


def test_kubernetes_installs_the_pinned_chart(prod_plan: Plan) -> None:
    release = nfd_release(prod_plan)["inputs"]
    assert release["chart"] == "oci://registry.k8s.io/nfd/charts/node-feature-discovery"
    assert release["version"] == "0.19.0"
    assert release["namespace"] == NAMESPACE
    assert "repositoryOpts" not in release  # an OCI chart names its registry in `chart`


def test_namespace_allows_privileged_pods(prod_plan: Plan) -> None:
    namespace = prod_plan.manifest("Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert prod_plan.depends_on(nfd_release(prod_plan), "nfd-namespace")


def test_worker_runs_on_tainted_gpu_nodes_too(prod_plan: Plan) -> None:
    values = nfd_release(prod_plan)["inputs"]["values"]
    assert GPU_TOLERATION in values["worker"]["tolerations"]
    assert "nodeSelector" not in values["worker"]  # every node, not only labelled ones


def test_worker_labels_pci_devices_by_vendor(prod_plan: Plan) -> None:
    assert_labels_nvidia_gpus_by_vendor(nfd_release(prod_plan)["inputs"]["values"]["worker"]["config"])


def test_master_keeps_gpu_feature_discovery_labels(prod_plan: Plan) -> None:
    values = nfd_release(prod_plan)["inputs"]["values"]
    assert "nvidia.com" in values["master"]["config"]["extraLabelNs"]
    assert values["gc"]["enable"] is True


def test_chart_default_image_unless_overridden(prod_plan: Plan, render) -> None:
    assert "image" not in nfd_release(prod_plan)["inputs"]["values"]
    config = stack_config("prod")
    config["gpu-platform:images"] = {"nfd": "registry.example.com/nfd/node-feature-discovery:v0.19.1"}
    image = nfd_release(render("prod", config))["inputs"]["values"]["image"]
    assert image == {"repository": "registry.example.com/nfd/node-feature-discovery", "tag": "v0.19.1"}


def test_kubernetes_has_no_nfd_operator(prod_plan: Plan) -> None:
    assert not prod_plan.kind("NodeFeatureDiscovery")
    assert not [n for n in prod_plan.kind("Namespace") if n["metadata"]["name"] == "openshift-nfd"]


# -- OpenShift: Red Hat's NFD operator and its NodeFeatureDiscovery ------------------------------------------------


def test_openshift_runs_the_nfd_operator_pinned(dev_plan: Plan) -> None:
    assert not dev_plan.of_type("kubernetes:helm.sh/v3:Release")
    spec = dev_plan.manifest("Subscription", "nfd", "openshift-nfd")["spec"]
    assert (spec["name"], spec["channel"], spec["source"]) == ("nfd", "stable", "redhat-operators")
    assert spec["startingCSV"] == labels.NFD_OLM_CSVS["4.18"]


def test_openshift_instance_labels_pci_devices_by_vendor(dev_plan: Plan) -> None:
    instance = dev_plan.manifest("NodeFeatureDiscovery", "nfd-instance", "openshift-nfd")
    assert instance["apiVersion"] == "nfd.openshift.io/v1"
    assert_labels_nvidia_gpus_by_vendor(yaml.safe_load(instance["spec"]["workerConfig"]["configData"]))


def test_openshift_instance_waits_for_the_operator(dev_plan: Plan) -> None:
    instance = dev_plan.object("NodeFeatureDiscovery", "nfd-instance", "openshift-nfd")
    assert dev_plan.depends_on(instance, "nfd-operator-approve-install-plan")


def test_openshift_refuses_an_nfd_image(render) -> None:
    config = stack_config("dev")
    config["gpu-platform:images"] = {"nfd": "registry.example.com/nfd/node-feature-discovery:v0.19.1"}
    with pytest.raises(Exception, match="nfd applies to Kubernetes"):
        render("dev", config)
