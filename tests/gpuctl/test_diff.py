"""gpuctl diff: steps, replacement rules, the human view and the JSON contract, on real renders."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from gpuctl.diff import diff_plans, refuse_driver_removal
from gpuctl.render import write_render
from stacks.config import ConfigError
from fleet.kernels import KernelTarget, ObservedNode
from tests.conftest import ROOT, render_stack, stack_config


def named(plan: dict, name: str) -> dict:
    return next(resource for resource in plan["resources"] if resource["name"] == name)


def test_identical_renders_have_no_steps(dev_plan):
    diff = diff_plans(dev_plan.document, copy.deepcopy(dev_plan.document))
    assert diff.steps == [] and diff.same == len(dev_plan.resources)


FENCE = "monitoring-dcgm-exporter-fence"  # the NetworkPolicy that fences the DCGM exporter port
PORT = ("spec", "ingress", 0, "ports", 0, "port")


def set_path(inputs: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        inputs = inputs[key]
    inputs[path[-1]] = value


def test_in_place_change_is_an_update_with_the_changed_path(dev_plan):
    new = copy.deepcopy(dev_plan.document)
    set_path(named(new, FENCE)["inputs"], PORT, 9401)
    [step] = diff_plans(dev_plan.document, new).steps
    assert step.op == "update"
    assert [(c.path, c.old, c.new) for c in step.changes] == [("spec.ingress[0].ports[0].port", 9400, 9401)]


@pytest.mark.parametrize("value", [9400.0, "9400"], ids=["float", "string"])
def test_equal_but_retyped_value_is_still_an_update(dev_plan, value):
    new = copy.deepcopy(dev_plan.document)
    set_path(named(new, FENCE)["inputs"], PORT, value)
    [step] = diff_plans(dev_plan.document, new).steps
    assert step.op == "update" and [c.path for c in step.changes] == ["spec.ingress[0].ports[0].port"]


@pytest.mark.parametrize(("name", "path", "value"), [
    (FENCE, ("metadata", "name"), "renamed"),
    (FENCE, ("metadata", "namespace"), "elsewhere"),
    ("gpu-operator-olm-approver-binding", ("roleRef", "name"), "other"),
    ("nfd-operator-approve-install-plan", ("spec", "template", "spec", "serviceAccountName"), "other"),
])
def test_forced_new_fields_replace(dev_plan, name, path, value):
    new = copy.deepcopy(dev_plan.document)
    set_path(named(new, name)["inputs"], path, value)
    [step] = diff_plans(dev_plan.document, new).steps
    assert step.op == "replace"
    assert step.replace_reasons == [".".join(path)]


def test_an_unlisted_field_of_a_job_or_binding_updates_in_place(dev_plan):
    new = copy.deepcopy(dev_plan.document)
    named(new, "nfd-operator-approve-install-plan")["inputs"]["spec"]["backoffLimit"] = 17
    named(new, "gpu-operator-olm-approver-binding")["inputs"]["metadata"]["labels"]["x"] = "y"
    assert {(step.resource["name"], step.op) for step in diff_plans(dev_plan.document, new).steps} == {
        ("nfd-operator-approve-install-plan", "update"), ("gpu-operator-olm-approver-binding", "update")}


def test_a_priority_class_value_change_is_a_replace_the_api_server_accepts(dev_plan):
    # PriorityClass.value is immutable in the API; the provider has no force-new rule for it, so the program asks.
    new = copy.deepcopy(dev_plan.document)
    priority = named(new, "priority-high")
    assert priority["options"]["deleteBeforeReplace"] is True
    priority["inputs"]["value"] = 200000
    [step] = diff_plans(dev_plan.document, new).steps
    assert (step.op, step.replace_reasons) == ("replace", ["value"])


def test_replace_on_changes_option_forces_replacement(dev_plan):
    # A custom resource has no provider rule: a spec change updates it, unless the resource asks for a replace.
    old, new = copy.deepcopy(dev_plan.document), copy.deepcopy(dev_plan.document)
    named(new, "nfd-instance")["inputs"]["spec"]["x"] = 1
    [step] = diff_plans(old, new).steps
    assert (step.op, step.replace_reasons) == ("update", [])
    for plan in (old, new):
        named(plan, "nfd-instance")["options"]["replaceOnChanges"] = ["spec"]
    [step] = diff_plans(old, new).steps
    assert (step.op, step.replace_reasons) == ("replace", ["spec.x"])


def test_ignore_changes_hides_the_path(dev_plan):
    old, new = copy.deepcopy(dev_plan.document), copy.deepcopy(dev_plan.document)
    for plan in (old, new):
        named(plan, "pool-t4-inference")["options"]["ignoreChanges"] = ["spec.replicas"]
    named(new, "pool-t4-inference")["inputs"]["spec"]["replicas"] = 9
    assert diff_plans(old, new).steps == []


def test_ignore_changes_reads_pulumi_property_paths(dev_plan):
    """A map key with dots is quoted in a Pulumi property path (`a["b.c"]`): the engine ignores exactly it."""
    old, new = copy.deepcopy(dev_plan.document), copy.deepcopy(dev_plan.document)
    named(new, "pool-t4-inference")["inputs"]["metadata"]["annotations"]["machine.openshift.io/GPU"] = "2"
    assert named(dev_plan.document, "pool-t4-inference")["options"]["ignoreChanges"]  # the program sets them
    assert diff_plans(old, new).steps == []
    named(new, "pool-t4-inference")["inputs"]["metadata"]["annotations"]["machine.openshift.io/os-id"] = "rhcos"
    [step] = diff_plans(old, new).steps
    assert [change.path for change in step.changes] == ["metadata.annotations.machine.openshift.io/os-id"]


def test_refuses_to_delete_a_driver_that_nodes_still_run(render, prod_plan):
    config = stack_config("prod")
    old = "6.8.0-1019-aws"
    for entry in config["gpu-platform:nodePools"]:
        if entry["kernel"] == old:
            entry["kernel"] = "6.8.0-1024-aws"
    new = render("prod", config).document
    diff = diff_plans(prod_plan.document, new)
    assert [step.resource["type"] for step in diff.steps if step.op == "delete"] == [
        "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"]
    refuse_driver_removal(diff, new, [])
    refuse_driver_removal(diff, new, [ObservedNode("gpu-x", KernelTarget("ubuntu22.04", "6.8.0-1024-aws")),
                                 ObservedNode("gpu-y", KernelTarget("rhcos4.18", old))])
    with pytest.raises(ConfigError, match=r"refused: .*nvidia-driver-ubuntu22-04-6-8-0-1019-aws.*nodes still run: "
                                          r"gpu-a, gpu-b; roll those nodes"):
        refuse_driver_removal(diff, new, [ObservedNode(name, KernelTarget("ubuntu22.04", old))
                                          for name in ("gpu-b", "gpu-a")])


def test_refuses_to_delete_an_openshift_releases_driver_while_nodes_run_that_release(render, dev_plan):
    """The Driver Toolkit driver of a release serves every kernel of it: its nodes, whatever kernel, hold it."""
    config = stack_config("dev")
    config["gpu-platform:cluster"].update(release="4.19.10", kernel="5.14.0-570.28.1.el9_6.x86_64",
                                          nfdOperatorCsv="nfd.4.19.0-202509240837")
    new = render("dev", config).document
    diff = diff_plans(dev_plan.document, new)
    refuse_driver_removal(diff, new, [ObservedNode("gpu-x", KernelTarget("rhcos4.19", "5.14.0-570.28.1.el9_6.x86_64"))])
    with pytest.raises(ConfigError, match=r"refused: .*nvidia-driver-rhcos4-18 for rhcos4.18 \(every kernel\), "
                                          r"which nodes still run: gpu-a; let the Machine Config Operator"):
        refuse_driver_removal(diff, new, [ObservedNode("gpu-a", KernelTarget("rhcos4.18",
                                                                             "5.14.0-427.99.1.el9_4.x86_64"))])


@pytest.mark.parametrize("precompiled", [True, False])
def test_a_driver_whose_nodes_another_driver_serves_goes(render, dev_plan, precompiled: bool):
    """On OpenShift, precompiled drivers on trade the release's driver for one per kernel, and off trades them back:
    every node keeps a driver, and the engine goes ahead (e2e/test_engine_lifecycle.py)."""
    config = stack_config("dev")
    config["gpu-platform:driver"] = {"branch": "580", "precompiled": True}
    per_kernel = render("dev", config).document
    old, new = (dev_plan.document, per_kernel) if precompiled else (per_kernel, dev_plan.document)
    diff = diff_plans(old, new)
    assert [s.op for s in diff.steps if s.resource["type"].endswith(":NVIDIADriver")].count("delete") == 1
    kernel = dev_plan.outputs["kernels"][0].split("/", 1)[1]
    refuse_driver_removal(diff, new, [ObservedNode("gpu-a", KernelTarget("rhcos4.18", kernel))])


@pytest.fixture(scope="module")
def rendered_pair(tmp_path_factory):
    from tests.conftest import render_stack

    base = tmp_path_factory.mktemp("diff")
    write_render(render_stack("prod").document, base / "old")
    config = stack_config("prod")
    config["gpu-platform:nodePools"][0]["replicas"] = 9
    config["gpu-platform:nodePools"][0]["maxReplicas"] = 20
    config["gpu-platform:tenants"].append({"name": "speech", "gpus": 0})
    write_render(render_stack("prod", config).document, base / "new")
    return base


def gpuctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], cwd=ROOT, capture_output=True, text=True)


def test_cli_json_mirrors_pulumi_preview(rendered_pair):
    result = gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"steps", "changeSummary", "summary"}
    assert set(document["changeSummary"]) == {"create", "update", "replace", "delete", "same"}
    update = next(step for step in document["steps"] if step["op"] == "update")
    assert {key: update[key] for key in ("op", "type", "name", "object", "diffs", "replaceReasons")} == {
        "op": "update", "type": "aws:autoscaling/group:Group", "name": "pool-l4-inference-asg",
        "object": "prod-gpu-gpu-l4-inference", "diffs": ["maxSize", "tags[0].value"], "replaceReasons": []}
    # The configured size the group records (the autoscaler owns the live one) and its new maximum.
    assert update["detailedDiff"] == [
        {"path": "maxSize", "name": "maxSize", "old": 16, "new": 20},
        {"path": "tags[0].value", "name": "tags[gpu-platform.io/configured-nodes].value", "old": "8", "new": "9"}]
    assert (update["old"]["maxSize"], update["new"]["maxSize"]) == (16, 20)
    [l4] = [pool for pool in document["summary"]["pools"] if pool["name"] == "l4-inference"]
    assert (l4["before"]["nodes"], l4["after"]["nodes"]) == (8, 9)
    assert document == json.loads(gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"),
                                         "--format", "json").stdout)
    assert document["changeSummary"]["update"] == 1 and document["changeSummary"]["create"] > 1


def test_cli_human_view_is_plain_text_in_a_pipe(rendered_pair):
    result = gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"))
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert "~ maxSize: 16 => 20" in result.stdout
    assert "config size 8 -> 9, but the autoscaler owns the live count" in result.stdout
    assert "+   " in result.stdout and "Resources:" in result.stdout
    assert result.stdout.rstrip().endswith("unchanged")
    assert result.stdout.index("Fleet:") < result.stdout.index("Changes:")
    assert "pool l4-inference: g6.xlarge, nodes 8 -> 9, GPUs 8 -> 9" in result.stdout
    only = gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"), "--diff-only")
    assert "Fleet:" not in only.stdout and "~ maxSize: 16 => 20" in only.stdout


def test_cli_json_and_another_format_conflict(rendered_pair):
    result = gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"), "--json", "--format", "text")
    assert result.returncode == 2 and "pick one" in result.stderr


@pytest.mark.parametrize("command", ["render", "check", "diff", "preview"])
def test_each_command_help_gives_examples_and_exit_codes(command):
    result = gpuctl(command, "--help")
    assert result.returncode == 0
    assert f"examples:\n  gpuctl {command} " in result.stdout
    assert "exit codes:\n  0  success" in result.stdout and "  2  bad input" in result.stdout


def test_cli_missing_plan_is_bad_input(tmp_path):
    result = gpuctl("diff", str(tmp_path), str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error:") and "plan.json" in result.stderr


@pytest.mark.parametrize(("resources", "where"), [
    ([1], "resources[0] has the wrong type"),
    ([{"urn": "x", "type": "t", "name": "n", "custom": True, "parent": None, "inputs": {},
       "options": {"protect": False, "deleteBeforeReplace": False, "ignoreChanges": [], "replaceOnChanges": []}}],
     "resources[0].dependencies is missing"),
])
def test_a_malformed_plan_is_one_line_exit_2(tmp_path, resources: list, where: str) -> None:
    (tmp_path / "plan.json").write_text(json.dumps(
        {"project": "gpu-platform", "stack": "dev", "resources": resources, "outputs": {}}))

    result = subprocess.run([sys.executable, "-m", "gpuctl", "diff", str(tmp_path), str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True)

    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert f"not a rendered plan ({where})" in result.stderr


def test_the_text_view_names_the_plan_it_compares_against(rendered_pair):
    result = gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"))
    assert result.stdout.splitlines()[0] == f"Previewing stack prod against {rendered_pair / 'old'}:"
    markdown = gpuctl("diff", str(rendered_pair / "old"), str(rendered_pair / "new"), "--format", "markdown")
    assert markdown.stdout.startswith(f"### `gpuctl diff`: stack `prod` against `{rendered_pair / 'old'}`")


def test_a_reader_that_stops_early_ends_diff_with_141_not_a_violation_code(rendered_pair):
    # rich ends a program whose pipe closes with exit 1, which is gpuctl's code for a policy violation. The
    # reader closes its end before gpuctl writes anything, as `gpuctl diff ... | head -c 0` would.
    process = subprocess.Popen([sys.executable, "-m", "gpuctl", "diff", str(rendered_pair / "old"),
                                str(rendered_pair / "new")], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    stderr = process.stderr.read()
    process.wait(timeout=120)

    assert process.returncode == 141 and b"Traceback" not in stderr


# -- list elements are named by what they are, before and after ---------------------------------------------------

ASG = "aws:autoscaling/group:Group"


def test_a_tag_removed_before_the_cluster_tag_is_the_only_tag_named(prod_plan):
    """An element removed from the middle of an Auto Scaling Group's tags shifts the tags after it: the diff names
    the removed tag, never the cluster's autoscaler discovery tag that stays."""
    new = copy.deepcopy(prod_plan.document)
    group = next(r for r in new["resources"] if r["type"] == ASG)
    tags = group["inputs"]["tags"]
    cluster = next(index for index, tag in enumerate(tags) if tag["key"].startswith("kubernetes.io/cluster/"))
    assert cluster > 0, "a tag must come before the cluster tag for the shift to show"
    removed = tags.pop(0)

    [step] = diff_plans(prod_plan.document, new).steps

    assert [(change.named, change.old, change.new) for change in step.changes] == [
        (f"tags[{removed['key']}]", removed, None)]


