"""Every custom resource of every shipped stack is valid against the real CRD of its kind, with nothing pruned.

The CRDs and the checker live beside the project (`../shared/reference/crds`, `../shared/tools/crd_check.py`), as
the projects that own those kinds publish them; they are never copied in. Without them the test is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuctl.render import write_render
from tests.conftest import ROOT, render_stack

CHECKER = ROOT.parent / "shared" / "tools" / "crd_check.py"
STACKS = sorted(path.name.split(".")[1] for path in ROOT.glob("Pulumi.*.yaml"))
# The checker validates an object's body without its metadata, yet keeps `metadata` in the required fields of
# CRDs that list it there (OLM's Subscription and OperatorGroup): a false report for any such object.
METADATA_ARTEFACT = ": : required field 'metadata' is missing"

pytestmark = pytest.mark.skipif(not CHECKER.is_file(), reason=f"{CHECKER} is not beside the project here")


@pytest.fixture(scope="module", params=STACKS)
def rendered(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(request.param) / "render"
    write_render(render_stack(request.param).document, out)
    return out / "manifests"


def crd_check(manifests: Path) -> dict:
    result = subprocess.run([sys.executable, str(CHECKER), str(manifests), "--json"], capture_output=True,
                            text=True, timeout=120)
    return json.loads(result.stdout)


def test_every_custom_resource_matches_its_crd(rendered: Path) -> None:
    report = crd_check(rendered)
    real = [error for error in report["errors"] if not error.endswith(METADATA_ARTEFACT)]
    assert report["checked"] > 0
    assert real == []


def test_reports_set_aside_are_only_objects_that_do_carry_metadata(rendered: Path) -> None:
    names = {error.removesuffix(METADATA_ARTEFACT) for error in crd_check(rendered)["errors"]
             if error.endswith(METADATA_ARTEFACT)}
    objects = [yaml.safe_load(path.read_text()) for path in rendered.glob("*.yaml")]
    carrying = {f"{obj['kind']}/{obj['metadata']['name']}" for obj in objects if obj.get("metadata", {}).get("name")}
    assert names <= carrying


def test_a_pruned_field_is_reported(tmp_path: Path) -> None:
    """The check can fail: a field the NVIDIADriver CRD does not declare is caught."""
    driver = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "bad"},
              "spec": {"driverType": "gpu", "image": "driver", "default": False, "usePrecompield": True}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(driver))
    assert any("usePrecompield" in error for error in crd_check(tmp_path)["errors"])
