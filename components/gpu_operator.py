"""GpuOperator: NVIDIA's GPU Operator installed pinned, as a Helm release or through OLM."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, helm_release, metadata
from components.olm import OlmOperator, OlmOperatorArgs

@dataclass(frozen=True)
class GpuOperatorArgs:
    """How the operator is installed.

    Attributes:
        flavor: `kubernetes` (Helm release) or `openshift` (OLM, NVIDIA's certified bundle).
        cli_image: OpenShift: the image with `oc` that approves the pinned install plan.
        namespace_labels: extra labels of the operator's namespace (OpenShift: cluster monitoring).
        chart_mirror: Kubernetes: where the pinned chart is pulled from instead (`charts.mirror`).
    """

    flavor: str
    cli_image: str | None = None
    namespace_labels: dict[str, str] = field(default_factory=dict)
    chart_mirror: str | None = None


class GpuOperator(pulumi.ComponentResource):
    """NVIDIA's GPU Operator, pinned: its Helm chart on Kubernetes, its certified OLM bundle on OpenShift.

    The chart deploys no ClusterPolicy and no default NVIDIADriver of its own (ClusterPolicyStack and DriverStack
    declare them from the stack config) and no NFD (NfdStack). `installed` is what the operator's custom
    resources wait for: its CRDs exist once it is.
    """

    namespace: str
    installed: pulumi.Resource

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:GpuOperator", name, None, opts)
        self.namespace = labels.GPU_OPERATOR_NAMESPACES[args.flavor]
        ns_labels = {"pod-security.kubernetes.io/enforce": "privileged", **args.namespace_labels}
        if args.flavor == "openshift":
            operator = OlmOperator(f"{name}-olm", OlmOperatorArgs(
                package=labels.GPU_OPERATOR_OLM, cli_image=args.cli_image, namespace_labels=ns_labels),
                child_options(self, opts))
            self.installed = operator.installed
        else:
            namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(
                self.namespace, extra_labels=ns_labels), opts=child_options(self, opts))
            self.installed = helm_release(f"{name}-release", labels.GPU_OPERATOR_CHART, self.namespace, {
                "nfd": {"enabled": False},  # NFD is its own release (NfdStack)
                "clusterPolicy": {"deployCR": False},  # ClusterPolicyStack builds it from the stack config
                "driver": {"nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False}},
                "operator": {"upgradeCRD": True, "cleanupCRD": False},
            }, child_options(self, opts, namespace), args.chart_mirror)
        self.register_outputs({"namespace": self.namespace})
