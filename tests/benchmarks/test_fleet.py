"""The fleet benchmark runs end to end at a smoke size (its times are printed, never asserted here)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.fleet import HEADER, fleet_config, measure, same_resources_program, table_row
from gpuctl.cli import load_plan
from gpuctl.runtime import run_program
from stacks.config import PROJECT, parse_stack_config


def test_the_fleet_is_a_valid_stack_of_many_pools_over_many_kernels() -> None:
    config = parse_stack_config({key.removeprefix(f"{PROJECT}:"): value
                                 for key, value in fleet_config(tenants=200, pools=30, kernels=10).items()})

    assert len(config.node_pools) == 30 and len(config.tenants) == 200
    assert len(config.declared_kernels) == 10


def test_smoke_size_renders_diffs_and_checks_a_fleet(tmp_path: Path) -> None:
    row = measure(150, tmp_path)
    assert row["resources"] >= 150
    assert all(row[key] > 0 for key in ("render", "render_floor", "render_same", "diff", "diff_floor", "check",
                                        "check_floor"))
    assert (tmp_path / "old-150" / "plan.json").exists() and (tmp_path / "new-150" / "manifests").is_dir()
    assert table_row(row).count("|") == HEADER.splitlines()[0].count("|")


def test_the_same_resources_floor_registers_what_the_program_did(tmp_path: Path) -> None:
    measure(150, tmp_path)
    plan = load_plan(tmp_path / "old-150")

    replayed = run_program(plan["stack"], {}, [], same_resources_program(plan))

    def shape(record: dict) -> tuple:
        parent = record["parent"].rsplit("::", 1)[-1] if record["parent"] else None
        return record["type"], record["name"], parent, len(record["dependencies"])

    assert sorted(map(shape, replayed["resources"])) == sorted(map(shape, plan["resources"]))
    kubernetes = {record["name"]: record["inputs"] for record in plan["resources"]
                  if record["type"].startswith("kubernetes:") and record["custom"]}
    assert kubernetes and all(record["inputs"] == kubernetes[record["name"]] for record in replayed["resources"]
                              if record["name"] in kubernetes)
