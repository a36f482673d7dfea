"""MonitoringStack: GPU alerts, the Grafana dashboard, and who may scrape the operator's DCGM exporter."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conftest import Plan, render_stack, stack_config

APP = "nvidia-dcgm-exporter"
NAMESPACES = {"dev": "nvidia-gpu-operator", "prod": "gpu-operator"}
# dcgm-exporter's default counters (etc/default-counters.csv and dcp-metrics-included.csv of the pinned release):
# the metrics an alert or panel may use without a custom metrics config.
DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DRIVER_VERSION",
}


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def plan(stack: str, dev_plan: Plan, prod_plan: Plan) -> Plan:
    return dev_plan if stack == "dev" else prod_plan


def alerts(plan: Plan, namespace: str) -> dict[str, dict[str, Any]]:
    rule = plan.manifest("PrometheusRule", "gpu-alerts", namespace)
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}


def dcgm_metrics(expression: str) -> set[str]:
    return set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", expression))


@pytest.mark.parametrize(("metric", "severity"), [
    ("DCGM_FI_DEV_XID_ERRORS", "critical"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "critical"),
    ("DCGM_FI_DEV_GPU_TEMP", "warning"),
])
def test_alerts_on_gpu_faults(plan: Plan, stack: str, metric: str, severity: str) -> None:
    matching = [a for a in alerts(plan, NAMESPACES[stack]).values() if metric in a["expr"]]

    assert matching, f"no alert on {metric}"
    assert matching[0]["labels"]["severity"] == severity
    assert matching[0]["annotations"]["summary"] and matching[0]["annotations"]["description"]


def test_alerts_use_only_default_exporter_metrics(plan: Plan, stack: str) -> None:
    """A metric the exporter does not collect by default makes an alert that never fires."""
    for name, alert in alerts(plan, NAMESPACES[stack]).items():
        assert dcgm_metrics(alert["expr"]) <= DEFAULT_COUNTERS, name


def test_alerts_when_the_exporter_is_down_or_never_scraped(plan: Plan, stack: str) -> None:
    """`up` of the ServiceMonitor's job, which Prometheus names after the operator's exporter Service; its absence
    counts too. That each alert fires and resolves is tested with promtool in e2e/test_alerts.py."""
    down = [a for a in alerts(plan, NAMESPACES[stack]).values() if f'up{{job="{APP}"}}' in a["expr"]]
    assert down and f'absent(up{{job="{APP}"}})' in down[0]["expr"]


def test_alerts_when_a_driver_is_down(plan: Plan, stack: str) -> None:
    driver = [a for a in alerts(plan, NAMESPACES[stack]).values() if "nvidia-gpu-driver-" in a["expr"]]

    assert driver
    assert driver[0]["labels"]["severity"] == "critical"
    assert f'namespace="{NAMESPACES[stack]}"' in driver[0]["expr"]


# The `resource` of kube_node_status_allocatable for what the device plugin advertises per partitioning, as
# kube-state-metrics writes it (internal/store/utils.go SanitizeLabelName: '.', '/', '-' and '+' become '_').
ADVERTISED = {"nvidia.com/gpu": "nvidia_com_gpu", "nvidia.com/gpu.shared": "nvidia_com_gpu_shared",
              "nvidia.com/mig-1g.10gb": "nvidia_com_mig_1g_10gb", "nvidia.com/mig-3g.40gb": "nvidia_com_mig_3g_40gb",
              "nvidia.com/mig-1g.10gb.me": "nvidia_com_mig_1g_10gb_me",  # profile 1g.10gb+me
              "nvidia.com/mig-1g.10gb.shared": "nvidia_com_mig_1g_10gb_shared"}


def test_a_node_advertising_any_kind_of_gpu_is_not_without_gpus(plan: Plan, stack: str) -> None:
    """Whole, time-sliced and MIG nodes all have GPUs: only a node advertising none of them is reported (PromQL
    anchors its regular expressions, like fullmatch; that the alert fires and resolves is e2e/test_alerts.py's)."""
    expr = alerts(plan, NAMESPACES[stack])["GpuNodeWithoutAllocatableGpus"]["expr"]
    [pattern] = re.findall(r'kube_node_status_allocatable\{resource=~"([^"]+)"\} > 0', expr)
    for name, resource in ADVERTISED.items():
        assert re.fullmatch(pattern, resource), name
    for other in ("nvidia_com_gpu_foo", "amd_com_gpu", "cpu", "nvidia_com_migrate"):
        assert not re.fullmatch(pattern, other), other


def test_alerts_when_a_mig_layout_fails_or_wedges(plan: Plan, stack: str) -> None:
    """The MIG manager's states (k8s-mig-manager v0.15.0 pkg/mig/reconfigure/reconfigure.go), read from the
    node label as kube-state-metrics names it: "failed" at once; "pending" or "rebooting" that lasts is the wedge
    of NVIDIA/gpu-operator#2833, and its description says how to recover."""
    rules = alerts(plan, NAMESPACES[stack])
    failed, stuck = rules["GpuMigConfigFailed"], rules["GpuMigConfigStuck"]
    assert 'kube_node_labels{label_nvidia_com_mig_config_state="failed"}' in failed["expr"]
    assert 'kube_node_labels{label_nvidia_com_mig_config_state=~"pending|rebooting"}' in stuck["expr"]
    assert stuck["for"] == "30m"  # longer than the five 5-minute waits for GPU clients of a working apply
    for rule in (failed, stuck):
        assert "by (node, label_nvidia_com_mig_config" in rule["expr"]  # one alert per node, naming the layout
        description = rule["annotations"]["description"]
        assert f"kubectl get pods -n {NAMESPACES[stack]} -l app=nvidia-mig-manager" in description
    assert "gpu-operator#2833" in stuck["annotations"]["description"]
    assert "paused-for-mig-change" in stuck["annotations"]["description"]


def test_every_alert_waits_a_duration_and_has_a_severity(plan: Plan, stack: str) -> None:
    for name, alert in alerts(plan, NAMESPACES[stack]).items():
        assert re.fullmatch(r"\d+[smh]", alert["for"]), name
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), name


