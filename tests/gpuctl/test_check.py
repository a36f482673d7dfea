"""`gpuctl check DIR`: the policy pack on rendered plans, end to end through the command line."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from collections.abc import Mapping, Sequence
from pulumi_policy import (PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions, ResourceValidationArgs,
                           ResourceValidationPolicy, StackValidationArgs)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

from components import labels
from gpuctl import check
from gpuctl.__main__ import main
from gpuctl.check import Violation, check_plan
from policy.rules import POLICIES
from gpuctl.render import write_render
from tests.conftest import ROOT, Plan

Document = dict[str, Any]


def resource(doc: Document, name: str) -> dict[str, Any]:
    [match] = [r for r in doc["resources"] if r["name"] == name and r["custom"]]
    return match


def over_capacity(doc: Document) -> None:
    """dev's pools advertise 8 whole GPUs (its T4s' shares are not GPUs): with vision's 4, one tenant asks for 9."""
    resource(doc, "tenant-nlp-research-gpu-quota")["inputs"]["spec"]["hard"][labels.GPU_QUOTA_KEY] = "9"


def untainted_pool(doc: Document) -> None:
    resource(doc, "pool-t4-inference")["inputs"]["spec"]["template"]["spec"]["taints"] = []


def no_gpu_quota(doc: Document) -> None:
    doc["resources"].remove(resource(doc, "tenant-vision-gpu-quota"))


DEV_DRIVER = "driver-rhcos4-18"
CLUSTER_POLICY = "cluster-policy-cluster-policy"
APPROVER = "gpu-operator-olm-approve-install-plan"


def driver_for_any_os(doc: Document) -> None:
    del resource(doc, DEV_DRIVER)["inputs"]["spec"]["nodeSelector"]["feature.node.kubernetes.io/system-os_release.ID"]


def operands_untolerated(doc: Document) -> None:
    resource(doc, CLUSTER_POLICY)["inputs"]["spec"]["daemonsets"]["tolerations"] = []


def latest_image(doc: Document) -> None:
    approver = resource(doc, APPROVER)["inputs"]["spec"]["template"]["spec"]
    approver["containers"][0]["image"] = "registry.redhat.io/openshift4/ose-cli-rhel9:latest"


# case -> (dev plan mutation, the policy and the resource the report must name)
VIOLATIONS: dict[str, tuple[Callable[[Document], None], str, str]] = {
    "over-capacity": (over_capacity, "gpu-quota-within-capacity", "(stack)"),
    "untainted-pool": (untainted_pool, "gpu-pool-tainted", "pool-t4-inference"),
    "no-gpu-quota": (no_gpu_quota, "tenant-gpu-quota", "tenant-vision-namespace"),
    "driver-unpinned": (driver_for_any_os, "driver-pinned-to-kernel", DEV_DRIVER),
    "operands-untolerated": (operands_untolerated, "operands-tolerate-gpu-taint", CLUSTER_POLICY),
    "latest-image": (latest_image, "no-latest-images", APPROVER),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory, dev_plan: Plan) -> dict[str, Path]:
    """Rendered dev directories: clean, one per violation, and one with every violation at once."""
    root = tmp_path_factory.mktemp("rendered")
    mutations = {"clean": [], **{case: [mutate] for case, (mutate, _, _) in VIOLATIONS.items()},
                 "all": [mutate for mutate, _, _ in VIOLATIONS.values()]}
    for case, mutate in mutations.items():
        doc = copy.deepcopy(dev_plan.document)
        for change in mutate:
            change(doc)
        write_render(doc, root / case)
    return {case: root / case for case in mutations}


@pytest.fixture(scope="module")
def cli(rendered: dict[str, Path]) -> dict[str, subprocess.CompletedProcess[str]]:
    """The command lines of this module, started at once so their interpreter start-ups can overlap."""
    runs = {"clean": [str(rendered["clean"])], "all": [str(rendered["all"])],
            "json": [str(rendered["all"]), "--json"], "missing": [str(rendered["clean"].parent / "never-rendered")]}
    started = {case: subprocess.Popen([sys.executable, "-m", "gpuctl", "check", *argv], cwd=ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE) for case, argv in runs.items()}
    results = {}
    for case, process in started.items():
        stdout, stderr = process.communicate(timeout=300)
        results[case] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return results


