"""The render on standby for `gpuctl preview --base`: the same review as gpuctl's own render, or none at all."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.preview import committed_project
from gpuctl import standby
from tests.conftest import ROOT

SHIPPED = ["dev", "staging", "prod", "onprem"]


@pytest.mark.parametrize("argv, expected", [
    (["preview", "--stack", "dev", "--base", "HEAD"], True),
    (["preview", "--stack", "dev", "--base=main", "--offline"], True),
    (["preview", "--stack", "dev", "--base", "HEAD", "--jobs", "2"], True),
    (["preview", "--stack", "dev", "--base", "HEAD", "--jobs", "1"], False),
    (["preview", "--stack", "dev", "--base", "HEAD", "--jobs=1"], False),
    (["preview", "--stack", "dev", "--base", "HEAD", "--no-cache"], False),
    (["preview", "--stack", "dev"], False),  # no base: nothing to reuse
    (["render", "--stack", "dev", "--base", "HEAD"], False),
    ([], False),
])
def test_a_standby_is_forked_only_for_a_cached_preview_against_a_base(monkeypatch, argv, expected) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert standby.suggested(argv) is expected


def test_one_cpu_gets_no_standby(monkeypatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert not standby.suggested(["preview", "--stack", "dev", "--base", "HEAD"])


LOADED = """
import json, sys
from pathlib import Path
from gpuctl import standby
standby.preload(online=False)
from gpuctl.runtime import render_plan
from gpuctl.stackfile import load_stack_file
before = set(sys.modules)
render_plan(load_stack_file(Path(f"Pulumi.{sys.argv[1]}.yaml"), sys.argv[1]))
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("stack", SHIPPED)
def test_the_standby_loads_every_module_a_render_uses_but_the_aws_sdks(stack: str) -> None:
    """A module the program starts to use and the standby does not load would load in the render, on the wait
    (the AWS SDK's load there by design: gpuctl/standby.py)."""
    result = subprocess.run([sys.executable, "-c", LOADED, stack], cwd=ROOT, capture_output=True, text=True,
                            check=True)
    assert [name for name in json.loads(result.stdout) if not name.startswith("pulumi_aws.")] == []


# A standby that dies before it answers (killed, out of memory): the stand-in ends as it is forked.
DYING = """
import os, sys
from gpuctl import standby
standby._serve = lambda *args: os._exit(9)
sys.argv = ["gpuctl", *sys.argv[1:]]
from gpuctl.__main__ import run
run()
"""


def test_a_standby_that_dies_leaves_the_same_review_to_gpuctl(tmp_path, base_plan_cache) -> None:
    repo = committed_project(tmp_path / "repo")
    path = repo / "Pulumi.onprem.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["gpu-platform:tenants"].append({"name": "newcomer", "gpus": 0, "group": "newcomer"})
    path.write_text(yaml.safe_dump(document))
    command = ["preview", "--stack", "onprem", "--base", "HEAD", "--offline", "--format", "json", "--jobs", "2"]

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=600)

    alone = run(sys.executable, "-m", "gpuctl", *command[:-1], "1")  # one process: no standby; the base cached
    on_standby = run(sys.executable, "-m", "gpuctl", *command)
    dead = run(sys.executable, "-c", DYING, *command)

    assert alone.returncode == 0, alone.stderr
    assert "newcomer" in alone.stdout
    for result in (on_standby, dead):
        assert (result.returncode, result.stdout, result.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_no_process_to_spare_is_no_standby(monkeypatch) -> None:
    """A fork refused (EAGAIN: the user's process limit) leaves the render to gpuctl, and no pipe open."""
    def refused(work):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(standby, "fork", refused)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    before = sorted(Path("/proc/self/fd").iterdir()) if Path("/proc/self/fd").is_dir() else []
    standby.start(["preview", "--stack", "dev", "--base", "HEAD"])
    assert standby.render(io.StringIO()) is None  # nothing to ask: gpuctl renders
    assert (sorted(Path("/proc/self/fd").iterdir()) if before else []) == before
