"""NfdStack: Node Feature Discovery, which labels GPU nodes with their PCI vendor, kernel and OS release."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import labels
from components.manifests import child_options, daemonset_spec, host_path, metadata, privileged_scc_binding

NFD_CRDS = {"NodeFeature": "nodefeatures", "NodeFeatureRule": "nodefeaturerules",
            "NodeFeatureGroup": "nodefeaturegroups"}
NAMESPACED_CRDS = {"NodeFeature", "NodeFeatureGroup"}

# Only PCI display/3D controllers (03xx) and accelerators (12xx) are labelled, by vendor: pci-10de.present.
WORKER_CONFIG = {
    "core": {"sleepInterval": "60s", "labelSources": ["pci", "kernel", "system"]},
    "sources": {
        "pci": {"deviceClassWhitelist": ["03", "12"], "deviceLabelFields": ["vendor"]},
        "kernel": {"configOpts": ["NO_HZ"]},
    },
}


@dataclass(frozen=True)
class NfdStackArgs:
    """NFD's image and namespace."""

    image: str
    openshift: bool = False
    namespace: str = labels.NFD_NAMESPACE


class NfdStack(pulumi.ComponentResource):
    """nfd-master, nfd-worker on every node (GPU nodes included), nfd-gc, their RBAC and the NVIDIA GPU rule."""

    namespace: str
    node_selector: dict[str, str]

    def __init__(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:NfdStack", name, None, opts)
        self.namespace = args.namespace
        self.node_selector = dict(labels.GPU_NODE_SELECTOR)
        child = child_options(self, opts)
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(
            args.namespace, extra_labels={"pod-security.kubernetes.io/enforce": "privileged"}), opts=child)
        crds = [self._crd(name, kind, plural, child) for kind, plural in NFD_CRDS.items()]
        in_ns = child_options(self, opts, namespace, *crds)
        self._rbac(name, in_ns)
        config = k8s.core.v1.ConfigMap(f"{name}-worker-conf", metadata=metadata("nfd-worker-conf", args.namespace),
                                       data={"nfd-worker.conf": yaml.safe_dump(WORKER_CONFIG, sort_keys=False)},
                                       opts=in_ns)
        self._master(name, args, in_ns)
        self._worker(name, args, pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[config])))
        self._gc(name, args, in_ns)
        if args.openshift:
            privileged_scc_binding(f"{name}-worker-scc", args.namespace, ["nfd-worker"], in_ns)
        k8s.apiextensions.CustomResource(
            f"{name}-nvidia-rule",
            api_version=f"{labels.NFD_API_GROUP}/v1alpha1",
            kind="NodeFeatureRule",
            metadata=metadata("nvidia-gpu"),
            spec={"rules": [{
                "name": "NVIDIA GPU",
                "labels": {"nvidia.com/gpu.present": "true"},
                "matchFeatures": [{"feature": "pci.device", "matchExpressions": {
                    "vendor": {"op": "In", "value": ["10de"]},
                    "class": {"op": "In", "value": ["0300", "0302"]},
                }}],
            }]},
            opts=in_ns,
        )
        self.register_outputs({"namespace": self.namespace, "nodeSelector": self.node_selector})

    def _crd(self, name: str, kind: str, plural: str, opts: pulumi.ResourceOptions):
        return k8s.apiextensions.v1.CustomResourceDefinition(
            f"{name}-crd-{plural}",
            metadata=metadata(f"{plural}.{labels.NFD_API_GROUP}"),
            spec={
                "group": labels.NFD_API_GROUP,
                "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                "scope": "Namespaced" if kind in NAMESPACED_CRDS else "Cluster",
                "versions": [{
                    "name": "v1alpha1", "served": True, "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    }}},
                    **({"subresources": {"status": {}}} if kind == "NodeFeatureGroup" else {}),
                }],
            },
            opts=opts,
        )

    def _rbac(self, name: str, opts: pulumi.ResourceOptions) -> None:
        namespace = self.namespace
        rules = {
            "nfd-master": [
                {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "list", "patch", "update"]},
                {"apiGroups": [labels.NFD_API_GROUP], "resources": list(NFD_CRDS.values()), "verbs": ["get", "list", "watch"]},
                {"apiGroups": [labels.NFD_API_GROUP], "resources": ["nodefeaturegroups/status"], "verbs": ["patch", "update"]},
            ],
            "nfd-gc": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
                {"apiGroups": [labels.NFD_API_GROUP], "resources": ["nodefeatures"], "verbs": ["list", "delete"]},
            ],
        }
        namespaced_rules = {
            "nfd-worker": [
                {"apiGroups": [labels.NFD_API_GROUP], "resources": ["nodefeatures"], "verbs": ["create", "get", "update"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            ],
            "nfd-master": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["nfd-master.nfd.kubernetes.io"], "verbs": ["get", "update"]},
            ],
        }
        for account in ("nfd-master", "nfd-worker", "nfd-gc"):
            k8s.core.v1.ServiceAccount(f"{name}-sa-{account}", metadata=metadata(account, namespace), opts=opts)
        subject = lambda account: [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]  # noqa: E731
        for account, account_rules in rules.items():
            k8s.rbac.v1.ClusterRole(f"{name}-cr-{account}", metadata=metadata(account), rules=account_rules, opts=opts)
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-crb-{account}", metadata=metadata(account), subjects=subject(account),
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account}, opts=opts)
        for account, account_rules in namespaced_rules.items():
            k8s.rbac.v1.Role(f"{name}-role-{account}", metadata=metadata(account, namespace), rules=account_rules,
                             opts=opts)
            k8s.rbac.v1.RoleBinding(
                f"{name}-rb-{account}", metadata=metadata(account, namespace), subjects=subject(account),
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account}, opts=opts)

    @staticmethod
    def _container(name: str, image: str, command: list[str], **extra) -> dict:
        return {
            "name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": command,
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
            **extra,
        }

    def _deployment(self, name: str, app: str, container: dict, opts: pulumi.ResourceOptions) -> None:
        selector = {"app.kubernetes.io/name": app}
        k8s.apps.v1.Deployment(f"{name}-{app}", metadata=metadata(app, self.namespace), spec={
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": {
                "serviceAccountName": app,
                "priorityClassName": "system-cluster-critical",
                "containers": [container],
            }},
        }, opts=opts)

    def _master(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions) -> None:
        self._deployment(name, "nfd-master", self._container(
            "nfd-master", args.image, ["nfd-master"], args=["-enable-leader-election"]), opts)

    def _gc(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions) -> None:
        self._deployment(name, "nfd-gc", self._container("nfd-gc", args.image, ["nfd-gc"]), opts)

    def _worker(self, name: str, args: NfdStackArgs, opts: pulumi.ResourceOptions) -> None:
        mounts = [("host-boot", "/boot"), ("host-os-release", "/etc/os-release"), ("host-sys", "/sys"),
                  ("host-usr-lib", "/usr/lib"), ("host-lib", "/lib")]
        # NFD's images are built to read the host under the `/host-` prefix: /host-sys, /host-etc/os-release, ...
        container = self._container(
            "nfd-worker", args.image, ["nfd-worker"], args=["-config=/etc/kubernetes/node-feature-discovery/nfd-worker.conf"],
            volumeMounts=[{"name": volume, "mountPath": f"/host-{path.lstrip('/')}", "readOnly": True}
                          for volume, path in mounts]
            + [{"name": "nfd-worker-conf", "mountPath": "/etc/kubernetes/node-feature-discovery", "readOnly": True}])
        pod = {
            "serviceAccountName": "nfd-worker",
            "priorityClassName": "system-node-critical",
            # The worker must label GPU nodes too, so it tolerates their taint.
            "tolerations": [dict(labels.GPU_TOLERATION)],
            "containers": [container],
            "volumes": [host_path(volume, path) for volume, path in mounts]
            + [{"name": "nfd-worker-conf", "configMap": {"name": "nfd-worker-conf"}}],
        }
        k8s.apps.v1.DaemonSet(f"{name}-nfd-worker", metadata=metadata("nfd-worker", self.namespace),
                              spec=daemonset_spec("nfd-worker", pod), opts=opts)
