"""NodeProfile: a GPU pool's OS tuning (CPU and topology managers, reserved CPUs, hugepages, sysctls).

OpenShift: a MachineConfigPool of the pool's nodes, a PerformanceProfile bound to it (the Node Tuning Operator
turns it into the pool's KubeletConfig, kernel arguments and Tuned profile), and a Tuned profile on top for
node-level sysctls; the Machine Config Operator reboots the pool's nodes into a change, `maxUnavailable` at a time.
Kubernetes on AWS: no objects, only the pool's boot configuration (`boot_script`, `kubelet_flags`), which the
launch template's user data carries; a change is a new template version the pool rolls through its instance
refresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.manifests import child_options, metadata
from fleet.cpusets import format_cpuset, parse_cpuset

MCO_ROLE_LABEL = "machineconfiguration.openshift.io/role"
NODE_ROLE_LABEL = "node-role.kubernetes.io/{role}"
TUNED_NAMESPACE = "openshift-cluster-node-tuning-operator"
# The Node Tuning Operator reads extra kubelet settings from this PerformanceProfile annotation and merges them into
# the KubeletConfig it renders for the profile (cluster-node-tuning-operator, pkg/performanceprofile/controller/
# performanceprofile/components/kubeletconfig: experimentalKubeletSnippetAnnotation); it overrides only the CPU
# manager, topology manager policy, reserved CPUs and memory manager, which the profile's own fields set. A second
# KubeletConfig for the same pool would compete with the operator's own, so allowedUnsafeSysctls and
# topologyManagerScope go here.
KUBELET_SNIPPET_ANNOTATION = "kubeletconfig.experimental"
# The Tuned profile the operator renders for a PerformanceProfile is `openshift-node-performance-<name>` at
# priority 20; a profile that includes it at a higher priority (lower number) extends it without replacing it.
PERFORMANCE_TUNED = "openshift-node-performance-{name}"
TUNED_PRIORITY = 19
# PerformanceProfile and kernel hugepage sizes for each Kubernetes size (x86_64).
PAGE_SIZES = {"2Mi": ("2M", 2048), "1Gi": ("1G", 1048576)}
SYSCTL_FILE = "/etc/sysctl.d/90-gpu-platform.conf"
GRUB_FILE = "/etc/default/grub.d/90-gpu-platform-hugepages.cfg"


@dataclass(frozen=True)
class NodeProfile:
    """A pool's tuning, resolved: unsafe sysctls are the pod sysctls the kubelet must allow (safe ones need nothing).

    `hugepages` maps a Kubernetes size ("1Gi", "2Mi") to a page count per node.
    """

    pool: str
    vcpus: int
    reserved_cpus: str
    cpu_manager_policy: str = "static"
    topology_manager_policy: str = "single-numa-node"
    topology_manager_scope: str = "pod"
    hugepages: tuple[tuple[str, int], ...] = ()
    unsafe_sysctls: tuple[str, ...] = ()
    node_sysctls: tuple[tuple[str, str], ...] = ()
    max_unavailable: int | str = 1
    safe_sysctls: tuple[str, ...] = field(default=(), compare=False)

    @property
    def role(self) -> str:
        """The pool's node role and MachineConfigPool name (OpenShift)."""
        return f"gpu-{self.pool}"

    @property
    def node_role_label(self) -> str:
        return NODE_ROLE_LABEL.format(role=self.role)

    @property
    def isolated_cpus(self) -> str:
        """Every vCPU not reserved, as a cpuset list: the CPUs guaranteed pods get whole."""
        reserved = parse_cpuset(self.reserved_cpus)
        return format_cpuset([cpu for cpu in range(self.vcpus) if cpu not in reserved])

    def rollout(self, flavor: str) -> dict[str, object]:
        """How a change of this profile reaches the pool's nodes."""
        if flavor == "openshift":
            return {"rollsBy": "machine-config-operator", "machineConfigPool": self.role,
                    "maxUnavailable": self.max_unavailable, "reboots": True}
        return {"rollsBy": "instance-refresh", "reboots": False}

    # Kubernetes on AWS ------------------------------------------------------------------------------------------

    def kubelet_flags(self) -> list[str]:
        """kubelet flags (cmd/kubelet/app/options/options.go, AddKubeletConfigFlags) the node's bootstrap passes."""
        flags = [f"--cpu-manager-policy={self.cpu_manager_policy}", f"--reserved-cpus={self.reserved_cpus}",
                 f"--topology-manager-policy={self.topology_manager_policy}",
                 f"--topology-manager-scope={self.topology_manager_scope}"]
        if self.unsafe_sysctls:
            flags.append(f"--allowed-unsafe-sysctls={','.join(self.unsafe_sysctls)}")
        return flags

    def boot_script(self) -> str:
        """Shell run before the kubelet starts: node-level sysctls, then hugepages (the kubelet reads them at start).

        Hugepages are allocated at once through sysfs (the boot fails if the kernel cannot give them all, rather
        than the node joining short of them), and written to the kernel command line for later reboots.
        """
        lines = [f"# node profile of pool {self.pool}: set before the kubelet starts"]
        if self.node_sysctls:
            lines.append(f"cat > {SYSCTL_FILE} <<'EOF'")
            lines += [f"{name} = {value}" for name, value in self.node_sysctls]
            lines += ["EOF", f"sysctl -p {SYSCTL_FILE}"]
        if self.hugepages:
            args = []
            for size, count in self.hugepages:
                kernel_size, kib = PAGE_SIZES[size]
                pages = f"/sys/kernel/mm/hugepages/hugepages-{kib}kB/nr_hugepages"
                lines += [f"echo {count} > {pages}", f'test "$(cat {pages})" -eq {count}']
                args.append(f"hugepagesz={kernel_size} hugepages={count}")
            default = PAGE_SIZES[self.default_hugepages_size][0]
            lines += [f"echo 'GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT default_hugepagesz={default} "
                      f"{' '.join(args)}\"' > {GRUB_FILE}", "update-grub"]
        return "\n".join(lines) + "\n"

    @property
    def default_hugepages_size(self) -> str:
        return max((size for size, _ in self.hugepages), key=lambda size: PAGE_SIZES[size][1])

    # OpenShift --------------------------------------------------------------------------------------------------

    def kubelet_snippet(self) -> dict[str, object]:
        """The KubeletConfiguration fields the PerformanceProfile has no field for."""
        snippet: dict[str, object] = {}
        if self.topology_manager_scope != "container":
            snippet["topologyManagerScope"] = self.topology_manager_scope
        if self.unsafe_sysctls:
            snippet["allowedUnsafeSysctls"] = list(self.unsafe_sysctls)
        return snippet


