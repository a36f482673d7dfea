"""`gpuctl render` end to end, as a user runs it: exit codes, plan.json, one manifest per object, schema validity."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hypothesis
import kubernetes_validate
import pytest
import yaml
from hypothesis import strategies as st

from gpuctl import render
from gpuctl.render import dump_yaml, manifests, write_plan
from tests.conftest import ROOT, render_stack, stack_config

STACKS = {"dev": "1.31", "prod": "1.31"}
# Core kinds each stack renders; the operators' own objects come from their Helm chart or OLM bundle instead.
CORE_KINDS = {"Namespace", "ConfigMap", "NetworkPolicy", "RoleBinding", "ResourceQuota", "LimitRange",
              "PriorityClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
STACK_CORE_KINDS = {"dev": CORE_KINDS | {"ServiceAccount", "Role", "Job"}, "prod": CORE_KINDS}
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def gpuctl(*args: str) -> subprocess.Popen:
    """Start `python -m gpuctl ...` from the repository root, as the README runs it."""
    return subprocess.Popen([sys.executable, "-m", "gpuctl", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = process.communicate(timeout=180)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# -- good renders -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Both shipped stacks rendered side by side (offline: no registry, no cluster)."""
    root = tmp_path_factory.mktemp("render")
    started = {stack: (gpuctl("render", "--stack", stack, "--offline", "--out", str(root / stack)), root / stack)
               for stack in STACKS}
    return {stack: (finish(process), out) for stack, (process, out) in started.items()}


@pytest.fixture(scope="module", params=sorted(STACKS))
def render_result(request, rendered) -> tuple[str, subprocess.CompletedProcess, Path]:
    result, out = rendered[request.param]
    assert result.returncode == 0, result.stderr
    return request.param, result, out


def load_plan(out: Path) -> dict[str, Any]:
    return json.loads((out / "plan.json").read_text())


def load_manifests(out: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((out / "manifests").iterdir()):
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert len(documents) == 1, f"{path.name} holds {len(documents)} objects"
        found[path.name] = documents[0]
    return found


def test_render_succeeds_and_says_where(render_result) -> None:
    stack, result, out = render_result

    assert result.stdout.startswith(f"rendered stack {stack}: ")
    assert str(out) in result.stdout
    assert "Traceback" not in result.stderr


def test_plan_json_has_the_documented_shape(render_result) -> None:
    stack, _, out = render_result
    plan = load_plan(out)

    assert set(plan) == {"project", "stack", "resources", "outputs", "tenantInputs"}
    assert (plan["project"], plan["stack"]) == ("gpu-platform", stack)
    assert plan["resources"]
    # Each tenant: the digest of its inputs and its components, the platform's children (gpuctl/reuse.py).
    assert set(plan["tenantInputs"]) == set(plan["outputs"]["tenants"])
    platform_children = {record["name"] for record in plan["resources"]
                         if record["parent"] and record["parent"].endswith("::gpu-platform")}
    for entry in plan["tenantInputs"].values():
        assert len(entry["digest"]) == 64 and set(entry["resources"]) <= platform_children
    for resource in plan["resources"]:
        assert set(resource) >= {"urn", "type", "name", "custom", "parent", "dependencies", "inputs", "options"}
        assert resource["urn"].startswith(f"urn:pulumi:{stack}::gpu-platform::")
        assert resource["urn"].endswith(f"::{resource['name']}")
        assert isinstance(resource["custom"], bool)
        assert resource["parent"] is None or resource["parent"].startswith(f"urn:pulumi:{stack}::gpu-platform::")
        assert isinstance(resource["dependencies"], list) and isinstance(resource["inputs"], dict)
        options = resource["options"]
        assert isinstance(options["replaceOnChanges"], list) and isinstance(options["ignoreChanges"], list)
        assert isinstance(options["deleteBeforeReplace"], bool) and isinstance(options["protect"], bool)


def test_plan_references_resolve(render_result) -> None:
    _, _, out = render_result
    plan = load_plan(out)
    urns = {resource["urn"] for resource in plan["resources"]}

    assert len(urns) == len(plan["resources"])
    for resource in plan["resources"]:
        assert set(resource["dependencies"]) <= urns, resource["urn"]
        parent = resource["parent"]
        assert parent is None or parent in urns or "::pulumi:pulumi:Stack::" in parent, resource["urn"]
    components = [r for r in plan["resources"] if not r["custom"]]
    assert {r["type"] for r in components} >= {
        "gpu-platform:index:GpuPlatform", "gpu-platform:index:GpuNodePool", "gpu-platform:index:NfdStack",
        "gpu-platform:index:GpuOperator", "gpu-platform:index:ClusterPolicyStack", "gpu-platform:index:DriverStack",
        "gpu-platform:index:DevicePluginStack", "gpu-platform:index:MonitoringStack",
        "gpu-platform:index:TenantAdmission", "gpu-platform:index:TenantQuota"}


def test_plan_outputs(render_result) -> None:
    stack, _, out = render_result
    outputs = load_plan(out)["outputs"]

    assert outputs["kubernetesVersion"] == STACKS[stack]
    assert outputs["capacity"] and outputs["kernels"] and outputs["driverImages"] and outputs["tenants"]
    assert outputs["totalGpus"] == sum(outputs["capacity"].values())


def test_one_manifest_file_per_kubernetes_object(render_result) -> None:
    stack, _, out = render_result
    plan = load_plan(out)
    kubernetes = [r for r in plan["resources"] if r["custom"] and r["type"].startswith("kubernetes:")]
    objects = [r["inputs"] for r in kubernetes if r["type"] != HELM_RELEASE]
    manifests = load_manifests(out)

    assert len(manifests) == len(objects)
    assert {"NVIDIADriver", "ClusterPolicy"} <= {m["kind"] for m in manifests.values()}
    identity = lambda m: (m["apiVersion"], m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])  # noqa: E731
    assert sorted(map(identity, manifests.values())) == sorted(map(identity, objects))
    for name, manifest in manifests.items():
        assert name.endswith(".yaml") and name.startswith(manifest["kind"].lower())


