"""MonitoringStack: alerts and a dashboard on the GPU Operator's DCGM exporter, and who may scrape it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata
from fleet.partitioning import MIG_PREFIX, SHARED_GPU


def kube_state_metrics_value(name: str) -> str:
    """A Kubernetes name as kube-state-metrics writes it into a label value (a node's `resource`) or a label name:
    every character outside [a-zA-Z0-9_] becomes '_' (kube-state-metrics internal/store/utils.go SanitizeLabelName)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def kube_state_metrics_label(key: str) -> str:
    """The label of kube_node_labels that carries a node label allowlisted by `--metric-labels-allowlist`:
    "label_" and the key sanitised, then snake-cased and lower-cased (internal/store/utils.go labelName)."""
    return "label_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", kube_state_metrics_value(key)).lower()


MIG_CONFIG = kube_state_metrics_label(labels.MIG_CONFIG_LABEL)
MIG_CONFIG_STATE = kube_state_metrics_label(labels.MIG_CONFIG_STATE_LABEL)


# Alerts on metrics the pinned dcgm-exporter collects by default (its dcp-metrics-included.csv, which the operator
# loads) and on kube-state-metrics' node and DaemonSet series. A GPU node is one with the GPU taint
# (kube_node_spec_taint): it has that series even when no GPU software ever ran on it, so absent GPU series are
# caught too. The MIG manager's state is a node label, which kube-state-metrics' kube_node_labels carries only if
# allowlisted (docs/monitoring.md): OpenShift's platform instance allows every node label (cluster-monitoring-operator
# release-4.18 assets/kube-state-metrics/deployment.yaml, `nodes=[*]`). Neither the operator's metrics (gpu-operator
# v26.7.0 controllers/operator_metrics.go InitOperatorMetrics, cmd/nvidia-validator/metrics.go NewNodeMetrics) nor
# dcgm-exporter's export it.
# (alert, expr, for, severity, summary, description)
def alerts(namespace: str) -> list[tuple[str, str, str, str, str, str]]:
    app, taint = labels.DCGM_EXPORTER_APP, labels.GPU_TAINT
    gpu_nodes = f'kube_node_spec_taint{{key="{taint["key"]}",effect="{taint["effect"]}"}}'
    # Whole GPUs, time-sliced shares, MIG slices (and shared MIG slices, "<mig>.shared"), as kube-state-metrics names
    # them in kube_node_status_allocatable's `resource` (internal/store/node.go
    # createNodeStatusAllocatableFamilyGenerator, SanitizeLabelName). A device plugin that stopped leaves its
    # resources at 0, hence `> 0`.
    advertised = "|".join((kube_state_metrics_value(labels.GPU_RESOURCE),
                           kube_state_metrics_value(SHARED_GPU),
                           kube_state_metrics_value(MIG_PREFIX) + ".+"))
    mig_manager = f"kubectl get pods -n {namespace} -l app=nvidia-mig-manager -o wide"
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
         f"The device plugin advertises none of {labels.GPU_RESOURCE}, {SHARED_GPU} or "
         f"{MIG_PREFIX}*: no driver for the node's kernel, the toolkit or device plugin failing, or a "
         "MIG layout change that never finished (see GpuMigConfigStuck). Check the NVIDIADriver of its kernel and "
         "the operand pods on the node."),
        # The MIG manager writes "failed" when it gives up on a layout (setState(migStateFailed) in Reconfigure.Run),
        # after restoring the GPU clients it stopped, and retries only when nvidia.com/mig.config changes or its pod
        # restarts (cmd/nvidia-mig-manager/main.go start, ContinuouslySyncMigConfigChanges).
        ("GpuMigConfigFailed",
         f'max by (node, {MIG_CONFIG}) (kube_node_labels{{{MIG_CONFIG_STATE}="failed"}})',
         "0m", "warning",
         f"MIG layout {{{{ $labels.{MIG_CONFIG} }}}} failed on GPU node {{{{ $labels.node }}}}",
         "NVIDIA's MIG manager gave up applying the node's MIG layout and will not retry on its own: the node "
         "advertises whatever slices its GPUs hold now, not the layout asked for. Find why in the log of the node's "
         f"nvidia-mig-manager pod (`{mig_manager}`): a layout its GPUs cannot hold, a GPU still in use, or a MIG "
         "mode change that needs a reboot. Fix the cause (drain the node; reboot it for a mode change), then delete "
         "that pod: the new one applies the layout again."),
        # "pending" (or "rebooting") that lasts: the wedge of NVIDIA/gpu-operator#2833, still in k8s-mig-manager
        # v0.15.0. When a GPU client pod outlives its 5-minute shutdown wait (Reconfigure.waitForPodsToBeDeleted:
        # at most five such waits), Run returns without setState: the state stays "pending", the operands stay
        # paused (nvidia.com/gpu.deploy.*=paused-for-mig-change) and the manager waits for a label change that never
        # comes. 30 minutes is longer than every wait of a working apply; each state is timed on its own.
        ("GpuMigConfigStuck",
         f'max by (node, {MIG_CONFIG}, {MIG_CONFIG_STATE}) '
         f'(kube_node_labels{{{MIG_CONFIG_STATE}=~"pending|rebooting"}})',
         "30m", "warning",
         f"MIG layout {{{{ $labels.{MIG_CONFIG} }}}} on GPU node {{{{ $labels.node }}}} has been "
         f"{{{{ $labels.{MIG_CONFIG_STATE} }}}} for 30 minutes",
         "NVIDIA's MIG manager is stuck (NVIDIA/gpu-operator#2833): a GPU client pod did not stop in time, it "
         "aborted the change, left the node's operands paused (nvidia.com/gpu.deploy.*=paused-for-mig-change) and "
         "waits for a label change that will not come; the node advertises no GPUs. Recover: let the pod stuck "
         "terminating on the node finish, or delete it, then delete the node's nvidia-mig-manager pod "
         f"(`{mig_manager}`): the new one applies the layout again and restores the operands."),
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
