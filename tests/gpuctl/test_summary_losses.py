"""Every loss a change brings is on the preview's destructive list, in plain words: drain switched off, a group's
access removed, queued work stranded, a driver downgrade, a tenant network deleted; and a tenant counts as changed
when anything of it changes."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpuctl.diff import diff_plans, property_changes
from gpuctl.report import summary_lines, tenant_rows
from gpuctl.summary import FleetSummary, summarize
from tests.conftest import ROOT, render_stack, stack_config


def change(stack: str, edit, base_config: dict | None = None) -> tuple[FleetSummary, list[str]]:
    """The summary of editing `stack`'s config (or `base_config`) with `edit`, and its text lines."""
    before = copy.deepcopy(base_config if base_config is not None else stack_config(stack))
    after = copy.deepcopy(before)
    edit(after)
    old, new = render_stack(stack, before).document, render_stack(stack, after).document
    summary = summarize(old, new, diff_plans(old, new))
    return summary, summary_lines(summary)


def destructive(summary: FleetSummary) -> list[str]:
    return [f"{item.what}: {item.takes_away}" for item in summary.destructive]


def test_removing_the_node_termination_handler_role_switches_drain_off_for_every_pool() -> None:
    summary, _ = change("prod", lambda config: config["gpu-platform:cluster"].pop("nodeTerminationHandlerRole"))

    [line] = destructive(summary)
    assert line.startswith("node drain switched off for pools a10g-batch, h100-training, l4-inference: the drain "
                           "before a node terminates")
    assert "goes with its pods still running" in line


def test_an_image_change_on_a_pool_without_drain_says_its_nodes_go_with_their_jobs_running() -> None:
    """An instance refresh replaces every running node; where the handler cannot drain, the jobs are not moved."""
    def edit(config: dict) -> None:
        config["gpu-platform:cluster"].pop("nodeTerminationHandlerRole")
        l4 = next(p for p in config["gpu-platform:nodePools"] if p["name"] == "l4-inference")
        l4.update(kernel="6.8.0-1024-aws", image="ami-0a1b2c3d4e5f60789")

    summary, lines = change("prod", edit)

    [refresh] = [line for line in destructive(summary) if line.startswith("pool l4-inference instance refresh")]
    assert refresh.startswith("pool l4-inference instance refresh: running GPU jobs on its 8 nodes: each node is "
                              "replaced by a new one, terminated with its pods still running: NOT drained unless")
    assert refresh.endswith(", 1 node at a time")
    assert "Destructive: nothing" not in lines


def test_a_tenants_new_group_is_a_loss_for_the_old_group_and_the_tenant_counts_as_changed() -> None:
    def edit(config: dict) -> None:
        vision = next(t for t in config["gpu-platform:tenants"] if t["name"] == "vision")
        vision["group"] = "vision-ml"

    summary, lines = change("onprem", edit)

    assert destructive(summary) == [
        "group vision-team loses namespace vision: every right vision-team had there (the tenant role): its members "
        "can no longer see or run the tenant's workloads; vision-ml gets them instead"]
    assert any(line.startswith("  vision (namespace vision): changed") and line.endswith(
        "; group vision-team -> vision-ml") for line in lines)


@pytest.mark.parametrize(("field", "value", "shown"), [("memory", "512Gi", "memory 256Gi -> 512Gi"),
                                                        ("pods", 50, "pods 200 -> 50")])
def test_a_tenant_whose_memory_or_pods_quota_changes_is_not_counted_unchanged(field: str, value, shown: str) -> None:
    def edit(config: dict) -> None:
        next(t for t in config["gpu-platform:tenants"] if t["name"] == "inference")[field] = value

    summary, _ = change("onprem", edit)

    rows, same = tenant_rows(summary)
    assert same == 2 and [(row["tenant"], row["also"]) for row in rows] == [("inference", shown)]
    assert summary.destructive == []


def test_switching_queue_to_quota_names_the_queued_jobs_it_strands_and_not_kueue_as_a_tenants_namespace() -> None:
    queue = yaml.safe_load((ROOT / "examples" / "Pulumi.queue.yaml").read_text())["config"]

    def edit(config: dict) -> None:
        config["gpu-platform:tenancy"] = {"mode": "quota"}
        for tenant in config["gpu-platform:tenants"]:
            tenant.pop("queue", None)

    summary, _ = change("queue", edit, queue)

    lines = destructive(summary)
    stranded = [line for line in lines if line.startswith("queue ")]
    assert [line.split(":", 1)[0] for line in stranded] == [
        "queue search-ranking/gpu deleted", "queue llm-training/gpu deleted", "queue analytics/gpu deleted"]
    assert all("stay suspended until deleted or resubmitted" in line for line in stranded)
    [kueue] = [line for line in lines if line.startswith("namespace kueue-system")]
    assert "tenant" not in kueue


