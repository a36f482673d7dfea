"""The partitioned example as rendered: what each pool's nodes register with, what tenants' quotas cap, what Kueue
covers; the components behind it are node_pool, tenant_quota, kueue, cluster_policy and machine_labels."""

from __future__ import annotations

import base64

from components import labels
from components.kueue import TenantQueueArgs, cluster_queue_spec, resource_groups
from tests.conftest import Plan, render_stack, stack_config

TAGS = "k8s.io/cluster-autoscaler/node-template/"


def group_tags(plan: Plan, pool: str) -> dict[str, str]:
    [group] = [g for g in plan.of_type("aws:autoscaling/group:Group") if g["inputs"]["name"].endswith(pool)]
    return {tag["key"]: tag["value"] for tag in group["inputs"]["tags"]}


def user_data(plan: Plan, pool: str) -> str:
    [template] = [t for t in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t["inputs"]["name"].endswith(pool)]
    return base64.b64decode(template["inputs"]["userData"]).decode()


def test_a_mig_pool_boots_with_its_layout_and_scales_from_zero_by_its_slices(partitioned_plan: Plan) -> None:
    assert "nvidia.com/mig.config=all-1g.10gb" in user_data(partitioned_plan, "a100-mig")
    tags = group_tags(partitioned_plan, "a100-mig")
    assert tags[f"{TAGS}label/nvidia.com/mig.config"] == "all-1g.10gb"
    assert tags[f"{TAGS}resources/nvidia.com/mig-1g.10gb"] == "56"
    assert f"{TAGS}resources/nvidia.com/gpu" not in tags


def test_a_dedicated_pool_registers_its_second_taint(partitioned_plan: Plan) -> None:
    assert ("--register-with-taints=nvidia.com/gpu:NoSchedule,gpu-platform.io/dedicated=a10g-search:NoSchedule"
            in user_data(partitioned_plan, "a10g-search"))
    assert group_tags(partitioned_plan, "a10g-search")[f"{TAGS}taint/gpu-platform.io/dedicated"] == \
        "a10g-search:NoSchedule"
    assert f"{TAGS}taint/gpu-platform.io/dedicated" not in group_tags(partitioned_plan, "h100-training")


def test_every_tenant_quota_caps_every_kind_the_fleet_advertises(partitioned_plan: Plan) -> None:
    quotas = {q["metadata"]["namespace"]: q["spec"]["hard"] for q in partitioned_plan.kind("ResourceQuota")
              if q["metadata"]["name"] == "gpu-quota"}
    assert quotas["inference"] == {"requests.nvidia.com/gpu": "0", "requests.nvidia.com/gpu.shared": "6",
                                   "requests.nvidia.com/mig-1g.10gb": "42"}
    assert quotas["search-ranking"]["requests.nvidia.com/mig-1g.10gb"] == "0"  # not given: none, not unlimited
    low = partitioned_plan.manifest("ResourceQuota", "high-priority-gpus", "inference")["spec"]["hard"]
    assert set(low.values()) == {"0"} and len(low) == 3


def test_only_the_owners_namespace_is_labelled_for_the_dedicated_pool(partitioned_plan: Plan) -> None:
    label = labels.DEDICATED_POOL_LABEL.format(pool="a10g-search")
    owners = [ns["metadata"]["name"] for ns in partitioned_plan.kind("Namespace")
              if label in ns["metadata"].get("labels", {})]
    assert owners == ["search-ranking"]


def test_the_cluster_policy_uses_the_mixed_strategy_and_mig_off_by_default(partitioned_plan: Plan) -> None:
    spec = partitioned_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]
    assert spec["mig"] == {"strategy": "mixed"}
    assert spec["migManager"]["config"] == {"default": "all-disabled"}


def test_pools_sharing_a_kind_share_a_resource_group_and_the_rest_have_their_own() -> None:
    nominal = {"a": {"nvidia.com/gpu": 2}, "s": {"nvidia.com/gpu.shared": 4},
               "m": {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1},
               "b": {"nvidia.com/gpu": 1}, "n": {"nvidia.com/mig-2g.20gb": 3}}

    assert resource_groups(nominal) == [
        (["nvidia.com/gpu"], ["a", "b"]), (["nvidia.com/gpu.shared"], ["s"]),
        (["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"], ["m", "n"])]


def test_every_flavor_lists_every_kind_of_its_group_and_compute_has_its_own() -> None:
    spec = cluster_queue_spec(TenantQueueArgs("t", "c", {"m": {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 0},
                                                         "n": {"nvidia.com/mig-2g.20gb": 3}, "x": {}},
                                              compute={"cpu": "8", "memory": "32Gi"}))
    mig, compute = spec["resourceGroups"]
    assert [[r["name"] for r in f["resources"]] for f in mig["flavors"]] == [mig["coveredResources"]] * 2
    assert [r["nominalQuota"] for f in mig["flavors"] for r in f["resources"]] == [2, 0, 0, 3]
    assert compute == {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "compute", "resources": [
        {"name": "cpu", "nominalQuota": "8", "borrowingLimit": 0, "lendingLimit": 0},
        {"name": "memory", "nominalQuota": "32Gi", "borrowingLimit": 0, "lendingLimit": 0}]}]}


