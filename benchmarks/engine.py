"""`pulumi preview` against `gpuctl preview` of the same stack and change, and `pulumi up` of a fleet of tenants.

Runs the real engine built by `make e2e-tools` against a local control plane (e2e/), on the bring-your-own onprem
stack (it registers nothing of AWS, whose provider cannot be built here), at its shipped size and with generated
fleets of tenants, in one run, on the wall clock:

- a new stack: `pulumi preview` (engine, provider, live discovery) against `gpuctl preview` (the same program under
  the mock runtime, live discovery too);
- the first `pulumi up` of it, against one `gpuctl render --offline`: the program registering the same resources
  with every answer immediate, so an upper bound of the program's own share of the update;
- then a change (one tenant added): `pulumi preview` against `gpuctl preview --base HEAD` (cold, then with its base
  cached; online, then offline as a pull request's preview runs), and `pulumi up` of it;
  then one more without the engine's event log (which the e2e tests read, and every other `up` here writes, but a
  user's `pulumi up` does not); then one more, `pulumi up` with a checkpoint after every step (the engine's default),
  the baseline; then one more by `pulumi up --target` of what `gpuctl preview` says changes. The fleets run as a
  fleet's deploy does, without the CLI's automatic log (docs/deploying.md), plus one preview and one `up` with it on;
- and the cost of the file backend's checkpoints: the first `pulumi up` of smaller fleets with a checkpoint after
  every step (the default) and with PULUMI_SKIP_CHECKPOINTS. The file backend rewrites the whole state after every
  step, so an update's checkpoints grow with the square of its resources: the fleets' `up` runs with them skipped,
  as the deploy workflow runs it (docs/deploying.md, docs/performance.md).

    python -m benchmarks.engine [--tenants 500,1000] [--checkpoint-tenants 100,150] [--no-previews | --previews-only]
    (needs the e2e tools and ../shared/reference/crds; a first deploy with checkpoints passes an hour at 300)

Times are printed as each run ends, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

from e2e.cluster import ControlPlane
from e2e.conftest import prepare_cluster
from e2e.engine import FLEET_SETTINGS, Engine
from e2e.stack import Stack
from e2e.standins import StandInCharts
from e2e.test_engine_lifecycle import CHARTS, PROJECT
from e2e.test_engine_stacks import project_copy

STACK = "onprem"


def timed(run) -> tuple[float, object]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def with_tenants(project: Path, names: list[str]) -> None:
    """The stack file with more tenants (no GPUs, so the capacity policy still passes)."""
    path = project / f"Pulumi.{STACK}.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"][f"{PROJECT}:tenants"] += [{"name": name, "gpus": 0, "group": name} for name in names]
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def fleet(count: int) -> list[str]:
    return [f"team-{n:04d}" for n in range(count)]


SKIP_CHECKPOINTS = "PULUMI_SKIP_CHECKPOINTS"  # FLEET_SETTINGS: state written once, when the update ends
FLEET_SECONDS = 3 * 3600  # the bound of one command: a first deploy with checkpoints grows with the square


def resources(engine: Engine) -> int:
    return len(engine.export()["deployment"].get("resources", []))


def measure(tenants: int, folder: Path, *, previews: bool = True, updates: bool = True, additions: bool = True,
            settings: dict[str, str] | None = None, automatic_log: bool = True) -> dict[str, float | int]:
    """Wall-clock seconds of each step on a fresh cluster and stack, with `settings` for the engine and, unless
    `automatic_log`, the CLI's automatic log off (then one preview and one `up` with it on, the baseline)."""
    stack = Stack.render(STACK)
    with ControlPlane.start(folder / "cluster") as plane:
        admin = prepare_cluster(stack, plane)
        charts = StandInCharts(folder / "charts", CHARTS)
        try:
            project = project_copy(folder / "project")
            engine = replace(Engine.prepare(project, folder / "engine", plane.kubeconfig, settings),
                             automatic_log=automatic_log)
            auto_logged = replace(engine, automatic_log=True)
            engine.init(STACK)
            for key, value in ((f"{PROJECT}:preflight", "false"), (f"{PROJECT}:charts.mirror", charts.url)):
                engine.run("config", "set", "--path", key, value)
            with_tenants(project, fleet(tenants))
            git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@127.0.0.1"]
            subprocess.run(["git", "init", "-q"], cwd=project, check=True)
            (project / ".git" / "info" / "exclude").write_text(".venv\n")
            subprocess.run([*git, "add", "-A"], cwd=project, check=True)
            subprocess.run([*git, "commit", "-qm", "deployed"], cwd=project, check=True)
            env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "GPUCTL_CACHE_DIR": str(folder / "cache")}

            def gpuctl(*args: str) -> str:
                return subprocess.run([sys.executable, "-m", "gpuctl", *args, "--stack", STACK], cwd=project,
                                      env=env, check=True, capture_output=True, text=True).stdout

            def deployed() -> None:
                subprocess.run([*git, "commit", "-qam", "deployed"], cwd=project, check=True)

            def changes(*options: str) -> list[str]:
                """The URNs gpuctl's preview against the deployed commit says change."""
                review = json.loads(gpuctl("preview", "--base", "HEAD", "--format", "json", *options))
                return [step["urn"] for step in review["steps"] if step["op"] != "same"]

            def targeted(urns: list[str]) -> None:
                """`pulumi up` of only those URNs (Pulumi's `--target`)."""
                engine.run("up", "--yes", "--skip-preview", *(arg for urn in urns for arg in ("--target", urn)),
                           timeout=FLEET_SECONDS)

            results: dict[str, float | int] = {}
            if previews:
                results["pulumi preview (new stack)"], report = timed(lambda: engine.preview(timeout=FLEET_SECONDS))
                results["resources"] = len(report.get("steps", []))
                results["gpuctl preview (new stack)"], _ = timed(
                    lambda: gpuctl("preview", "--format", "json", "--no-cache"))
            if not updates:
                return results
            results["pulumi up (first deploy)"], _ = timed(lambda: engine.up(policy_pack=None, timeout=FLEET_SECONDS))
            results["resources"] = resources(engine)
            if not additions:
                return results
            if previews:
                results["gpuctl render --offline"], _ = timed(
                    lambda: gpuctl("render", "--offline", "--out", str(folder / "render")))
            with_tenants(project, ["one-more"])
            if previews:
                results["pulumi preview (one tenant added)"], _ = timed(lambda: engine.preview(timeout=FLEET_SECONDS))
                if not automatic_log:
                    results["pulumi preview (one tenant added, the CLI's automatic log on)"], _ = timed(
                        lambda: auto_logged.preview(timeout=FLEET_SECONDS))
                # Cold: the deployed commit is new to the cache, which the run fills; then its base cached, as the
                # pull request's next push finds it: only the tenant added renders (gpuctl/reuse.py).
                for state in ("cold", "its base cached"):
                    results[f"gpuctl preview --base HEAD, {state} (one tenant added)"], _ = timed(
                        lambda: gpuctl("preview", "--base", "HEAD", "--format", "json"))
                # The pull request's preview (preview.yml) runs offline: no live discovery, its own cache entry.
                for state in ("cold", "its base cached"):
                    results[f"gpuctl preview --base HEAD --offline, {state} (one tenant added)"], _ = timed(
                        lambda: gpuctl("preview", "--base", "HEAD", "--format", "json", "--offline"))
            results["pulumi up (one tenant added)"], _ = timed(lambda: engine.up(policy_pack=None, timeout=FLEET_SECONDS))
            deployed()
            # The e2e tests read the steps from the engine's event log (`--event-log`), which every `up` here writes;
            # a user's `pulumi up` writes none.
            with_tenants(project, ["one-unlogged"])
            results["pulumi up (one more tenant, no event log)"], _ = timed(
                lambda: replace(engine, logged=()).up(policy_pack=None, timeout=FLEET_SECONDS))
            deployed()
            if not automatic_log:
                with_tenants(project, ["one-auto-logged"])
                results["pulumi up (one more tenant, the CLI's automatic log on)"], _ = timed(
                    lambda: auto_logged.up(policy_pack=None, timeout=FLEET_SECONDS))
                deployed()
            with_tenants(project, ["another-one"])
            checkpoints = replace(engine, settings={key: value for key, value in engine.settings.items()
                                                    if key != SKIP_CHECKPOINTS})
            results["pulumi up (one more tenant, a checkpoint after every step)"], _ = timed(
                lambda: checkpoints.up(policy_pack=None, timeout=FLEET_SECONDS))
            deployed()
            with_tenants(project, ["a-third-one"])
            # Cold: the base commit is new to the cache. The pull request's preview renders the same base and keeps
            # it there (preview.yml), so the deploy's preview finds it: the second run.
            results["gpuctl preview --base HEAD, cold (one more)"], urns = timed(changes)
            results["gpuctl preview --base HEAD, its base cached (one more)"], urns = timed(changes)
            results["pulumi up --target its changes (one more)"], _ = timed(lambda: targeted(urns))
            results["targeted: cached preview + up --target (one more)"] = (
                results["gpuctl preview --base HEAD, its base cached (one more)"]
                + results["pulumi up --target its changes (one more)"])
            return results
        finally:
            charts.close()
            admin.close()


