"""Fleet-scale benchmark: `gpuctl render`, `diff` and `check` against the floor of what they must do anyway.

For each size it writes a synthetic Kubernetes stack (tenants, and Auto Scaling Group pools spread over many
Ubuntu kernels, so one NVIDIADriver per kernel; an OpenShift cluster runs the one kernel of its release), then times, in this process
(imports warm, as a long CLI session would see them):

- render: `gpuctl render --config-file STACK --out DIR --offline` against the floor of registering the same
  number of bare ConfigMaps, of the same mean input size, through the same mock runtime;
- diff: `gpuctl diff OLD NEW` of two renders (one tenant's quota changed) against loading both plans;
- check: `gpuctl check DIR` against loading the plan.

    python -m benchmarks.fleet [--sizes 1000,10000,20000]     (or BENCH_SIZES=300 for a smoke run)

Sizes are approximate resource counts. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path

import yaml

from gpuctl.__main__ import main as gpuctl
from gpuctl.cli import load_plan
from gpuctl.runtime import run_program
from stacks.config import PROJECT

RESOURCES_PER_TENANT = 7  # measured: a tenant is a namespace, quotas, limits, RBAC and pod security
DEFAULT_SIZES = "1000,10000,20000"


def fleet_config(tenants: int, pools: int, kernels: int) -> dict:
    """A Kubernetes stack with `pools` pools spread over `kernels` kernels and `tenants` one-GPU tenants."""
    return {
        f"{PROJECT}:cluster": {"name": "bench", "flavor": "kubernetes", "kubernetesVersion": "1.31",
                               "region": "us-east-1", "subnetIds": ["subnet-0a1b2c3d4e5f60718"],
                               "securityGroupIds": ["sg-0d4e5f60718293a4b"], "instanceProfile": "bench-gpu-node"},
        f"{PROJECT}:nodePools": [{
            "name": f"pool-{index}", "instanceType": "p4d.24xlarge", "replicas": tenants // (8 * pools) + 1,
            "os": "ubuntu22.04", "kernel": f"6.8.0-{1000 + index % kernels}-aws",
            "image": f"ami-{index:017x}",
        } for index in range(pools)],
        f"{PROJECT}:tenants": [{"name": f"team-{index}", "gpus": 1} for index in range(tenants)],
    }


def timed(*argv: str) -> float:
    """Seconds `gpuctl ARGV` takes, its output discarded; a failing command stops the benchmark."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = gpuctl(list(argv))
    seconds = time.perf_counter() - start
    if code not in (0, 1):  # 1: policy violations or changes found, still a full run
        raise SystemExit(f"gpuctl {' '.join(argv)} exited {code}")
    return seconds


def floor_render(count: int, mean_input_bytes: int) -> float:
    """Seconds to register `count` ConfigMaps of `mean_input_bytes` JSON inputs through the mock runtime."""
    import pulumi_kubernetes as k8s

    padding = "x" * max(0, mean_input_bytes - 90)

    def program() -> None:
        for index in range(count):
            k8s.core.v1.ConfigMap(f"cm-{index}", metadata={"name": f"cm-{index}", "namespace": "bench"},
                                  data={"pad": padding})

    start = time.perf_counter()
    run_program("bench", {}, [], program)
    return time.perf_counter() - start


def floor_load(*dirs: Path) -> float:
    start = time.perf_counter()
    for directory in dirs:
        load_plan(directory)
    return time.perf_counter() - start


def measure(size: int, work: Path) -> dict:
    tenants = max(1, size // RESOURCES_PER_TENANT)
    pools = max(1, tenants // 50)
    stacks = {}
    for name, config in (("old", fleet_config(tenants, pools, 10)), ("new", fleet_config(tenants, pools, 10))):
        if name == "new":
            config[f"{PROJECT}:tenants"][0]["gpus"] = 2
        stacks[name] = work / f"Pulumi.{name}.yaml"
        stacks[name].write_text(yaml.safe_dump({"config": config}))
    old, new = work / "old", work / "new"
    render = timed("render", "--config-file", str(stacks["old"]), "--out", str(old), "--offline")
    timed("render", "--config-file", str(stacks["new"]), "--out", str(new), "--offline")
    plan = load_plan(old)
    count = len(plan["resources"])
    mean_input = sum(len(json.dumps(r["inputs"])) for r in plan["resources"]) // count
    return {"resources": count, "render": render, "render_floor": floor_render(count, mean_input),
            "diff": timed("diff", str(old), str(new)), "diff_floor": floor_load(old, new),
            "check": timed("check", str(old)), "check_floor": floor_load(old)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=os.environ.get("BENCH_SIZES", DEFAULT_SIZES),
                        help="comma-separated approximate resource counts")
    sizes = [int(size) for size in parser.parse_args().sizes.split(",")]
    print(f"{'resources':>9} {'render ms/res':>13} {'floor':>6} {'ratio':>5}  {'diff s':>7} {'load 2':>7} "
          f"{'ratio':>5}  {'check s':>7} {'load 1':>7} {'ratio':>5}")
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as work:
        for size in sizes:
            row = measure(size, Path(work))
            count = row["resources"]
            print(f"{count:9d} {1e3 * row['render'] / count:13.3f} {1e3 * row['render_floor'] / count:6.3f} "
                  f"{row['render'] / row['render_floor']:5.2f}  {row['diff']:7.3f} {row['diff_floor']:7.3f} "
                  f"{row['diff'] / row['diff_floor']:5.2f}  {row['check']:7.3f} {row['check_floor']:7.3f} "
                  f"{row['check'] / row['check_floor']:5.2f}")


if __name__ == "__main__":
    main()
