"""Well-known keys, names and pinned versions: the one source of truth shared by components, policies and tests."""

from __future__ import annotations

from dataclasses import dataclass

# The operating system labels the fleet facts name, defined below them and read from here by the components.
from fleet.labels import NFD_PREFIX, OS_ID_LABEL, OS_VERSION_LABEL, OS_VERSION_MAJOR_LABEL  # noqa: F401

# Extended resource advertised by the device plugin, and the quota key that caps it.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_QUOTA_KEY = f"requests.{GPU_RESOURCE}"

# Every GPU node carries this taint. The key equals the extended resource name, so the
# ExtendedResourceToleration admission plugin adds the toleration to any pod requesting GPUs.
GPU_TAINT = {"key": GPU_RESOURCE, "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# A pool dedicated to some tenants carries this taint too, its value the pool's name; only those tenants' pods may
# tolerate it (their namespaces carry DEDICATED_POOL_LABEL for it, which the tenant pod policy reads).
DEDICATED_TAINT_KEY = "gpu-platform.io/dedicated"
DEDICATED_POOL_LABEL = "dedicated.gpu-platform.io/{pool}"


def dedicated_taint(pool: str) -> dict[str, str]:
    return {"key": DEDICATED_TAINT_KEY, "value": pool, "effect": "NoSchedule"}


# Node Feature Discovery labels; those of a node's operating system are the fleet facts' (fleet/labels.py).
NFD_API_GROUP = "nfd.k8s-sigs.io"
NVIDIA_PCI_LABEL = f"{NFD_PREFIX}/pci-10de.present"
KERNEL_LABEL = f"{NFD_PREFIX}/kernel-version.full"

# The node label by which NVIDIA's device plugin picks its config from the ConfigMap the ClusterPolicy names
# (k8s-device-plugin's config manager, `--node-label`); nodes without it use the ClusterPolicy's default config.
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# NVIDIA's MIG manager (k8s-mig-manager v0.15.0, the GPU Operator v26.7.0 pin) applies the layout named by the first
# label and reports on the second (pkg/mig/reconfigure/reconfigure.go Reconfigure.Run): "pending" while it applies,
# "rebooting" before a reboot it asked for, then "success" or "failed" (setState).
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
# GPU feature discovery's product label: the GPU's name with spaces as "-" (k8s-device-plugin v0.20.0
# internal/lm/resource.go productLabel; ../shared/notes/gpu-readings.md, "GFD product label").
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# Labels the platform puts on its own nodes and objects.
POOL_LABEL = "gpu-platform.io/pool"
GPU_NODE_SELECTOR = {NVIDIA_PCI_LABEL: "true"}
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-platform"}
TENANT_LABEL = "gpu-platform.io/tenant"
# On the admission gate's probe namespace, which carries TENANT_LABEL (the tenant policies bind it) but is no tenant's.
ADMISSION_PROBE_LABEL = "gpu-platform.io/admission-probe"
# The admission gate's namespaces: its Job's, and the probe namespace its dry runs are refused in.
ADMISSION_GATE_NAMESPACES = ("gpu-platform-admission-gate", "gpu-platform-admission-probe")
TENANT_PRIORITY_LABEL = "gpu-platform.io/priority-class"  # on a tenant namespace: the highest class it may use
TENANT_ROLE = "gpu-platform-tenant"  # the ClusterRole a tenant's group holds in its namespace
DRIVER_TARGET_LABEL = "gpu-platform.io/driver-target"
KERNEL_ANNOTATION = "gpu-platform.io/kernel"
OS_ANNOTATION = "gpu-platform.io/os"
# The node count a pool is configured with, on its Auto Scaling Group (tag) or MachineSet (annotation): the capacity
# policy reads it, the same under `pulumi up` (which hands stack policies the live size the autoscaler moved) and
# under gpuctl (the inputs).
CONFIGURED_NODES = "gpu-platform.io/configured-nodes"

# Namespaces: where the operators and their operands run, per flavor (NVIDIA's and Red Hat's documented ones).
GPU_OPERATOR_NAMESPACES = {"kubernetes": "gpu-operator", "openshift": "nvidia-gpu-operator"}
NFD_NAMESPACES = {"kubernetes": "node-feature-discovery", "openshift": "openshift-nfd"}
SYSTEM_NAMESPACES = (*GPU_OPERATOR_NAMESPACES.values(), *NFD_NAMESPACES.values())
# The cloud's instance metadata service (EC2: IPv4 and IPv6), where a node's role credentials are served.
METADATA_SERVICE_CIDRS = {"0.0.0.0/0": "169.254.169.254/32", "::/0": "fd00:ec2::254/128"}
DCGM_EXPORTER_APP = "nvidia-dcgm-exporter"  # the operator's app label on the exporter's pods, Service, ServiceMonitor
DCGM_EXPORTER_PORT = 9400

# Priority classes.
NODE_CRITICAL_PRIORITY = "system-node-critical"
# Priority classes reserved for the cluster's own components; tenant namespaces admit none of them.
SYSTEM_PRIORITY_CLASSES = [NODE_CRITICAL_PRIORITY, "system-cluster-critical"]
HIGH_PRIORITY_CLASS = "gpu-high"
LOW_PRIORITY_CLASS = "gpu-low"

# pulumi-kubernetes annotations (provider/pkg/metadata/annotations.go, overrides.go): do not wait for readiness
# (also when PULUMI_K8S_AWAIT_ALL=true would wait for a generic Ready); wait this long for create, update and
# delete; wait for these `jsonpath=`/`condition=` expressions; delete without waiting for dependents.
SKIP_AWAIT = "pulumi.com/skipAwait"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"
WAIT_FOR = "pulumi.com/waitFor"
DELETION_PROPAGATION = "pulumi.com/deletionPropagationPolicy"
PATCH_FORCE = "pulumi.com/patchForce"  # a Patch resource takes over fields another manager owns

# Cluster-autoscaler discovery and scale-from-zero node-template tags (ASG) and annotations (MachineSet).
CA_ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
CA_CLUSTER_TAG = "k8s.io/cluster-autoscaler/{cluster}"
CA_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/{key}"
CA_TAINT_TAG = "k8s.io/cluster-autoscaler/node-template/taint/{key}"
CA_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/{resource}"
MACHINESET_CAPACITY_ANNOTATIONS = {
    "cpu": "machine.openshift.io/vCPU",
    "memory": "machine.openshift.io/memoryMb",
    "gpu": "machine.openshift.io/GPU",
}
MACHINESET_GPU_TYPE_LABEL = "cluster-api/accelerator"

# Pinned dependencies. NVIDIA's GPU Operator v26.7.0 (deployments/gpu-operator/values.yaml and Chart.yaml at that tag)
# runs every GPU operand; NFD v0.19.0 is the release that operator ships as its subchart.
NVIDIA_REGISTRY = "nvcr.io/nvidia"
GPU_OPERATOR_VERSION = "v26.7.0"


@dataclass(frozen=True)
class HelmChart:
    """A chart pinned to one version in one repository (a Helm repository URL or an OCI registry path)."""

    repository: str
    chart: str
    version: str

    def from_mirror(self, mirror: str | None) -> HelmChart:
        """The same chart and version pulled from `mirror` (a Helm repository URL or an `oci://` path), if set."""
        return HelmChart(mirror.rstrip("/"), self.chart, self.version) if mirror else self


@dataclass(frozen=True)
class OlmPackage:
    """An OLM package pinned to one ClusterServiceVersion of one channel of a catalog."""

    package: str
    channel: str
    csv: str
    source: str
    namespace: str
    all_namespaces: bool = False  # an operator that installs only cluster-wide (its CSV's one install mode)


GPU_OPERATOR_CHART = HelmChart("https://helm.ngc.nvidia.com/nvidia", "gpu-operator", GPU_OPERATOR_VERSION)
NFD_CHART = HelmChart("oci://registry.k8s.io/nfd/charts", "node-feature-discovery", "0.19.0")
# OpenShift: NVIDIA's certified bundle (bundle/metadata/annotations.yaml: channel v26.7, OpenShift 4.18-4.22).
GPU_OPERATOR_OLM = OlmPackage("gpu-operator-certified", "v26.7", f"gpu-operator-certified.{GPU_OPERATOR_VERSION}",
                              "certified-operators", "nvidia-gpu-operator")
# Red Hat's NFD operator ships per OpenShift minor; the CSV of each supported minor.
NFD_OLM_NAMESPACE = "openshift-nfd"
NFD_OLM_CSVS = {"4.18": "nfd.4.18.0-202509240837"}


def nfd_olm_package(csv: str) -> OlmPackage:
    return OlmPackage("nfd", "stable", csv, "redhat-operators", NFD_OLM_NAMESPACE)


# The operand images of GPU Operator v26.7.0, by ClusterPolicy section; `images` in the stack config overrides them.
OPERAND_IMAGES = {
    "toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",
    "devicePlugin": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
    "gfd": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
    "dcgmExporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
    "validator": f"nvcr.io/nvidia/gpu-operator:{GPU_OPERATOR_VERSION}",
    "migManager": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0",
    "driverManager": "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0",
}
# OpenShift: `oc` for the job that approves the pinned operator's install plan, from the release's own CLI image.
OPENSHIFT_CLI_IMAGE = "registry.redhat.io/openshift4/ose-cli-rhel9:v{minor}"

# Kueue (tenancy mode `queue`): the release's chart, and the keys its code reads (pkg/constants, pkg/controller/
# constants in sigs.k8s.io/kueue v0.19.2). Jobs name their LocalQueue and WorkloadPriorityClass by these labels.
KUEUE_VERSION = "0.19.2"
KUEUE_CHART = HelmChart("oci://registry.k8s.io/kueue/charts", "kueue", KUEUE_VERSION)
KUEUE_NAMESPACE = "kueue-system"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
# OpenShift: the Red Hat build of Kueue (openshift/kueue-operator, branch release-1.4: CSV kueue-operator.v1.4.1 runs
# Kueue 0.18; its CSV supports only the AllNamespaces install mode; its bundle is published for OpenShift
# v4.18-v4.22, label com.redhat.openshift.versions). It needs cert-manager: Red Hat's cert-manager Operator (branch
# cert-manager-1.19: CSV cert-manager-operator.v1.19.1, channels stable-v1 and stable-v1.19; package
# openshift-cert-manager-operator in redhat-operators).
KUEUE_OLM = OlmPackage("kueue-operator", "stable-v1.4", "kueue-operator.v1.4.1", "redhat-operators",
                       "openshift-kueue-operator", all_namespaces=True)
KUEUE_OLM_MINORS = ("4.18", "4.19", "4.20", "4.21", "4.22")  # the OpenShift releases its bundle is published for
CERT_MANAGER_OLM = OlmPackage("openshift-cert-manager-operator", "stable-v1.19", "cert-manager-operator.v1.19.1",
                              "redhat-operators", "cert-manager-operator")
KUEUE_OPERATOR_API_VERSION = "kueue.openshift.io/v1"
# The Red Hat build registers Kueue's webhooks of namespaced kinds only for namespaces with this label: without it a
# Job is not suspended on creation and its pods start outside the queue.
KUEUE_MANAGED_LABEL = "kueue.openshift.io/managed"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TENANT_QUEUE = "gpu"  # the LocalQueue of every tenant namespace
QUEUE_POLICY_NAME = "gpu-platform-tenant-queue"  # the admission policy that keeps GPU work inside the queues
# The identity kube-controller-manager's Job controller creates pods as (--use-service-account-credentials).
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
# ... and the identity its CronJob controller creates Jobs as (owned by their CronJob).
CRONJOB_CONTROLLER = "system:serviceaccount:kube-system:cronjob-controller"
# The identities Kueue's controller manager works as: the chart's service account (release `kueue`, so fullname
# `kueue`: charts/kueue/templates/rbac/service_account.yaml at v0.19.2), and the Red Hat build's (its operator's
# bindata/assets/kueue-operator/serviceaccount.yaml, release-1.4). Tenants may not take either namespace.
KUEUE_CONTROLLERS = (f"system:serviceaccount:{KUEUE_NAMESPACE}:kueue-controller-manager",
                     f"system:serviceaccount:{KUEUE_OLM.namespace}:kueue-controller-manager")
