"""The delivery workflows: valid against the GitHub workflow schema, and doing what a reviewer relies on.

Schema validation uses the GitHub workflow schema vendored inside check-jsonschema, so it runs offline.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.engine import FLEET_SETTINGS
from tests.conftest import render_stack

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW_FILES = sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])
SHIPPED_STACKS = sorted(path.name.split(".")[1] for path in ROOT.glob("Pulumi.*.yaml"))


# --- helpers ------------------------------------------------------------------------------------------------


def validate(*files: Path) -> subprocess.CompletedProcess[str]:
    """Validate workflow files against check-jsonschema's vendored GitHub workflow schema.

    Proxies point at a closed local port, so any attempt to reach the network fails the run.
    """
    unreachable = "http://127.0.0.1:9"
    env = {**os.environ, "HTTP_PROXY": unreachable, "HTTPS_PROXY": unreachable, "NO_PROXY": ""}
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         *map(str, files)],
        capture_output=True, text=True, env=env, timeout=120, check=False)


def load(name: str) -> dict[str, Any]:
    """A workflow as data. YAML 1.1 reads the bare key `on` as True: map it back."""
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    if True in document:
        document["on"] = document.pop(True)
    return document


def uses(step: dict[str, Any], action: str) -> bool:
    return step.get("uses", "").split("@")[0] == action


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if uses(step, action)]


def index_of(job: dict[str, Any], step: dict[str, Any]) -> int:
    return next(i for i, candidate in enumerate(job["steps"]) if candidate is step)


def gpuctl_preview(job: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The job's one `gpuctl preview` step and its arguments, with the step's `$VARS` expanded."""
    found = [(step, line) for step in job["steps"] for line in step.get("run", "").splitlines()
             if re.search(r"\bpython -m gpuctl preview\b", line)]
    assert len(found) == 1, f"expected one gpuctl preview command, found {len(found)}"
    step, line = found[0]
    variables = {**job.get("env", {}), **step.get("env", {})}
    expanded = re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?",
                      lambda m: str(variables.get(m.group(1), m.group(0))), line)
    words = shlex.split(expanded.split(">")[0])
    return step, words[words.index("preview") + 1:]


def option(arguments: list[str], name: str) -> str | None:
    return arguments[arguments.index(name) + 1] if name in arguments else None


def pulumi_steps(job: dict[str, Any], command: str) -> list[dict[str, Any]]:
    return [step for step in steps_using(job, "pulumi/actions") if step["with"]["command"] == command]


def matrix_stacks(job: dict[str, Any]) -> list[str]:
    return sorted(job["strategy"]["matrix"]["stack"])


# --- schema ---------------------------------------------------------------------------------------------------


def test_both_workflows_are_shipped():
    assert {path.name for path in WORKFLOW_FILES} >= {"preview.yml", "deploy.yml"}


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda path: path.name)
def test_workflow_matches_github_schema(path: Path):
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_accepts_a_minimal_workflow(tmp_path: Path):
    minimal = tmp_path / "minimal.yml"
    minimal.write_text("on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n      - run: 'true'\n")
    result = validate(minimal)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path: Path):
    broken = tmp_path / "broken.yml"
    # No runs-on, and a step that both runs a command and uses an action.
    broken.write_text("on: push\njobs:\n  build:\n    steps:\n      - run: 'true'\n        uses: actions/checkout@v7\n")
    result = validate(broken)
    assert result.returncode != 0
    assert "broken.yml" in result.stdout + result.stderr


def test_stacks_are_shipped():
    assert set(SHIPPED_STACKS) >= {"dev", "staging", "prod"}


# --- pull-request preview -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def preview() -> dict[str, Any]:
    return load("preview.yml")


def test_preview_runs_on_pull_requests_to_main(preview):
    assert preview["on"]["pull_request"]["branches"] == ["main"]


def test_offline_preview_covers_every_shipped_stack(preview):
    assert matrix_stacks(preview["jobs"]["offline-preview"]) == SHIPPED_STACKS


