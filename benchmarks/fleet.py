"""Fleet-scale benchmark: `gpuctl render`, `diff` and `check` against the floor of what they must do anyway.

For each size it writes a synthetic Kubernetes stack (tenants, and Auto Scaling Group pools spread over many
Ubuntu kernels, so one NVIDIADriver per kernel; an OpenShift cluster runs the one kernel of its release), then
times, in this process, with the collector set as the CLI sets it (`one_shot_collector`) and imports warm:

- render: `gpuctl render --config-file STACK --out DIR --offline` (into a new folder; the faster of the renders of
  the two stacks `diff` compares) against the floor of registering the same number of bare ConfigMaps, of the same
  mean input size (JSON bytes), through the same mock runtime; and, to show what of the rest is the program's,
  against registering the plan's own resources (same types, inputs, parents and dependencies) in one flat loop, the
  better of two runs: what the SDK charges for these resources;
- diff: `gpuctl diff OLD NEW` of two renders (one tenant's quota changed) against loading both plans;
- check: `gpuctl check DIR` against loading the plan (diff, check and their floors: the best of 3 runs).

`make bench` then runs benchmarks/preview.py: `gpuctl preview --base HEAD` as a user runs it, in fresh
processes, on the wall clock, for the shipped stacks and generated fleets (1,200 tenants on 40 pools, and sizes
for growth), against one `gpuctl render` (time) and these bare ConfigMaps (peak memory).

    python -m benchmarks.fleet [--sizes 1000,10000,20000] [--clock cpu|wall]   (BENCH_SIZES=300: smoke run)
    python -m benchmarks.preview [--sizes 1000,20000]   (benchmarks/preview.py; `make bench` runs both)

Times are this process's CPU time by default (on a shared machine the wall clock also counts other work);
each command and its floor run back to back, and the garbage of one run is collected, untimed, before the
next, as separate CLI runs would start clean. Sizes are approximate resource counts. Times are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

import yaml
from pydantic.alias_generators import to_snake

from gpuctl.__main__ import main as gpuctl, one_shot_collector
from gpuctl.cli import load_plan
from gpuctl.runtime import run_program
from stacks.config import PROJECT

RESOURCES_PER_TENANT = 9  # measured: a tenant is its component, a namespace, quotas, limits, a fence, RBAC
DEFAULT_SIZES = "1000,10000,20000"
REPEATS = 3  # diff, check and loading are short: their best of 3 runs


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


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time


def seconds(run, repeats: int = 1) -> float:
    """Seconds `run()` takes on the chosen clock (the best of `repeats` runs), each after collecting what earlier
    runs left (untimed)."""
    spent = []
    for _ in range(repeats):
        gc.collect()
        start = clock()
        run()
        spent.append(clock() - start)
    return min(spent)


def timed(*argv: str, repeats: int = 1) -> float:
    """Seconds `gpuctl ARGV` takes (the best of `repeats` runs), its output discarded; a failing command stops
    the benchmark."""
    codes = []

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            codes.append(gpuctl(list(argv)))

    spent = seconds(run, repeats)
    if set(codes) - {0, 1}:  # 1: policy violations or changes found, still a full run
        raise SystemExit(f"gpuctl {' '.join(argv)} exited {codes[-1]}")
    return spent


def floor_render(count: int, mean_input_bytes: int) -> float:
    """Seconds to register `count` ConfigMaps of `mean_input_bytes` JSON inputs through the mock runtime."""
    import pulumi_kubernetes as k8s

    padding = "x" * max(0, mean_input_bytes - 90)

    def program() -> None:
        for index in range(count):
            k8s.core.v1.ConfigMap(f"cm-{index}", metadata={"name": f"cm-{index}", "namespace": "bench"},
                                  data={"pad": padding})

    return seconds(lambda: run_program("bench", {}, [], program))


TYPE_TOKEN = re.compile(r"^(?P<package>aws|kubernetes):(?P<module>[^:]+):(?P<name>\w+)$")


def resource_class(type_token: str) -> type | None:
    """The provider SDK's class for a type token (`kubernetes:core/v1:ResourceQuota` ->
    `pulumi_kubernetes.core.v1.ResourceQuota`), or None where it has none under that module path."""
    match = TYPE_TOKEN.match(type_token)
    if not match:
        return None
    module = match["module"]
    if match["package"] == "kubernetes":
        group, _, version = module.rpartition("/")
        module = f"{group.split('.')[0]}.{version}"
    else:
        module = module.split("/")[0]
    try:
        return getattr(importlib.import_module(f"pulumi_{match['package']}.{module}"), match["name"])
    except (ImportError, AttributeError):
        return None


def _register(record: dict[str, Any], opts: Any) -> Any:
    import pulumi
    import pulumi_kubernetes as k8s

    inputs = dict(record["inputs"])
    if not record["custom"]:
        return pulumi.ComponentResource(record["type"], record["name"], None, opts)
    cls = resource_class(record["type"])
    if cls is not None:
        with contextlib.suppress(TypeError):  # a class whose arguments differ from its inputs: registered as below
            return cls(record["name"], **{to_snake(key): value for key, value in inputs.items()}, opts=opts)
    if record["type"].startswith("kubernetes:"):
        return k8s.apiextensions.CustomResource(record["name"], api_version=inputs.pop("apiVersion"),
                                                kind=inputs.pop("kind"), metadata=inputs.pop("metadata", None),
                                                opts=opts, **inputs)
    return pulumi.CustomResource(record["type"], record["name"], inputs, opts)


def same_resources_program(plan: dict[str, Any]) -> Callable[[], None]:
    """A program that registers the plan's own resources, with their types, inputs, parents and dependencies,
    in one flat loop."""
    import pulumi

    records = {record["urn"]: record for record in plan["resources"]}
    graph = TopologicalSorter()
    for record in plan["resources"]:
        graph.add(record["urn"], *record["dependencies"], *filter(None, [record["parent"]]))
    order = [urn for urn in graph.static_order() if urn in records]

    def program() -> None:
        registered: dict[str, Any] = {}
        for urn in order:
            record = records[urn]
            opts = pulumi.ResourceOptions(parent=registered.get(record["parent"]),
                                          depends_on=[registered[urn] for urn in record["dependencies"]] or None)
            registered[urn] = _register(record, opts)

    return program


def same_resources_render(plan: dict[str, Any], repeats: int = 2) -> float:
    """Seconds to register the plan's own resources through the mock runtime (the best of `repeats` runs, as
    render's two): what the SDK charges for them."""
    program = same_resources_program(plan)
    return seconds(lambda: run_program(plan["stack"], {}, [], program), repeats)