def test_a_dedicated_pools_flavor_is_only_in_its_owners_queues_and_tolerates_its_taint() -> None:
    config = stack_config("queue")
    config["gpu-platform:nodePools"][1]["dedicatedTo"] = ["llm-training", "analytics"]
    plan = render_stack("queue", config)
    queues = {q["metadata"]["name"]: [f["name"] for g in q["spec"]["resourceGroups"] for f in g["flavors"]]
              for q in plan.kind("ClusterQueue")}
    assert "a10g-batch" not in queues["search-ranking"] and "a10g-batch" in queues["llm-training"]
    flavor = plan.manifest("ResourceFlavor", "a10g-batch")
    assert {"key": "gpu-platform.io/dedicated", "operator": "Equal", "value": "a10g-batch",
            "effect": "NoSchedule"} in flavor["spec"]["tolerations"]


def test_a_mig_layout_on_openshift_reaches_running_machines_through_a_job(render) -> None:
    config = stack_config("dev")
    config["gpu-platform:nodePools"][1]["migLayout"] = "all-3g.20gb"
    config["gpu-platform:tenants"][0]["gpus"] = 0
    config["gpu-platform:tenants"][1]["gpus"] = 0
    config["gpu-platform:tenants"][0]["migSlices"] = {"3g.20gb": 16}
    plan = render("dev", config)
    [job] = [j for j in plan.kind("Job") if j["metadata"]["namespace"] == "openshift-machine-api"]
    env = {item["name"]: item["value"] for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LABELS"] == '{"nvidia.com/mig.config":"all-3g.20gb"}'
    assert env["MACHINESET"].startswith("dev-ocp-7xk2p-gpu-a100-training")
    [role] = [r for r in plan.kind("Role") if r["metadata"]["namespace"] == "openshift-machine-api"]
    assert role["rules"] == [{"apiGroups": ["machine.openshift.io"], "resources": ["machines"],
                              "verbs": ["get", "list", "patch"]}]
    [machine_set] = [m for m in plan.kind("MachineSet") if "a100" in m["metadata"]["name"]]
    assert machine_set["spec"]["template"]["spec"]["metadata"]["labels"]["nvidia.com/mig.config"] == "all-3g.20gb"


def test_the_mig_manager_may_reboot_cloud_nodes_but_not_brought_ones(partitioned_plan: Plan, render) -> None:
    """A100s on EC2 are passed through to the VM: a MIG mode change may need a reboot there (WITH_REBOOT); a
    bring-your-own stack's MIG manager never reboots its owner's machines."""
    policy = partitioned_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["migManager"]
    assert policy["env"] == [{"name": "WITH_REBOOT", "value": "true"}]
    config = stack_config("onprem")
    config["gpu-platform:nodePools"][0]["migLayout"] = "all-3g.40gb"
    for tenant in config["gpu-platform:tenants"]:
        tenant.pop("gpus", None)
    config["gpu-platform:tenants"][0]["migSlices"] = {"3g.40gb": 32}
    onprem = render("onprem", config).manifest("ClusterPolicy", "cluster-policy")["spec"]["migManager"]
    assert "env" not in onprem


def recut_job(plan: Plan) -> dict:
    [job] = [j for j in plan.kind("Job") if j["metadata"]["namespace"] == "openshift-machine-api"]
    return job


def test_a_mig_capable_machine_set_pool_without_a_layout_re_cuts_to_all_disabled(dev_plan: Plan) -> None:
    """The machine API never removes a node label: a layout that goes must be `all-disabled`, on the template and on
    the running machines, or the nodes stay sliced while the stack counts whole GPUs."""
    job = recut_job(dev_plan)
    env = {item["name"]: item["value"] for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LAYOUT"] == "all-disabled" and env["LABELS"] == '{"nvidia.com/mig.config":"all-disabled"}'
    [machine_set] = [m for m in dev_plan.kind("MachineSet") if "a100" in m["metadata"]["name"]]
    assert machine_set["spec"]["template"]["spec"]["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    [t4] = [m for m in dev_plan.kind("MachineSet") if "t4" in m["metadata"]["name"]]
    assert "nvidia.com/mig.config" not in t4["spec"]["template"]["spec"]["metadata"]["labels"]  # no MIG on a T4


def test_the_re_cut_roll_may_drain_nodes_and_nothing_more(dev_plan: Plan) -> None:
    job = recut_job(dev_plan)
    # pulumi up starts it, as a refresh, and waits for nothing but its creation (and on delete, for it to be gone)
    assert job["metadata"]["annotations"][labels.WAIT_FOR] == "jsonpath={.metadata.uid}"
    assert labels.SKIP_AWAIT not in job["metadata"]["annotations"]
    assert job["spec"]["backoffLimit"] == 0  # a failed node is left for a person, not retried
    # 2 nodes at most (maxReplicas), each drained in 600 s and re-cut in 900 s
    assert job["spec"]["activeDeadlineSeconds"] == 2 * (600 + 900) + 120
    [role] = [r for r in dev_plan.kind("ClusterRole") if r["metadata"]["name"] == job["spec"]["template"]["spec"][
        "serviceAccountName"]]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]}]


def test_dedicating_a_machine_set_pool_taints_its_running_machines(render) -> None:
    config = stack_config("dev")
    config["gpu-platform:nodePools"][1]["dedicatedTo"] = ["vision"]
    config["gpu-platform:tenants"][1]["gpus"] = 0
    env = {item["name"]: item["value"] for item in recut_job(render("dev", config))["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert '{"effect":"NoSchedule","key":"gpu-platform.io/dedicated","value":"a100-training"}' in env["TAINTS"]
    assert env["DEDICATED"] == "a100-training"
