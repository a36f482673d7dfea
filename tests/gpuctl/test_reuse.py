"""gpuctl/reuse.py: a preview's head from its base's plan, only the tenants a change touches rendered again, must be
the whole head's render, resource for resource."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.preview import committed_project
from gpuctl.render import render_plan
from gpuctl.reuse import changed_tenants, same_program, splice
from gpuctl.stackfile import stack_file_from_config
from tests.conftest import stack_config

TENANTS = "gpu-platform:tenants"


def with_fleet(stack: str) -> dict[str, Any]:
    """A shipped stack with a dozen more tenants (no GPUs: the capacity holds), every fourth with a network where the
    stack's pools can carry one."""
    config = stack_config(stack)
    queued = config.get("gpu-platform:tenancy", {}).get("mode") == "queue"
    pool = config["gpu-platform:nodePools"][0]["name"]
    config[TENANTS] += [{
        "name": f"team-{index:02}", "gpus": 0, **({"queue": {"pools": [pool]}} if queued else {}),
        **({"networks": [{"name": "collective", "type": "macvlan", "master": f"ens6f1.{100 + index}", "mode": "bridge",
                          "ipam": {"type": "whereabouts", "range": f"10.30.{index}.0/24"}}]}
           if stack == "onprem" and index % 4 == 0 else {}),
    } for index in range(12)]
    return config


def render(stack: str, config: dict[str, Any], part=None) -> dict[str, Any]:
    return render_plan(stack_file_from_config(stack, copy.deepcopy(config)), part=part)


def tenants_registered(plan: dict[str, Any]) -> set[str]:
    roots = {root: tenant for tenant, entry in plan["tenantInputs"].items() for root in entry["resources"]}
    return {roots[record["name"]] for record in plan["resources"]
            if record["name"] in roots and record["parent"].endswith("::gpu-platform")}


def added_last(config: dict) -> None:
    config[TENANTS].append({**config[TENANTS][-1], "name": "newcomer"})


def added_first(config: dict) -> None:
    config[TENANTS].insert(0, {**config[TENANTS][-1], "name": "newcomer"})


def removed(config: dict) -> None:
    del config[TENANTS][1]


def retired(config: dict) -> None:
    config[TENANTS][-2]["retired"] = True


def regrouped(config: dict) -> None:
    config[TENANTS][-3]["group"] = "another-group"


def reprioritized(config: dict) -> None:
    config[TENANTS][-1]["priorityClass"] = "gpu-high"


def given_more(config: dict) -> None:
    """The first tenant given one more of what it holds (whole GPUs first, else shares)."""
    tenant = config[TENANTS][0]
    key = "gpus" if tenant.get("gpus") else "gpuShares"
    tenant[key] += 1


def reordered(config: dict) -> None:
    config[TENANTS].reverse()


def pool_grown(config: dict) -> None:
    config["gpu-platform:nodePools"][0]["replicas"] += 1


EDITS: dict[str, Callable[[dict], None]] = {function.__name__: function for function in (
    added_last, added_first, removed, retired, regrouped, reprioritized, given_more, reordered, pool_grown)}


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("stack", ["onprem", "queue", "queue-openshift", "dra-queue"])
def test_the_head_from_its_base_is_the_whole_render(stack: str, edit: str) -> None:
    base_config = with_fleet(stack)
    head_config = copy.deepcopy(base_config)
    EDITS[edit](head_config)
    base = render(stack, base_config)

    part = changed_tenants(base)
    incremental = render(stack, head_config, part)
    whole = render(stack, head_config)

    assert splice(base, incremental) == whole


@pytest.mark.parametrize("stack", ["onprem", "queue"])
def test_a_tenant_added_last_renders_alone(stack: str) -> None:
    """Quota mode, and queue mode where each guarantee depends on the tenants before it: a tenant added last
    changes no other tenant's inputs."""
    base_config = with_fleet(stack)
    head_config = copy.deepcopy(base_config)
    added_last(head_config)
    incremental = render(stack, head_config, changed_tenants(render(stack, base_config)))

    assert tenants_registered(incremental) == {"newcomer"}


def test_a_change_to_every_tenants_inputs_renders_them_all() -> None:
    """The tenants' role is the platform's: renamed, every tenant's binding names the new one."""
    base_config = with_fleet("queue")
    head_config = copy.deepcopy(base_config)
    head_config["gpu-platform:tenancy"]["cohort"] = "another-cohort"
    base = render("queue", base_config)
    incremental = render("queue", head_config, changed_tenants(base))

    assert tenants_registered(incremental) == set(incremental["tenantInputs"])
    assert splice(base, incremental) == render("queue", head_config)


def test_a_base_plan_without_digests_is_not_reused() -> None:
    base = render("onprem", with_fleet("onprem"))
    del base["tenantInputs"]

    assert changed_tenants(base) is None


def test_records_that_do_not_fit_together_are_not_spliced() -> None:
    config = with_fleet("onprem")
    base = render("onprem", config)
    incremental = render("onprem", config, changed_tenants(base))
    assert splice(base, incremental) == render("onprem", config)

    without_a_root = {**base, "resources": [record for record in base["resources"] if record["name"] != "tenant-team-03"]}
    assert splice(without_a_root, incremental) is None
    kept = next(record for record in base["resources"] if record["name"] == "tenant-team-03")
    without_a_dependency = {**incremental, "resources": [record for record in incremental["resources"]
                                                         if record["urn"] != kept["dependencies"][0]]}
    assert splice(base, without_a_dependency) is None


def test_the_program_is_the_bases_only_while_no_file_a_render_reads_changes(tmp_path) -> None:
    repo = committed_project(tmp_path / "repo")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                            text=True).stdout.strip()

    def after(path: str, text: str) -> bool:
        original = (repo / path).read_text() if (repo / path).exists() else None
        (repo / path).write_text((original or "") + text)
        try:
            return same_program(commit, "dev", "Pulumi.dev.yaml", repo)
        finally:
            if original is None:
                (repo / path).unlink()
            else:
                (repo / path).write_text(original)

    assert same_program(commit, "dev", "Pulumi.dev.yaml", repo)
    assert after("Pulumi.dev.yaml", "\n") and after("Pulumi.prod.yaml", "\n") and after("README.md", "\n")
    assert after("docs/gpuctl.md", "\n") and after("tests/conftest.py", "\n")
    assert not after("components/tenant_quota.py", "\n# a comment is a change too\n")
    assert not after("components/new_module.py", "VALUE = 1\n"), "an untracked file the program may import"
    assert not after("examples/Pulumi.queue.yaml", "\n"), "read by a preview of --config-file examples/..."
    assert not after("Pulumi.yaml", "\n")
