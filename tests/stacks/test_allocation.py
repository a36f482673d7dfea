"""stacks.allocation: what allocation mode `dra` cannot serve, refused in one line naming the field and the fix; and
what the mode renders (examples/Pulumi.dra.yaml)."""

from __future__ import annotations

import pytest
import yaml

from components.dra_admission import QUEUED_TEMPLATE_VALIDATIONS
from components.kueue import configuration

from fleet.dra import OPERATOR_CLASSES, quota_key
from gpuctl.summary.allocation import device_classes
from stacks.config import parse_stack_config
from tests.conftest import ROOT, Plan, config_values, render_stack
from tests.stacks.test_config import config_error, pool

DRA = "dra"
QUEUE_EXAMPLE = ROOT / "examples" / "Pulumi.dra-queue.yaml"
WHOLE, MIG, SEARCH = "gpu.gpu-platform.io", "mig-1g.10gb.gpu-platform.io", "gpu.l40s-search.gpu-platform.io"


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
    (lambda v: pool(v, 2)["bringYourOwn"].update(gpuModel="NVIDIA-H100-80GB-HBM3"), "nodePools[2].dedicatedTo",
     "same GPU model"),
], ids=["time-slicing", "old-kubernetes", "dedicated-model-clash"])
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


def dra_queue_config() -> dict:
    """The DRA example in tenancy mode queue (examples/Pulumi.dra-queue.yaml)."""
    return yaml.safe_load(QUEUE_EXAMPLE.read_text())["config"]


@pytest.fixture(scope="module")
def dra_queue_plan() -> Plan:
    return render_stack("dra-queue", dra_queue_config())


def test_in_queue_mode_kueue_counts_every_class_of_the_stack_in_every_queue(dra_queue_plan: Plan) -> None:
    classes = sorted(manifest["metadata"]["name"] for manifest in dra_queue_plan.kind("DeviceClass"))
    [release] = [r for r in dra_queue_plan.resources if r["type"] == "kubernetes:helm.sh/v3:Release"
                 and r["inputs"]["name"] == "kueue"]
    shipped = yaml.safe_load(release["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert shipped == configuration(classes)
    for queue in dra_queue_plan.kind("ClusterQueue"):
        covered = {name for group in queue["spec"]["resourceGroups"] for name in group["coveredResources"]}
        # Every mapped class covered, or Kueue would let it run uncounted (IgnoreUndeclared); no extended resource.
        assert covered == {quota_key(name) for name in classes}
    search = dra_queue_plan.manifest("ClusterQueue", "search")["spec"]["resourceGroups"]
    nominal = {(flavor["name"], quota["name"]): quota["nominalQuota"] for group in search
               for flavor in group["flavors"] for quota in flavor["resources"]}
    assert nominal[("l40s-search", quota_key(SEARCH))] == 4 and nominal[("h100-training", quota_key(WHOLE))] == 2
    assert nominal[("l40s-search", quota_key(MIG))] == 0


def test_in_queue_mode_the_quota_per_class_is_the_ceiling_and_the_operators_classes_stay_at_0(
        dra_queue_plan: Plan) -> None:
    hard = dra_queue_plan.manifest("ResourceQuota", "gpu-quota", "research")["spec"]["hard"]
    # research: 7 MIG slices guaranteed, and what training lends (14) it may borrow; whole H100s only borrowed.
    assert hard[quota_key(MIG)] == "21" and hard[quota_key(WHOLE)] == "8" and hard[quota_key(SEARCH)] == "0"
    assert all(hard[quota_key(name)] == "0" for name in OPERATOR_CLASSES)
    assert hard["requests.nvidia.com/gpu"] == "0"
    assert dra_queue_plan.manifest("Namespace", "search")["metadata"]["annotations"][
        "gpu-platform.io/device-classes"] == f"{WHOLE},{SEARCH}"


def test_queue_mode_with_dra_on_openshift_is_refused() -> None:
    def mutate(values: dict) -> None:
        values["allocationMode"] = "dra"
        values["cluster"].update(release="4.21.0", kernel="5.14.0-570.49.1.el9_6.x86_64",
                                 nfdOperatorCsv="nfd.4.21.0-202601010000")
    message = config_error(mutate, "queue-openshift")
    assert "tenancy.mode" in message and "deviceClassMappings" in message and "Red Hat build" in message


def test_in_queue_mode_tenants_keep_their_templates_and_give_them_no_owner(dra_plan: Plan,
                                                                           dra_queue_plan: Plan) -> None:
    """A template deleted and made again by its name could ask more than Kueue counted for the Jobs naming it."""
    def template_verbs(plan: Plan) -> set[str]:
        rules = plan.manifest("ClusterRole", "gpu-platform-tenant")["rules"]
        return {verb for rule in rules if "resourceclaimtemplates" in rule["resources"] for verb in rule["verbs"]}
    assert {"create", "delete"} <= template_verbs(dra_plan)
    assert "create" in template_verbs(dra_queue_plan) and not {"delete", "deletecollection"} & template_verbs(
        dra_queue_plan)

    def rules(plan: Plan, resource: str) -> list[str]:
        policy = plan.manifest("ValidatingAdmissionPolicy", f"gpu-platform-tenant-claims-{resource}")
        return [validation["expression"] for validation in policy["spec"]["validations"]]
    owner_rule = QUEUED_TEMPLATE_VALIDATIONS[0][0]
    assert owner_rule in rules(dra_queue_plan, "resourceclaimtemplates")
    assert owner_rule not in rules(dra_queue_plan, "resourceclaims") + rules(dra_plan, "resourceclaimtemplates")


def test_in_queue_mode_the_summary_counts_guarantees_per_class_as_the_capacity_policy_does(
        dra_queue_plan: Plan) -> None:
    classes = device_classes(dra_queue_plan.document)
    assert classes == {WHOLE: (8, 8), MIG: (21, 56), SEARCH: (4, 4)}