def test_clean_stack_exits_0(cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    result = cli["clean"]
    assert (result.returncode, result.stderr) == (0, "")
    assert "policies passed" in result.stdout


def test_mandatory_violations_exit_1_naming_each_policy(cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    result = cli["all"]
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"mandatory ({len(VIOLATIONS)})"
    assert lines[-1] == f"{len(VIOLATIONS)} mandatory, 0 advisory violation(s)"
    for _, policy, where in VIOLATIONS.values():
        assert any(line.startswith(f"{policy}  {where}  ") for line in lines[1:-1]), policy


@pytest.mark.parametrize("case", VIOLATIONS)
def test_each_violation_alone_exits_1(rendered: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                      case: str) -> None:
    _, policy, where = VIOLATIONS[case]
    assert main(["check", str(rendered[case])]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "mandatory (1)" and lines[1].startswith(f"{policy}  {where}  ")


def test_missing_dir_exits_2_with_one_line(cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    result = cli["missing"]
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and "never-rendered" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_json_gives_the_same_as_data(cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    result = cli["json"]
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["stack"] == "dev" and (report["mandatory"], report["advisory"]) == (len(VIOLATIONS), 0)
    assert all(set(v) == {"policy", "level", "urn", "name", "message"} for v in report["violations"])
    assert {(v["policy"], v["name"] or "(stack)") for v in report["violations"]} == \
        {(policy, where) for _, policy, where in VIOLATIONS.values()}
    by_policy = {v["policy"]: v for v in report["violations"]}
    assert by_policy["gpu-quota-within-capacity"]["urn"] is None
    assert by_policy["no-latest-images"]["urn"].endswith(f"::{APPROVER}")
    assert by_policy["operands-tolerate-gpu-taint"]["urn"].endswith(f"::{CLUSTER_POLICY}")


# The pack config and malformed input, in-process: the same entry point, without a start-up each.


def write_config(tmp_path: Path, config: Any) -> str:
    path = tmp_path / "policy-config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_policy_config_lowers_a_level_to_advisory(rendered: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, {"no-latest-images": {"enforcementLevel": "advisory"}})
    assert main(["check", str(rendered["latest-image"]), "--policy-config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "advisory (1)" and lines[1].startswith(f"no-latest-images  {APPROVER}  ")


def test_policy_config_disables_a_policy(rendered: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, {"all": "advisory", "no-latest-images": "disabled"})
    assert main(["check", str(rendered["latest-image"]), "--policy-config", config]) == 0
    assert "policies passed" in capsys.readouterr().out


@pytest.mark.parametrize(("config", "summary"), [
    ({"all": "disabled"}, "no policy ran: the pack config disables every one"),
    ({"no-latest-images": "disabled"}, "policies passed on"),
])
def test_disabled_policies_are_not_reported_as_passed(rendered: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str], config: Any,
                                                      summary: str) -> None:
    assert main(["check", str(rendered["clean"]), "--policy-config", write_config(tmp_path, config)]) == 0
    out = capsys.readouterr().out
    assert summary in out and f"{len(POLICIES)} policies passed" not in out


def test_policy_config_knob_is_applied(rendered: dict[str, Path], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"gpu-quota-within-capacity": {"maxOvercommit": 1.7}})
    assert main(["check", str(rendered["over-capacity"]), "--policy-config", config]) == 0


@pytest.mark.parametrize(("config", "complaint"), [
    ({"no-such-policy": "advisory"}, "'no-such-policy' is not a policy of the pack"),
    ({"no-latest-images": "sometimes"}, "enforcementLevel 'sometimes' is not one of"),
    ({"gpu-quota-within-capacity": {"maxOvercommit": "lots"}}, "gpu-quota-within-capacity.maxOvercommit"),
    ({"allowed-image-registries": {"allowedRegistry": ["quay.io"]}}, "'allowedRegistry' was unexpected"),
    (["no-latest-images"], "must be a JSON object"),
    ([], "must be a JSON object"),  # empty, yet not "no config"
])
def test_bad_policy_config_exits_2(rendered: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   config: Any, complaint: str) -> None:
    assert main(["check", str(rendered["clean"]), "--policy-config", write_config(tmp_path, config)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: policy config: ") and complaint in error


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_knob_that_is_not_a_finite_number_exits_2(rendered: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str], number: str) -> None:
    # NaN compares false with every bound: taken, it would pass any over-capacity stack.
    config = tmp_path / "policy-config.json"
    config.write_text('{"gpu-quota-within-capacity": {"maxOvercommit": %s}}' % number)
    assert main(["check", str(rendered["over-capacity"]), "--policy-config", str(config)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(config) in error and number.lstrip("-")[:3] in error


@pytest.mark.parametrize(("plan", "complaint"), [(b"\xff\xfe{}", "not UTF-8 text"),
                                                 (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")])
def test_an_unreadable_plan_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: bytes,
                                    complaint: str) -> None:
    (tmp_path / "plan.json").write_bytes(plan)
    assert main(["check", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and complaint in error and "render one with" in error


@pytest.mark.parametrize(("plan", "complaint"), [("{", "not JSON"), ("[]", "not a rendered plan"),
                                                 ('{"resources": [{"urn": "x"}]}', "not a rendered plan")])
def test_malformed_plan_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: str, complaint: str) -> None:
    (tmp_path / "plan.json").write_text(plan)
    assert main(["check", str(tmp_path)]) == 2
    assert complaint in capsys.readouterr().err


def test_unknown_value_is_an_advisory_note(dev_plan: Plan) -> None:
    doc = copy.deepcopy(dev_plan.document)
    resource(doc, "tenant-vision-namespace")["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = \
        "[unknown]"
    [note] = check_plan(doc)
    assert note == Violation("tenant-pod-security", "advisory", resource(doc, "tenant-vision-namespace")["urn"],
                             "tenant-vision-namespace", note.message)
    assert "cannot be checked on this plan" in note.message


def sdk_props(value: Any) -> Any:
    """A plan's inputs as the engine hands them: "[unknown]" as the SDK's sentinel, in the SDK's own proxy."""
    def unknowns(item: Any) -> Any:
        if isinstance(item, dict):
            return {key: unknowns(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [unknowns(inner) for inner in item]
        return UNKNOWN_STRING_VALUE if item == "[unknown]" else item
    return unknown_checking_proxy(unknowns(value))


def read_all(value: Any) -> Any:
    """Everything a policy can read from a proxied value: each value, or the error reading it raises."""
    def read(get: Callable[[], Any]) -> Any:
        try:
            return read_all(get())
        except UnknownValueError as error:
            return ("unknown", error.message, error.props)
        except (IndexError, KeyError, TypeError) as error:
            return (type(error).__name__,)
    if isinstance(value, Mapping):
        assert isinstance(value, check._DictProxy.__mro__[1])  # the SDK's mapping proxy
        return {"keys": list(value), "len": len(value), "missing": read(lambda: value["missing"]),
                "items": {key: read(lambda key=key: value[key]) for key in value},
                "get": [read(lambda key=key: value.get(key)) for key in value]}
    if isinstance(value, Sequence) and not isinstance(value, str):
        assert isinstance(value, check._ListProxy.__mro__[1])  # the SDK's sequence proxy
        return {"len": len(value), "items": [read(lambda i=i: value[i]) for i in range(len(value))],
                "last": read(lambda: value[-1]), "beyond": read(lambda: value[len(value)]),
                "key": read(lambda: value["x"]),
                "slice": [read_all(item) if not isinstance(item, str) else item for item in value[1:]]}
    return value


def test_plan_inputs_read_as_the_sdks_proxy_reads_them(dev_plan: Plan) -> None:
    inputs = {"spec": {"list": [1, "[unknown]", {"deep": ["[unknown]", "x"]}, []], "unknown": "[unknown]",
                       "nested": {"n": None, "b": True, "s": "nvcr.io/nvidia/driver:580"}}, "top": "[unknown]"}
    for value in [inputs, *(record["inputs"] for record in dev_plan.document["resources"])]:
        lazy = check._DictProxy(copy.deepcopy(value), [])
        assert read_all(lazy) == read_all(sdk_props(copy.deepcopy(value)))


def engine_run(plan: Document) -> list[tuple[str, str | None, str]]:
    """The pack run as pulumi_policy's analyzer runs it: every resource policy on every resource, each stack
    policy on its own fresh list of resources, the SDK's eager proxies; (policy, urn, message) in report order."""
    reports: list[tuple[str, str | None, str]] = []

    def stack_resources() -> list[PolicyResource]:
        by_urn = {}
        for record in plan["resources"]:
            options = record.get("options", {})
            opts = PolicyResourceOptions(bool(options.get("protect")), list(options.get("ignoreChanges", [])),
                                         options.get("deleteBeforeReplace"), [], PolicyCustomTimeouts(0, 0, 0), [],
                                         record["parent"])
            by_urn[record["urn"]] = PolicyResource(record["type"], sdk_props(record["inputs"]), record["urn"],
                                                   record["name"], opts, None, None, [], {})
        for record in plan["resources"]:
            by_urn[record["urn"]].parent = by_urn.get(record["parent"])
        return list(by_urn.values())

    for policy in POLICIES:
        resources = stack_resources()
        if isinstance(policy, ResourceValidationPolicy):
            for resource in resources:
                def report(message: str, _urn: str | None = None, urn: str = resource.urn) -> None:
                    reports.append((policy.name, urn, message))
                try:
                    policy.validate(ResourceValidationArgs(resource.resource_type, resource.props, resource.urn,
                                                           resource.name, resource.opts, None, {}), report)
                except UnknownValueError as error:
                    reports.append((policy.name, resource.urn, f"cannot be checked on this plan: {error.message}"))
        else:
            try:
                policy.validate(StackValidationArgs(resources, {}),
                                lambda message, urn=None: reports.append((policy.name, urn, message)))
            except UnknownValueError as error:
                reports.append((policy.name, None, f"cannot be checked on this plan: {error.message}"))
    return reports


def test_check_reports_what_the_engine_reports_in_its_order(dev_plan: Plan, prod_plan: Plan) -> None:
    broken = copy.deepcopy(dev_plan.document)
    for mutate, _, _ in VIOLATIONS.values():
        mutate(broken)
    resource(broken, "tenant-vision-namespace")["inputs"]["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] = "[unknown]"
    for plan in (dev_plan.document, prod_plan.document, broken):
        expected = engine_run(plan)
        assert [(v.policy, v.urn, v.message) for v in check_plan(plan)] == expected
    assert len(expected) > len(VIOLATIONS)  # every mutation reported, and the unknown noted
