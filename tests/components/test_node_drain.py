"""NodeDrain on Kubernetes: the termination handler, its queue, the rule that feeds it, and its IAM policy."""

from __future__ import annotations

import json

from tests.conftest import Plan, stack_config

PREFIX = "prod-gpu-gpu-"  # every pool's group: prod-gpu-gpu-l4-inference, ...


def test_only_kubernetes_stacks_run_the_drain(prod_plan: Plan, dev_plan: Plan) -> None:
    assert len(prod_plan.of_type("gpu-platform:index:NodeDrain")) == 1
    assert dev_plan.of_type("gpu-platform:index:NodeDrain") == []
    assert not [r for r in dev_plan.resources if r["type"].startswith("aws:")]


def test_the_rule_sends_only_this_stacks_termination_actions_to_the_queue(prod_plan: Plan) -> None:
    rule = prod_plan.named("node-drain-rule")
    assert json.loads(rule["inputs"]["eventPattern"]) == {
        "source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-terminate Lifecycle Action"],
        "detail": {"AutoScalingGroupName": [{"prefix": PREFIX}]}}
    target = prod_plan.named("node-drain-target")
    assert prod_plan.depends_on(target, "node-drain-rule") and prod_plan.depends_on(target, "node-drain-queue")
    queue = prod_plan.named("node-drain-queue")["inputs"]
    # An event stays queued as long as its instance waits in the drain hook (heartbeat 1800 s).
    assert queue["messageRetentionSeconds"] == 1800 and queue["sqsManagedSseEnabled"] is True
    assert prod_plan.depends_on(prod_plan.named("node-drain-queue-policy"), "node-drain-rule")


def test_the_handler_runs_in_queue_mode_off_the_gpu_nodes(prod_plan: Plan) -> None:
    release = prod_plan.named("node-drain-handler")["inputs"]

    assert (release["chart"], release["version"]) == (
        "oci://public.ecr.aws/aws-ec2/helm/aws-node-termination-handler", "0.27.6")
    values = release["values"]
    assert values["enableSqsTerminationDraining"] is True and values["awsRegion"] == "us-east-1"
    assert values["nodeTerminationGracePeriod"] == 1800  # as long as the hooks' heartbeat
    assert values["checkTagBeforeDraining"] is False  # the rule already names only this stack's groups
    assert values["tolerations"] == []  # the GPU taint keeps it off the nodes it drains
    assert prod_plan.depends_on(prod_plan.named("node-drain-handler"), "node-drain-target")


def test_the_handlers_policy_is_least_privilege_and_readable_in_review(prod_plan: Plan) -> None:
    policy = json.loads(prod_plan.named("node-drain-policy")["inputs"]["policy"])
    by_action = {action: statement["Resource"] for statement in policy["Statement"]
                 for action in statement["Action"]}

    assert by_action["sqs:ReceiveMessage"] == by_action["sqs:DeleteMessage"] == \
        "arn:aws:sqs:us-east-1:*:prod-gpu-gpu-node-termination"
    assert by_action["autoscaling:CompleteLifecycleAction"] == \
        f"arn:aws:autoscaling:us-east-1:*:autoScalingGroup:*:autoScalingGroupName/{PREFIX}*"
    assert all(group["inputs"]["name"].startswith(PREFIX)
               for group in prod_plan.of_type("aws:autoscaling/group:Group"))
    assert set(by_action) == {"sqs:ReceiveMessage", "sqs:DeleteMessage", "autoscaling:CompleteLifecycleAction",
                              "autoscaling:DescribeAutoScalingInstances", "autoscaling:DescribeTags",
                              "ec2:DescribeInstances"}


def test_the_named_role_gets_the_policy_before_the_handler_starts(prod_plan: Plan) -> None:
    [attachment] = prod_plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert attachment["inputs"]["role"] == "prod-gpu-system-node"
    assert prod_plan.depends_on(attachment, "node-drain-policy")
    assert prod_plan.depends_on(prod_plan.named("node-drain-handler"), "node-drain-policy-attachment")
    roll = prod_plan.outputs["pools"]["l4-inference"]["roll"]["drain"]
    assert roll.startswith("node termination handler cordons and drains each node")


def test_without_a_role_the_preview_says_nodes_are_not_drained(render) -> None:
    """The policy is created for the operator to attach; until then the handler can read no event, and each node
    waits out its hook and terminates undrained: the roll line says so rather than claim a drain."""
    config = stack_config("prod")
    del config["gpu-platform:cluster"]["nodeTerminationHandlerRole"]
    plan = render("prod", config)

    assert plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") == []
    for pool in plan.outputs["pools"].values():
        assert pool["roll"]["drain"].startswith("NOT drained unless you attach the handler's IAM policy")


def test_the_longest_drain_of_any_pool_bounds_the_handler(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:nodePools"][2]["roll"] = {"drainTimeoutSeconds": 3600}
    plan = render("prod", config)

    assert plan.named("node-drain-handler")["inputs"]["values"]["nodeTerminationGracePeriod"] == 3600
    hooks = {r["name"]: r["inputs"]["heartbeatTimeout"]
             for r in plan.of_type("aws:autoscaling/lifecycleHook:LifecycleHook")}
    assert hooks[f"pool-{config['gpu-platform:nodePools'][2]['name']}-drain-hook"] == 3600
    assert sorted(hooks.values()) == [1800, 1800, 3600]
    assert plan.named("node-drain-queue")["inputs"]["messageRetentionSeconds"] == 3600
