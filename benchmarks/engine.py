"""`pulumi preview` against `gpuctl preview` of the same stack and change, and the program's share of `pulumi up`.

Runs the real engine built by `make e2e-tools` against a local control plane (e2e/), on the bring-your-own onprem
stack (it registers nothing of AWS, whose provider cannot be built here), at its shipped size and with a generated
fleet of tenants, in one run, on the wall clock:

- a new stack: `pulumi preview` (engine, provider, live discovery) against `gpuctl preview` (the same program under
  the mock runtime, live discovery too);
- `pulumi up` of it, against one `gpuctl render --offline`: the program registering the same resources with every
  answer immediate, so an upper bound of the program's own share of the update;
- then a change (one tenant added): `pulumi preview` against `gpuctl preview --base HEAD`;
- and the cost of the file backend's checkpoints: `pulumi up` of a mid-sized fleet with and without
  PULUMI_SKIP_CHECKPOINTS. The file backend rewrites the whole state after every step, so an update's checkpoints
  grow with the square of its resources: the fleet's `up` is measured with them skipped (docs/performance.md).

    python -m benchmarks.engine [--tenants 1000] [--checkpoint-tenants 150]
    (needs the e2e tools and ../shared/reference/crds)

Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from e2e.cluster import ControlPlane
from e2e.conftest import prepare_cluster
from e2e.engine import Engine
from e2e.stack import Stack
from e2e.standins import StandInCharts
from e2e.test_engine_lifecycle import CHARTS, PROJECT
from e2e.test_engine_stacks import project_copy

STACK = "onprem"


def timed(run) -> tuple[float, object]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def with_tenants(project: Path, count: int) -> None:
    """The stack file with `count` more tenants (no GPUs, so the capacity policy still passes)."""
    path = project / f"Pulumi.{STACK}.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"][f"{PROJECT}:tenants"] += [{"name": f"team-{n:04d}", "gpus": 0, "group": f"team-{n:04d}"}
                                                 for n in range(count)]
    path.write_text(yaml.safe_dump(document, sort_keys=False))


SKIP_CHECKPOINTS = {"PULUMI_SKIP_CHECKPOINTS": "true"}  # state written once, when the update ends


def measure(tenants: int, folder: Path, *, previews: bool = True, settings: dict[str, str] | None = None
            ) -> dict[str, float | int]:
    """Wall-clock seconds of each step on a fresh cluster and stack, with `settings` for the engine."""
    stack = Stack.render(STACK)
    with ControlPlane.start(folder / "cluster") as plane:
        admin = prepare_cluster(stack, plane)
        charts = StandInCharts(folder / "charts", CHARTS)
        try:
            project = project_copy(folder / "project")
            engine = Engine.prepare(project, folder / "engine", plane.kubeconfig, settings)
            engine.init(STACK)
            for key, value in ((f"{PROJECT}:preflight", "false"), (f"{PROJECT}:charts.mirror", charts.url)):
                engine.run("config", "set", "--path", key, value)
            with_tenants(project, tenants)
            git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@127.0.0.1"]
            subprocess.run(["git", "init", "-q"], cwd=project, check=True)
            (project / ".git" / "info" / "exclude").write_text(".venv\n")
            subprocess.run([*git, "add", "-A"], cwd=project, check=True)
            subprocess.run([*git, "commit", "-qm", "deployed"], cwd=project, check=True)
            env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}

            def gpuctl(*args: str) -> None:
                subprocess.run([sys.executable, "-m", "gpuctl", *args, "--stack", STACK], cwd=project, env=env,
                               check=True, capture_output=True)

            results: dict[str, float | int] = {}
            if previews:
                results["engine preview (new)"], report = timed(engine.preview)
                results["resources"] = len(report.get("steps", []))
                results["gpuctl preview (new)"], _ = timed(
                    lambda: gpuctl("preview", "--format", "json", "--no-cache"))
            results["pulumi up"], _ = timed(lambda: engine.up(policy_pack=None))
            if not previews:
                return results
            results["gpuctl render --offline"], _ = timed(
                lambda: gpuctl("render", "--offline", "--out", str(folder / "render")))
            path = project / f"Pulumi.{STACK}.yaml"
            document = yaml.safe_load(path.read_text())
            document["config"][f"{PROJECT}:tenants"].append({"name": "one-more", "gpus": 0})
            path.write_text(yaml.safe_dump(document, sort_keys=False))
            results["engine preview (one tenant added)"], _ = timed(engine.preview)
            results["gpuctl preview --base HEAD (one tenant added)"], _ = timed(
                lambda: gpuctl("preview", "--base", "HEAD", "--format", "json", "--no-cache"))
            return results
        finally:
            charts.close()
            admin.close()


def in_scratch(tenants: int, **options) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as scratch:
        return measure(tenants, Path(scratch), **options)


def report(title: str, results: dict[str, float | int]) -> None:
    print(title)
    for name, seconds in results.items():
        print(f"  {name:<48} {seconds:7.1f} s")
    if "gpuctl render --offline" in results:
        print(f"  {'program share of pulumi up (at most)':<48} "
              f"{results['gpuctl render --offline'] / results['pulumi up']:7.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000, help="the generated fleet's extra tenants")
    parser.add_argument("--checkpoint-tenants", type=int, default=150,
                        help="extra tenants of the fleet whose `up` runs with and without checkpoints")
    args = parser.parse_args()
    shipped = in_scratch(0)
    report(f"{STACK} as shipped ({shipped.pop('resources')} resources):", shipped)
    fleet = in_scratch(args.tenants, settings=SKIP_CHECKPOINTS)
    report(f"{STACK} with {args.tenants} more tenants ({fleet.pop('resources')} resources), `pulumi up` with "
           "PULUMI_SKIP_CHECKPOINTS=true:", fleet)
    checkpoints = {
        "pulumi up, a checkpoint after every step": in_scratch(args.checkpoint_tenants, previews=False)["pulumi up"],
        "pulumi up, PULUMI_SKIP_CHECKPOINTS=true": in_scratch(
            args.checkpoint_tenants, previews=False, settings=SKIP_CHECKPOINTS)["pulumi up"]}
    report(f"{STACK} with {args.checkpoint_tenants} more tenants, the file backend's checkpoints:", checkpoints)


if __name__ == "__main__":
    main()
