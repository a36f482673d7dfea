"""`gpuctl preview`: render the stack, diff it against a git ref, and run the policy pack: the PR view."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from gpuctl import check, report, summary
from gpuctl import diff as plan_diff
from gpuctl.cli import (OK, ROOT, VIOLATION, add_format_arguments, add_stack_arguments, console, empty_plan,
                        observed_nodes, output_format_of, stack_file)
from gpuctl.render import render_plan
from gpuctl.runtime import fingerprinted_secrets
from gpuctl.stackfile import stack_file_path
from fleet.kernels import KernelTarget
from stacks.config import ConfigError
from stacks.preflight import PreflightError, RegistryUnreachable, check_driver_images


def _git(*args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ConfigError(f"git {' '.join(args)}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'failed'}")
    return result.stdout.strip()


def render_at(ref: str, stack: str, observed_file: str | None, pull_secret_file: str | None = None) -> dict[str, Any]:
    """Render the stack with the program and stack file as they are at `ref`, in a scratch folder, with the same
    pull secret as the head (from the same file, or the environment it inherits)."""
    try:
        commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except ConfigError:
        raise ConfigError(f"--base {ref}: not a commit in this repository; use a branch, tag or commit") from None
    with tempfile.TemporaryDirectory(prefix="gpuctl-base-") as scratch:
        tree = Path(scratch) / "tree"
        _extract(commit, tree)
        if not stack_file_path(tree, stack).is_file():
            return empty_plan(stack)
        out = Path(scratch) / "plan"
        command = [sys.executable, "-m", "gpuctl", "render", "--stack", stack, "--out", str(out), "--offline"]
        if observed_file:
            command += ["--observed-nodes", str(Path(observed_file).resolve())]
        if pull_secret_file:
            command += ["--registry-pull-secret-file", str(Path(pull_secret_file).resolve())]
        result = subprocess.run(command, cwd=tree, capture_output=True, text=True)
        if result.returncode != 0:
            reason = (result.stderr.strip().splitlines() or ["it failed"])[-1]
            raise ConfigError(f"--base {ref}: the stack does not render there: {reason}")
        return json.loads((out / "plan.json").read_text())


def _extract(commit: str, tree: Path) -> None:
    """The tracked files at `commit`, written to `tree` by this process.

    Not a git worktree: `git worktree add` leaves state in the repository and checks out in a child of its own,
    which outlives it when an interrupted preview kills git, and keeps writing while the scratch folder is
    removed. An archive read in one call and extracted here leaves nothing behind but the scratch folder.
    """
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        raise ConfigError(f"git archive {commit}: {archive.stderr.decode(errors='replace').strip() or 'failed'}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as files:
        files.extractall(tree, filter="data")


def base_kernels(plan: dict[str, Any]) -> list[KernelTarget]:
    """The kernels that had a driver in the base revision."""
    return [KernelTarget(*key.split("/", 1)) for key in plan.get("outputs", {}).get("kernels", [])]


def kept_note(plan: dict[str, Any]) -> list[str]:
    """One line for each driver kept only for lack of evidence."""
    return [f"kept: the driver for {key}, which no pool boots any more; with no node inventory it stays until a "
            "deploy (live discovery) or --observed-nodes shows no node on that kernel"
            for key in plan["outputs"].get("keptKernels", [])]


def new_driver_images(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """The images the GPU Operator will pull that the base revision did not declare, by `os/kernel`."""
    before = old.get("outputs", {}).get("driverImages", {})
    return {key: image for key, image in sorted(new["outputs"].get("driverImages", {}).items())
            if before.get(key) != image}


def preflight_images(plan: dict[str, Any], offline: bool) -> tuple[str, dict[str, str], ConfigError | None]:
    """The driver image preflight: what happened (one line), each image's status, and the error that stops the
    command once the report is shown (a missing image), if any."""
    images = {KernelTarget(*key.split("/", 1)): image for key, image in plan["outputs"]["driverImages"].items()}
    distinct = set(images.values())
    if offline:
        return "skipped (--offline)", dict.fromkeys(distinct, summary.SKIPPED), None
    try:
        check_driver_images(images)
    except RegistryUnreachable as error:
        return f"not verified: {error}", dict.fromkeys(distinct, summary.NOT_VERIFIED), None
    except PreflightError as error:  # names the missing images, and those a registry outage left unverified
        return (f"failed: {error}", {image: summary.MISSING if image in error.missing else summary.NOT_VERIFIED
                                     if image in error.unverified or not error.missing else summary.VERIFIED
                                     for image in distinct}, error)
    return f"passed ({len(distinct)} driver images found)", dict.fromkeys(distinct, summary.VERIFIED), None


def refuse_kernel_without_image(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse an AWS pool whose kernel changes while its image stays: the same image boots the old kernel, so the
    preview would promise a kernel upgrade and a roll that change nothing on the nodes."""
    before = summary.pool_states(old)
    for name, after in summary.pool_states(new).items():
        was = before.get(name)
        if was and after.roll.get("method") == "instance-refresh" and was.kernel and after.kernel \
                and was.kernel != after.kernel and was.image == after.image:
            raise ConfigError(
                f"gpu-platform:nodePools[{name}].kernel and .image: the kernel changes ({was.kernel} -> "
                f"{after.kernel}) but the image stays {after.image}, which boots the old kernel; change both "
                "together (an image that boots the new kernel) or neither")


