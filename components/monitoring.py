"""MonitoringStack: alerts and a dashboard on the GPU Operator's DCGM exporter, and who may scrape it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata


def kube_state_metrics_value(name: str) -> str:
    """A Kubernetes name as kube-state-metrics writes it into a label value (a node's `resource`): every character outside [a-zA-Z0-9_] becomes '_' (kube-state-metrics internal/store/utils.go SanitizeLabelName)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


# Alerts on metrics the pinned dcgm-exporter collects by default (its dcp-metrics-included.csv, which the operator
# loads) and on kube-state-metrics' default node and DaemonSet series. A GPU node is one with the GPU taint
# (kube_node_spec_taint): it has that series even when no GPU software ever ran on it, so absent GPU series are
# caught too. (alert, expr, for, severity, summary, description)
def alerts(namespace: str) -> list[tuple[str, str, str, str, str, str]]:
    app, taint = labels.DCGM_EXPORTER_APP, labels.GPU_TAINT
    gpu_nodes = f'kube_node_spec_taint{{key="{taint["key"]}",effect="{taint["effect"]}"}}'
    # Whole GPUs, time-sliced shares, MIG slices (and shared MIG slices, "<mig>.shared"), as kube-state-metrics names
    # them in kube_node_status_allocatable's `resource` (internal/store/node.go
    # createNodeStatusAllocatableFamilyGenerator, SanitizeLabelName). A device plugin that stopped leaves its
    # resources at 0, hence `> 0`.
    advertised = "|".join((kube_state_metrics_value(labels.GPU_RESOURCE),
                           kube_state_metrics_value(labels.GPU_SHARED_RESOURCE),
                           kube_state_metrics_value(labels.MIG_RESOURCE_PREFIX) + ".+"))
    return [
        # DCGM_FI_DEV_XID_ERRORS holds the last XID a GPU reported until its driver reloads: the alert fires while
        # a GPU holds an XID (a repeat of the same code included), and resolves once the GPU has been reset.
        ("GpuXidError", "DCGM_FI_DEV_XID_ERRORS != 0", "0m", "critical",
         "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
         "An XID is a driver-reported GPU fault. Cordon the node, check `dmesg | grep NVRM`, and see NVIDIA's XID "
         "catalog."),
        ("GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "0m", "critical",
         "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} failed to remap a memory row",
         "The GPU can no longer hide uncorrectable memory errors. Drain the node and have the GPU replaced."),
        ("GpuTemperatureHigh", "DCGM_FI_DEV_GPU_TEMP > 85", "5m", "warning",
         "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is at {{ $value }} C",
         "Sustained heat throttles clocks. Check the instance's cooling and the workload's power draw."),
        # A failed scrape is up == 0; an exporter never scraped at all has no `up` series, while GPU nodes exist.
        ("DcgmExporterDown",
         f'up{{job="{app}"}} == 0 or (absent(up{{job="{app}"}}) and on() count({gpu_nodes}) > 0)',
         "10m", "warning", "No GPU metrics from the DCGM exporter {{ $labels.instance }}",
         f"GPU alerts are blind where the exporter is not scraped. Check the {app} pods in {namespace} and the "
         "Prometheus that should select its ServiceMonitor."),
        ("GpuDriverUnavailable",
         f'kube_daemonset_status_number_unavailable{{namespace="{namespace}",daemonset=~"nvidia-gpu-driver-.*"}} > 0',
         "15m", "critical", "Driver DaemonSet {{ $labels.daemonset }} has unavailable pods",
         "Nodes on this kernel have no working driver and no GPUs. Check the NVIDIADriver's status, the driver pod "
         "logs and that its image exists."),
        # A node whose kernel has no driver never advertises a GPU resource, so it has no allocatable series at all.
        ("GpuNodeWithoutAllocatableGpus",
         f'{gpu_nodes} unless on(node) kube_node_status_allocatable{{resource=~"{advertised}"}} > 0',
         "15m", "warning", "GPU node {{ $labels.node }} advertises no GPUs",
         f"The device plugin advertises none of {labels.GPU_RESOURCE}, {labels.GPU_SHARED_RESOURCE} or "
         f"{labels.MIG_RESOURCE_PREFIX}*: no driver for the node's kernel, the toolkit or device plugin failing, or a "
         "MIG layout change that never finished. Check the NVIDIADriver of its kernel and "
         "the operand pods on the node."),
    ]


def panel_queries(namespace: str) -> list[tuple[str, str]]:
    # The operator's ServiceMonitor honours the exporter's namespace/pod labels (a GPU's user); an idle GPU has none
    # and keeps the exporter's own namespace, which therefore is not a user.
    return [
        ("GPU utilisation (%)", "avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL)"),
        ("GPU memory used (MiB)", "sum by (Hostname, gpu) (DCGM_FI_DEV_FB_USED)"),
        ("GPU temperature (C)", "max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)"),
        ("Power draw (W)", "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)"),
        ("XID errors", "max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS)"),
        ("GPUs in use by namespace",
         f'count by (namespace) (DCGM_FI_DEV_GPU_UTIL{{namespace!="",namespace!="{namespace}"}})'),
    ]


def dashboard(namespace: str) -> dict:
    """The Grafana dashboard: one time-series panel per question an on-call engineer asks first."""
    panels = [{
        # "graph": the panel type both OpenShift's console and Grafana (which migrates it) draw.
        "id": index + 1, "type": "graph", "title": title,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "targets": [{"expr": expr, "refId": "A"}],
    } for index, (title, expr) in enumerate(panel_queries(namespace))]
    return {
        "title": "NVIDIA GPUs", "uid": "gpu-platform-dcgm", "schemaVersion": 39, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }


# OpenShift's console shows the dashboards of ConfigMaps so labelled in this namespace; Grafana's sidecar (the
# kube-prometheus-stack chart's default) those labelled grafana_dashboard.
OPENSHIFT_DASHBOARDS = ("openshift-config-managed", {"console.openshift.io/dashboard": "true"})
GRAFANA_DASHBOARD_LABELS = {"grafana_dashboard": "1"}


@dataclass(frozen=True)
class MonitoringStackArgs:
    """Where the exporter runs, who may scrape it, whether the Prometheus Operator's CRDs exist, the labels its
    Prometheus selects rules by, and whether the dashboard goes to OpenShift's console (else Grafana's sidecar)."""

    namespace: str
    scrapers: tuple[str, ...]
    prometheus_operator: bool
    rule_labels: dict[str, str] = field(default_factory=dict)
    openshift: bool = False


class MonitoringStack(pulumi.ComponentResource):
    """GPU alerts (PrometheusRule, where the Prometheus Operator runs), a Grafana dashboard, and a fence that lets
    only the monitoring namespaces reach the DCGM exporter, whose metrics name every tenant's pods.

    The exporter, its Service and its ServiceMonitor are the GPU Operator's (ClusterPolicy dcgmExporter).
    """

    def __init__(self, name: str, args: MonitoringStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:MonitoringStack", name, None, opts)
        child = child_options(self, opts)
        k8s.networking.v1.NetworkPolicy(
            f"{name}-dcgm-exporter-fence", metadata=metadata("dcgm-exporter-scrapers-only", args.namespace),
            spec={"podSelector": {"matchLabels": {"app": labels.DCGM_EXPORTER_APP}}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": scraper}}} for scraper in args.scrapers],
                      "ports": [{"protocol": "TCP", "port": labels.DCGM_EXPORTER_PORT}]}]},
            opts=child)
        if args.prometheus_operator:
            k8s.apiextensions.CustomResource(
                f"{name}-alerts", api_version="monitoring.coreos.com/v1", kind="PrometheusRule",
                metadata=metadata("gpu-alerts", args.namespace, extra_labels=args.rule_labels),
                spec={"groups": [{"name": "gpu-platform.rules", "rules": [{
                    "alert": alert, "expr": expr, "for": wait, "labels": {"severity": severity},
                    "annotations": {"summary": summary, "description": description},
                } for alert, expr, wait, severity, summary, description in alerts(args.namespace)]}]},
                opts=child)
        where, dashboard_labels = OPENSHIFT_DASHBOARDS if args.openshift else (args.namespace,
                                                                               GRAFANA_DASHBOARD_LABELS)
        k8s.core.v1.ConfigMap(
            f"{name}-dashboard", metadata=metadata("gpu-dashboard", where, extra_labels=dashboard_labels),
            data={"gpu-platform.json": json.dumps(dashboard(args.namespace), indent=2, sort_keys=True)}, opts=child)
        self.register_outputs({})
