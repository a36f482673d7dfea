"""`gpuctl preview --base HEAD` as a user runs it, against one `gpuctl render` (wall time) and the bare floor
(peak memory), each a fresh process in a repository holding the project (see benchmarks/fleet.py)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.fleet import RESOURCES_PER_TENANT, fleet_config
from gpuctl.cli import load_plan
from stacks.config import PROJECT

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = tuple(sorted(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in ROOT.glob("Pulumi.*.yaml")))
REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))  # wall times: the best of this many runs
TENANTS_PER_POOL = 30  # the fleet: 1,200 tenants over 40 pools
SAMPLE = 0.05  # seconds between samples of the memory of all the processes of a run
FLOOR = ("import sys; from gpuctl.__main__ import one_shot_collector; from benchmarks.fleet import floor_render; "
         "one_shot_collector(); floor_render(int(sys.argv[1]), int(sys.argv[2]))")


@dataclass(frozen=True)
class Run:
    """One process run: wall and CPU seconds (all its processes), peak RSS of its largest process and, sampled,
    the peak memory of all of them at once (proportional set size, MB)."""

    wall: float
    cpu: float
    largest: float
    together: float


def best(runs: list[Run]) -> Run:
    return Run(*(min(getattr(run, field) for run in runs) for field in ("wall", "cpu", "largest", "together")))


def tree_pss(pid: int) -> int:
    """Resident kB of `pid` and every process under it, now, each page shared by n of them counted 1/n (a fork
    shares its parent's pages); 0 for those gone meanwhile."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            rollup = Path(f"/proc/{current}/smaps_rollup").read_text()
            pending += Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def measured(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
             before: Callable[[], None] = lambda: None) -> Run:
    """Wall and CPU time, the best of REPEATS runs of `argv`, each after `before()`; then one more run whose
    processes' memory is sampled all along. Sampling is not free (reading a large process's smaps_rollup takes
    about 12 ms and holds its memory map's lock), so no timed run samples."""
    timed = best([run(argv, cwd, env, before) for _ in range(REPEATS)])
    sampled = run(argv, cwd, env, before, sample=True)
    return Run(timed.wall, timed.cpu, min(timed.largest, sampled.largest), sampled.together)


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, before: Callable[[], None] = lambda: None,
        sample: bool = False) -> Run:
    """Run `argv` to its end (after `before()`, untimed), sampling the memory of all its processes when asked; a
    failure (an exit code other than 0, or 1 for changes or violations found) stops the benchmark."""
    before()
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors,
                                   env={**os.environ, **(env or {})})
        peak, done = [0], threading.Event()

        def sampling() -> None:
            while not done.wait(SAMPLE):
                peak[0] = max(peak[0], tree_pss(process.pid))

        sampler = threading.Thread(target=sampling, daemon=True) if sample else None
        if sampler:
            sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        if sampler:
            sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode not in (0, 1):
            errors.seek(0)
            raise SystemExit(f"{' '.join(argv)} exited {process.returncode}: {errors.read().decode()[-2000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, (peak[0] or usage.ru_maxrss) / 1024)


def committed_project(repo: Path, stacks: dict[str, dict] | None = None) -> Path:
    """A git repository at `repo` holding the project as it is now plus these stack files, committed once."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    for stack, document in (stacks or {}).items():
        (repo / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], cwd=repo, check=True)
    return repo


def project_repository(work: Path, fleets: dict[str, dict]) -> Path:
    """The project and the fleets' stack files committed in work/repo; then each fleet's first pool moves to a new
    kernel (and image) in the working tree."""
    repo = committed_project(work / "repo", {stack: {"config": config} for stack, config in fleets.items()})
    for stack, config in fleets.items():
        # a kernel upgrade: the new kernel and the image that boots it (one without the other is refused)
        config[f"{PROJECT}:nodePools"][0].update(kernel="6.8.0-1999-aws", image="ami-0999999999999999f")
        (repo / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return repo


def fleet(resources: int) -> dict:
    tenants = max(1, resources // RESOURCES_PER_TENANT)
    return fleet_config(tenants, max(1, tenants // TENANTS_PER_POOL), 10)


def measure(stack: str, repo: Path, work: Path) -> dict:
    """Render, cold and warm preview, and the floor, for one stack of `repo`."""
    gpuctl = [sys.executable, "-m", "gpuctl"]
    out = work / f"render-{stack}"

    preview = [*gpuctl, "preview", "--stack", stack, "--base", "HEAD", "--offline", "--format", "json"]
    empty = work / f"cache-{stack}-empty"
    cache = work / f"cache-{stack}"

    rendered = measured([*gpuctl, "render", "--stack", stack, "--out", str(out), "--offline"], repo,
                        before=lambda: shutil.rmtree(out, ignore_errors=True))
    plan = load_plan(out)
    count = len(plan["resources"])
    mean_input = sum(len(json.dumps(r["inputs"])) for r in plan["resources"]) // count
    del plan
    run(preview, repo, {"GPUCTL_CACHE_DIR": str(cache)})  # fills the cache
    return {"stack": stack, "resources": count, "render": rendered,
            "cold": measured(preview, repo, {"GPUCTL_CACHE_DIR": str(empty)},
                             before=lambda: shutil.rmtree(empty, ignore_errors=True)),
            "warm": measured(preview, repo, {"GPUCTL_CACHE_DIR": str(cache)}),
            # in turn, in one process, for a runner with one core or little memory (cold: the larger)
            "serial": run([*preview, "--jobs", "1"], repo, {"GPUCTL_CACHE_DIR": str(empty)},
                          lambda: shutil.rmtree(empty, ignore_errors=True), sample=True),
            "floor": measured([sys.executable, "-c", FLOOR, str(count), str(mean_input)], ROOT)}


HEADER = ("| stack | resources | render s | preview cold s | ratio | preview warm s | ratio | render CPU s "
          "| preview cold CPU s | floor MB | render MB | preview MB (largest process) | ratio "
          "| preview PSS MB (all processes) | ratio to the floor's PSS | `--jobs 1` PSS MB | ratio "
          "|\n|---|" + "---:|" * 16)


def table_row(row: dict) -> str:
    render, cold, warm, floor = row["render"], row["cold"], row["warm"], row["floor"]
    peak = max(cold.largest, warm.largest)
    together = max(cold.together, warm.together)
    cells = [row["stack"], f"{row['resources']:,}", f"{render.wall:.1f}", f"{cold.wall:.1f}",
             f"{cold.wall / render.wall:.2f}", f"{warm.wall:.1f}", f"{warm.wall / render.wall:.2f}",
             f"{render.cpu:.1f}", f"{cold.cpu:.1f}",
             f"{floor.largest:.0f}", f"{render.largest:.0f}", f"{peak:.0f}", f"{peak / floor.largest:.2f}",
             f"{together:.0f}", f"{together / floor.together:.2f}",
             f"{row['serial'].together:.0f}", f"{row['serial'].together / floor.together:.2f}"]
    return "| " + " | ".join(cells) + " |"


def growth(first: dict, last: dict) -> str:
    """How preview time per resource and preview memory against the floor grow from the first size to the last."""
    def per_resource(row: dict) -> float:
        return row["cold"].wall / row["resources"]

    def against_floor(row: dict) -> float:
        return max(row["cold"].largest, row["warm"].largest) / row["floor"].largest

    return (f"from {first['resources']:,} to {last['resources']:,} resources: preview (cold) wall per resource "
            f"{per_resource(last) / per_resource(first):.2f}x, render wall per resource "
            f"{(last['render'].wall / last['resources']) / (first['render'].wall / first['resources']):.2f}x, "
            f"preview peak against the floor's {against_floor(last) / against_floor(first):.2f}x")


def report(sizes: list[int], fleet_resources: int = 1200 * RESOURCES_PER_TENANT,
           shipped: tuple[str, ...] = SHIPPED) -> dict[str, dict]:
    """Print the preview table: the shipped stacks, the 1,200-tenant fleet, and fleets of `sizes` for growth."""
    fleets = {f"fleet-{size}": fleet(size) for size in sorted({fleet_resources, *sizes})}
    with tempfile.TemporaryDirectory(prefix="gpuctl-bench-preview-") as scratch:
        work = Path(scratch)
        repo = project_repository(work, fleets)
        print(f"\npreview --base HEAD --offline, wall clock (best of {REPEATS}), peak RSS", flush=True)
        print(HEADER, flush=True)
        rows = {}
        for stack in (*shipped, *fleets):
            rows[stack] = measure(stack, repo, work)
            print(table_row(rows[stack]), flush=True)
    if len(sizes) > 1:
        print(growth(rows[f"fleet-{min(sizes)}"], rows[f"fleet-{max(sizes)}"]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=os.environ.get("BENCH_PREVIEW_SIZES", "1000,20000"),
                        help="comma-separated approximate resource counts of the fleets that show growth")
    parser.add_argument("--fleet", type=int, default=1200 * RESOURCES_PER_TENANT,
                        help="approximate resource count of the fleet the targets are set for (1,200 tenants)")
    args = parser.parse_args()
    report([int(size) for size in args.sizes.split(",")], args.fleet)


if __name__ == "__main__":
    main()
