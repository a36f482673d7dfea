"""The fleet summary of changes that re-cut, replace or close nodes running GPU jobs, on real renders: each is in the
destructive list with the roll that causes it, per placement, and none reads "Destructive: nothing"."""

from __future__ import annotations

from collections.abc import Callable

from gpuctl.diff import diff_plans
from gpuctl.preview import base_kernels
from gpuctl.render import render_plan
from gpuctl.report import summary_lines
from gpuctl.stackfile import stack_file_from_config
from gpuctl.summary import FleetSummary, PoolChange, summarize
from tests.conftest import stack_config

Edit = Callable[[dict], None]


def pool(config: dict, name: str) -> dict:
    return next(p for p in config["gpu-platform:nodePools"] if p["name"] == name)


def tenant(config: dict, name: str) -> dict:
    return next(t for t in config["gpu-platform:tenants"] if t["name"] == name)


def change(stack: str, base_edit: Edit, head_edit: Edit) -> FleetSummary:
    """The summary of going from the stack edited by `base_edit` to it edited by `head_edit` too."""
    config = stack_config(stack)
    base_edit(config)
    base = render_plan(stack_file_from_config(stack, config))
    head_edit(config)
    head = render_plan(stack_file_from_config(stack, config), previous=base_kernels(base))
    return summarize(base, head, diff_plans(base, head), offline=True)


def the_pool(summary: FleetSummary, name: str) -> PoolChange:
    return next(p for p in summary.pools if p.name == name)


def losses(summary: FleetSummary, name: str) -> dict[str, str]:
    """What the destructive list says the change takes from a pool (and the report's lines agree it takes any)."""
    text = "\n".join(summary_lines(summary))
    assert ("Destructive: nothing" in text) == (not summary.destructive)
    return {item.what: item.takes_away for item in summary.destructive if item.what.startswith(f"pool {name} ")}


def nothing(config: dict) -> None:
    pass


# -- Auto Scaling Group pools (examples/Pulumi.partitioned.yaml) ----------------------------------------------------


