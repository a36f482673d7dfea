"""components.kueue: the queue admission policy's CEL evaluated on pods and Jobs, the ClusterQueue a tenant's
guarantee becomes, and Kueue's configuration."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from components import labels
from components.kueue import (QUEUE_VALIDATIONS, QUEUE_VARIABLES, TenantQueueArgs, cluster_queue_spec,
                              configuration)
from tests.cel import broken_rules
from tests.conftest import ROOT, render_stack

GPU = labels.GPU_RESOURCE
EXAMPLE = ROOT / "examples" / "Pulumi.queue.yaml"
POD_SPEC = {"restartPolicy": "Never",
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                            "resources": {"limits": {GPU: "1"}}}]}


def pod(gpus: bool = True) -> dict[str, Any]:
    spec = copy.deepcopy(POD_SPEC)
    if not gpus:
        spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def job(job_labels: dict[str, str] | None = None, gpus: bool = True) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": "j", **({"labels": job_labels} if job_labels is not None else {})},
            "spec": {"template": {"spec": pod(gpus)["spec"]}}}


def admit(obj: dict[str, Any], *, user: str = "alice", tenant_class: str = labels.LOW_PRIORITY_CLASS) -> list[str]:
    return broken_rules(QUEUE_VARIABLES, QUEUE_VALIDATIONS, obj, user=user, tenant_class=tenant_class)


QUEUED = {labels.QUEUE_NAME_LABEL: labels.TENANT_QUEUE}


def test_a_gpu_pod_a_tenant_creates_is_refused_and_told_to_submit_a_queued_job() -> None:
    [message] = admit(pod())
    assert labels.QUEUE_NAME_LABEL in message and "Job" in message


def test_gpu_pods_of_jobs_kueue_admitted_and_cpu_pods_pass() -> None:
    assert admit(pod(), user=labels.JOB_CONTROLLER) == []
    assert admit(pod(gpus=False)) == []


@pytest.mark.parametrize("job_labels", [None, {}, {labels.QUEUE_NAME_LABEL: "other"}])
def test_a_gpu_job_outside_the_tenant_queue_is_refused(job_labels: dict[str, str] | None) -> None:
    [message] = admit(job(job_labels))
    assert f"{labels.QUEUE_NAME_LABEL}: {labels.TENANT_QUEUE}" in message


def test_a_queued_gpu_job_and_a_cpu_job_pass() -> None:
    assert admit(job(QUEUED)) == []
    assert admit(job(None, gpus=False)) == []


def test_only_a_high_priority_tenant_may_name_the_high_workload_priority() -> None:
    high = job({**QUEUED, labels.WORKLOAD_PRIORITY_LABEL: labels.HIGH_PRIORITY_CLASS})
    [message] = admit(high)
    assert labels.HIGH_PRIORITY_CLASS in message
    assert admit(high, tenant_class=labels.HIGH_PRIORITY_CLASS) == []
    assert admit(job({**QUEUED, labels.WORKLOAD_PRIORITY_LABEL: labels.LOW_PRIORITY_CLASS})) == []


def test_cluster_queue_caps_lending_at_the_guarantee_and_leaves_unset_limits_out() -> None:
    spec = cluster_queue_spec(TenantQueueArgs(tenant="a", cohort="c", nominal={"x": 4, "y": 1}, lending_limit=2,
                                              weight=3))
    quotas = [flavor["resources"][0] for flavor in spec["resourceGroups"][0]["flavors"]]
    assert quotas == [{"name": GPU, "nominalQuota": 4, "lendingLimit": 2},
                      {"name": GPU, "nominalQuota": 1, "lendingLimit": 1}]
    assert spec["cohortName"] == "c" and spec["fairSharing"] == {"weight": "3"}
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "a"}}


def test_the_chart_runs_kueue_with_this_configuration() -> None:
    plan = render_stack("queue", yaml.safe_load(EXAMPLE.read_text())["config"])
    [release] = [r for r in plan.resources if r["type"] == "kubernetes:helm.sh/v3:Release"
                 and r["inputs"]["name"] == "kueue"]
    assert release["inputs"]["version"] == labels.KUEUE_VERSION
    shipped = yaml.safe_load(release["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert shipped == configuration()
    assert shipped["integrations"]["frameworks"] == ["batch/job"]
