"""NodeDrain: every GPU node an Auto Scaling Group terminates is cordoned and drained first.

The mechanism is AWS Node Termination Handler in Queue Processor mode (aws/aws-node-termination-handler README,
"Queue Processor"): each pool's group has a termination lifecycle hook (components/placements/auto_scaling_group.py) that holds a
terminating instance in `Terminating:Wait`; EventBridge sends the group's "EC2 Instance-terminate Lifecycle Action"
event to an SQS queue; the handler reads it, cordons and drains the node through the Eviction API (so
PodDisruptionBudgets and each pod's own grace period hold), then completes the lifecycle action and the instance
terminates. An instance refresh honours termination hooks, so a rolling image change drains node by node at the
refresh's rate; so do scale-ins by the cluster autoscaler and AZ rebalancing.

Chosen over a drain in the program (pulumi does not wait for a refresh and cannot act per instance) and over
EKS managed node groups (the pools are plain Auto Scaling Groups on any Kubernetes on AWS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components import labels
from components.manifests import child_options, helm_release

# config/helm/aws-node-termination-handler/Chart.yaml at tag v1.25.6 (chart 0.27.6, app 1.25.6); the README
# installs it from this OCI registry.
NTH_CHART = labels.HelmChart("oci://public.ecr.aws/aws-ec2/helm", "aws-node-termination-handler", "0.27.6")
NTH_NAMESPACE = "kube-system"
# The EventBridge detail-type of an Auto Scaling termination lifecycle action (the README's ASG rule).
TERMINATE_ACTION = "EC2 Instance-terminate Lifecycle Action"
# README "IAM Policy for aws-node-termination-handler Deployment": what the queue processor calls.
HANDLER_QUEUE_ACTIONS = ("sqs:DeleteMessage", "sqs:ReceiveMessage")
HANDLER_GROUP_ACTIONS = ("autoscaling:CompleteLifecycleAction",)
HANDLER_DESCRIBE_ACTIONS = ("autoscaling:DescribeAutoScalingInstances", "autoscaling:DescribeTags",
                            "ec2:DescribeInstances")


@dataclass(frozen=True)
class NodeDrainArgs:
    """The prefix of the cluster's pools' Auto Scaling Group names, how long a drain may take, and who may run the
    handler.

    By prefix, not by name: a pool removed in a change keeps its drain until its group is gone. Listing the groups
    would drop the removed one from the rule and the policy in an update, which the engine runs before it deletes
    the group, so its nodes would terminate with no handler hearing of them.

    `role`: the IAM role of the nodes the handler runs on (it tolerates no GPU taint, so never a GPU node it
    might have to drain). On a plain Kubernetes cluster a pod has its node's instance-profile credentials; the
    handler's policy is attached to that role when it is named, else it is created for you to attach.
    """

    cluster: str
    region: str
    group_prefix: str
    drain_timeout_seconds: int
    role: str | None = None
    chart_mirror: str | None = None  # charts.mirror: where the pinned chart is pulled from instead


class NodeDrain(pulumi.ComponentResource):
    """SQS queue, EventBridge rule for the pools' termination lifecycle actions, IAM policy, and the handler."""

    ready: pulumi.Resource

    def __init__(self, name: str, args: NodeDrainArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:NodeDrain", name, None, opts)
        child = child_options(self, opts)
        prefix = f"{args.cluster}-gpu"
        # Retention as long as the hooks' heartbeat: an instance waits in Terminating:Wait that long, so its event
        # must outlast a handler restart for all of it; an older event has no instance left to drain (SQS: >= 60).
        queue = aws.sqs.Queue(f"{name}-queue", name=f"{prefix}-node-termination",
                              message_retention_seconds=max(60, args.drain_timeout_seconds),
                              sqs_managed_sse_enabled=True, opts=child)
        # Only this stack's groups (EventBridge prefix matching): the handler sees no event of another cluster's
        # instances (so it needs no managed-tag check, which would skip instances launched before the tag existed).
        rule = aws.cloudwatch.EventRule(
            f"{name}-rule", name=f"{prefix}-node-termination",
            description="Termination lifecycle actions of the GPU pools, for the node termination handler",
            event_pattern=json.dumps({
                "source": ["aws.autoscaling"], "detail-type": [TERMINATE_ACTION],
                "detail": {"AutoScalingGroupName": [{"prefix": args.group_prefix}]}}, sort_keys=True),
            opts=child)
        aws.sqs.QueuePolicy(f"{name}-queue-policy", queue_url=queue.url, policy=pulumi.Output.all(
            queue.arn, rule.arn).apply(lambda arns: json.dumps({"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
                "Resource": arns[0], "Condition": {"ArnEquals": {"aws:SourceArn": arns[1]}}}]})), opts=child)
        target = aws.cloudwatch.EventTarget(f"{name}-target", rule=rule.name, target_id="node-termination-queue",
                                            arn=queue.arn, opts=child)
        partition = "aws-us-gov" if "-gov-" in args.region else "aws"
        groups = f"arn:{partition}:autoscaling:{args.region}:*:autoScalingGroup:*:autoScalingGroupName/" \
                 f"{args.group_prefix}*"
        # Written from names alone (any account), so the preview shows the whole policy before it exists.
        queue_arn = f"arn:{partition}:sqs:{args.region}:*:{prefix}-node-termination"
        policy = aws.iam.Policy(
            f"{name}-policy", name=f"{prefix}-node-termination-handler",
            description="AWS Node Termination Handler (queue processor) for the GPU pools",
            policy=json.dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": list(HANDLER_QUEUE_ACTIONS), "Resource": queue_arn},
                {"Effect": "Allow", "Action": list(HANDLER_GROUP_ACTIONS), "Resource": groups},
                {"Effect": "Allow", "Action": list(HANDLER_DESCRIBE_ACTIONS), "Resource": "*"},
            ]}), opts=child)
        before_handler: list[pulumi.Resource] = [target]
        if args.role:
            before_handler.append(aws.iam.RolePolicyAttachment(
                f"{name}-policy-attachment", role=args.role, policy_arn=policy.arn, opts=child))
        # Values the chart's templates/deployment.yaml reads (queue-processor Deployment when
        # enableSqsTerminationDraining); the drain timeout matches the hooks' heartbeat, so a drain never
        # outlives the hook that holds its instance.
        self.ready = helm_release(f"{name}-handler", NTH_CHART, NTH_NAMESPACE, {
            "enableSqsTerminationDraining": True,
            "queueURL": queue.url,
            "awsRegion": args.region,
            "checkASGTagBeforeDraining": False,
            "checkTagBeforeDraining": False,
            "nodeTerminationGracePeriod": args.drain_timeout_seconds,
            "podTerminationGracePeriod": -1,  # each pod's own terminationGracePeriodSeconds
            "deleteLocalData": True,
            "ignoreDaemonSets": True,
            "emitKubernetesEvents": True,
            "tolerations": [],  # never on a GPU node: it would evict itself mid-drain, and pools scale to zero
        }, child_options(self, opts, *before_handler), args.chart_mirror)
        self.register_outputs({"queue": queue.url, "rule": rule.name, "policy": policy.name})


def drain_phrase(heartbeat_seconds: int, permitted: bool) -> str:
    """How a pool's nodes are drained, in one phrase for the preview; `permitted`: the stack attaches the handler's
    IAM policy (cluster.nodeTerminationHandlerRole), without which the handler can read no event."""
    if not permitted:
        return (f"NOT drained unless you attach the handler's IAM policy to the role of the nodes it runs on "
                f"(or set cluster.nodeTerminationHandlerRole): without it each terminating node waits out its "
                f"lifecycle hook ({heartbeat_seconds} s) and terminates undrained")
    return (f"node termination handler cordons and drains each node before it terminates (lifecycle hook, "
            f"heartbeat {heartbeat_seconds} s)")
