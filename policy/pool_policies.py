"""Policies of GPU pools and their taint: every pool taints its nodes, and only GPU pods tolerate it."""

from __future__ import annotations

from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs

from components import labels
from policy.capacity import gpus_per_node, registers_gpu_taint
from policy.index import index
from policy.reading import (AUTO_SCALING_GROUP, GPU_TAINT_TEXT, LAUNCH_TEMPLATE, MACHINE_SET, NODE_POOL, POOL_COMPONENT,
                            asg_tags, describe, dig, items, pod_spec, requests_gpus, tolerates)
from policy.resource_types import runs_pods


def _in_pool(parent: str | None) -> bool:
    """Whether a resource's parent (a URN) is a GpuNodePool: the URN's type chain ends in the component's type."""
    return bool(parent) and parent.split("::")[-2].rsplit("$", 1)[-1] == POOL_COMPONENT


def pools_tainted(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """One pool resource at a time, so `pulumi up` stops before it creates or changes an untainted pool."""
    key, effect = labels.GPU_TAINT["key"], labels.GPU_TAINT["effect"]
    in_pool = _in_pool(args.opts.parent if args.opts else None)
    if args.resource_type == MACHINE_SET and (in_pool or gpus_per_node(args) > 0):
        taints = items(dig(args.props, "spec", "template", "spec", "taints"))
        if not any(t.get("key") == key and t.get("effect") == effect for t in taints):
            report(f"{describe(args.resource_type, args.props)} does not taint its nodes {GPU_TAINT_TEXT}, so "
                   f"CPU pods can fill them; add {{key: {key}, effect: {effect}}} to spec.template.spec.taints", None)
    elif args.resource_type == AUTO_SCALING_GROUP and (in_pool or gpus_per_node(args) > 0):
        tag = labels.CA_TAINT_TAG.format(key=key)
        if not asg_tags(args.props).get(tag, "").endswith(f":{effect}"):
            report(f"Auto Scaling Group {args.props.get('name') or args.name} lacks the tag {tag}=:{effect} (the "
                   "autoscaler's template node when scaling from zero), so the autoscaler plans CPU pods onto its "
                   f"nodes; add it", None)
    elif args.resource_type == NODE_POOL and (in_pool or gpus_per_node(args) > 0):
        taints = items(dig(args.props, "spec", "template", "spec", "taints"))
        if not any(t.get("key") == key and t.get("effect") == effect for t in taints):
            report(f"{describe(args.resource_type, args.props)} does not taint its nodes {GPU_TAINT_TEXT}, so "
                   f"CPU pods can fill them; add {{key: {key}, effect: {effect}}} to spec.template.spec.taints", None)
    elif args.resource_type == LAUNCH_TEMPLATE and in_pool and not registers_gpu_taint(args):
        report(f"launch template {args.props.get('name') or args.name} of a GPU pool does not start the kubelet with "
               f"--register-with-taints={GPU_TAINT_TEXT}, so its nodes are not tainted and CPU pods can fill them; "
               "add the flag to its user data", None)


def gpu_pods_tolerate_taint(args: StackValidationArgs, report: ReportViolation) -> None:
    runtime_classes = {dig(r.props, "metadata", "name"): r.props for r in index(args.resources).of_kind("RuntimeClass")}
    for resource in index(args.resources).selected(runs_pods):
        spec = pod_spec(resource.resource_type, resource.props)
        if spec is None or not requests_gpus(spec):
            continue
        runtime_class = spec.get("runtimeClassName")
        tolerations = [*items(spec.get("tolerations")),
                       *items(dig(runtime_classes.get(runtime_class), "scheduling", "tolerations"))]
        if not any(tolerates(t, labels.GPU_TAINT) for t in tolerations):
            via = (f"nor does RuntimeClass {runtime_class} add it" if runtime_class in runtime_classes else
                   f"and RuntimeClass {runtime_class} is not in this stack" if runtime_class else
                   "and it sets no runtimeClassName")
            report(f"{describe(resource.resource_type, resource.props)} requests {labels.GPU_RESOURCE} but does not "
                   f"tolerate the taint {GPU_TAINT_TEXT} ({via}), so it stays Pending; add the toleration "
                   f"{{key: {labels.GPU_RESOURCE}, operator: Exists, effect: NoSchedule}} or a RuntimeClass that "
                   "adds it", resource.urn)