def floor_load(*dirs: Path) -> float:
    return seconds(lambda: [load_plan(directory) for directory in dirs], REPEATS)


def measure(size: int, work: Path) -> dict:
    tenants = max(1, size // RESOURCES_PER_TENANT)
    pools = max(1, tenants // 50)
    stacks = {}
    for name, config in (("old", fleet_config(tenants, pools, 10)), ("new", fleet_config(tenants, pools, 10))):
        if name == "new":
            config[f"{PROJECT}:tenants"][0]["gpus"] = 2
        stacks[name] = work / f"Pulumi.{name}-{size}.yaml"
        stacks[name].write_text(yaml.safe_dump({"config": config}))
    old, new = work / f"old-{size}", work / f"new-{size}"
    render = min(timed("render", "--config-file", str(stacks[name]), "--out", str(out), "--offline")
                 for name, out in (("old", old), ("new", new)))  # one tenant's GPUs apart: the faster of the two
    plan = load_plan(old)
    count = len(plan["resources"])
    mean_input = sum(len(json.dumps(r["inputs"])) for r in plan["resources"]) // count
    same_resources = same_resources_render(plan)
    del plan
    return {"resources": count, "render": render, "render_floor": floor_render(count, mean_input),
            "render_same": same_resources,
            "diff": timed("diff", str(old), str(new), repeats=REPEATS), "diff_floor": floor_load(old, new),
            "check": timed("check", str(old), repeats=REPEATS), "check_floor": floor_load(old)}


HEADER = ("| resources | render ms/res | floor ms/res | ratio | same resources ms/res | ratio | diff s "
          "| load 2 plans s | ratio | check s | load plan s | ratio |\n|" + "---:|" * 12)


def table_row(row: dict) -> str:
    count = row["resources"]
    cells = [f"{count:,}", f"{1e3 * row['render'] / count:.2f}", f"{1e3 * row['render_floor'] / count:.2f}",
             f"{row['render'] / row['render_floor']:.2f}", f"{1e3 * row['render_same'] / count:.2f}",
             f"{row['render'] / row['render_same']:.2f}", f"{row['diff']:.2f}", f"{row['diff_floor']:.2f}",
             f"{row['diff'] / row['diff_floor']:.2f}", f"{row['check']:.2f}", f"{row['check_floor']:.2f}",
             f"{row['check'] / row['check_floor']:.2f}"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    global clock
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=os.environ.get("BENCH_SIZES", DEFAULT_SIZES),
                        help="comma-separated approximate resource counts")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu", help="cpu: this process's CPU time (default)")
    args = parser.parse_args()
    clock = CLOCKS[args.clock]
    sizes = [int(size) for size in args.sizes.split(",")]
    one_shot_collector()
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-") as work:
        measure(100, Path(work))  # warm: imports, schemas; not reported
        print(f"{args.clock} time; render per resource, diff and check in seconds", flush=True)
        print(HEADER, flush=True)
        rows = []
        for size in sizes:
            rows.append(measure(size, Path(work)))
            print(table_row(rows[-1]), flush=True)
    first, last = rows[0], rows[-1]
    growth = (last["render"] / last["resources"]) / (first["render"] / first["resources"])
    print(f"render per resource at {last['resources']:,} resources: {growth:.2f}x that at {first['resources']:,}")


if __name__ == "__main__":
    main()
