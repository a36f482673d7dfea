"""The stack's GPU alerts, run by Prometheus' own rule engine (`promtool test rules`, built from its Go module): each
fires on the failure it exists for, absent series included, and resolves when the failure ends."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import labels
from e2e.cluster import BIN
from tests.conftest import render_stack

PROMTOOL = BIN / "promtool"
APP = labels.DCGM_EXPORTER_APP
TAINTED = f'kube_node_spec_taint{{key="{labels.GPU_TAINT["key"]}",effect="{labels.GPU_TAINT["effect"]}",node="n1"}}'


@pytest.fixture(scope="module")
def rules(tools: Path, tmp_path_factory) -> tuple[Path, str]:
    """prod's rule groups as Prometheus loads them, and the operator namespace the rules name."""
    plan = render_stack("prod")
    [rule] = plan.kind("PrometheusRule")
    folder = tmp_path_factory.mktemp("rules")
    (folder / "full.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    # Expected alerts are compared with their annotations too: the tests judge expressions, waits and labels, and
    # leave the annotations' templates to `promtool check rules`.
    groups = [{**group, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]]}
              for group in rule["spec"]["groups"]]
    (folder / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    return folder, rule["metadata"]["namespace"]


def promtool_test(folder: Path, series: list[dict[str, str]], checks: list[dict[str, Any]]) -> None:
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]}
    (folder / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([str(PROMTOOL), "test", "rules", "test.yaml"], cwd=folder, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def alert(name: str, at: str, *expected: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": e} for e in expected]}


def test_the_rules_load_and_their_templates_parse(rules) -> None:
    folder, _ = rules
    result = subprocess.run([str(PROMTOOL), "check", "rules", "full.yaml"], cwd=folder, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_xid_fires_while_the_gpu_holds_it_and_resolves_after_a_reset(rules) -> None:
    """A repeat of the same XID keeps the alert firing (the old `changes()` rule went quiet after 10 minutes)."""
    gpu = {"gpu": "0", "Hostname": "n1", "severity": "critical"}
    promtool_test(rules[0], [{"series": 'DCGM_FI_DEV_XID_ERRORS{gpu="0",Hostname="n1"}',
                              "values": "0 0 79x20 0 0"}], [
        alert("GpuXidError", "1m"),
        alert("GpuXidError", "3m", gpu),
        alert("GpuXidError", "20m", gpu),
        alert("GpuXidError", "24m"),
    ])


def test_a_failed_row_remap_fires_and_resolves(rules) -> None:
    gpu = {"gpu": "1", "Hostname": "n1", "severity": "critical"}
    promtool_test(rules[0], [{"series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="1",Hostname="n1"}',
                              "values": "0 1 1 0"}], [
        alert("GpuRowRemapFailure", "0m"), alert("GpuRowRemapFailure", "1m", gpu), alert("GpuRowRemapFailure", "3m")])


def test_a_hot_gpu_fires_after_five_minutes_and_resolves(rules) -> None:
    gpu = {"gpu": "0", "Hostname": "n1", "severity": "warning"}
    promtool_test(rules[0], [{"series": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"}', "values": "90x7 70x3"}], [
        alert("GpuTemperatureHigh", "4m"), alert("GpuTemperatureHigh", "6m", gpu), alert("GpuTemperatureHigh", "9m")])


def test_an_exporter_that_fails_its_scrapes_fires(rules) -> None:
    down = {"job": APP, "instance": "10.0.0.1:9400", "severity": "warning"}
    promtool_test(rules[0], [{"series": f'up{{job="{APP}",instance="10.0.0.1:9400"}}', "values": "0x12 1x3"}], [
        alert("DcgmExporterDown", "9m"), alert("DcgmExporterDown", "11m", down), alert("DcgmExporterDown", "14m")])


def test_an_exporter_never_scraped_fires_while_gpu_nodes_exist(rules) -> None:
    """No `up` series at all: an exporter Prometheus never found (the old `up == 0` rule stayed silent)."""
    promtool_test(rules[0], [{"series": TAINTED, "values": "1x12"}], [
        alert("DcgmExporterDown", "11m", {"job": APP, "severity": "warning"})])
    promtool_test(rules[0], [{"series": 'kube_node_info{node="cpu-0"}', "values": "1x12"}], [
        alert("DcgmExporterDown", "11m")])  # no GPU node: nothing to scrape, nothing to say


def test_a_driver_daemonset_with_unavailable_pods_fires(rules) -> None:
    folder, namespace = rules
    driver = {"namespace": namespace, "daemonset": "nvidia-gpu-driver-ubuntu22.04-abc", "severity": "critical"}
    series = (f'kube_daemonset_status_number_unavailable{{namespace="{namespace}",'
              'daemonset="nvidia-gpu-driver-ubuntu22.04-abc"}')
    promtool_test(folder, [{"series": series, "values": "1x17 0"}], [
        alert("GpuDriverUnavailable", "14m"), alert("GpuDriverUnavailable", "16m", driver),
        alert("GpuDriverUnavailable", "18m")])


def test_a_gpu_node_that_never_advertised_gpus_fires(rules) -> None:
    """A kernel without a driver: the node has no allocatable nvidia.com/gpu series at all (the old `== 0` rule
    stayed silent); it resolves once the device plugin advertises GPUs."""
    node = {"key": labels.GPU_TAINT["key"], "effect": labels.GPU_TAINT["effect"], "node": "n1",
            "severity": "warning"}
    promtool_test(rules[0], [
        {"series": TAINTED, "values": "1x30"},
        {"series": 'kube_node_status_allocatable{resource="nvidia_com_gpu",node="n1"}', "values": "_x20 4x10"},
    ], [alert("GpuNodeWithoutAllocatableGpus", "14m"), alert("GpuNodeWithoutAllocatableGpus", "16m", node),
        alert("GpuNodeWithoutAllocatableGpus", "22m")])


def allocatable(resource: str, values: str) -> dict[str, str]:
    """kube_node_status_allocatable of node n1, `resource` as kube-state-metrics writes it: '.', '/' and '-' become
    '_' (internal/store/utils.go SanitizeLabelName)."""
    return {"series": f'kube_node_status_allocatable{{resource="{resource}",node="n1",unit="integer"}}',
            "values": values}


@pytest.mark.parametrize("advertised", [
    {"nvidia_com_gpu_shared": "4x30"},  # time-sliced: nvidia.com/gpu.shared, no nvidia.com/gpu at all
    {"nvidia_com_gpu": "0x30", "nvidia_com_mig_1g_10gb": "7x30"},  # MIG (mixed): nvidia.com/mig-1g.10gb
], ids=["shared", "mig"])
def test_a_shared_or_mig_node_advertises_gpus(rules, advertised: dict[str, str]) -> None:
    """A node whose GPUs are time-sliced or MIG-sliced advertises no whole GPU, and still has GPUs to give."""
    promtool_test(rules[0], [{"series": TAINTED, "values": "1x30"},
                             *(allocatable(resource, values) for resource, values in advertised.items())], [
        alert("GpuNodeWithoutAllocatableGpus", "16m"), alert("GpuNodeWithoutAllocatableGpus", "30m")])


def test_a_mig_node_whose_slices_are_gone_fires(rules) -> None:
    """A stopped device plugin leaves its resources at 0 (a MIG change that never finished): no GPUs to give."""
    node = {"key": labels.GPU_TAINT["key"], "effect": labels.GPU_TAINT["effect"], "node": "n1",
            "severity": "warning"}
    promtool_test(rules[0], [
        {"series": TAINTED, "values": "1x40"},
        allocatable("nvidia_com_gpu", "0x40"), allocatable("nvidia_com_mig_1g_10gb", "7x4 0x25 7x10"),
    ], [alert("GpuNodeWithoutAllocatableGpus", "4m"), alert("GpuNodeWithoutAllocatableGpus", "19m"),
        alert("GpuNodeWithoutAllocatableGpus", "21m", node), alert("GpuNodeWithoutAllocatableGpus", "31m")])


# kube_node_labels of node n1 as kube-state-metrics writes it with the node's labels allowlisted (OpenShift's allows
# them all, so other labels come along): "label_" and the key with '.', '/' and '-' as '_' (internal/store/utils.go
# labelName). Each value of nvidia.com/mig.config.state is its own series; a value the node no longer has is stale.
def mig_state(state: str, values: str, layout: str = "all-1g.10gb") -> dict[str, str]:
    return {"series": f'kube_node_labels{{node="n1",job="kube-state-metrics",label_kubernetes_io_hostname="n1",'
                      f'label_nvidia_com_mig_config="{layout}",label_nvidia_com_mig_config_state="{state}"}}',
            "values": values}


def mig_alert(state: str | None = None, layout: str = "all-1g.10gb") -> dict[str, str]:
    expected = {"node": "n1", "label_nvidia_com_mig_config": layout, "severity": "warning"}
    return expected | ({"label_nvidia_com_mig_config_state": state} if state else {})


def test_a_failed_mig_layout_fires_until_the_next_layout_succeeds(rules) -> None:
    """The MIG manager writes "failed" and retries nothing until the layout label changes or its pod restarts."""
    promtool_test(rules[0], [
        mig_state("pending", "1x4 stale"), mig_state("failed", "_x5 1x9 stale"),
        mig_state("pending", "_x15 1x2 stale", layout="all-balanced"),
        mig_state("success", "_x18 1x5", layout="all-balanced"),
    ], [alert("GpuMigConfigFailed", "4m"), alert("GpuMigConfigFailed", "5m", mig_alert()),
        alert("GpuMigConfigFailed", "14m", mig_alert()), alert("GpuMigConfigFailed", "16m"),
        alert("GpuMigConfigFailed", "20m")])


def test_a_mig_layout_stuck_pending_fires_and_resolves(rules) -> None:
    """NVIDIA/gpu-operator#2833: the manager gave up waiting for a GPU client and left the state "pending"; deleting
    its pod makes the new one apply the layout."""
    promtool_test(rules[0], [mig_state("pending", "1x40 stale"), mig_state("success", "_x41 1x4")], [
        alert("GpuMigConfigStuck", "29m"), alert("GpuMigConfigStuck", "31m", mig_alert("pending")),
        alert("GpuMigConfigStuck", "40m", mig_alert("pending")), alert("GpuMigConfigStuck", "42m"),
        alert("GpuMigConfigFailed", "42m")])


def test_a_mig_layout_that_reboots_the_node_is_not_stuck(rules) -> None:
    """A MIG mode change with a reboot: pending, rebooting, pending again, then success; each state is timed alone."""
    promtool_test(rules[0], [
        mig_state("pending", "1x24 stale"), mig_state("rebooting", "_x25 1x19 stale"),
        mig_state("pending", "_x45 1x24 stale"), mig_state("success", "_x70 1x4"),
    ], [alert("GpuMigConfigStuck", at) for at in ("24m", "44m", "69m", "74m")])