def test_an_element_that_changes_place_is_a_move_of_that_element_alone(prod_plan):
    new = copy.deepcopy(prod_plan.document)
    tags = next(r for r in new["resources"] if r["type"] == ASG)["inputs"]["tags"]
    tags.insert(0, tags.pop())

    [step] = diff_plans(prod_plan.document, new).steps

    assert [(change.named, change.old, change.new) for change in step.changes] == [
        (f"tags[{tags[0]['key']}] (moved)", f"position {len(tags) - 1}", "position 0")]


STACKS = ("dev", "staging", "prod", "onprem", "karpenter", "openshift-4-20", "partitioned", "queue", "queue-openshift")


def list_fields(value, parts=()):
    """(parts, list) of every list in a resource's inputs, nested ones included."""
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    if isinstance(value, list):
        yield parts, value
    for key, child in children:
        yield from list_fields(child, (*parts, key))


def each_list_field():
    """One resource for each list-valued field (of two elements or more) of each resource kind the stacks emit."""
    from gpuctl.diff import dotted
    seen = {}
    for stack in STACKS:
        for resource in render_stack(stack).resources:
            for parts, items in list_fields(resource["inputs"]):
                shape = (resource["type"], dotted([0 if isinstance(part, int) else part for part in parts]))
                if len(items) >= 2 and shape not in seen:
                    seen[shape] = (resource, parts)
    return seen


