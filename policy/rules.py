"""The platform's policies as CrossGuard objects, in the order they report, shared by the pack
(`policy/__main__.py`) and `gpuctl check`.

Each family's validations live in its own module (pool_policies, quota_policies, operand_policies, image_policies,
tenant_policies, node_policies), over reading, capacity, queues and resource_types. Importing this module only
defines the policies; constructing a `PolicyPack` is what starts a server, and only `policy/__main__.py` does that.
Policies read resource properties through the mappings and sequences pulumi-policy hands them, so a value that is
unknown during preview surfaces as the SDK's own error.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from components import labels
from fleet.catalog import MAX_HUGEPAGES_SHARE
from policy.image_policies import allowed_registries, no_latest_images
from policy.node_policies import (NETWORKS_ANNOTATION, efa_on_capable_instances, hugepages_within_memory,
                                  node_sysctls_in_profiles, tenant_networks_own_namespace)
from policy.operand_policies import (driver_pinned_to_kernel, gpu_access_through_device_plugin,
                                     operands_tolerate_gpu_taint)
from policy.pool_policies import gpu_pods_tolerate_taint, pools_tainted
from policy.quota_policies import (queue_borrowing_within_cohort, queue_flavors_tolerate_pools, queue_within_capacity,
                                   quota_within_capacity, tenant_gpu_quota)
from policy.reading import (DEFAULT_OVERCOMMIT, DEFAULT_REGISTRIES, GPU_TAINT_TEXT, POD_SECURITY_ENFORCE,
                            SYSTEM_NAMESPACES)
from policy.resource_types import (applies_to, is_cluster_policy, is_launch_template, is_namespace, is_nvidia_driver,
                                   is_pool_part, names_images, resource_policy, runs_pods, tolerates_operands)
from policy.tenant_policies import (host_access_in_system_namespaces, tenant_no_system_priority, tenant_pod_security,
                                    tenant_rbac)

__all__ = ["DEFAULT_OVERCOMMIT", "DEFAULT_REGISTRIES", "POD_SECURITY_ENFORCE", "POLICIES", "applies_to"]

POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    resource_policy(
        applies_to=is_pool_part,
        name="gpu-pool-tainted",
        description=f"Every GPU pool taints its nodes {GPU_TAINT_TEXT}: a MachineSet or Karpenter NodePool in its "
                    "template, an Auto Scaling Group in the autoscaler's taint tag, a pool's launch template in the kubelet's flags.",
        validate=pools_tainted,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-gpu-quota",
        description="Every tenant namespace has an unscoped ResourceQuota on every kind of GPU the pools advertise "
                    "(whole GPUs, shares, MIG slices), in tenancy mode queue too, where it is the ceiling Kueue "
                    "admits within.",
        validate=tenant_gpu_quota,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="gpu-quota-within-capacity",
        description="The tenants' GPU quotas add up to no more than the pools' GPUs (in allocation mode dra, each "
                    "DeviceClass's devices) times the allowed overcommit.",
        validate=quota_within_capacity,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties={"maxOvercommit": {
            "type": "number", "exclusiveMinimum": 0, "default": DEFAULT_OVERCOMMIT,
            "description": "GPUs that may be promised per GPU in the pools (1.0: none beyond capacity)",
        }}),
    ),
    StackValidationPolicy(
        name="queue-guarantee-within-capacity",
        description="The GPUs the ClusterQueues guarantee in each ResourceFlavor add up to no more than its pool "
                    "advertises (time-slicing counts each share).",
        validate=queue_within_capacity,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="queue-borrowing-within-cohort",
        description="A ClusterQueue's borrowing limit in a flavor is no more than the rest of its cohort may lend "
                    "there.",
        validate=queue_borrowing_within_cohort,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="queue-flavors-tolerate-pools",
        description="Every ResourceFlavor selects a GPU pool's nodes and tolerates every taint of those pools.",
        validate=queue_flavors_tolerate_pools,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="gpu-pods-tolerate-taint",
        description=f"Every pod template requesting {labels.GPU_RESOURCE} tolerates {GPU_TAINT_TEXT}, itself or "
                    "through its RuntimeClass.",
        validate=gpu_pods_tolerate_taint,
        enforcement_level=EnforcementLevel.ADVISORY,
    ),
    resource_policy(
        applies_to=is_nvidia_driver,
        name="driver-pinned-to-kernel",
        description=f"Each NVIDIADriver pins one OS release in spec.nodeSelector, and a precompiled one also one "
                    f"kernel ({labels.KERNEL_LABEL}); with usePrecompiled its spec.version is a driver branch (digits "
                    "only), and a tag in spec.image names the pinned kernel.",
        validate=driver_pinned_to_kernel,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=tolerates_operands,
        name="operands-tolerate-gpu-taint",
        description=f"The ClusterPolicy (spec.daemonsets.tolerations) and every NVIDIADriver (spec.tolerations) "
                    f"tolerate {GPU_TAINT_TEXT}, so the operator's pods run on the GPU nodes.",
        validate=operands_tolerate_gpu_taint,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=is_cluster_policy,
        name="gpu-access-only-through-device-plugin",
        description="The ClusterPolicy makes the container toolkit ignore NVIDIA_VISIBLE_DEVICES from unprivileged "
                    "containers and the device plugin pass devices as volume mounts or CDI.",
        validate=gpu_access_through_device_plugin,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=names_images,
        name="no-latest-images",
        description="Every container image, and every operand image of the ClusterPolicy and the NVIDIADrivers "
                    "(sections with repository/image/version), is pinned to a version tag or digest, never :latest "
                    "or untagged; an NVIDIADriver always sets spec.version.",
        validate=no_latest_images,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=names_images,
        name="allowed-image-registries",
        description="Every container image, and every operand image the ClusterPolicy and the NVIDIADrivers name "
                    "(<repository>/<image>), comes from an allowed registry or registry path.",
        validate=allowed_registries,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties={"allowedRegistries": {
            "type": "array", "items": {"type": "string", "minLength": 1}, "default": list(DEFAULT_REGISTRIES),
            "description": "registry hosts, or host/path prefixes, that images may come from",
        }}),
    ),
    resource_policy(
        applies_to=runs_pods,
        name="host-access-only-in-gpu-system",
        description="Privileged containers, host namespaces and hostPath volumes only in the GPU Operator's and NFD's "
                    f"namespaces ({', '.join(SYSTEM_NAMESPACES)}).",
        validate=host_access_in_system_namespaces,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=is_namespace,
        name="tenant-pod-security",
        description="Tenant namespaces enforce the baseline or restricted pod security standard.",
        validate=tenant_pod_security,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-rbac-least-privilege",
        description="No binding grants a tenant cluster-admin or a role with wildcard rules.",
        validate=tenant_rbac,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-no-system-priority",
        description=f"Tenant namespaces admit no pods of the {' or '.join(labels.SYSTEM_PRIORITY_CLASSES)} priority class.",
        validate=tenant_no_system_priority,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="hugepages-within-memory",
        description=f"Hugepages of a PerformanceProfile or a launch template's boot take at most "
                    f"{int(MAX_HUGEPAGES_SHARE * 100)}% of the memory of the nodes they land on.",
        validate=hugepages_within_memory,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="node-sysctls-only-in-profiles",
        description="Node-level (not namespaced) sysctls are set only by a pool's node profile: never in a pod's "
                    "securityContext, never allowed to pods (allowedUnsafeSysctls), never by a Tuned profile of "
                    "its own.",
        validate=node_sysctls_in_profiles,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=is_launch_template,
        name="efa-only-on-capable-instances",
        description="A launch template attaches EFA interfaces only to an EFA-capable instance type, at most as many "
                    "as it takes.",
        validate=efa_on_capable_instances,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-networks-own-namespace",
        description=f"Tenant pods attach ({NETWORKS_ANNOTATION}) only to networks of their own namespace.",
        validate=tenant_networks_own_namespace,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
]
