"""`gpuctl preview`: render the stack, diff it against a git ref, and run the policy pack: the PR view."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from gpuctl import basecache, check, deployed, report, reuse, scratch, standby, summary, upgrade
from gpuctl import diff as plan_diff
from gpuctl.children import Child, Group, ahead, wait_all
from gpuctl.inputs import read_input
from gpuctl.outputs import check_output_file, write_output_file
from gpuctl.cli import (BAD_INPUT, OK, ROOT, VIOLATION, add_format_arguments, add_stack_arguments, console,
                        empty_plan, observed_nodes, output_format_of, stack_file)
from gpuctl.render import render_plan, stream_plan
from gpuctl.runtime import fingerprinted_secrets
from gpuctl.stackfile import StackFile, load_stack_file, stack_file_path
from fleet.kernels import KernelTarget, ObservedNode
from stacks.config import PROJECT, ConfigError, config_from_stack_file
from stacks.inventory import node_list
from stacks.part import Part
from stacks.preflight import PreflightError, RegistryUnreachable, check_driver_images


def _git(*args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ConfigError(f"git {' '.join(args)}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'failed'}")
    return result.stdout.strip()


FINGERPRINTED = '"[secret '  # a masked value with its fingerprint (gpuctl/runtime.py)


def resolve(ref: str) -> str:
    """The commit `ref` names, or bad input."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except ConfigError:
        raise ConfigError(f"--base {ref}: not a commit in this repository; use a branch, tag or commit") from None


