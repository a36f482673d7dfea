"""gpuctl preview --base-state: the base is what the last deploy left, as `pulumi stack export` holds it.

The export here is a stand-in written in the engine's export shape (deployment.resources with urn, type, custom,
parent, dependencies, inputs, protect; the root stack resource's outputs) from a render; the engine lifecycle suite
compares gpuctl with `pulumi preview` on a real export.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.preview import committed_project
from fleet.kernels import KernelTarget, ObservedNode
from gpuctl.deployed import as_deployed, read_state
from gpuctl.deployed import kernels as deployed_kernels
from gpuctl.inputs import MAX_INPUT_BYTES
from stacks.config import ConfigError
from stacks.inventory import node_list
from tests.conftest import render_stack

STALE = "6.8.0-1018-aws"  # a kernel nodes ran at the last deploy, which no pool declares
PROD_NODES = [ObservedNode(f"gpu-{kernel}", KernelTarget("ubuntu22.04", kernel))
              for kernel in ("6.8.0-1019-aws", "6.8.0-1021-aws")]


def export(plan: dict[str, Any]) -> dict[str, Any]:
    """A plan as `pulumi stack export` shapes the state it leaves."""
    root = f"urn:pulumi:{plan['stack']}::{plan['project']}::pulumi:pulumi:Stack::{plan['project']}-{plan['stack']}"
    resources = [{"urn": root, "custom": False, "type": "pulumi:pulumi:Stack", "outputs": plan["outputs"]}]
    resources += [{"urn": r["urn"], "custom": r["custom"], "type": r["type"], "parent": r["parent"] or root,
                   "dependencies": r["dependencies"], "inputs": r["inputs"], "outputs": r["inputs"],
                   "protect": r["options"]["protect"]} for r in plan["resources"]]
    return {"version": 3, "deployment": {"manifest": {"version": "3.272.0"}, "resources": resources}}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return committed_project(tmp_path_factory.mktemp("deployed") / "repo")


def preview(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuctl", "preview", *args], cwd=repo, capture_output=True,
                          text=True)


def test_a_driver_the_last_deploy_kept_for_nodes_that_moved_on_is_deleted_and_said_why(repo, tmp_path):
    """Nodes ran a kernel at the last deploy, so it kept that kernel's driver; they have moved on since. The next
    change deletes it under `pulumi up`: previewed against the deployed state, gpuctl shows the delete and why."""
    stale = ObservedNode("gpu-old", KernelTarget("ubuntu22.04", STALE))
    deployed = render_stack("prod", observed=[*PROD_NODES, stale])
    state = tmp_path / "state.json"
    state.write_text(json.dumps(export(deployed.document)))
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(node_list(PROD_NODES)))
    common = ("--stack", "prod", "--base", "HEAD", "--offline", "--observed-nodes", str(nodes))

    result = preview(repo, *common, "--base-state", str(state), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {step["name"]: step["op"] for step in document["steps"]} == {f"driver-ubuntu22-04-{STALE.replace('.', '-')}":
                                                                        "delete"}
    [leaving] = document["summary"]["destructive"]
    assert leaving["what"] == f"driver nvidia-driver-ubuntu22-04-{STALE.replace('.', '-')} deleted"
    assert leaving["takes_away"].startswith(f"the GPU driver of every node on kernel ubuntu22.04/{STALE} (no pool "
                                            "boots it and ")
    assert leaving["takes_away"].endswith(" shows no node on it)")

    text = preview(repo, *common, "--base-state", str(state)).stdout
    assert "Previewing stack prod against HEAD as deployed" in text and "re-rendered" not in text
    # The same change against the commit alone cannot see it, and says so.
    rerendered = preview(repo, *common, "--json")
    assert rerendered.returncode == 0, rerendered.stderr
    assert json.loads(rerendered.stdout)["steps"] == []
    assert "re-rendered with today's nodes" in preview(repo, *common).stdout


def test_a_resource_the_commit_has_but_the_state_lacks_is_created():
    plan = render_stack("prod").document
    state = export(plan)["deployment"]["resources"]
    dropped = next(r for r in state if r["type"].endswith("NVIDIADriver"))
    state.remove(dropped)
    base = as_deployed(plan, state, "prod")
    assert dropped["urn"] not in {r["urn"] for r in base["resources"]}
    assert len(base["resources"]) == len(plan["resources"]) - 1


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"), ('{"deployment": {}}', None), ('{"version": 3}', "not a stack export"),
    ('{"deployment": {"resources": [{"type": "x"}]}}', "not a stack export")])
def test_a_file_that_is_no_stack_export_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "state.json"
    path.write_text(text)
    if message is None:  # a stack never deployed: no resources
        assert read_state(str(path)) == []
        return
    with pytest.raises(ConfigError, match=rf"--base-state {path}: {message}.*pulumi stack export"):
        read_state(str(path))


def test_another_stack_s_export_is_refused():
    plan = render_stack("prod").document
    with pytest.raises(ConfigError, match="not a resource of stack staging"):
        as_deployed({**plan, "stack": "staging"}, export(plan)["deployment"]["resources"], "staging")


def test_base_state_needs_base_and_exits_2_writing_nothing(repo, tmp_path):
    result = preview(repo, "--stack", "prod", "--offline", "--base-state", str(tmp_path / "state.json"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].endswith("pass --base <that commit>")
    assert "Traceback" not in result.stderr


ROOT_URN = "urn:pulumi:prod::gpu-platform::pulumi:pulumi:Stack::gpu-platform-prod"
DRIVER_URN = "urn:pulumi:prod::gpu-platform::kubernetes:nvidia.com/v1alpha1:NVIDIADriver::driver"


@pytest.mark.parametrize(("field", "value", "named"), [
    ("outputs", [], "deployment.resources[0].outputs is not an object"),
    ("outputs", "text", "deployment.resources[0].outputs is not an object"),
    ("parent", 7, "deployment.resources[1].parent is not text"),
    ("parent", [ROOT_URN], "deployment.resources[1].parent is not text"),
    ("dependencies", ROOT_URN, "deployment.resources[1].dependencies is not a list of URNs"),
    ("dependencies", {"a": 1}, "deployment.resources[1].dependencies is not a list of URNs"),
    ("dependencies", [7], "deployment.resources[1].dependencies is not a list of URNs"),
    ("inputs", [], "deployment.resources[1].inputs is not an object"),
    ("inputs", "text", "deployment.resources[1].inputs is not an object"),
    ("provider", 7, "deployment.resources[1].provider is not text"),
    ("provider", {"urn": ROOT_URN}, "deployment.resources[1].provider is not text"),
    ("protect", "yes", "deployment.resources[1].protect is not true or false"),
    ("urn", "", "deployment.resources[1].urn is not text"),
    (None, "a resource", "deployment.resources[1] is not an object")])
def test_each_malformed_shape_of_an_export_is_one_line_naming_where_it_is(tmp_path, field, value, named):
    """Every field the preview reads of an exported resource, of the wrong type: exit 2 in one line naming the place
    in the export, never a traceback (exit 1 reads as a policy violation in CI)."""
    root = {"urn": ROOT_URN, "type": "pulumi:pulumi:Stack", "custom": False, "outputs": {}}
    driver = {"urn": DRIVER_URN, "type": "kubernetes:nvidia.com/v1alpha1:NVIDIADriver", "custom": True,
              "parent": ROOT_URN, "dependencies": [], "inputs": {}}
    if field is None:
        driver = value
    elif field == "outputs":
        root[field] = value
    else:
        driver[field] = value
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 3, "deployment": {"resources": [root, driver]}}))

    with pytest.raises(ConfigError) as raised:
        read_state(str(path))
    assert str(raised.value) == (f"--base-state {path}: not a stack export ({named}"
                                 + str(raised.value).split(named, 1)[1])
    assert "\n" not in str(raised.value) and str(raised.value).endswith("pulumi stack export --stack <stack> --file FILE`")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["named pipe", "device", "too large"])
def test_an_export_is_read_as_every_input_is(repo, tmp_path, fifo, kind):
    """A named pipe (which would block forever), /dev/zero (which never ends) and a file over the input bound are
    refused in one line before they are read whole."""
    if kind == "too large":
        path = tmp_path / "huge.json"
        with open(path, "wb") as file:
            file.truncate(MAX_INPUT_BYTES + 1)
    else:
        path = fifo if kind == "named pipe" else Path("/dev/zero")

    result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "prod", "--base", "HEAD",
                             "--offline", "--base-state", str(path)], cwd=repo, capture_output=True, text=True,
                            timeout=120)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    problem = {"named pipe": "is a named pipe", "device": "is a device", "too large": "larger than 256 MiB"}[kind]
    assert result.stderr.startswith(f"error: --base-state {path}: {problem}"), result.stderr


UPGRADED = "6.8.0-1024-aws"  # prod's l4-inference and a10g-batch upgraded to it from 6.8.0-1021-aws
UPGRADED_IMAGE = "ami-0a1b2c3d4e5f60789"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_driver_kept_for_nodes_not_yet_rebooted_stays_through_an_unrelated_change(tmp_path, jobs):
    """A kernel upgrade was deployed while the nodes still ran the old kernel, so the engine kept its driver. Before
    they reboot, an unrelated change is previewed against the deployed state: the old driver stays, as it does under
    the engine; the preview neither deletes it nor blames an --observed-nodes never given."""
    repo = committed_project(tmp_path / "repo")
    stack_file = repo / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text().replace("kernel: 6.8.0-1021-aws", f"kernel: {UPGRADED}")
                          .replace("image: ami-0e1f2a3b4c5d6e7f8", f"image: {UPGRADED_IMAGE}"))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "upgrade"],
                   cwd=repo, check=True)
    config = yaml.safe_load(stack_file.read_text())["config"]
    not_rebooted = [ObservedNode("gpu-l4-1", KernelTarget("ubuntu22.04", "6.8.0-1021-aws")),
                    ObservedNode("gpu-h100-1", KernelTarget("ubuntu22.04", "6.8.0-1019-aws"))]
    deployed = render_stack("prod", config=config, observed=not_rebooted)
    assert "ubuntu22.04/6.8.0-1021-aws" in deployed.outputs["kernels"]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(export(deployed.document)))
    stack_file.write_text(stack_file.read_text().replace("gpus: 8", "gpus: 6", 1))  # an unrelated tenant change

    result = preview(repo, "--stack", "prod", "--base", "HEAD", "--base-state", str(state), "--offline", "--json",
                     "--jobs", jobs, "--no-cache")

    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [step["op"] for step in document["steps"]] == ["update"], document["steps"]
    assert document["summary"]["destructive"] == []
    assert "ubuntu22.04/6.8.0-1021-aws" in document["keptDrivers"]
    # What the engine still checks live, which no offline preview can see (drift made by hand on the nodes).
    assert any("a node relabelled or a label removed by hand" in line for line in document["summary"]["unknowns"])


@pytest.mark.parametrize("recorded", ["ubuntu22.04/6.8.0-1021-aws", [7], ["no-slash"]])
def test_recorded_kernels_of_the_wrong_shape_are_one_line(recorded):
    root = {"urn": ROOT_URN, "type": "pulumi:pulumi:Stack", "outputs": {"kernels": recorded}}
    with pytest.raises(ConfigError, match=r"^--base-state s\.json: not a stack export \(deployment\.resources\[0\]"
                                          r"\.outputs\.kernels is not a list of os/kernel\)"):
        deployed_kernels([root], "s.json")


def test_the_kernels_of_the_last_deploy_are_read_from_the_root_stack():
    root = {"urn": ROOT_URN, "type": "pulumi:pulumi:Stack", "outputs": {"kernels": ["ubuntu22.04/6.8.0-1021-aws"]}}
    assert deployed_kernels([root], "s.json") == [KernelTarget("ubuntu22.04", "6.8.0-1021-aws")]
    assert deployed_kernels([], "s.json") == []
