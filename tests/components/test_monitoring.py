"""MonitoringStack: DCGM exporter, its Service and ServiceMonitor, GPU alerts, and the Grafana dashboard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Plan

NAMESPACE = "gpu-system"
APP = "nvidia-dcgm-exporter"


@pytest.fixture(scope="module", params=["dev", "prod"])
def plan(request, dev_plan: Plan, prod_plan: Plan) -> Plan:
    return dev_plan if request.param == "dev" else prod_plan


def alerts(plan: Plan) -> dict[str, dict[str, Any]]:
    rule = plan.manifest("PrometheusRule", "gpu-alerts", NAMESPACE)
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}


def test_dcgm_exporter_runs_on_gpu_nodes(plan: Plan) -> None:
    daemonset = plan.manifest("DaemonSet", APP, NAMESPACE)
    spec = daemonset["spec"]["template"]["spec"]
    [container] = spec["containers"]

    assert container["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"
    assert spec["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["runtimeClassName"] == "nvidia"
    assert {"name": "metrics", "containerPort": 9400} in container["ports"]
    # Pod-to-GPU attribution comes from the kubelet's pod-resources socket.
    assert any(m["mountPath"] == "/var/lib/kubelet/pod-resources" for m in container["volumeMounts"])


def test_service_exposes_port_9400_of_the_exporter_pods(plan: Plan) -> None:
    service = plan.manifest("Service", APP, NAMESPACE)
    daemonset = plan.manifest("DaemonSet", APP, NAMESPACE)

    [port] = service["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("metrics", 9400, 9400)
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_service_monitor_scrapes_the_service(plan: Plan) -> None:
    monitor = plan.manifest("ServiceMonitor", APP, NAMESPACE)
    service = plan.manifest("Service", APP, NAMESPACE)

    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert NAMESPACE in monitor["spec"]["namespaceSelector"]["matchNames"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]


@pytest.mark.parametrize(("metric", "severity"), [
    ("DCGM_FI_DEV_XID_ERRORS", "critical"),
    ("DCGM_FI_DEV_GPU_TEMP", "warning"),
])
def test_alerts_on_gpu_faults(plan: Plan, metric: str, severity: str) -> None:
    matching = [a for a in alerts(plan).values() if metric in a["expr"]]

    assert matching, f"no alert on {metric}"
    assert matching[0]["labels"]["severity"] == severity
    assert matching[0]["annotations"]["summary"] and matching[0]["annotations"]["description"]


def test_alerts_when_the_exporter_is_down(plan: Plan) -> None:
    """`up` of the ServiceMonitor's job, which Prometheus names after the Service; absent() covers no targets."""
    down = [a for a in alerts(plan).values() if f'up{{job="{APP}"}}' in a["expr"]]

    assert down and "absent(" in down[0]["expr"]


def test_alerts_when_a_driver_is_down(plan: Plan) -> None:
    driver = [a for a in alerts(plan).values() if "nvidia-driver-" in a["expr"]]

    assert driver
    assert driver[0]["labels"]["severity"] == "critical"
    assert 'namespace="gpu-system"' in driver[0]["expr"]


def test_every_alert_waits_a_duration_and_has_a_severity(plan: Plan) -> None:
    for name, alert in alerts(plan).items():
        assert alert["for"].endswith(("s", "m", "h")), name
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), name


def test_grafana_dashboard_is_valid_json(plan: Plan) -> None:
    config_map = plan.manifest("ConfigMap", "gpu-dashboard", NAMESPACE)

    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    [document] = config_map["data"].values()
    dashboard = json.loads(document)
    assert dashboard["title"] and dashboard["uid"]
    assert dashboard["panels"]
    expressions = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    assert "DCGM_FI_DEV_GPU_UTIL" in expressions and "DCGM_FI_DEV_FB_USED" in expressions
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_gpu_system_namespace_is_monitored_on_openshift(dev_plan: Plan) -> None:
    namespace = dev_plan.manifest("Namespace", NAMESPACE)

    assert namespace["metadata"]["labels"]["openshift.io/cluster-monitoring"] == "true"