def render_both(args: argparse.Namespace, head: StackFile,
                observed: list[ObservedNode] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plans of the stack at `--base` and in the working tree.

    The base renders with the program and stack file as they are at that commit, in a scratch folder, unless the
    cache holds its plan. The head keeps the drivers of the base's kernels and, with --base-state, of the kernels the
    deployed state holds, as the program does under the engine. With --jobs 2 or more the head renders in forks at
    the same time: its base kernels (which drivers to keep) read from the base's stack file, and, in the processes the base leaves free, in parts of
    the tenants (`head_parts`). When the base's plan says other kernels, or a part fails or the parts disagree,
    the head renders again in this process, so the result is the same either way. With the base's plan cached and
    the base's code in the working tree, only the tenants whose inputs changed render again: the base's plan holds
    the others as the head would register them (`gpuctl/reuse.py`).
    """
    commit = resolve(args.base)
    # With the deployed state, the kernels that had a driver at the last deploy: the head keeps their drivers as the
    # program does under the engine while nodes may still run them (a kernel upgraded before its nodes rebooted).
    deployed_kernels = deployed.kernels(args.deployed, args.base_state) if args.deployed is not None else []
    observed_json = read_input(Path(args.observed_nodes), f"--observed-nodes {args.observed_nodes}",
                               "pass a `kubectl get nodes -o json` file").encode() if args.observed_nodes else None
    entry = None if args.no_cache else basecache.key(_git("ls-tree", commit), args.stack, observed_json,
                                                     args.stack_path)
    old = basecache.read(entry) if entry else None
    online = not args.offline
    # The children end (killed and reaped) before their scratch folder is removed.
    with scratch.folder("gpuctl-base-") as work, Group() as children:
        base: list[Child] = []
        parts: list[Child] = []
        previous = _previous(old, deployed_kernels) if old is not None else None
        if old is not None and (new := _from_base(old, head, observed, online, previous, commit, args)) is not None:
            return old, new
        standby.stop()  # the renders below need its CPU
        if old is None:
            _extract(commit, work / "tree")
            if args.stack_path and (work / "tree" / args.stack_path).is_file():
                base.append(_start_base(args, work, children))
                declared = _declared_kernels(work / "tree" / args.stack_path, args.stack, observed)
                previous = None if declared is None else sorted({*declared, *deployed_kernels})
            else:
                old = empty_plan(args.stack)
                previous = _previous(old, deployed_kernels)
        if args.jobs > 1 and previous is not None:
            count = head_parts(head, args.jobs - len(base))
            parts = [children.fork(functools.partial(
                _render_head, head, observed, online, previous, work / f"head-{index}",
                Part(index, count) if count > 1 else None)) for index in range(count)]
        wait_all([*base, *parts])
        if old is None:
            old = _base_plan(base[0], args.base, work, entry)
        new, said = _head_plan(parts, work) if parts else (None, "")
        if new is not None and set(previous) == set(_previous(old, deployed_kernels)):
            sys.stderr.write(said)
            return old, new
        return old, render_plan(head, observed, online=online, previous=_previous(old, deployed_kernels))


def _from_base(old: dict[str, Any], head: StackFile, observed: list[ObservedNode] | None, online: bool,
               previous: list[KernelTarget], commit: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """The head's plan from the base's: with the base's code, only the tenants whose inputs changed render again
    (`gpuctl/reuse.py`); None when that cannot be shown to give the whole render's plan."""
    part = reuse.changed_tenants(old)
    if part is None or not reuse.same_program(commit, args.stack, args.stack_path):
        return None
    said = io.StringIO()  # what the render says is said once, by the render whose plan is used
    try:
        plan = standby.render(said, stack_file=head, observed=observed, online=online, previous=previous, part=part)
        if plan is None:
            with contextlib.redirect_stderr(said):
                plan = render_plan(head, observed, online=online, previous=previous, part=part)
        new = reuse.splice(old, plan)
    except ConfigError:
        sys.stderr.write(said.getvalue())
        raise
    if new is not None:
        sys.stderr.write(said.getvalue())
    return new


def _previous(base: dict[str, Any], deployed_kernels: list[KernelTarget]) -> list[KernelTarget]:
    """The kernels whose drivers the head keeps for lack of a node inventory: the base's, and the deployed state's."""
    return sorted({*base_kernels(base), *deployed_kernels})


TENANTS_PER_PART = 100  # each part registers everything but the tenants again: fewer tenants are not worth it


def head_parts(head: StackFile, processes: int) -> int:
    """In how many processes the head renders: at most `processes`, and at least TENANTS_PER_PART tenants each."""
    tenants = head.config.get(f"{PROJECT}:tenants")
    return max(1, min(processes, len(tenants) // TENANTS_PER_PART if isinstance(tenants, list) else 0))


def _start_base(args: argparse.Namespace, work: Path, children: Group) -> Child:
    """`gpuctl render` of the base revision, as that revision's gpuctl does it, into work/plan."""
    source = ["--config-file", str(work / "tree" / args.stack_path)] if args.config_file else ["--stack", args.stack]
    command = [sys.executable, "-m", "gpuctl", "render", *source, "--out", str(work / "plan"), "--offline"]
    if args.observed_nodes:
        command += ["--observed-nodes", str(Path(args.observed_nodes).resolve())]
    if args.registry_pull_secret_file:  # the head's pull secret, so both routes give the same plan
        command += ["--registry-pull-secret-file", str(Path(args.registry_pull_secret_file).resolve())]
    return children.command(command, cwd=work / "tree", stderr=work / "base.stderr")


def _base_plan(child: Child, ref: str, work: Path, entry: str | None) -> dict[str, Any]:
    if child.returncode != 0:
        said = (work / "base.stderr").read_text(errors="replace")
        if scratch.full(said):  # the scratch folder, not the base revision, is at fault
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        reason = (said.strip().splitlines() or ["it failed"])[-1]
        raise ConfigError(f"--base {ref}: the stack does not render there: {reason}")
    # A plan whose secrets carry this run's fingerprints is not kept: another run's key would show them changed.
    if entry and FINGERPRINTED not in (work / "plan" / "plan.json").read_text(errors="replace"):
        basecache.write(entry, work / "plan" / "plan.json")
    with open(work / "plan" / "plan.json", "rb") as plan:
        return json.load(plan)


def _declared_kernels(path: Path, stack: str, observed: list[ObservedNode] | None) -> list[KernelTarget] | None:
    """The kernels the base's plan will most likely list (what its stack file at `path` declares and the nodes
    run), read with this revision's code; None when this code cannot read that stack file."""
    try:
        values = load_stack_file(path, stack).config
        config = config_from_stack_file(values)
    except ConfigError:
        return None
    return sorted(config.declared_kernels | {node.target for node in observed or ()})


def _render_head(head: StackFile, observed: list[ObservedNode] | None, online: bool,
                 previous: list[KernelTarget], out: Path, part: Part | None) -> int:
    """In a forked child: render the head (or a part of it) and stream its plan to `out`, what it says to
    out.stderr, and bad input to out.error (exit 2). Nothing is reported from here: gpuctl decides."""
    os.dup2(os.open(out.with_suffix(".stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
    try:
        plan = render_plan(head, observed, online=online, previous=previous, part=part)
    except ConfigError as error:
        out.with_suffix(".error").write_text(str(error))
        return BAD_INPUT
    with open(out, "w") as stream:
        stream_plan(plan, stream)
    return OK


def _head_plan(parts: list[Child], work: Path) -> tuple[dict[str, Any] | None, str]:
    """The head's plan from its parts and what its render said on stderr; no plan when a part failed or the parts
    disagree on what they all register (a resource, the outputs) or say. Bad input that every part met alike
    (the config, the cluster's answers) is raised as it is, after what they said: a render says the same."""
    said = {_read(work / f"head-{index}.stderr") for index in range(len(parts))}
    codes = {child.returncode for child in parts}
    if len(said) != 1 or None in said:
        return None, ""
    if codes == {BAD_INPUT}:
        refused = {_read(work / f"head-{index}.error") for index in range(len(parts))}
        if len(refused) == 1 and None not in refused:
            sys.stderr.write(said.pop())
            raise ConfigError(refused.pop())
    if codes != {OK}:
        return None, ""
    plans = []
    for index in range(len(parts)):
        with open(work / f"head-{index}", "rb") as stream:
            plans.append(json.load(stream))
    first, *others = plans
    by_urn = {record["urn"]: record for record in first["resources"]}
    for plan in others:
        if plan["outputs"] != first["outputs"] or plan["tenantInputs"] != first["tenantInputs"]:
            return None, ""
        for record in plan["resources"]:
            if by_urn.setdefault(record["urn"], record) != record:
                return None, ""
    return ({**first, "resources": sorted(by_urn.values(), key=lambda record: record["urn"])} if others else first,
            said.pop())


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


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
        files.extractall(tree, filter=_inside)


def _inside(member: tarfile.TarInfo, tree: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, skipping (not failing on) what would point outside the tree, such as a committed
    link to an absolute path: the program reads nothing outside its checkout."""
    try:
        return tarfile.data_filter(member, tree)
    except tarfile.FilterError:
        return None


# What a base commit re-rendered cannot stand in for: the state `pulumi up` compares with was rendered with the nodes
# of the last deploy, and the program keeps a driver for every kernel a node runs.
RE_RENDERED_BASE = (
    "the base is {ref} re-rendered with today's nodes, not the state last deployed: a driver created or deleted "
    "because nodes changed kernel or OS release since the last deploy (a driver no node needs any more, one for a "
    "node on an undeclared kernel) is in pulumi up's plan but not shown here")


# What `pulumi up` still reads live that an offline preview without a node inventory cannot: drift made by hand.
LIVE_CHECKS = (
    "pulumi up reads the cluster live and still checks what this preview could not: the kernel and OS release each "
    "GPU node reports (NFD's labels: a node relabelled or a label removed by hand changes which drivers are kept or "
    "added), the nodes of bring-your-own pools (their GPU taint and the labels that select them), and the CRDs the "
    "stack needs but does not install")


def base_kernels(plan: dict[str, Any]) -> list[KernelTarget]:
    """The kernels that had a driver in the base revision."""
    return [KernelTarget(*key.split("/", 1)) for key in plan.get("outputs", {}).get("kernels", [])]


def kept_note(plan: dict[str, Any]) -> list[str]:
    """One line for each driver kept only for lack of evidence (not for a kernel whose OS's driver serves a declared
    kernel too: that driver stays anyway)."""
    return [f"kept: the driver for {key}, which no pool boots any more; with no node inventory it stays until a "
            "deploy (live discovery) or --observed-nodes shows no node on that kernel"
            for key in plan["outputs"].get("keptKernels", []) if not upgrade.shared(plan, key)]


def new_driver_images(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """The images the GPU Operator will pull that the base revision did not declare, by `os/kernel`."""
    before = old.get("outputs", {}).get("driverImages", {})
    return {key: image for key, image in sorted(new["outputs"].get("driverImages", {}).items())
            if before.get(key) != image and image not in before.values()}


SWITCHED_OFF = f"skipped ({PROJECT}:preflight false)"


def preflight_images(plan: dict[str, Any], offline: bool,
                     enabled: bool = True) -> tuple[str, dict[str, str], ConfigError | None]:
    """The driver image preflight: what happened (one line), each image's status, and the error that stops the
    command once the report is shown (a missing image), if any. `enabled`: the stack's preflight setting, which
    `pulumi up` obeys too."""
    images = {KernelTarget(*key.split("/", 1)): image for key, image in plan["outputs"]["driverImages"].items()}
    distinct = set(images.values())
    if offline:
        return "skipped (--offline)", dict.fromkeys(distinct, summary.SKIPPED), None
    if not enabled:
        return SWITCHED_OFF, dict.fromkeys(distinct, SWITCHED_OFF), None
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
    """Refuse an AWS pool (an Auto Scaling Group's or Karpenter's) whose kernel changes while its image stays: the same image boots the old kernel, so the
    preview would promise a kernel upgrade and a roll that change nothing on the nodes."""
    before = summary.pool_states(old)
    for name, after in summary.pool_states(new).items():
        was = before.get(name)
        if was and after.roll.get("method") in ("instance-refresh", summary.DRIFT) and was.kernel and after.kernel \
                and was.kernel != after.kernel and was.image == after.image:
            raise ConfigError(
                f"gpu-platform:nodePools[{name}].kernel and .image: the kernel changes ({was.kernel} -> "
                f"{after.kernel}) but the image stays {after.image}, which boots the old kernel; change both "
                "together (an image that boots the new kernel) or neither")


JSON_FILE_FIX = "pass a new file, or one an earlier --json-file wrote, in a writable folder"


def _a_review(text: str) -> bool:
    """Whether `text` is a review an earlier `--json-file` wrote (which a later run may replace)."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(document, dict) and {"steps", "changeSummary", "summary"} <= document.keys()


def run(args: argparse.Namespace) -> int:
    if args.base is not None and not args.base.strip():  # an unset CI variable: not "diff against nothing"
        raise ConfigError("--base: empty; pass a branch, tag or commit, or leave --base out to preview a new "
                          "deployment")
    if args.base_state is not None and not args.base:
        raise ConfigError("--base-state: needs --base, the commit that was deployed (its render gives the deployed "
                          "resources' inputs); pass --base <that commit>")
    if args.base and not args.no_cache:
        basecache.check_folder()
    if args.json_file is not None:  # refused before anything is rendered, as `render --out` is
        check_output_file(Path(args.json_file), f"--json-file {args.json_file}", _a_review, JSON_FILE_FIX)
    head = stack_file(args)
    args.stack, args.stack_path = head.stack, _stack_path(args)
    args.deployed = deployed.read_state(args.base_state) if args.base_state is not None else None
    with scratch.folder("gpuctl-nodes-") as nodes:
        if args.base and not args.offline and args.observed_nodes is None:
            args.observed_nodes = _live_nodes(head, nodes / "nodes.json")
        return _preview(args, head)


def _stack_path(args: argparse.Namespace) -> str | None:
    """The stack file's path in the checkout, the same at every revision; None for a file outside it."""
    if not args.config_file:
        return stack_file_path(Path(), args.stack).as_posix()
    try:
        return Path(args.config_file).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def _new_at(args: argparse.Namespace) -> str | None:
    """The stack file's path when `--base` does not hold it (the stack is new there), else None."""
    if args.stack_path is None:
        return args.config_file
    found = subprocess.run(["git", "cat-file", "-e", f"{resolve(args.base)}:{args.stack_path}"], cwd=ROOT,
                           capture_output=True)
    return None if found.returncode == 0 else args.stack_path


def _live_nodes(head: StackFile, path: Path) -> str | None:
    """The cluster's GPU nodes read once, into `path`, when the stack reads them live: the base then renders with
    the nodes the head sees (which kernels' drivers it kept), as the engine's state holds them."""
    try:
        config = config_from_stack_file(head.config)
    except ConfigError:
        return None  # the head render names what is wrong
    if not config.cluster.discovery.enabled:
        return None
    from stacks.discovery import read_live_nodes  # the Kubernetes client loads only for commands that read

    # What the renders read of the nodes and nothing else, so the base cache's key holds while they hold.
    path.write_text(json.dumps(node_list(read_live_nodes(config.cluster.discovery))))
    return str(path)


def _preview(args: argparse.Namespace, head: StackFile) -> int:
    output_format = output_format_of(args)
    observed = observed_nodes(args.observed_nodes)
    # One key for both renders, this run only: a secret that changed shows a changed fingerprint, and the
    # fingerprint says nothing about the value outside this run.
    with fingerprinted_secrets():
        if args.base:
            old, new = render_both(args, head, observed)
            if args.deployed is not None:
                old = deployed.as_deployed(old, args.deployed, args.stack)
        else:
            old, new = empty_plan(args.stack), render_plan(head, observed, online=not args.offline)
    refuse_kernel_without_image(old, new)
    upgrade.refuse_release_change(old, new)
    config = config_from_stack_file(head.config)
    policy_config = check.read_policy_config(args.policy_config)
    checking = functools.partial(check.check_plan, new, policy_config)
    with Group() as children:
        # With a second processor, the policy pack checks the head's plan in a fork while this process diffs it.
        violations_of = ahead(children, checking) if args.jobs > 1 else checking
        checked, statuses, missing = preflight_images(new, args.offline, config.preflight)
        changes = plan_diff.diff_plans(old, new)
        plan_diff.refuse_driver_removal(changes, new, observed or [])
        fleet = summary.summarize(old, new, changes, preflight=statuses, offline=args.offline and observed is None)
        violations = violations_of()
    refused = plan_diff.refused_by_the_engine(changes)
    outcome = VIOLATION if check.has_mandatory(violations) or refused else OK
    if args.base and args.deployed is None:
        fleet.unknowns.insert(0, RE_RENDERED_BASE.format(ref=args.base))
    if args.offline and observed is None and config.cluster.discovery.enabled:
        fleet.unknowns.append(LIVE_CHECKS)
    base = f"{args.base} as deployed ({args.base_state})" if args.deployed is not None else args.base
    review = report.Review(
        args.stack, base, changes, fleet,
        violations, len(new["resources"]), checked, kept_note(new), new_driver_images(old, new),
        policies=check.policies_run(policy_config),
        new_stack=_new_at(args) if args.base else None)
    if args.json_file:
        write_output_file(Path(args.json_file), json.dumps(report.to_json(review), indent=2) + "\n",
                          f"--json-file {args.json_file}", _a_review, JSON_FILE_FIX)
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
              f"replaces ({names}); mark the pool, tenant or tenant network `retired: true` first and remove it in a later change",
              file=sys.stderr)
    return outcome


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def jobs(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: pass a whole number of processes, 1 or more")
    return int(value)


def register(commands) -> None:
    parser = commands.add_parser("preview", help="render + diff against a git ref + policies: the PR view")
    add_stack_arguments(parser)
    parser.add_argument("--base", metavar="GIT_REF", help="diff against the stack as it is at this ref")
    parser.add_argument("--base-state", metavar="FILE",
                        help="`pulumi stack export` of the stack as deployed: the base is the resources it holds and "
                             "its outputs, with the inputs of --base (the commit deployed)")
    add_format_arguments(parser)
    parser.add_argument("--offline", action="store_true", help="skip the registry preflight and live discovery")
    parser.add_argument("--policy-config", metavar="FILE", help="policy pack config (JSON), as for `gpuctl check`")
    parser.add_argument("--jobs", type=jobs, default=usable_cpus(), metavar="N",
                        help="render processes at once (default: this machine's CPUs): the base and the head at "
                             "once, a stack of many tenants in parts, and with the base cached a render on standby "
                             "as gpuctl starts; 1: in turn, in one process, with the least memory in use")
    parser.add_argument("--no-cache", action="store_true",
                        help=f"render the base even when the cache ({basecache.folder()}) holds its plan")
    parser.add_argument("--json-file", metavar="FILE", help="also write the whole review as JSON to FILE (the "
                                                           "Markdown comment cuts long summaries)")
    parser.set_defaults(run=run)
