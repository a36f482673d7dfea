"""NfdStack: Node Feature Discovery, which labels GPU nodes with their PCI vendor, kernel and OS release."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import labels
from components.images import ImageName
from components.manifests import child_options, helm_release, metadata
from components.olm import OlmOperator, OlmOperatorArgs

# As NVIDIA's GPU Operator configures its NFD subchart: network and display/3D PCI classes, labelled by vendor
# only, so every NVIDIA GPU node carries feature.node.kubernetes.io/pci-10de.present=true. The kernel and
# system sources (on by default) add kernel-version.full and system-os_release.ID / VERSION_ID (and VERSION_ID.major,
# by which the GPU Operator selects RHEL nodes).
WORKER_CONFIG = {"sources": {"pci": {"deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"],
                                     "deviceLabelFields": ["vendor"]}}}
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}


@dataclass(frozen=True)
class NfdStackArgs:
    """Where NFD runs and how it is installed: a Helm release (Kubernetes) or Red Hat's operator (OpenShift)."""

    flavor: str
    image: str | None = None
    olm: labels.OlmPackage | None = None
    cli_image: str | None = None
    chart_mirror: str | None = None  # charts.mirror: where the pinned chart is pulled from instead


class NfdStack(pulumi.ComponentResource):
    """NFD labelling every node, GPU nodes included (its worker tolerates the GPU taint).

    Kubernetes: the node-feature-discovery chart, pinned, as a Helm release. OpenShift: Red Hat's NFD operator
    through OLM and its NodeFeatureDiscovery instance. `ready` is what the GPU Operator waits for.
    """

    namespace: str
    ready: pulumi.Resource

    def __init__(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:NfdStack", name, None, opts)
        self.namespace = labels.NFD_NAMESPACES[args.flavor]
        if args.flavor == "openshift":
            self.ready = self._openshift(name, args, opts)
        else:
            self.ready = self._helm(name, args, opts)
        self.register_outputs({"namespace": self.namespace})

    def _helm(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions | None) -> pulumi.Resource:
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(
            self.namespace, extra_labels=PRIVILEGED), opts=child_options(self, opts))
        values = {
            "priorityClassName": labels.NODE_CRITICAL_PRIORITY,
            "master": {"config": {"extraLabelNs": ["nvidia.com"]}},
            "worker": {"tolerations": [dict(labels.GPU_TOLERATION)], "config": WORKER_CONFIG},
            "gc": {"enable": True},
        }
        if args.image:
            image = ImageName.parse(args.image)
            values["image"] = {"repository": f"{image.registry}/{image.repository}", "tag": image.tag}
        return helm_release(f"{name}-release", labels.NFD_CHART, self.namespace, values,
                            child_options(self, opts, namespace), args.chart_mirror)

    def _openshift(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions | None) -> pulumi.Resource:
        operator = OlmOperator(f"{name}-operator", OlmOperatorArgs(
            package=args.olm, cli_image=args.cli_image, namespace_labels={}), child_options(self, opts))
        return k8s.apiextensions.CustomResource(
            f"{name}-instance", api_version="nfd.openshift.io/v1", kind="NodeFeatureDiscovery",
            # Its readiness is the NFD operator's (workers on every node): `pulumi up` does not wait for it.
            metadata=metadata("nfd-instance", self.namespace, annotations={labels.SKIP_AWAIT: "true"}),
            spec={"workerConfig": {"configData": yaml.safe_dump(WORKER_CONFIG, sort_keys=False)}},
            opts=child_options(self, opts, operator.installed))
