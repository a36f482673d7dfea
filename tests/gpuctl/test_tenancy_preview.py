"""Switching a stack from tenancy mode quota to queue, as the preview shows it: per tenant the hard GPU quota becomes
its ceiling, a queue and its guarantee come, and nothing that holds workloads is deleted."""

from __future__ import annotations

import pytest

from gpuctl.diff import diff_plans
from gpuctl.report import summary_lines, tenant_rows
from gpuctl.summary import summarize
from tests.conftest import render_stack, stack_config


@pytest.fixture(scope="module")
def switch():
    base = render_stack("staging").document
    config = stack_config("staging")
    config["gpu-platform:tenancy"] = {"mode": "queue"}
    new = render_stack("staging", config).document
    diff = diff_plans(base, new)
    return diff, summarize(base, new, diff)


def kinds(diff, op: str) -> list[tuple[str, str]]:
    return sorted((step.resource["type"].rsplit(":", 1)[-1], step.resource["name"]) for step in diff.steps
                  if step.op == op and step.resource["custom"])


def test_each_tenants_gpu_quota_becomes_its_ceiling_and_nothing_is_deleted(switch) -> None:
    diff, _ = switch
    assert kinds(diff, "delete") == []
    quotas = {step.resource["name"]: step.resource["inputs"]["spec"]["hard"] for step in diff.steps
              if step.op == "update" and step.resource["type"].endswith(":ResourceQuota")}
    assert set(quotas) == {f"tenant-{name}-gpu-quota" for name in ("analytics", "llm-training", "search-ranking")}
    # analytics: its 2 GPUs and the 4 it may borrow (search-ranking's 2 on l4, llm-training's 2 on a10g).
    assert quotas["tenant-analytics-gpu-quota"]["requests.nvidia.com/gpu"] == "6"
    # Only the admission gate's Job is replaced: it now proves the queue policy too (a new Job, run before the old
    # one is deleted).
    assert [step.resource["name"] for step in diff.steps
            if step.op in ("replace", "create-replacement", "delete-replaced")] == ["admission-gate-job"]


def test_each_tenant_gains_a_cluster_queue_and_the_local_queue_of_its_namespace(switch) -> None:
    created = kinds(switch[0], "create")
    for name in ("analytics", "llm-training", "search-ranking"):
        assert ("ClusterQueue", f"tenant-{name}-queue-cluster-queue") in created
        assert ("LocalQueue", f"tenant-{name}-queue-local-queue") in created
    assert ("Release", "kueue-release") in created


def test_the_summary_shows_per_tenant_guaranteed_and_borrowable_before_and_after(switch) -> None:
    _, summary = switch
    assert summary.destructive == []
    rows, same = tenant_rows(summary)
    assert same == 0
    by_name = {row["tenant"]: row for row in rows}
    assert by_name["analytics"]["tenancy"] == "quota -> queue"
    assert by_name["analytics"]["guaranteed GPUs"] == "2"  # 2 under a hard quota, 2 nominal in its queue
    assert by_name["analytics"]["may borrow"] == "0 -> 4"  # search-ranking's 2 on l4, llm-training's 2 on a10g
    assert any("analytics (namespace analytics): changed" in line and "may borrow 0 -> 4" in line
               for line in summary_lines(summary))