class NodeTuning(pulumi.ComponentResource):
    """OpenShift: the pool's MachineConfigPool, its PerformanceProfile and (for node-level sysctls) a Tuned profile.

    The pool's MachineSet labels its nodes `node-role.kubernetes.io/<role>`, which the MachineConfigPool selects.
    """

    def __init__(self, name: str, profile: NodeProfile, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:NodeTuning", name, None, opts)
        role = profile.role
        pool_labels = {MCO_ROLE_LABEL: role}
        node_selector = {profile.node_role_label: ""}
        mcp = k8s.apiextensions.CustomResource(
            f"{name}-machine-config-pool", api_version="machineconfiguration.openshift.io/v1",
            kind="MachineConfigPool", metadata=metadata(role, extra_labels=pool_labels),
            spec={
                # The pool takes the worker machine configs plus its own (the PerformanceProfile's and the Tuned
                # profile's); a node in `worker` and one custom pool belongs to the custom pool.
                "machineConfigSelector": {"matchExpressions": [
                    {"key": MCO_ROLE_LABEL, "operator": "In", "values": ["worker", role]}]},
                "nodeSelector": {"matchLabels": node_selector},
                "maxUnavailable": profile.max_unavailable,
            }, opts=child_options(self, opts))
        spec: dict[str, object] = {
            "cpu": {"reserved": profile.reserved_cpus, "isolated": profile.isolated_cpus},
            "numa": {"topologyPolicy": profile.topology_manager_policy},
            "nodeSelector": node_selector,
            "machineConfigPoolSelector": pool_labels,
            "machineConfigLabel": pool_labels,
            # Throughput, not real time: no RT kernel, no per-CPU power tuning (NTO's default workload hints).
            "realTimeKernel": {"enabled": False},
            "workloadHints": {"realTime": False, "highPowerConsumption": False, "perPodPowerManagement": False},
        }
        if profile.hugepages:
            spec["hugepages"] = {
                "defaultHugepagesSize": PAGE_SIZES[profile.default_hugepages_size][0],
                "pages": [{"size": PAGE_SIZES[size][0], "count": count} for size, count in profile.hugepages],
            }
        snippet = profile.kubelet_snippet()
        annotations = {KUBELET_SNIPPET_ANNOTATION: json.dumps(snippet, sort_keys=True)} if snippet else None
        self.performance_profile = k8s.apiextensions.CustomResource(
            f"{name}-performance-profile", api_version="performance.openshift.io/v2", kind="PerformanceProfile",
            metadata=metadata(role, annotations=annotations), spec=spec,
            opts=child_options(self, opts, mcp))
        if profile.node_sysctls:
            data = "\n".join([
                "[main]", f"summary=Node-level sysctls of GPU pool {profile.pool}",
                f"include={PERFORMANCE_TUNED.format(name=role)}", "", "[sysctl]",
                *(f"{key}={value}" for key, value in profile.node_sysctls), ""])
            k8s.apiextensions.CustomResource(
                f"{name}-tuned", api_version="tuned.openshift.io/v1", kind="Tuned",
                metadata=metadata(role, TUNED_NAMESPACE),
                spec={"profile": [{"name": role, "data": data}],
                      "recommend": [{"machineConfigLabels": pool_labels, "priority": TUNED_PRIORITY,
                                     "profile": role}]},
                opts=child_options(self, opts, self.performance_profile))
        self.register_outputs({"machineConfigPool": role, "performanceProfile": role})
