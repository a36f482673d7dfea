"""stacks.allocation: what allocation mode `dra` cannot serve, refused in one line naming the field and the fix; and
what the mode renders (examples/Pulumi.dra.yaml)."""

from __future__ import annotations

import pytest

from fleet.dra import OPERATOR_CLASSES, quota_key
from stacks.config import parse_stack_config
from tests.conftest import Plan, config_values, render_stack
from tests.stacks.test_config import config_error, pool

DRA = "dra"


@pytest.fixture(scope="module")
def dra_plan() -> Plan:
    return render_stack(DRA)


def test_device_plugin_is_the_default() -> None:
    assert parse_stack_config(config_values("dev")).allocation_mode == "devicePlugin"


def test_an_unknown_mode_names_both() -> None:
    message = config_error(lambda values: values.update(allocationMode="mps"), DRA)
    assert "allocationMode" in message and "devicePlugin" in message and "dra" in message


@pytest.mark.parametrize(("mutate", "field", "reason"), [
    (lambda v: pool(v, 0).update(timeSlicingReplicas=2), "nodePools[0].timeSlicingReplicas", "shares GPUs per claim"),
    (lambda v: v["cluster"].update(kubernetesVersion="1.33"), "cluster.kubernetesVersion", "1.34"),
    (lambda v: v["tenancy"].update(mode="queue") if "tenancy" in v else v.update(tenancy={"mode": "queue"}),
     "tenancy.mode", "tenancy mode quota"),
    (lambda v: pool(v, 2)["bringYourOwn"].update(gpuModel="NVIDIA-H100-80GB-HBM3"), "nodePools[2].dedicatedTo",
     "same GPU model"),
], ids=["time-slicing", "old-kubernetes", "queue", "dedicated-model-clash"])
def test_what_dra_cannot_serve_is_refused(mutate, field: str, reason: str) -> None:
    message = config_error(mutate, DRA)
    assert field in message and reason in message and "allocationMode devicePlugin" in message


def test_a_mig_layout_on_a_provisioned_pool_is_refused() -> None:
    def mutate(values: dict) -> None:
        values["allocationMode"] = "dra"
        values["cluster"]["kubernetesVersion"] = "1.34"
    message = config_error(mutate, "partitioned")
    assert "nodePools[0].migLayout" in message and "no MIG manager" in message


def test_dra_mode_runs_a_gpu_cluster_and_no_cluster_policy(dra_plan: Plan) -> None:
    assert dra_plan.kind("ClusterPolicy") == [] and dra_plan.kind("ConfigMap") != []
    [cluster] = dra_plan.kind("GPUCluster")
    assert cluster["metadata"]["name"] == "gpu-cluster"
    assert cluster["spec"]["draDriver"]["computeDomains"] == {"enabled": False}
    [driver] = dra_plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    assert dra_plan.depends_on(driver, "dra-gpu-cluster")


def test_each_tenant_has_a_quota_line_per_class_adding_up_to_its_grant(dra_plan: Plan) -> None:
    classes = {manifest["metadata"]["name"] for manifest in dra_plan.kind("DeviceClass")}
    assert classes == {"gpu.gpu-platform.io", "mig-1g.10gb.gpu-platform.io", "gpu.l40s-search.gpu-platform.io"}
    hard = dra_plan.manifest("ResourceQuota", "gpu-quota", "search")["spec"]["hard"]
    lines = {key.removesuffix(quota_key("")): int(value) for key, value in hard.items() if key.endswith(quota_key(""))}
    assert set(lines) == classes | set(OPERATOR_CLASSES)
    assert lines["gpu.l40s-search.gpu-platform.io"] == 4 and lines["gpu.gpu-platform.io"] == 2
    assert sum(lines.values()) == 6 and hard["requests.nvidia.com/gpu"] == "0"
    namespace = dra_plan.manifest("Namespace", "search")
    assert namespace["metadata"]["annotations"]["gpu-platform.io/device-classes"] == \
        "gpu.gpu-platform.io,gpu.l40s-search.gpu-platform.io"


def test_tenants_may_make_claims_in_dra_mode_only(dra_plan: Plan) -> None:
    rules = dra_plan.manifest("ClusterRole", "gpu-platform-tenant")["rules"]
    assert any("resourceclaims" in rule["resources"] for rule in rules)
    dev = render_stack("dev").manifest("ClusterRole", "gpu-platform-tenant")["rules"]
    assert not any("resourceclaims" in rule["resources"] for rule in dev)