def test_a_driver_branch_downgrade_is_remarked_and_listed() -> None:
    def edit(config: dict) -> None:
        config["gpu-platform:driver"]["branch"] = "570"

    summary, lines = change("prod", edit)

    assert [item.what for item in summary.destructive] == [
        "pool a10g-batch driver roll (nvidia-driver-ubuntu22-04-6-8-0-1021-aws)",
        "pool h100-training driver roll (nvidia-driver-ubuntu22-04-6-8-0-1019-aws)",
        "pool l4-inference driver roll (nvidia-driver-ubuntu22-04-6-8-0-1021-aws)",
        "driver for ubuntu22.04/6.8.0-1019-aws downgraded, branch 580 -> 570",
        "driver for ubuntu22.04/6.8.0-1021-aws downgraded, branch 580 -> 570"]
    # The operator reloads each node's driver with its GPU pods evicted, one node at a time (maxParallelUpgrades 1).
    [a10g] = [item for item in summary.destructive if item.what.startswith("pool a10g-batch")]
    assert a10g.takes_away == ("running GPU jobs on its 4 nodes: each node is cordoned, its GPU pods evicted and its "
                               "driver reloaded, 1 node at a time")
    assert all(kernel.note == "driver branch 580 -> 570: a downgrade" for kernel in summary.kernels)
    assert sum("driver branch 580 -> 570: a downgrade" in line for line in lines) == 2


def test_a_tenant_networks_retirement_shows_and_its_removal_is_destructive() -> None:
    def retire(config: dict) -> None:
        vision = next(t for t in config["gpu-platform:tenants"] if t["name"] == "vision")
        vision["networks"][0]["retired"] = True

    retired, lines = change("onprem", retire)
    assert "  tenant vision network collective: newly retired: its NetworkAttachmentDefinition is unprotected, so a " \
           "later change may remove the network; pods attach to it until then" in lines
    assert retired.destructive == []

    base = copy.deepcopy(stack_config("onprem"))
    retire(base)
    removed, _ = change("onprem", lambda config: next(
        t for t in config["gpu-platform:tenants"] if t["name"] == "vision").pop("networks"), base)
    assert destructive(removed) == [
        "network vision/collective deleted: the tenant's secondary network: pods that ask for it no longer start "
        "(running pods keep their interface until they restart)"]


def test_a_list_element_is_named_by_its_type_where_it_has_one() -> None:
    """The cluster autoscaler's GPU limits: `gpus[1].max` says nothing of which GPU."""
    old = [{"type": "nvidia-a10g", "min": 0, "max": 8}, {"type": "nvidia-l4", "min": 0, "max": 8}]
    new = [{"type": "nvidia-a10g", "min": 0, "max": 8}, {"type": "nvidia-l4", "min": 0, "max": 16}]

    [change] = property_changes({"spec": {"resourceLimits": {"gpus": old}}}, {"spec": {"resourceLimits": {"gpus": new}}})
    assert change.named == "spec.resourceLimits.gpus[nvidia-l4].max"


@pytest.mark.parametrize("written", ["false", False])
def test_preflight_false_in_the_stack_file_keeps_the_preview_off_the_registry(tmp_path, monkeypatch, capsys,
                                                                             written) -> None:
    """As `pulumi config set gpu-platform:preflight false` writes it (text), or as a YAML boolean."""
    from gpuctl import preview
    from gpuctl.__main__ import main

    def asked(images) -> None:
        raise AssertionError(f"the registry was asked for {sorted(images.values())}")

    config = yaml.safe_load((ROOT / "examples" / "Pulumi.queue.yaml").read_text())
    config["config"]["gpu-platform:cluster"]["discovery"] = {"enabled": False}
    config["config"]["gpu-platform:preflight"] = written
    (tmp_path / "Pulumi.queue.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr(preview, "check_driver_images", asked)

    assert main(["preview", "--config-file", str(tmp_path / "Pulumi.queue.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Driver image preflight: skipped (gpu-platform:preflight false)" in out
    assert "preflight false" not in out.replace("skipped (gpu-platform:preflight false)", "")