def run(args: argparse.Namespace) -> int:
    output_format = output_format_of(args)
    observed = observed_nodes(args.observed_nodes)
    if args.base is not None and not args.base.strip():  # an unset CI variable: not "diff against nothing"
        raise ConfigError("--base: empty; pass a branch, tag or commit, or leave --base out to preview a new "
                          "deployment")
    # One key for both renders, this run only: a secret that changed shows a changed fingerprint, and the
    # fingerprint says nothing about the value outside this run.
    with fingerprinted_secrets():
        old = render_at(args.base, args.stack, args.observed_nodes, args.registry_pull_secret_file) if args.base \
            else empty_plan(args.stack)
        new = render_plan(stack_file(args), observed, online=not args.offline, previous=base_kernels(old))
    refuse_kernel_without_image(old, new)
    checked, statuses, missing = preflight_images(new, args.offline)
    changes = plan_diff.diff_plans(old, new)
    plan_diff.refuse_driver_removal(changes, observed or [])
    policy_config = check.read_policy_config(args.policy_config)
    violations = check.check_plan(new, policy_config)
    refused = plan_diff.refused_by_the_engine(changes)
    outcome = VIOLATION if check.has_mandatory(violations) or refused else OK
    review = report.Review(
        args.stack, args.base, changes,
        summary.summarize(old, new, changes, preflight=statuses, offline=args.offline and observed is None),
        violations, len(new["resources"]), checked, kept_note(new), new_driver_images(old, new),
        policies=check.policies_run(policy_config))
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report.to_json(review), indent=2) + "\n")
    if output_format == "json":
        print(json.dumps(report.to_json(review), indent=2))
    elif output_format == "markdown":
        print(report.to_markdown(review), end="")
    else:
        report.print_text(review, console())
    if missing is not None:
        raise missing
    if refused:
        names = ", ".join(step.resource["name"] for step in refused)
        print(f"refused: pulumi up would stop at {len(refused)} protected resource(s) this change deletes or "
              f"replaces ({names}); mark the pool or tenant `retired: true` first and remove it in a later change",
              file=sys.stderr)
    return outcome


def register(commands) -> None:
    parser = commands.add_parser("preview", help="render + diff against a git ref + policies: the PR view")
    add_stack_arguments(parser, config_file=False)
    parser.add_argument("--base", metavar="GIT_REF", help="diff against the stack as it is at this ref")
    add_format_arguments(parser)
    parser.add_argument("--offline", action="store_true", help="skip the registry preflight and live discovery")
    parser.add_argument("--policy-config", metavar="FILE", help="policy pack config (JSON), as for `gpuctl check`")
    parser.add_argument("--json-file", metavar="FILE", help="also write the whole review as JSON to FILE (the "
                                                           "Markdown comment cuts long summaries)")
    parser.set_defaults(run=run)
