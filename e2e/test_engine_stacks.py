"""gpuctl held to the engine: the real program's `pulumi preview --json` against gpuctl's preview, URN by URN.

The engine (built from Go modules, e2e/tools) runs the program on a copy of the project, against the control plane
the stack was applied to (e2e/conftest.py), with live discovery reading that cluster's kwok nodes. Only stacks the
engine can run here: dev registers no AWS resource, and its operators come through OLM, not from a chart registry
(onprem's NFD chart is an OCI chart on registry.k8s.io, which cannot be fetched here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from e2e.conftest import Applied
from e2e.engine import Engine, missing_tools, steps
from tests.conftest import ROOT

# What the engine's report holds that gpuctl's does not, and why; every other difference fails the test.
ENGINE_ONLY = {"pulumi:pulumi:Stack": "the root stack resource, which the engine registers around every program"}


def project_copy(folder: Path) -> Path:
    """The checkout's tracked files in `folder`, with the project's .venv: `stack init` may write the stack file."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.split():
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    (folder / ".venv").symlink_to(ROOT / ".venv")
    return folder


@pytest.mark.parametrize("applied", ["dev"], indirect=True)
def test_gpuctl_previews_a_new_stack_as_the_engine_does(applied: Applied, tmp_path: Path) -> None:
    missing = missing_tools()
    if missing:
        pytest.fail(f"{', '.join(missing)} not built: run `make e2e` (it builds them first)", pytrace=False)
    stack = applied.stack.name
    engine = Engine.prepare(project_copy(tmp_path / "project"), tmp_path / "engine", applied.plane.kubeconfig)
    # The driver image preflight asks a registry, which is not reachable here.
    engine.init(stack, config={"gpu-platform:preflight": "false"})
    theirs = {urn: op for urn, op in steps(engine.preview()).items()
              if urn.split("::")[2].split("$")[-1] not in ENGINE_ONLY}

    ours = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", stack, "--offline", "--format",
                           "json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KUBECONFIG": str(applied.plane.kubeconfig)})
    assert ours.returncode == 0, ours.stderr
    mine = {step["urn"]: step["op"] for step in json.loads(ours.stdout)["steps"]}

    assert set(mine) == set(theirs), (sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine)))
    assert {urn: op for urn, op in mine.items() if theirs[urn] != op} == {}
    assert set(theirs.values()) == {"create"} and len(theirs) == len(applied.stack.plan.resources)


# A debug line the SDK logs at every registration (pulumi runtime/resource.py, register_resource.do_register).
SDK_DEBUG_LINE = "resource registration successful"


@pytest.mark.parametrize("applied", ["dev"], indirect=True)
def test_the_program_sends_the_sdks_debug_lines_only_when_asked(applied: Applied, tmp_path: Path) -> None:
    """The program registers without the SDK's debug lines (each one call to the engine): `pulumi preview --debug`
    shows none of them, and shows them again with GPU_PLATFORM_SDK_DEBUG=true."""
    missing = missing_tools()
    if missing:
        pytest.fail(f"{', '.join(missing)} not built: run `make e2e` (it builds them first)", pytrace=False)
    engine = Engine.prepare(project_copy(tmp_path / "project"), tmp_path / "engine", applied.plane.kubeconfig)
    engine.init(applied.stack.name, config={"gpu-platform:preflight": "false"})

    lean = engine.run("preview", "--debug")
    asked = replace(engine, settings={"GPU_PLATFORM_SDK_DEBUG": "true"}).run("preview", "--debug")

    assert SDK_DEBUG_LINE not in lean.stdout + lean.stderr
    assert (asked.stdout + asked.stderr).count(SDK_DEBUG_LINE) >= len(applied.stack.plan.resources)
