"""Fleet-scale render benchmark: the platform's cost per resource against the SDK's own per-resource cost.

Renders a synthetic stack with thousands of tenants and dozens of pools and kernels, then the same number
of bare ConfigMaps through the same mock runtime. The ratio of the two per-resource times shows how much
the program adds on top of registering resources at all; it should stay close to 1 and flat as N grows.

    python -m benchmarks.fleet [--tenants 2000] [--pools 40] [--kernels 20]
"""

from __future__ import annotations

import argparse
import time

import pulumi_kubernetes as k8s

from gpuctl.runtime import run_program
from stacks.config import PROJECT, load_stack_config
from stacks.program import build


def fleet_config(tenants: int, pools: int, kernels: int) -> dict:
    """An OpenShift stack with `pools` pools spread over `kernels` kernels and `tenants` one-GPU tenants."""
    return {
        f"{PROJECT}:cluster": {"name": "bench", "flavor": "openshift", "kubernetesVersion": "1.31",
                               "infrastructureId": "bench-x1y2z"},
        f"{PROJECT}:nodePools": [{
            "name": f"pool-{index}", "instanceType": "p4d.24xlarge", "replicas": tenants // (8 * pools) + 1,
            "os": "rhcos4.16", "kernel": f"5.14.0-427.{index % kernels}.1.el9_4.x86_64",
            "image": f"ami-{index:017x}",
        } for index in range(pools)],
        f"{PROJECT}:tenants": [{"name": f"team-{index}", "gpus": 1} for index in range(tenants)],
    }


def timed(program, config: dict) -> tuple[float, int]:
    start = time.perf_counter()
    plan = run_program("bench", config, [], program)
    return time.perf_counter() - start, len(plan["resources"])


def bare_resources(count: int):
    def program():
        for index in range(count):
            k8s.core.v1.ConfigMap(f"cm-{index}", metadata={"name": f"cm-{index}", "namespace": "bench"},
                                  data={"key": "value"})
    return program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=2000)
    parser.add_argument("--pools", type=int, default=40)
    parser.add_argument("--kernels", type=int, default=20)
    args = parser.parse_args()
    for scale in (0.25, 0.5, 1.0):
        config = fleet_config(int(args.tenants * scale), max(1, int(args.pools * scale)), args.kernels)
        platform_seconds, count = timed(lambda: build(load_stack_config()), config)
        sdk_seconds, _ = timed(bare_resources(count), config)
        print(f"tenants={int(args.tenants * scale):5d} resources={count:6d}  platform {platform_seconds:6.2f}s "
              f"({1e3 * platform_seconds / count:.2f} ms/resource)  bare SDK {sdk_seconds:6.2f}s "
              f"({1e3 * sdk_seconds / count:.2f} ms/resource)  ratio {platform_seconds / sdk_seconds:.2f}")


if __name__ == "__main__":
    main()