def test_every_core_manifest_validates_against_the_kubernetes_schema(render_result) -> None:
    stack, _, out = render_result
    version = f"{STACKS[stack]}.0"
    validated, errors = set(), []
    for name, manifest in load_manifests(out).items():
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue  # custom resources (MachineSet, ServiceMonitor, ...): no upstream schema
        except kubernetes_validate.ValidationError as error:
            errors.append(f"{name}: {'.'.join(map(str, error.path))}: {error.message}")
        validated.add(manifest["kind"])

    assert errors == []
    assert STACK_CORE_KINDS[stack] <= validated, STACK_CORE_KINDS[stack] - validated


def test_a_helm_release_is_in_the_plan_but_writes_no_manifest(rendered) -> None:
    """A release of a chart is not an object the API server stores: Helm installs the chart's objects."""
    _, out = rendered["prod"]
    releases = [r["inputs"] for r in load_plan(out)["resources"] if r["type"] == HELM_RELEASE]
    kinds = {m["kind"] for m in load_manifests(out).values()}

    assert {(r["name"], r["namespace"]) for r in releases} == {
        ("gpu-operator", "gpu-operator"), ("node-feature-discovery", "node-feature-discovery"),
        ("aws-node-termination-handler", "kube-system"), ("aws-efa-k8s-device-plugin", "kube-system")}
    assert "Release" not in kinds
    assert not any(path.name.startswith("release") for path in (out / "manifests").iterdir())


def test_both_backends_render_their_pools(rendered) -> None:
    kinds = {stack: {m["kind"] for m in load_manifests(out).values()} for stack, (_, out) in rendered.items()}
    prod_types = {r["type"] for r in load_plan(rendered["prod"][1])["resources"]}

    assert {"MachineSet", "MachineAutoscaler"} <= kinds["dev"]
    assert "MachineSet" not in kinds["prod"]
    assert {"aws:ec2/launchTemplate:LaunchTemplate", "aws:autoscaling/group:Group"} <= prod_types


def test_render_is_deterministic(rendered) -> None:
    """The plan is what a review diffs: another process (another hash seed) must render the same plan."""
    in_process = render_stack("dev").document

    assert load_plan(rendered["dev"][1]) == json.loads(json.dumps(in_process))


# -- bad input ----------------------------------------------------------------------------------------------------


