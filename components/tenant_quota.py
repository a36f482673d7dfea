"""TenantQuota: a tenant's namespace, capped at its share of the GPUs, used by its own group only; and the
ClusterRole that group holds there."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import kinds, labels
from components.dra_admission import CLASSES_ANNOTATION
from components.manifests import child_options, metadata
from fleet.dra import quota_key


_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
_READ = ["get", "list", "watch"]
# What a tenant needs to run its workloads in its namespace, and read-only what the platform puts there. Unlike the
# built-in `edit` role: no write on NetworkPolicies (policies add up, so any new one would widen the fence), no
# impersonating service accounts or minting their tokens, no DaemonSets (node agents are the platform's).
TENANT_RULES = [
    {"apiGroups": [""], "resources": ["pods", "services", "configmaps", "secrets", "persistentvolumeclaims",
                                      "serviceaccounts"], "verbs": _WRITE},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["pods/log", "pods/status", "events", "endpoints", "resourcequotas",
                                      "limitranges"], "verbs": _READ},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets", "deployments/scale",
                                          "statefulsets/scale"], "verbs": _WRITE},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _WRITE},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": _WRITE},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _WRITE},
    # Exposure beyond the cluster is the platform team's: Ingresses (any host, on either flavor) are read-only here,
    # and the tenant objects policy keeps Services to ClusterIP.
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": _READ},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
    {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["network-attachment-definitions"], "verbs": _READ},
    # Tenancy mode queue: why a job waits, or was preempted (its Workload), and its queue.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": _READ},
    # ... and its place in the queue: Kueue's visibility API lists a LocalQueue's pending workloads with their
    # positions in it and in the ClusterQueue (apis/visibility/v1beta2 PendingWorkload; the chart's own
    # pending-workloads-lq-viewer role grants the same). Cluster queues' listings, which show other tenants', are not.
    {"apiGroups": ["visibility.kueue.x-k8s.io"], "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]},
]


# Allocation mode `dra`: claims and claim templates, under the quota per DeviceClass and the claims policy
# (components/dra_admission.py). A claim's status (its allocation, whom it is reserved for) is the scheduler's.
DRA_RULES = [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaimtemplates"],
              "verbs": _WRITE}]
# Tenancy mode queue too: templates are never deleted by tenants. Kueue counts a template when it admits a Job
# (kueue v0.19.2 pkg/dra/claims.go GetResourceRequestsForResourceClaimTemplates) and a template's spec is immutable
# (k8s.io/kubernetes v1.34.4 pkg/apis/resource/validation ValidateResourceClaimTemplateUpdate), so only a template
# deleted and made again by the same name would give the Job's next pod more devices than Kueue counted.
QUEUED_DRA_RULES = [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": _WRITE},
                    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"],
                     "verbs": [verb for verb in _WRITE if verb not in ("delete", "deletecollection")]}]


def tenant_role(name: str, opts: pulumi.ResourceOptions, dra: bool = False,
                queued: bool = False) -> k8s.rbac.v1.ClusterRole:
    """The ClusterRole every tenant's group is bound to, in its own namespace only (a RoleBinding); with `dra`, the
    DRA claims too (`queued`: templates not deleted)."""
    rules = (QUEUED_DRA_RULES if queued else DRA_RULES) if dra else []
    return k8s.rbac.v1.ClusterRole(name, metadata=metadata(labels.TENANT_ROLE), rules=[*TENANT_RULES, *rules],
                                   opts=opts)


# OpenShift lets every authenticated user request projects through this binding of the self-provisioner role.
SELF_PROVISIONERS = "self-provisioners"


def self_provisioning_off(name: str, opts: pulumi.ResourceOptions) -> k8s.rbac.v1.ClusterRoleBindingPatch:
    """OpenShift: empty the `self-provisioners` binding (a server-side apply that takes its subjects over) and keep
    the API server from restoring it at restart (`autoupdate: false`), so only admins create projects. Taking this
    out of the stack leaves the binding as it is: restore its subjects by hand to give projects back."""
    return k8s.rbac.v1.ClusterRoleBindingPatch(name, metadata={
        "name": SELF_PROVISIONERS,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "false", labels.PATCH_FORCE: "true"},
    }, role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "self-provisioner"},
        subjects=[], opts=opts)


@dataclass(frozen=True)
class TenantQuotaArgs:
    """One tenant: its name, the most it may hold of each kind of GPU the fleet advertises (whole GPUs, shares, MIG
    slices: `quota`; what it was given, or in tenancy mode `queue` its guarantee plus what it may borrow; 0 for a kind
    not given), its priority class and the group that works in its namespace (holding
    the ClusterRole `role` there)."""

    name: str
    quota: dict[str, int]
    priority_class: str
    group: str
    cpu: str = "64"
    memory: str = "256Gi"
    pods: int = 200
    scrapers: tuple[str, ...] = ()  # namespaces whose Prometheus may reach the tenant's pods
    # Restricted: non-root, no privilege escalation, every capability dropped, the runtime's seccomp profile. GPU
    # containers need none of those (docs/tenants.md); OpenShift's restricted-v2 SCC fills them in for tenant pods.
    pod_security: str = "restricted"
    role: str = labels.TENANT_ROLE
    protect: bool = True  # the engine refuses to delete protected resources: removal takes `retired: true` first
    kueue_managed: bool = False  # OpenShift, mode `queue`: the label the Red Hat build's webhooks act on
    dedicated_pools: tuple[str, ...] = ()  # pools reserved for this tenant (and perhaps others)
    members_after: tuple[pulumi.Resource, ...] = ()  # what the group's binding waits for besides the quotas
    # Allocation mode `dra`: devices the tenant may hold per DeviceClass of the fleet (0 where not given).
    devices: dict[str, int] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.quota.get(labels.GPU_RESOURCE, 0)


QUOTA_WAIT_SECONDS = 120  # the controller manager's quota controller writes the status within seconds
QUOTA_SPEC_DIGEST = "gpu-platform.io/quota-spec"


def quota(name: str, quota_name: str, namespace: str, spec: dict, opts: pulumi.ResourceOptions) -> \
        kinds.KindObject:
    """A ResourceQuota that `pulumi up` holds until the quota controller enforces this very spec.

    The API server's quota admission enforces only what a quota's status lists, and the controller manager fills
    it in after each change (plugin/pkg/admission/resourcequota, CheckRequest reads status.hard): until then a pod
    of any size is admitted. So `up` waits for each hard limit in the status. It also waits for a digest of the
    spec in an annotation: the provider's waitFor watcher takes whatever its informer holds, and a ResourceQuota has
    no metadata.generation to tell a cached copy from before the change apart (pulumi-kubernetes
    pkg/await/condition/observer.go, ObjectObserver.Observe), so without it `up` could record the quota as it was
    and plan the same change again.
    """
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    # RFC 9535 paths (pkg/jsonpath/jsonpath.go, Parse), a list meaning all of them (pkg/metadata/overrides.go,
    # ReadyCondition).
    conditions = [f"jsonpath={{.metadata.annotations['{QUOTA_SPEC_DIGEST}']}}={digest}",
                  *(f"jsonpath={{.status.hard['{key}']}}={value}" for key, value in sorted(spec["hard"].items()))]
    return kinds.RESOURCE_QUOTA(name, opts, metadata=metadata(quota_name, namespace, annotations={
        QUOTA_SPEC_DIGEST: digest, labels.WAIT_FOR: json.dumps(conditions),
        labels.TIMEOUT_SECONDS: str(QUOTA_WAIT_SECONDS)}), spec=spec)


class TenantQuota(pulumi.ComponentResource):
    """Namespace with pod security, GPU and compute quotas, a LimitRange, a fence, and its group's RoleBinding.

    GPU pods may only use the tenant's own priority class (a low-priority tenant cannot claim `gpu-high`), and
    no tenant pod may use the `system-*` classes that would let it preempt node agents. The namespace admits
    traffic only from itself and the monitoring namespaces; its label `gpu-platform.io/priority-class` tells the
    admission policy which classes the tenant may use.
    """

    namespace: str
    gpus: int
    members: kinds.KindObject

    def __init__(self, name: str, args: TenantQuotaArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantQuota", name, None, opts)
        self.namespace, self.gpus = args.name, args.gpus
        tenant = {labels.TENANT_LABEL: args.name}
        protected = pulumi.ResourceOptions(protect=args.protect)
        namespace = kinds.NAMESPACE(f"{name}-namespace", pulumi.ResourceOptions.merge(
            child_options(self, opts), protected), metadata=metadata(args.name, extra_labels={
            **tenant,
            labels.TENANT_PRIORITY_LABEL: args.priority_class,
            "pod-security.kubernetes.io/enforce": args.pod_security,
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
            **({labels.KUEUE_MANAGED_LABEL: "true"} if args.kueue_managed else {}),
            **{labels.DEDICATED_POOL_LABEL.format(pool=pool): "true" for pool in args.dedicated_pools},
        }, annotations={CLASSES_ANNOTATION: ",".join(sorted(name for name, count in args.devices.items() if count))}
            if args.devices else None))
        # What is in the namespace waits for it alone: the namespace waits for everything the tenant waits for (the
        # admission policies, priority classes, role), so they come first anyway, and the engine deletes dependents
        # first through the namespace too. Each of the tenant's eight resources naming the platform's dozen
        # resources itself cost every registration and the state a dozen URNs for nothing.
        child = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        # Removing a tenant in one change must stop the engine before it deletes anything of the tenant's: it
        # deletes dependents first, so what nothing depends on (limits, fence, binding) is protected with the
        # namespace, and the quotas, which come and go with the tenancy mode and priority tier, stay behind the
        # binding that depends on them.
        kept = pulumi.ResourceOptions.merge(child, protected)
        quotas = [quota(f"{name}-gpu-quota", "gpu-quota", args.name, {
            "hard": {**{f"requests.{kind}": str(amount) for kind, amount in sorted(args.quota.items())},
                     **{quota_key(name): str(amount) for name, amount in sorted(args.devices.items())}}}, child)]
        # CPU pods count too: without this they could fill the GPU nodes a tenant's quota does not cover.
        quotas.append(quota(f"{name}-compute-quota", "compute-quota", args.name, {
            "hard": {"requests.cpu": args.cpu, "requests.memory": args.memory, "pods": str(args.pods)}}, child))
        scoped = [("system-priority", labels.SYSTEM_PRIORITY_CLASSES, {"pods": "0"})]
        if args.priority_class == labels.LOW_PRIORITY_CLASS:
            scoped.append(("high-priority-gpus", [labels.HIGH_PRIORITY_CLASS],
                           {f"requests.{kind}": "0" for kind in sorted(args.quota)}))
        for suffix, classes, hard in scoped:
            quotas.append(quota(f"{name}-{suffix}", suffix, args.name, {
                "hard": hard,
                "scopeSelector": {"matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": classes}]},
            }, child))
        # No nvidia.com/gpu here: a Container limit range defaults its entries onto every container, and a GPU
        # request on a CPU pod would consume quota or, through ExtendedResourceToleration, let it onto GPU nodes.
        kinds.LIMIT_RANGE(f"{name}-limits", kept, metadata=metadata("default-limits", args.name), spec={"limits": [{
            "type": "Container",
            "default": {"cpu": "1", "memory": "2Gi"},
            "defaultRequest": {"cpu": "250m", "memory": "512Mi"},
            "max": {"cpu": args.cpu, "memory": args.memory},
        }]})
        # Ingress only from the namespace and the monitoring namespaces; egress anywhere but the instance metadata
        # service (policies add up, and tenants may not add one, so nothing reopens either).
        kinds.NETWORK_POLICY(f"{name}-fence", kept, metadata=metadata("tenant-fence", args.name), spec={
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [
                {"podSelector": {}},
                *({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": scraper}}}
                  for scraper in args.scrapers),
            ]}],
            "egress": [{"to": [
                {"namespaceSelector": {}},  # every pod of the cluster: CIDR rules need not cover pods (Cilium)
                *({"ipBlock": {"cidr": cidr, "except": [metadata_service]}}
                  for cidr, metadata_service in labels.METADATA_SERVICE_CIDRS.items()),
            ]}],
        })
        # Members get in only once every quota is enforced (see quota), and the admission policies (the stack's
        # admission gate, `members_after`).
        self.members = kinds.ROLE_BINDING(
            f"{name}-members", pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(
                depends_on=[*quotas, *args.members_after])),
            metadata=metadata(f"{args.name}-members", args.name), subjects=[
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": args.group}],
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": args.role})
        self.register_outputs({"namespace": self.namespace, "gpus": self.gpus})
