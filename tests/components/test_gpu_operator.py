"""GpuOperator: NVIDIA's GPU Operator, pinned: a Helm release on Kubernetes, its certified OLM bundle on OpenShift."""

from __future__ import annotations

from typing import Any

from components import labels
from tests.conftest import Plan

RELEASE = "kubernetes:helm.sh/v3:Release"


def operator_release(plan: Plan) -> dict[str, Any]:
    [release] = [r for r in plan.of_type(RELEASE) if r["inputs"]["name"] == "gpu-operator"]
    return release


def test_kubernetes_installs_the_pinned_chart(prod_plan: Plan) -> None:
    release = operator_release(prod_plan)["inputs"]
    assert (release["chart"], release["version"]) == ("gpu-operator", "v26.7.0")
    assert release["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert release["namespace"] == "gpu-operator"
    assert (labels.GPU_OPERATOR_CHART.chart, labels.GPU_OPERATOR_CHART.version) == ("gpu-operator", "v26.7.0")


def test_chart_leaves_nfd_policy_and_drivers_to_the_platform(prod_plan: Plan) -> None:
    values = operator_release(prod_plan)["inputs"]["values"]
    assert values["nfd"]["enabled"] is False  # NfdStack installs NFD
    assert values["clusterPolicy"]["deployCR"] is False  # ClusterPolicyStack declares it
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    assert values["operator"]["cleanupCRD"] is False  # uninstalling never deletes the CRDs with their objects


def test_operator_namespace_admits_privileged_operands(prod_plan: Plan) -> None:
    namespace = prod_plan.manifest("Namespace", "gpu-operator")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    release = operator_release(prod_plan)
    assert prod_plan.depends_on(release, "gpu-operator-namespace")


def test_operator_installs_after_nfd(prod_plan: Plan, dev_plan: Plan) -> None:
    assert prod_plan.depends_on(operator_release(prod_plan), "nfd-release")
    subscription = dev_plan.object("Subscription", "gpu-operator-certified", "nvidia-gpu-operator")
    assert dev_plan.depends_on(subscription, "nfd-instance")


def test_openshift_subscribes_to_the_certified_bundle(dev_plan: Plan) -> None:
    assert not dev_plan.of_type(RELEASE)
    subscription = dev_plan.manifest("Subscription", "gpu-operator-certified", "nvidia-gpu-operator")["spec"]
    assert (subscription["name"], subscription["channel"], subscription["source"]) == (
        "gpu-operator-certified", "v26.7", "certified-operators")
    assert subscription["startingCSV"] == "gpu-operator-certified.v26.7.0"
    assert subscription["installPlanApproval"] == "Manual"


def test_openshift_operator_namespace_is_cluster_monitored(dev_plan: Plan) -> None:
    """OpenShift's platform Prometheus scrapes the exporter's ServiceMonitor only in namespaces labelled so."""
    namespace_labels = dev_plan.manifest("Namespace", "nvidia-gpu-operator")["metadata"]["labels"]
    assert namespace_labels["openshift.io/cluster-monitoring"] == "true"
    assert namespace_labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_kubernetes_has_no_olm_objects(prod_plan: Plan) -> None:
    assert not prod_plan.kind("Subscription") and not prod_plan.kind("OperatorGroup")
    # The only Job is the admission gate's (components/admission_gate.py): no install-plan approver.
    assert [r["name"] for r in prod_plan.of_type("kubernetes:batch/v1:Job")] == ["admission-gate-job"]


def test_operator_custom_resources_wait_for_the_install(dev_plan: Plan, prod_plan: Plan) -> None:
    for plan, installed in ((dev_plan, "gpu-operator-olm-approve-install-plan"), (prod_plan, "gpu-operator-release")):
        for kind in ("ClusterPolicy", "NVIDIADriver"):
            for resource in plan.resources:
                if resource["type"].endswith(f":{kind}"):
                    assert plan.depends_on(resource, installed), (kind, resource["name"])