def write_bad_inputs(directory: Path) -> dict[str, list[str]]:
    """Each bad-input case: the arguments after `render`."""
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    config["config"]["gpu-platform:nodePools"][0]["instanceType"] = "g4dn.xlarg"
    (directory / "unknown-instance.yaml").write_text(yaml.safe_dump(config))
    (directory / "syntax.yaml").write_text("config:\n  gpu-platform:cluster:\n    name: dev\n   flavor: [openshift\n")
    (directory / "nodes.json").write_text('{"items": [')
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    config["config"]["gpu-platform:registryPullSecret"] = '{"auths": {"nvcr.io": {"auth": "plain-text"}}}'
    (directory / "plain-secret.yaml").write_text(yaml.safe_dump(config))
    shipped = (ROOT / "Pulumi.dev.yaml").read_text()
    edits = {"namespace-typo": ("gpu-platform:tenants", "gpuplatform:tenants"),
             "duplicate-key": ("config:\n", "config:\n  gpu-platform:tenants: []\n"),
             "yaml11-bool": ("gpus: 4", "gpus: yes"),
             "huge-replicas": ("replicas: 2", "replicas: 1000000000000000000000000000000")}
    for case, (old, new) in edits.items():
        assert old in shipped
        (directory / f"{case}.yaml").write_text(shipped.replace(old, new, 1))
    (directory / "not-utf8.yaml").write_bytes(shipped.encode().replace(b"dev", b"d\xe9v", 1))
    return {
        **{case: ["--config-file", str(directory / f"{case}.yaml")] for case in [*edits, "not-utf8"]},
        "plain-text-secret": ["--config-file", str(directory / "plain-secret.yaml")],
        "unknown-instance": ["--config-file", str(directory / "unknown-instance.yaml")],
        "yaml-syntax": ["--config-file", str(directory / "syntax.yaml")],
        "missing-stack": ["--stack", "no-such-stack"],
        "observed-not-json": ["--stack", "dev", "--observed-nodes", str(directory / "nodes.json")],
    }


EXPECTED_IN_MESSAGE = {
    "plain-text-secret": ["gpu-platform:registryPullSecret", "must be a secret", "pulumi config set --secret"],
    "unknown-instance": ["nodePools[0]", "instanceType", "did you mean 'g4dn.xlarge'?"],
    "yaml-syntax": ["syntax.yaml", "line 4", "YAML"],
    "missing-stack": ["Pulumi.no-such-stack.yaml"],
    "observed-not-json": ["--observed-nodes", "nodes.json", "not JSON"],
    "missing-out": ["--out"],
    "namespace-typo": ["gpuplatform:tenants", "unknown config namespace", "did you mean gpu-platform:tenants?"],
    "duplicate-key": ["gpu-platform:tenants", "appears twice", "keep one"],
    "yaml11-bool": ["tenants[0].gpus", "must be a number, not 'yes'"],
    "huge-replicas": ["nodePools[0].replicas", "too large", "at most 1000"],
    "not-utf8": ["not-utf8.yaml", "not UTF-8", "save the file as UTF-8"],
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every bad-input case, run side by side."""
    directory = tmp_path_factory.mktemp("bad-input")
    started = {}
    for case, args in write_bad_inputs(directory).items():
        out = directory / f"out-{case}"
        started[case] = (gpuctl("render", *args, "--offline", "--out", str(out)), out)
    started["missing-out"] = (gpuctl("render", "--stack", "dev", "--offline"), directory / "out-missing-out")
    previous = directory / "previous"
    previous.mkdir()
    (previous / "plan.json").write_text("{}")
    started["previous"] = (gpuctl("render", "--stack", "no-such-stack", "--offline", "--out", str(previous)), previous)
    return {case: (finish(process), out) for case, (process, out) in started.items()}


@pytest.mark.parametrize("case", sorted(EXPECTED_IN_MESSAGE))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(bad_runs, case: str) -> None:
    result, out = bad_runs[case]

    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in EXPECTED_IN_MESSAGE[case]:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert result.stdout == ""


def test_failed_render_leaves_a_previous_render_untouched(bad_runs) -> None:
    result, out = bad_runs["previous"]

    assert result.returncode == 2
    assert sorted(p.name for p in out.iterdir()) == ["plan.json"]
    assert (out / "plan.json").read_text() == "{}"


# -- --out never destroys anything ----------------------------------------------------------------------------------


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under `path` (or `path` itself) with its content."""
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", [".", "components", "README.md", "/proc"])
def test_out_refuses_anything_but_an_empty_folder_or_an_earlier_render(target: str) -> None:
    before = snapshot(ROOT / target) if target != "/proc" else None

    result = finish(gpuctl("render", "--stack", "dev", "--offline", "--out", target))

    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and f"--out {target}:" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    if before is not None:
        assert snapshot(ROOT / target) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_out_refuses_a_folder_it_cannot_write(tmp_path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = finish(gpuctl("render", "--stack", "dev", "--offline", "--out", str(locked / "out")))
    finally:
        locked.chmod(0o700)

    assert result.returncode == 2 and "not writable" in result.stderr
    assert not (locked / "out").exists()


def test_rendering_again_replaces_an_earlier_render(tmp_path) -> None:
    from gpuctl.render import write_render

    out, fresh = tmp_path / "out", tmp_path / "fresh"
    write_render(render_stack("prod").document, out)

    write_render(render_stack("dev").document, out)

    write_render(render_stack("dev").document, fresh)
    assert snapshot(out) == snapshot(fresh), "nothing of the prod render is left"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "out"]


@pytest.mark.parametrize(("added", "reported"), [
    ("notes.txt", "notes.txt"), ("manifests/my-extra.yaml", "manifests/my-extra.yaml"),
    ("manifests/sub/x.yaml", "manifests/sub")])
def test_a_file_of_the_users_in_an_earlier_render_is_never_replaced(tmp_path, added: str, reported: str) -> None:
    out = tmp_path / "out"
    assert finish(gpuctl("render", "--stack", "prod", "--offline", "--out", str(out))).returncode == 0
    (out / added).parent.mkdir(parents=True, exist_ok=True)
    (out / added).write_text("mine\n")
    before = snapshot(out)

    result = finish(gpuctl("render", "--stack", "dev", "--offline", "--out", str(out)))

    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: --out {out}: holds {reported}, which no render wrote, refusing to replace it; "
                             "move it out, or pass a new or empty folder, or one an earlier `gpuctl render` wrote\n")
    assert snapshot(out) == before


