"""The fleet benchmark runs end to end at a smoke size (its times are printed, never asserted here)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.fleet import measure


def test_smoke_size_renders_diffs_and_checks_a_fleet(tmp_path: Path) -> None:
    row = measure(150, tmp_path)
    assert row["resources"] >= 150
    assert all(row[key] > 0 for key in ("render", "render_floor", "diff", "diff_floor", "check", "check_floor"))
    assert (tmp_path / "old" / "plan.json").exists() and (tmp_path / "new" / "manifests").is_dir()