def test_offline_preview_diffs_against_the_target_branch_offline(preview):
    job = preview["jobs"]["offline-preview"]
    checkout = steps_using(job, "actions/checkout")[0]
    assert checkout["with"]["fetch-depth"] == 0, "--base needs the target branch's history"
    setup = steps_using(job, "actions/setup-python")[0]["with"]
    assert str(setup["python-version"]) == "3.11"
    assert setup["cache"] == "pip" and setup["cache-dependency-path"] == "requirements.lock"
    assert any(step.get("run", "").strip() == "pip install -r requirements.lock" for step in job["steps"])

    _, arguments = gpuctl_preview(job)
    assert option(arguments, "--stack") == "${{ matrix.stack }}"
    assert option(arguments, "--base") == "origin/${{ github.base_ref }}"
    assert "--offline" in arguments


def test_offline_preview_needs_no_credentials(preview):
    job = preview["jobs"]["offline-preview"]
    text = yaml.safe_dump(job)
    assert "secrets." not in text and "secrets[" not in text
    assert "id-token" not in job["permissions"]
    assert "if" not in job, "the offline preview runs on every pull request"


def test_offline_preview_posts_one_sticky_comment_per_stack_then_fails_on_a_bad_exit(preview):
    job = preview["jobs"]["offline-preview"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert job["strategy"]["fail-fast"] is False, "one stack's failure must not hide the others' comments"

    run_step, arguments = gpuctl_preview(job)
    assert "set +e" in run_step["run"] and "exit-code=" in run_step["run"], "the exit code is captured"
    assert option(arguments, "--format") == "markdown", "the comment is gpuctl's own Markdown"

    comments = steps_using(job, "marocchino/sticky-pull-request-comment")
    assert len(comments) == 1
    comment = comments[0]
    assert "${{ matrix.stack }}" in comment["with"]["header"], "one sticky comment per stack"
    assert comment["if"].startswith("always()"), "the comment is posted when the preview fails too"
    composed = next(step for step in job["steps"] if comment["with"]["path"] in step.get("run", ""))
    assert "comment.md" in composed["run"], "the comment holds the preview's Markdown"
    assert composed["if"].startswith("always()")
    assert '>> "$GITHUB_STEP_SUMMARY"' in composed["run"], "forks, which get no comment, see it in the job summary"

    failing = job["steps"][-1]
    assert re.search(r"exit-code != '0'", failing["if"]) and "exit" in failing["run"]
    assert index_of(job, run_step) < index_of(job, composed) < index_of(job, comment) < index_of(job, failing)


@pytest.fixture(scope="module")
def aws_stacks() -> list[str]:
    """The shipped stacks whose program registers an AWS provider (Auto Scaling Group pools)."""
    return sorted(stack for stack in SHIPPED_STACKS if render_stack(stack).of_type("pulumi:providers:aws"))


def test_pulumi_preview_is_gated_on_configured_credentials(preview, aws_stacks):
    job = preview["jobs"]["pulumi-preview"]
    assert "vars.PULUMI_PREVIEW == 'true'" in job["if"]
    assert matrix_stacks(job) == SHIPPED_STACKS
    assert job["permissions"]["id-token"] == "write"
    [credentials] = steps_using(job, "aws-actions/configure-aws-credentials")
    assert credentials["with"]["role-to-assume"].startswith("${{ vars.")
    # AWS credentials reach only the stacks that register AWS resources: least privilege.
    assert sorted(re.findall(r"matrix\.stack == '([a-z0-9-]+)'", credentials["if"])) == aws_stacks
    assert any("secrets[format('PREVIEW_KUBECONFIG_{0}', matrix.stack)]" in str(step.get("env", {}))
               for step in job["steps"])


def test_pulumi_preview_comments_and_runs_the_policy_pack(preview):
    job = preview["jobs"]["pulumi-preview"]
    (step,) = pulumi_steps(job, "preview")
    assert step["with"]["comment-on-pr"] is True
    assert step["with"]["policyPacks"] == "policy" and (ROOT / "policy").is_dir()
    assert "matrix.stack" in step["with"]["stack-name"]
    assert step["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"


# --- deployment ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deploy() -> dict[str, Any]:
    return load("deploy.yml")


def deploy_jobs(deploy: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """stack -> (job id, job) for every job that runs `pulumi up`."""
    return {job["env"]["STACK"]: (job_id, job) for job_id, job in deploy["jobs"].items()
            if pulumi_steps(job, "up")}


def test_deploy_runs_on_merge_to_main_and_by_hand(deploy):
    assert deploy["on"]["push"]["branches"] == ["main"]
    assert "workflow_dispatch" in deploy["on"]


def test_deploy_covers_every_shipped_stack(deploy):
    assert sorted(deploy_jobs(deploy)) == SHIPPED_STACKS


def test_deploy_runs_dev_first_then_staging_then_prod_behind_environments(deploy):
    jobs = deploy_jobs(deploy)
    dev_id, dev = jobs["dev"]
    staging_id, staging = jobs["staging"]
    _, prod = jobs["prod"]
    assert "needs" not in dev, "dev deploys first, automatically"
    assert dev["if"] == "github.ref == 'refs/heads/main'"
    assert staging["needs"] in (dev_id, [dev_id])
    assert prod["needs"] in (staging_id, [staging_id])
    assert staging["environment"] == "staging"
    assert prod["environment"] == "production"
    # onprem takes what soaked in staging, behind its own approval.
    _, onprem = jobs["onprem"]
    assert onprem["needs"] in (staging_id, [staging_id])
    assert onprem["environment"] == "onprem"


def test_deploy_gives_aws_credentials_only_to_stacks_with_aws_resources(deploy, aws_stacks):
    for stack, (_, job) in deploy_jobs(deploy).items():
        credentials = steps_using(job, "aws-actions/configure-aws-credentials")
        assert bool(credentials) == (stack in aws_stacks), stack
        assert ("id-token" in job["permissions"]) == (stack in aws_stacks), stack


def test_deploy_serialises_updates_per_stack_without_cancelling(deploy):
    groups = set()
    for stack, (_, job) in deploy_jobs(deploy).items():
        assert stack in job["concurrency"]["group"]
        assert job["concurrency"]["cancel-in-progress"] is False
        groups.add(job["concurrency"]["group"])
    assert len(groups) == len(SHIPPED_STACKS)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_deploy_previews_with_preflight_before_up_with_the_policy_pack(deploy, stack):
    _, job = deploy_jobs(deploy)[stack]
    preflight, arguments = gpuctl_preview(job)
    assert option(arguments, "--stack") == stack
    assert "--offline" not in arguments, "the driver image preflight runs before a deployment"
    (up,) = pulumi_steps(job, "up")
    assert index_of(job, preflight) < index_of(job, up)
    assert up["with"]["policyPacks"] == "policy"
    assert "env.STACK" in up["with"]["stack-name"]


def test_deploy_writes_the_state_once_only_where_every_create_upserts(deploy, aws_stacks):
    """Stacks of Kubernetes objects only update without the engine's per-step checkpoints, with forced applies
    (docs/deploying.md): after a killed update, the next one's creates take over what it made. AWS resources do not
    upsert, so stacks with them keep the checkpoints. The fleet's `up` runs as the e2e tests run it."""
    for stack, (_, job) in deploy_jobs(deploy).items():
        (up,) = pulumi_steps(job, "up")
        settings = {key: up.get("env", {}).get(key) for key in FLEET_SETTINGS}
        assert settings == (dict.fromkeys(FLEET_SETTINGS) if stack in aws_stacks else FLEET_SETTINGS), stack


def test_fleet_deploys_run_the_cli_without_its_automatic_log(deploy, aws_stacks):
    """Where the fleet's update runs (the stacks that skip checkpoints), ~/.pulumi/logs is a file before any pulumi
    step, so the CLI writes no automatic log, which the runner would discard (docs/deploying.md)."""
    for stack, (_, job) in deploy_jobs(deploy).items():
        switched = [step for step in job["steps"] if step.get("run") == "mkdir -p ~/.pulumi && touch ~/.pulumi/logs"]
        assert len(switched) == (stack not in aws_stacks), stack
        for step in switched:
            assert all(index_of(job, step) < index_of(job, other)
                       for command in ("preview", "up") for other in pulumi_steps(job, command)), stack


# --- both -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_actions_are_pinned_to_a_release(name):
    pinned = re.compile(r"^[\w.-]+/[\w./-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})$")
    for job in load(name)["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert pinned.match(step["uses"]), f"{step['uses']} is not pinned to a release or commit"


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_token_is_read_only_unless_a_job_asks(name):
    assert load(name)["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_deploy_runs_the_policy_pack_on_a_preview_before_up(deploy, stack):
    # Stack policies run only after `pulumi up` has registered every resource, so a mandatory stack-policy
    # violation must stop the job in a preview, before the update.
    _, job = deploy_jobs(deploy)[stack]
    (preview_step,) = pulumi_steps(job, "preview")
    (up,) = pulumi_steps(job, "up")
    assert index_of(job, preview_step) < index_of(job, up)
    assert preview_step["with"]["policyPacks"] == "policy"
    assert preview_step["with"]["stack-name"] == up["with"]["stack-name"]
    assert "continue-on-error" not in preview_step, "a failed preview must stop the job"


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_the_pulumi_cli_is_pinned_beside_the_python_sdk(name):
    """The CLI and the pulumi SDK are released together under one version: the one requirements.lock pins."""
    [sdk] = re.findall(r"(?m)^pulumi==([\d.]+)$", (ROOT / "requirements.lock").read_text())
    steps = [step for job in load(name)["jobs"].values() for step in steps_using(job, "pulumi/actions")]
    assert steps and all(str(step["with"].get("pulumi-version")) == sdk for step in steps)


def test_deploy_timeouts_cover_the_longest_waits_of_one_up(deploy):
    """One `pulumi up` may wait, in a row: each Helm release (its timeout), the OLM subscription, a removed pool's
    group while its nodes sit in their drain hook (the group's delete timeout at the longest heartbeat the config
    allows), and a custom resource's delete; plus the install and both previews. A job killed mid-update leaves
    the stack locked with pending operations."""
    from stacks.config import RollConfig
    from tests.conftest import render_stack

    longest_drain = next(meta.le for meta in RollConfig.model_fields["drain_timeout_seconds"].metadata
                         if hasattr(meta, "le"))
    helm_seconds = max(sum(r["inputs"]["timeout"] for r in render_stack(stack).of_type(
        "kubernetes:helm.sh/v3:Release")) for stack in SHIPPED_STACKS)
    waits = helm_seconds / 60 + 10 + (longest_drain // 60 + 10) + 10
    for job_id, job in deploy_jobs(deploy).values():
        assert job["timeout-minutes"] >= waits + 20, f"{job_id}: {job['timeout-minutes']} min < {waits} min of waits"


def test_offline_preview_keeps_the_base_plans_between_runs(preview):
    # A warm base renders only the head: the folder gpuctl reads by default, per stack and base commit.
    job = preview["jobs"]["offline-preview"]
    [cache] = steps_using(job, "actions/cache")
    assert cache["with"]["path"] == "~/.cache/gpuctl/base-plans"
    assert "${{ matrix.stack }}" in cache["with"]["key"] and "base.sha" in cache["with"]["key"]
    names = [step.get("name") for step in job["steps"]]
    assert names.index(cache["name"]) < names.index("gpuctl preview")


def test_the_pr_workflow_previews_against_the_deployed_state_where_the_backend_is_configured(preview):
    job = preview["jobs"]["deployed-preview"]
    assert "vars.PULUMI_PREVIEW == 'true'" in job["if"] and "head.repo.full_name" in job["if"]
    assert matrix_stacks(job) == SHIPPED_STACKS
    export = next(step for step in job["steps"] if "pulumi stack export" in step.get("run", ""))
    assert export["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    state = shlex.split(export["run"])[-1]
    run_step, arguments = gpuctl_preview(job)
    assert option(arguments, "--base-state") == state and option(arguments, "--base") == "origin/${{ github.base_ref }}"
    assert index_of(job, export) < index_of(job, run_step)
    assert "--base-state" not in gpuctl_preview(preview["jobs"]["offline-preview"])[1], "that job has no credentials"
