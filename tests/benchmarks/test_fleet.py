"""The fleet benchmark runs end to end at a smoke size (its times are printed, never asserted here)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.fleet import HEADER, fleet_config, measure, table_row
from stacks.config import PROJECT, parse_stack_config


def test_the_fleet_is_a_valid_stack_of_many_pools_over_many_kernels() -> None:
    config = parse_stack_config({key.removeprefix(f"{PROJECT}:"): value
                                 for key, value in fleet_config(tenants=200, pools=30, kernels=10).items()})

    assert len(config.node_pools) == 30 and len(config.tenants) == 200
    assert len(config.declared_kernels) == 10


def test_smoke_size_renders_diffs_and_checks_a_fleet(tmp_path: Path) -> None:
    row = measure(150, tmp_path)
    assert row["resources"] >= 150
    assert all(row[key] > 0 for key in ("render", "render_floor", "diff", "diff_floor", "check", "check_floor"))
    assert (tmp_path / "old-150" / "plan.json").exists() and (tmp_path / "new-150" / "manifests").is_dir()
    assert table_row(row).count("|") == HEADER.splitlines()[0].count("|")