def test_prometheus_rule_only_with_the_prometheus_operator(render) -> None:
    config = stack_config("prod")
    del config["gpu-platform:monitoring"]  # Kubernetes default: no Prometheus Operator
    plan = render("prod", config)
    assert not plan.kind("PrometheusRule")
    assert plan.manifest("ConfigMap", "gpu-dashboard", "gpu-operator")  # the dashboard needs no CRD
    config = stack_config("dev")
    config["gpu-platform:monitoring"] = {"prometheusOperator": False}
    assert not render("dev", config).kind("PrometheusRule")


# Where each flavor's dashboards are read: OpenShift's console, or Grafana's sidecar.
DASHBOARDS = {"dev": ("openshift-config-managed", "console.openshift.io/dashboard", "true"),
              "prod": (NAMESPACES["prod"], "grafana_dashboard", "1")}


def test_grafana_dashboard_is_valid_json(plan: Plan, stack: str) -> None:
    namespace, label, value = DASHBOARDS[stack]
    config_map = plan.manifest("ConfigMap", "gpu-dashboard", namespace)

    assert config_map["metadata"]["labels"][label] == value
    [document] = config_map["data"].values()
    dashboard = json.loads(document)
    assert dashboard["title"] and dashboard["uid"]
    assert dashboard["panels"]
    expressions = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    assert "DCGM_FI_DEV_GPU_UTIL" in expressions and "DCGM_FI_DEV_FB_USED" in expressions
    assert dcgm_metrics(expressions) <= DEFAULT_COUNTERS
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    # idle GPUs keep the exporter's own namespace (the ServiceMonitor honours the exporter's labels): not a user
    assert f'namespace!="{NAMESPACES[stack]}"' in expressions


def test_the_prometheus_selector_labels_reach_the_rules_and_the_service_monitor() -> None:
    """A kube-prometheus-stack Prometheus selects rules and ServiceMonitors by its release label by default."""
    config = stack_config("prod")
    config["gpu-platform:monitoring"]["ruleLabels"] = {"release": "kube-prometheus-stack"}
    plan = render_stack("prod", config)
    assert plan.manifest("PrometheusRule", "gpu-alerts", NAMESPACES["prod"])["metadata"]["labels"][
        "release"] == "kube-prometheus-stack"
    monitor = plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["dcgmExporter"]["serviceMonitor"]
    assert monitor["additionalLabels"] == {"release": "kube-prometheus-stack"}


def exporter_fence(plan: Plan, namespace: str) -> dict[str, Any]:
    return plan.manifest("NetworkPolicy", "dcgm-exporter-scrapers-only", namespace)


@pytest.mark.parametrize(("stack_name", "scrapers"), [
    ("dev", {"openshift-monitoring", "openshift-user-workload-monitoring"}),
    ("prod", {"monitoring"}),
])
def test_only_monitoring_namespaces_reach_the_exporter(dev_plan: Plan, prod_plan: Plan, stack_name: str,
                                                       scrapers: set[str]) -> None:
    """The exporter's metrics name every tenant's pods: tenants must not read each other's through it."""
    fence = exporter_fence(dev_plan if stack_name == "dev" else prod_plan, NAMESPACES[stack_name])["spec"]
    assert fence["podSelector"] == {"matchLabels": {"app": APP}}
    assert fence["policyTypes"] == ["Ingress"]
    [rule] = fence["ingress"]
    allowed = set()
    for peer in rule["from"]:
        assert set(peer) == {"namespaceSelector"}  # no podSelector/ipBlock widening the fence
        assert set(peer["namespaceSelector"]) == {"matchLabels"}
        allowed.add(peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"])
    assert allowed == scrapers
    assert rule["ports"] == [{"protocol": "TCP", "port": 9400}]


def test_fence_follows_the_configured_monitoring_namespaces(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:cluster"]["monitoringNamespaces"] = ["observability"]
    [rule] = exporter_fence(render("prod", config), "gpu-operator")["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}]


def test_monitoring_waits_for_the_operator_namespace(dev_plan: Plan, prod_plan: Plan) -> None:
    for plan, installed in ((dev_plan, "gpu-operator-olm-approve-install-plan"), (prod_plan, "gpu-operator-release")):
        for name in ("monitoring-alerts", "monitoring-dashboard", "monitoring-dcgm-exporter-fence"):
            assert plan.depends_on(plan.named(name), installed), name
