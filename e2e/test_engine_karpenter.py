"""The Karpenter example under the real engine: gpuctl's preview held to `pulumi preview`, and the kernel-ahead order
`pulumi up` really takes when a pool moves to a new image and kernel.

The NodePools and EC2NodeClasses are custom resources of the reference CRDs (installed in the control plane); no
Karpenter runs here (e2e/test_karpenter.py runs the real one on the rendered NodePools). Stand-ins as for the engine
lifecycle (e2e/test_engine_lifecycle.py): the charts come from a Helm repository on 127.0.0.1 serving stand-in charts.
"""

from __future__ import annotations

import json
from pathlib import Path

from e2e.test_engine_lifecycle import pool_field, started
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "Pulumi.karpenter.yaml"
NEW_KERNEL, NEW_IMAGE = "6.8.0-1024-aws", "ami-0a1b2c3d4e5f60718"
NEW_DRIVER = "driver-ubuntu22-04-6-8-0-1024-aws"


def operations(events: Path) -> list[tuple[str, str, str]]:
    """(phase, operation, resource name) of each step of an update, in the order the engine reported them: `pre`
    when it starts, `done` when its outputs are in."""
    found = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        for phase, key in (("pre", "resourcePreEvent"), ("done", "resOutputsEvent")):
            if step := event.get(key):
                metadata = step["metadata"]
                if metadata["op"] != "same":
                    found.append((phase, metadata["op"], metadata["urn"].rsplit("::", 1)[-1]))
    return found


def test_a_karpenter_pool_moves_to_a_new_kernel_driver_first_as_gpuctl_previews_it(tmp_path: Path) -> None:
    with started("karpenter", tmp_path, example=EXAMPLE) as life:
        assert set(life.compare("a new stack", base=False).values()) == {"create"}
        life.engine.up(policy_pack=ROOT / "policy")
        life.deployed("a new stack")

        def new_image_and_kernel(config: dict) -> None:
            pool_field("a10g-training", "image", NEW_IMAGE)(config)
            pool_field("a10g-training", "kernel", NEW_KERNEL)(config)

        what = "a Karpenter pool's image and kernel"
        planned = life.change(what, new_image_and_kernel)
        assert {urn.rsplit("::", 1)[-1]: op for urn, op in planned.items()} == {
            NEW_DRIVER: "create", "pool-a10g-training": "update", "pool-a10g-training-node-class": "update"}
        # The review says what Karpenter will do, and that it evicts running jobs.
        roll = next(pool["roll"] for pool in life.review["summary"]["pools"] if pool["name"] == "a10g-training")
        assert "marked Drifted" in roll and "1 node (4 GPUs) at a time (disruption budget 1)" in roll, roll
        destructive = [item["what"] for item in life.review["summary"]["destructive"]]
        assert "pool a10g-training drift replacement" in destructive, destructive
        # `up` created the new kernel's driver before it touched either object Karpenter drifts on.
        steps = operations(life.engine.event_log)
        driver_done = steps.index(("done", "create", NEW_DRIVER))
        assert driver_done < steps.index(("pre", "update", "pool-a10g-training-node-class")), steps
        assert driver_done < steps.index(("pre", "update", "pool-a10g-training")), steps