def in_scratch(tenants: int, **options) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as scratch:
        return measure(tenants, Path(scratch), **options)


def report(title: str, results: dict[str, float | int]) -> None:
    print(title, flush=True)
    for name, seconds in results.items():
        print(f"  {name:<60} {seconds:7.1f} s", flush=True)
    if "gpuctl render --offline" in results:
        print(f"  {'program share of the first pulumi up (at most)':<60} "
              f"{results['gpuctl render --offline'] / results['pulumi up (first deploy)']:7.0%}")
    for change in ("new stack", "one tenant added"):
        if f"pulumi preview ({change})" in results:
            engine = results[f"pulumi preview ({change})"]
            for name, ours in results.items():
                if name.startswith("gpuctl preview") and name.endswith(f"({change})"):
                    print(f"  {'pulumi preview / ' + name:<60} {engine / ours:7.1f} x", flush=True)


def sizes(text: str) -> list[int]:
    return [int(size) for size in text.split(",") if size]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=sizes, default=[1000],
                        help="comma-separated: the generated fleets' extra tenants (deployed with checkpoints skipped)")
    parser.add_argument("--checkpoint-tenants", type=sizes, default=[150],
                        help="comma-separated: extra tenants of the fleets whose first `up` runs with and without "
                             "checkpoints")
    parser.add_argument("--no-shipped", action="store_true", help="leave out the stack as shipped")
    parser.add_argument("--no-previews", action="store_true", help="time the updates only")
    parser.add_argument("--previews-only", action="store_true", help="time the previews of a new stack only")
    args = parser.parse_args()
    print(f"load average at the start: {' '.join(f'{load:.2f}' for load in os.getloadavg())}", flush=True)
    if not args.no_shipped:
        shipped = in_scratch(0)
        report(f"{STACK} as shipped ({shipped.pop('resources')} resources):", shipped)
    for tenants in args.tenants:
        results = in_scratch(tenants, previews=not args.no_previews, updates=not args.previews_only,
                             settings=FLEET_SETTINGS, automatic_log=False)
        settings = " (the CLI's automatic log off)" + ("" if args.previews_only else ", `pulumi up` with " + " ".join(
            f"{key}={value}" for key, value in FLEET_SETTINGS.items()))
        report(f"{STACK} with {tenants} more tenants ({results.pop('resources')} resources){settings}:", results)
    for tenants in args.checkpoint_tenants:
        results = {}
        for title, settings in (("a checkpoint after every step", None),
                                ("PULUMI_SKIP_CHECKPOINTS=true", FLEET_SETTINGS)):
            run = in_scratch(tenants, previews=False, additions=False, settings=settings)
            results[f"first pulumi up, {title}"] = run["pulumi up (first deploy)"]
        report(f"{STACK} with {tenants} more tenants ({run['resources']} resources), the file backend's "
               "checkpoints:", results)
    print(f"load average at the end: {' '.join(f'{load:.2f}' for load in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