# A marker that does not list what the render wrote vouches for nothing: a user's file beside plan.json and
# manifests/*.yaml would look like the render's own.
@pytest.mark.parametrize("marker", ["", "written by gpuctl render; the folder is replaced as a whole\n",
                                    "written by gpuctl render; the folder is replaced as a whole; it wrote these files:"
                                    "\nplan.json\n../elsewhere.txt\n"], ids=["empty", "older gpuctl", "foreign path"])
def test_a_render_whose_marker_does_not_list_its_files_is_never_replaced(tmp_path, marker: str) -> None:
    from gpuctl.render import MARKER

    out = tmp_path / "out"
    assert finish(gpuctl("render", "--stack", "prod", "--offline", "--out", str(out))).returncode == 0
    (out / MARKER).write_text(marker)
    (out / "manifests" / "my-notes.yaml").write_text("mine\n")
    before = snapshot(out)

    result = finish(gpuctl("render", "--stack", "dev", "--offline", "--out", str(out)))

    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: --out {out}: holds a {MARKER} marker that does not list the files a render "
                             "wrote (empty, or of an older gpuctl), refusing to replace it; move out what you keep "
                             "and delete the folder, or pass a new or empty folder, or one an earlier `gpuctl render` "
                             "wrote\n")
    assert snapshot(out) == before


def test_an_interrupted_render_leaves_the_previous_render_intact(tmp_path, monkeypatch) -> None:
    from gpuctl.render import write_render

    out = tmp_path / "out"
    write_render(render_stack("dev").document, out)
    before = snapshot(out)
    real_rename = Path.rename
    interrupts = [KeyboardInterrupt()]

    def interrupted(self: Path, target):
        if Path(target) == out.resolve() and interrupts:
            raise interrupts.pop()
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_render(render_stack("dev").document, out)
    monkeypatch.setattr(Path, "rename", real_rename)

    assert snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


YAML_EDGE_CASES = ["yes", "0123", "1e3", ":", "- a", "null", "~", "a: b", "#x", " lead", "trail ", "'q'", "a\tb",
                   "2024-01-01", "ą", "", "x" * 200, "one\ntwo", "a long string " * 10, "\x07",
                   # long single-line strings, folded at the 80th column: a space at every place a fold may fall,
                   # runs of spaces, a space at each end, quotes and indicators that make them single-quoted
                   "a " * 120, "word  " * 40, "  " + "x y " * 40 + " ", "it's: #" * 30, "x" * 79 + " y" * 30,
                   '["jsonpath={.status.hard[\'requests.cpu\']}=64", ' * 6, "- " + "[a, b] " * 30]


@pytest.mark.parametrize("value", YAML_EDGE_CASES)
def test_manifest_yaml_is_byte_for_byte_pyyaml_safe_dump(value: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                "data": {value: value, "list": [value, {value: [value]}]}}

    assert dump_yaml(manifest) == yaml.safe_dump(manifest, sort_keys=False)


