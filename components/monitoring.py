"""MonitoringStack: DCGM exporter on every GPU node, scraped by Prometheus, with alerts and a dashboard."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.device_plugin import RUNTIME_CLASS
from components.manifests import child_options, daemonset_spec, host_path, metadata, node_agent_pod

APP = "nvidia-dcgm-exporter"
METRICS_PORT = 9400

ALERTS = [
    ("GpuXidError", "increase(DCGM_FI_DEV_XID_ERRORS[10m]) > 0 or DCGM_FI_DEV_XID_ERRORS > 0", "0m", "critical",
     "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
     "An XID is a driver-reported GPU fault. Cordon the node, check `dmesg | grep NVRM`, and see NVIDIA's XID catalog."),
    ("GpuDoubleBitEccErrors", "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0", "0m", "critical",
     "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} has uncorrectable ECC errors",
     "Uncorrectable memory errors corrupt results. Drain the node and reset or replace the GPU."),
    ("GpuTemperatureHigh", "DCGM_FI_DEV_GPU_TEMP > 85", "5m", "warning",
     "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is at {{ $value }} C",
     "Sustained heat throttles clocks. Check the instance's cooling and the workload's power draw."),
    ("DcgmExporterDown", f'up{{job="{APP}"}} == 0 or absent(up{{job="{APP}"}})', "10m", "warning",
     "DCGM exporter is not scraped", "No GPU metrics: GPU alerts are blind. Check the exporter pods in gpu-system."),
    ("GpuDriverPodsUnavailable",
     'kube_daemonset_status_number_unavailable{namespace="gpu-system",daemonset=~"nvidia-driver-.*"} > 0',
     "15m", "critical", "Driver DaemonSet {{ $labels.daemonset }} has unavailable pods",
     "Nodes on this kernel have no working driver and no GPUs. Check the driver pod logs and the image tag."),
    ("GpuNodeWithoutAllocatableGpus",
     'kube_node_status_allocatable{resource="nvidia_com_gpu"} == 0 '
     'and on(node) kube_node_labels{label_feature_node_kubernetes_io_pci_10de_present="true"}',
     "15m", "warning", "GPU node {{ $labels.node }} advertises no GPUs",
     "The device plugin is not advertising nvidia.com/gpu. Check the driver, toolkit and device plugin pods."),
]

PANELS = [
    ("GPU utilisation (%)", "avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL)"),
    ("GPU memory used (MiB)", "sum by (Hostname, gpu) (DCGM_FI_DEV_FB_USED)"),
    ("GPU temperature (C)", "max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)"),
    ("Power draw (W)", "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)"),
    ("XID errors", "max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS)"),
    ("GPUs in use by namespace", "count by (namespace) (DCGM_FI_DEV_GPU_UTIL{namespace!=\"\"})"),
]


def dashboard() -> dict:
    """The Grafana dashboard: one time-series panel per question an on-call engineer asks first."""
    panels = [{
        "id": index + 1, "type": "timeseries", "title": title,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "targets": [{"expr": expr, "refId": "A"}],
    } for index, (title, expr) in enumerate(PANELS)]
    return {
        "title": "NVIDIA GPUs", "uid": "gpu-platform-dcgm", "schemaVersion": 39, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }


@dataclass(frozen=True)
class MonitoringStackArgs:
    """The exporter image and where Prometheus and Grafana pick objects up."""

    dcgm_exporter_image: str
    namespace: str = labels.MONITORING_NAMESPACE


class MonitoringStack(pulumi.ComponentResource):
    """DCGM exporter DaemonSet and Service on port 9400, its ServiceMonitor, GPU alerts and a dashboard."""

    metrics_port: int

    def __init__(self, name: str, args: MonitoringStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:MonitoringStack", name, None, opts)
        self.metrics_port = METRICS_PORT
        child = child_options(self, opts)
        namespace = args.namespace
        selector = {"app.kubernetes.io/name": APP}
        k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=metadata(APP, namespace),
                                   automount_service_account_token=False, opts=child)
        container = {
            "name": "dcgm-exporter", "image": args.dcgm_exporter_image,
            "env": [{"name": "DCGM_EXPORTER_LISTEN", "value": f":{METRICS_PORT}"},
                    {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                    {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcp-metrics-included.csv"}],
            "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
            "securityContext": {"runAsNonRoot": False, "runAsUser": 0,
                                "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
            "volumeMounts": [{"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                              "readOnly": True}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": METRICS_PORT}, "initialDelaySeconds": 45},
            "livenessProbe": {"httpGet": {"path": "/health", "port": METRICS_PORT}, "initialDelaySeconds": 45,
                              "periodSeconds": 5},
        }
        pod = node_agent_pod(APP, service_account=APP, containers=[container], runtimeClassName=RUNTIME_CLASS,
                             volumes=[host_path("pod-resources", "/var/lib/kubelet/pod-resources")])
        k8s.apps.v1.DaemonSet(f"{name}-dcgm-exporter", metadata=metadata(APP, namespace),
                              spec=daemonset_spec(APP, pod), opts=child)
        k8s.core.v1.Service(f"{name}-service", metadata=metadata(APP, namespace, extra_labels=selector), spec={
            "selector": selector,
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP"}],
        }, opts=child)
        k8s.apiextensions.CustomResource(
            f"{name}-service-monitor", api_version="monitoring.coreos.com/v1", kind="ServiceMonitor",
            metadata=metadata(APP, namespace),
            spec={"selector": {"matchLabels": selector}, "namespaceSelector": {"matchNames": [namespace]},
                  "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "relabelings": [
                      {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]}]},
            opts=child)
        k8s.apiextensions.CustomResource(
            f"{name}-alerts", api_version="monitoring.coreos.com/v1", kind="PrometheusRule",
            metadata=metadata("gpu-alerts", namespace),
            spec={"groups": [{"name": "gpu-platform.rules", "rules": [{
                "alert": alert, "expr": expr, "for": wait, "labels": {"severity": severity},
                "annotations": {"summary": summary, "description": description},
            } for alert, expr, wait, severity, summary, description in ALERTS]}]},
            opts=child)
        k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata=metadata("gpu-dashboard", namespace, extra_labels={"grafana_dashboard": "1"}),
            data={"gpu-platform.json": json.dumps(dashboard(), indent=2, sort_keys=True)}, opts=child)
        self.register_outputs({"metricsPort": self.metrics_port})
