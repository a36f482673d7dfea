"""Which resource types a policy reads: module-level predicates, so a resource index selects the resources of
each once, and the resource policies that declare them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from policy.reading import (AUTO_SCALING_GROUP, CLUSTER_POLICY, LAUNCH_TEMPLATE, MACHINE_SET, NODE_POOL, NVIDIA_DRIVER,
                            OPERAND_IMAGE_RESOURCES, OPERAND_TOLERATIONS, PERFORMANCE_PROFILE, POD_SPEC_PATHS, kind)


def every_type(resource_type: str) -> bool:
    return True


def runs_pods(resource_type: str) -> bool:
    """Workloads with a pod spec (POD_SPEC_PATHS)."""
    return kind(resource_type) in POD_SPEC_PATHS


def names_images(resource_type: str) -> bool:
    """Workloads, and the GPU Operator resources that name operand images."""
    return runs_pods(resource_type) or resource_type in OPERAND_IMAGE_RESOURCES


def is_pool(resource_type: str) -> bool:
    return resource_type in (MACHINE_SET, AUTO_SCALING_GROUP, NODE_POOL)


def is_pool_part(resource_type: str) -> bool:
    return resource_type in (MACHINE_SET, AUTO_SCALING_GROUP, LAUNCH_TEMPLATE, NODE_POOL)


def is_role(resource_type: str) -> bool:
    return kind(resource_type) in ("Role", "ClusterRole")


def sets_sysctls(resource_type: str) -> bool:
    """Workloads, and the node settings that allow or set sysctls (see _unsafe_allowed and Tuned)."""
    return (runs_pods(resource_type) or resource_type in (PERFORMANCE_PROFILE, LAUNCH_TEMPLATE)
            or kind(resource_type) in ("KubeletConfig", "Tuned"))


def is_nvidia_driver(resource_type: str) -> bool:
    return resource_type == NVIDIA_DRIVER


def tolerates_operands(resource_type: str) -> bool:
    return resource_type in OPERAND_TOLERATIONS


def is_cluster_policy(resource_type: str) -> bool:
    return resource_type == CLUSTER_POLICY


def is_namespace(resource_type: str) -> bool:
    return kind(resource_type) == "Namespace"


def is_launch_template(resource_type: str) -> bool:
    return resource_type == LAUNCH_TEMPLATE


_APPLIES_TO: dict[str, Callable[[str], bool]] = {}


def resource_policy(*, applies_to: Callable[[str], bool], validate: Callable[[ResourceValidationArgs, ReportViolation],
                    None], **kwargs: Any) -> ResourceValidationPolicy:
    """A ResourceValidationPolicy whose validation returns at once for resource types `applies_to` rejects, so a
    runner holding the resources by type may skip those without building their arguments (`applies_to`)."""
    def validate_applicable(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if applies_to(args.resource_type):
            validate(args, report)

    policy = ResourceValidationPolicy(validate=validate_applicable, **kwargs)
    _APPLIES_TO[policy.name] = applies_to
    return policy


def applies_to(policy: ResourceValidationPolicy) -> Callable[[str], bool]:
    """The resource types a resource policy can report on (its validation does nothing for the others)."""
    return _APPLIES_TO.get(policy.name, every_type)