def test_a_tenants_quotas_are_written_by_libyaml(monkeypatch) -> None:
    """Their wait conditions are one long annotation: printable ASCII, which libyaml folds as PyYAML does."""
    if render.CSafeDumper is None:
        pytest.skip("PyYAML without libyaml here")
    dumpers = {}
    real_dump = yaml.dump
    monkeypatch.setattr(render.yaml, "dump", lambda data, Dumper, **kw: (  # noqa: N803 (PyYAML's name)
        dumpers.__setitem__(data["metadata"]["name"], Dumper), real_dump(data, Dumper=Dumper, **kw))[1])
    quotas = [m for m in manifests(render_stack("onprem").document) if m["kind"] == "ResourceQuota"]

    assert quotas and any(len(value) > 80 for q in quotas for value in q["metadata"]["annotations"].values())
    assert {dumpers[q["metadata"]["name"]] for q in quotas if dump_yaml(q)} == {render.CSafeDumper}


def test_every_prod_manifest_is_written_as_pyyaml_safe_dump_writes_it(prod_plan) -> None:
    objects = manifests(prod_plan.document)

    assert objects and all(dump_yaml(m) == yaml.safe_dump(m, sort_keys=False) for m in objects)


def written_plan(plan: dict[str, Any]) -> bytes:
    stream = io.BytesIO()
    write_plan(plan, stream)
    return stream.getvalue()


def test_plan_json_is_the_text_json_dump_writes(prod_plan) -> None:
    """Readers of plan.json (a reviewer's eyes, `diff`, a cached base) see the layout they saw before orjson wrote it."""
    plan = prod_plan.document

    assert written_plan(plan) == (json.dumps(plan, indent=2, sort_keys=True) + "\n").encode()


# JSON of ASCII strings (control characters included, DEL not) and integers of any size, nested: the values a plan
# holds (its one float is a stack's timeout).
ASCII = st.text(st.characters(max_codepoint=126), max_size=12)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | ASCII,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ASCII, inner, max_size=4),
                           max_leaves=30)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(resources=st.lists(st.dictionaries(ASCII, JSON_VALUES, max_size=4), max_size=3),
                  outputs=JSON_VALUES)
def test_any_plan_is_written_as_json_dump_writes_it(resources: list, outputs: Any) -> None:
    plan = {"project": "gpu-platform", "stack": "x", "resources": resources, "outputs": outputs, "tenantInputs": {}}

    assert written_plan(plan) == (json.dumps(plan, indent=2, sort_keys=True) + "\n").encode()


def test_a_plan_of_other_characters_and_floats_reads_back_the_same() -> None:
    plan = {"project": "gpu-platform", "stack": "x", "resources": [{"name": "équipe-α\x7f", "timeout": 1e-07}],
            "outputs": {"big": 10**30}, "tenantInputs": {}}

    assert json.loads(written_plan(plan)) == plan


@pytest.mark.parametrize("tenants", [40, 120])
def test_the_final_wait_visits_each_output_a_bounded_number_of_times(tenants: int, monkeypatch) -> None:
    """The runtime waits for the program's outputs all at once: the SDK's own wait, which waits for the first
    of those pending over and over, visited every output about 270 times whatever the fleet (O(n) per round)."""
    from benchmarks.fleet import fleet_config

    waited, real_wait = [], asyncio.wait

    async def counting_wait(tasks, *args, **kwargs):
        waited.append(len(tasks))
        return await real_wait(tasks, *args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counting_wait)
    plan = render_stack(config=fleet_config(tenants=tenants, pools=2, kernels=2))
    assert len(plan.resources) > 8 * tenants
    assert sum(waited) <= 10 * len(plan.resources)


def test_under_the_engine_a_secret_structured_key_is_refused_not_rendered_in_plain_text() -> None:
    """The Pulumi CLI hands the program a structured value holding a `secure:` as one secret key, decrypted: no
    field of it is kept secret, so the program refuses it rather than write it into resources and outputs."""
    from gpuctl.render import render_plan
    from gpuctl.stackfile import StackFile, stack_file_from_config
    from stacks.config import ConfigError

    stack = stack_file_from_config("prod", stack_config("prod"))
    config = {**stack.config}
    config["gpu-platform:cluster"] = {**config["gpu-platform:cluster"], "instanceProfile": "decrypted-profile"}
    with pytest.raises(ConfigError) as caught:
        render_plan(StackFile("prod", config, [*stack.secret_keys, "gpu-platform:cluster"]))
    assert "gpu-platform:cluster: holds a `secure:` value" in str(caught.value)
    assert "decrypted-profile" not in str(caught.value)