@pytest.fixture(scope="module")
def list_fields_of_every_kind():
    return each_list_field()


def test_every_list_field_of_every_kind_names_an_element_removed_or_added_alone(list_fields_of_every_kind):
    """Remove the first element of each list (then add it back): the one change is that element, named by what it is
    where it has a name, never a shift of the elements after it."""
    from gpuctl.diff import ELEMENT_KEYS, dotted, property_changes
    assert len(list_fields_of_every_kind) >= 30
    for (kind, field), (resource, parts) in list_fields_of_every_kind.items():
        shorter = copy.deepcopy(resource["inputs"])
        items = shorter
        for part in parts:
            items = items[part]
        element = items.pop(0)
        name = (next((element[key] for key in ELEMENT_KEYS if isinstance(element.get(key), str)), None)
                if isinstance(element, dict) else None if isinstance(element, list) else str(element))
        for old, new, before, after in ((resource["inputs"], shorter, element, None),
                                        (shorter, resource["inputs"], None, element)):
            changes = property_changes(old, new)
            assert [(change.path, change.old, change.new) for change in changes] == [
                (dotted([*parts, 0]), before, after)], (kind, field, [change.to_json() for change in changes])
            if name is not None and len({json.dumps(item, sort_keys=True) for item in items}) == len(items):
                assert changes[0].named.endswith(f"[{name}]"), (kind, field, changes[0].named)