def custom(devices: dict[str, int]) -> Edit:
    def edit(config: dict) -> None:
        pool(config, "a100-mig")["migLayout"] = devices
        count = devices.get("1g.10gb", 0) * 8
        tenant(config, "llm-training")["migSlices"] = {"1g.10gb": count // 4}
        tenant(config, "inference")["migSlices"] = {"1g.10gb": count - count // 4}
    return edit


def test_editing_a_custom_layout_is_a_layout_change_that_replaces_the_nodes() -> None:
    summary = change("partitioned", custom({"1g.10gb": 7}), custom({"1g.10gb": 5, "2g.20gb": 1}))
    mig = the_pool(summary, "a100-mig")

    assert "instance refresh of 1 node" in mig.roll
    assert "MIG custom-a100-mig-" in mig.roll and "then advertise 40 nvidia.com/mig-1g.10gb, 8 nvidia.com/mig-2g.20gb" \
        in mig.roll
    [(what, takes_away)] = losses(summary, "a100-mig").items()
    assert what.startswith("pool a100-mig MIG layout custom-a100-mig-") and what.count("custom-a100-mig-") == 2
    assert takes_away == "running GPU jobs on its 1 node: each node is drained and replaced by the instance refresh"


def test_whole_gpus_to_shares_on_an_auto_scaling_group_replaces_every_node() -> None:
    def shares(config: dict) -> None:
        pool(config, "h100-training")["timeSlicingReplicas"] = 2
        tenant(config, "llm-training")["gpus"] = 0
        tenant(config, "llm-training")["gpuShares"] = 16
    summary = change("partitioned", nothing, shares)
    training = the_pool(summary, "h100-training")

    assert "whole GPUs -> time-sliced x2: the nodes' accelerator label (on whole-GPU pools only) is in the launch " \
           "template, so the instance refresh above replaces every node" in training.roll
    assert "running pods keep their GPUs" not in training.roll
    assert losses(summary, "h100-training") == {
        "pool h100-training whole GPUs -> time-sliced x2": "running GPU jobs on its 1 node: the instance refresh "
        "replaces every node (the accelerator label is in the launch template), each drained first"}


def test_a_share_count_change_restarts_the_device_plugin_and_replaces_nothing() -> None:
    summary = change("partitioned", nothing, lambda config: pool(config, "l4-shared").update(timeSlicingReplicas=2))
    assert "running pods keep their GPUs" in the_pool(summary, "l4-shared").roll
    assert losses(summary, "l4-shared") == {}


# -- OpenShift MachineSet pools (Pulumi.dev.yaml) --------------------------------------------------------------------


def mig_on_a100(config: dict) -> None:
    pool(config, "a100-training")["migLayout"] = "all-3g.20gb"
    tenant(config, "vision")["gpus"] = 0
    tenant(config, "nlp-research")["gpus"] = 0
    tenant(config, "vision")["migSlices"] = {"3g.20gb": 4}


def test_removing_a_layout_re_cuts_the_running_nodes_to_all_disabled_through_the_drain_roll() -> None:
    def whole(config: dict) -> None:
        del pool(config, "a100-training")["migLayout"]
        tenant(config, "vision")["gpus"] = 4
        del tenant(config, "vision")["migSlices"]
    summary = change("dev", mig_on_a100, whole)
    training = the_pool(summary, "a100-training")

    assert "MIG all-3g.20gb -> whole GPUs: a Job re-cuts the pool's running nodes one at a time: it cordons the " \
           "node, evicts its pods through the eviction API (PodDisruptionBudgets respected, up to 600s)" in training.roll
    assert "waits up to 900s for nvidia.com/mig.config.state=success" in training.roll
    assert losses(summary, "a100-training") == {
        "pool a100-training MIG layout all-3g.20gb -> all-disabled": "running GPU jobs on its 1 node: each node is "
        "drained (cordoned, its GPU pods evicted, PodDisruptionBudgets respected) before its GPUs are re-cut, one "
        "node at a time"}


def test_setting_a_layout_on_a_machine_set_pool_is_destructive_with_its_roll() -> None:
    summary = change("dev", nothing, mig_on_a100)
    assert "whole GPUs -> MIG all-3g.20gb: a Job re-cuts" in the_pool(summary, "a100-training").roll
    assert list(losses(summary, "a100-training")) == ["pool a100-training MIG layout all-disabled -> all-3g.20gb"]


def test_dedicating_a_machine_set_pool_reaches_its_running_nodes_and_says_who_loses_them() -> None:
    def dedicated(config: dict) -> None:
        pool(config, "a100-training")["dedicatedTo"] = ["vision"]
        tenant(config, "nlp-research")["gpus"] = 0
    summary = change("dev", nothing, dedicated)
    training = the_pool(summary, "a100-training")

    assert "dedicated to nobody -> vision: the template reaches new machines, and the Job sets the taints of the " \
           "running nodes" in training.roll
    assert losses(summary, "a100-training") == {
        "pool a100-training dedicated to vision": "other tenants' use of its 1 running node: the Job taints each "
        "running node through its machine; their pods running there keep running (NoSchedule evicts nothing), but "
        "none starts there again"}


# -- bring-your-own pools (Pulumi.onprem.yaml) -----------------------------------------------------------------------


def test_a_mig_change_on_a_bring_your_own_pool_is_destructive_and_says_how_to_roll_it() -> None:
    def sliced(config: dict) -> None:
        pool(config, "dgx-a100")["migLayout"] = "all-3g.40gb"
        tenant(config, "vision")["gpus"] = 0
        tenant(config, "nlp-research")["gpus"] = 0
        tenant(config, "vision")["migSlices"] = {"3g.40gb": 32}
    summary = change("onprem", nothing, sliced)
    dgx = the_pool(summary, "dgx-a100")

    assert "whole GPUs -> MIG all-3g.40gb: you roll the pool's nodes, one at a time: cordon, drain, label " \
           "nvidia.com/mig.config=all-3g.40gb, wait for nvidia.com/mig.config.state=success, uncordon" in dgx.roll
    assert losses(summary, "dgx-a100") == {
        "pool dgx-a100 MIG layout all-disabled -> all-3g.40gb": "running GPU jobs on its 2 nodes: when you re-label "
        "a node, its GPU pods must be drained first: NVIDIA's MIG manager evicts nothing, and a GPU instance still in "
        "use makes the re-cut fail"}


# -- Karpenter pools (examples/Pulumi.karpenter.yaml) ---------------------------------------------------------------


def karpenter(**fields: object) -> Edit:
    return lambda config: pool(config, "a10g-training")["karpenter"].update(fields)


def test_consolidating_under_used_nodes_is_destructive_for_their_jobs() -> None:
    summary = change("karpenter", nothing, karpenter(consolidation="WhenEmptyOrUnderutilized"))
    training = the_pool(summary, "a10g-training")

    assert "consolidation WhenEmpty -> WhenEmptyOrUnderutilized: Karpenter now also replaces or removes nodes that " \
           "run pods but are under-used" in training.roll
    assert list(losses(summary, "a10g-training")) == [
        "pool a10g-training consolidation WhenEmpty -> WhenEmptyOrUnderutilized"]


def test_a_wider_requirement_drifts_no_node() -> None:
    summary = change("karpenter", nothing, karpenter(capacityTypes=["on-demand", "spot"]))
    training = the_pool(summary, "a10g-training")

    assert not training.drifts and "drift replacement" not in training.roll
    assert "requirements change: the template's hash leaves them out, so Karpenter replaces only the nodes that no " \
           "longer satisfy them (RequirementsDrifted), within the disruption budget: none" in training.roll
    assert losses(summary, "a10g-training") == {}


def test_a_narrower_requirement_replaces_only_the_nodes_outside_it() -> None:
    summary = change("karpenter", nothing, karpenter(zones=["us-east-1a"]))
    training = the_pool(summary, "a10g-training")

    assert not training.drifts
    assert "within the disruption budget: nodes with topology.kubernetes.io/zone us-east-1b" in training.roll
    assert losses(summary, "a10g-training") == {
        "pool a10g-training requirements narrowed": "running GPU jobs on its nodes with topology.kubernetes.io/zone "
        "us-east-1b: Karpenter replaces those nodes by drift, within the disruption budget"}


def test_an_expiry_is_said_to_ignore_the_disruption_budget() -> None:
    summary = change("karpenter", nothing, karpenter(expireAfter="720h"))
    training = the_pool(summary, "a10g-training")

    assert training.drifts and "expireAfter Never -> 720h: the drift replacement above gives every node the new " \
                               "expiry, from then on Karpenter deletes each node when it is 720h old" in training.roll
    found = losses(summary, "a10g-training")
    assert "pool a10g-training drift replacement" in found
    assert found["pool a10g-training expireAfter Never -> 720h"].startswith(
        "running GPU jobs on each node that reaches that age: it is deleted, whatever the disruption budget")


def test_removing_a_karpenter_pool_takes_away_what_runs_not_its_limit() -> None:
    def retired(config: dict) -> None:
        pool(config, "a10g-training")["retired"] = True

    def removed(config: dict) -> None:
        config["gpu-platform:nodePools"].remove(pool(config, "a10g-training"))
        tenant(config, "llm-training")["gpus"] = 0
        tenant(config, "analytics")["gpus"] = 0
    summary = change("karpenter", retired, removed)

    assert losses(summary, "a10g-training") == {} and {item.what: item.takes_away for item in summary.destructive}[
        "pool a10g-training"] == "1 nodes, 4 GPUs (g5.12xlarge)"
