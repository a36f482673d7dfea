"""Shared command-line plumbing: exit codes, one-line errors, stack and node-list arguments."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pydantic
from pydantic import SecretStr
from rich.console import Console

from gpuctl.inputs import read_input
from gpuctl.stackfile import StackFile, load_stack_file, stack_file_path
from stacks.config import PROJECT, ConfigError, docker_config_json
from fleet.kernels import ObservedNode
from stacks.inventory import parse_node_list

ROOT = Path(__file__).resolve().parent.parent
OK, VIOLATION, BAD_INPUT = 0, 1, 2
# Offline, the registry pull secret comes from a file or this variable, never from the stack file's ciphertext.
PULL_SECRET_ENV = "GPU_PLATFORM_REGISTRY_PULL_SECRET"
PULL_SECRET_KEY = f"{PROJECT}:registryPullSecret"
MAX_PULL_SECRET_BYTES = 1 << 20  # a .dockerconfigjson for a handful of registries is a few hundred bytes


class Parser(argparse.ArgumentParser):
    """argparse that reports usage mistakes as one-line ConfigErrors (exit 2) instead of printing usage."""

    def error(self, message: str):
        raise ConfigError(f"{self.prog}: {message}")


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """--stack NAME | --config-file PATH, and --observed-nodes FILE."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="stack name: reads Pulumi.<stack>.yaml")
    source.add_argument("--config-file", help="a stack file at any path (Pulumi.qa.yaml: stack qa)")
    parser.add_argument("--observed-nodes", help="`kubectl get nodes -o json` output: kernels GPU nodes run now")
    parser.add_argument("--registry-pull-secret-file", metavar="FILE",
                        help=f"the registry's .dockerconfigjson, kept secret (or set ${PULL_SECRET_ENV})")


FORMATS = ("text", "json", "markdown")


def add_format_arguments(parser: argparse.ArgumentParser) -> None:
    """--format text|json|markdown, and --json as a short form of --format json."""
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="text (default; colour on a terminal), json (steps with old and new values, and the "
                             "summary as data) or markdown (a GitHub comment)")
    parser.add_argument("--json", action="store_true", help="the same as --format json")


def output_format_of(args: argparse.Namespace) -> str:
    if args.json and args.format not in (None, "json"):
        raise ConfigError(f"--json and --format {args.format}: pick one")
    return "json" if args.json else args.format or "text"


EXIT_CODES = """exit codes:
  0  success{extra}
  2  bad input: one line on stderr naming the field or file and the fix"""

# The examples and exit codes each subcommand's --help ends with.
EPILOGS = {
    "render": """examples:
  gpuctl render --stack dev --out build/dev --offline
  gpuctl render --stack prod --out build/prod --observed-nodes nodes.json
  gpuctl render --config-file ./Pulumi.qa.yaml --out build/qa --offline

""" + EXIT_CODES.format(extra="\n  1  a manifest the API server would reject (nothing is written)"),
    "check": """examples:
  gpuctl check build/dev
  gpuctl check build/prod --json --policy-config policy-config.json

""" + EXIT_CODES.format(extra="\n  1  at least one mandatory policy violation"),
    "diff": """examples:
  gpuctl diff build/old build/new                    fleet summary, then the resource diff
  gpuctl diff build/old build/new --diff-only        only the resource diff
  gpuctl diff build/old build/new --format markdown  a GitHub comment
  gpuctl diff build/old build/new --format json --observed-nodes nodes.json

""" + EXIT_CODES.format(extra="") + "\n     (also: a change that deletes the driver of a kernel --observed-nodes still run)",
    "preview": """examples:
  gpuctl preview --stack prod --base origin/main --offline
  gpuctl preview --stack prod --base origin/main --offline --format markdown > comment.md
  gpuctl preview --stack staging --base HEAD --format json --observed-nodes nodes.json

""" + EXIT_CODES.format(extra="\n  1  a mandatory policy violation, or a step pulumi up would refuse (deleting or "
                            "replacing a protected resource); the report is still printed")
    + "\n     (also: a driver image missing from its registry; the report is printed first)",
}


def add_epilogs(commands: Any) -> None:
    """Give each registered subcommand its examples and exit codes, printed as written."""
    for name, parser in commands.choices.items():
        if name in EPILOGS:
            parser.epilog = EPILOGS[name]
            parser.formatter_class = argparse.RawDescriptionHelpFormatter


def project_root(start: Path | None = None) -> Path:
    """The nearest folder from `start` (the working folder) up holding this project's Pulumi.yaml, else ROOT."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        try:  # read as every input is: a Pulumi.yaml that is a named pipe must not hang gpuctl
            text = read_input(folder / "Pulumi.yaml", str(folder / "Pulumi.yaml"), "")
        except ConfigError:
            continue
        if re.search(rf"(?m)^name:\s*{PROJECT}\s*$", text):
            return folder
    return ROOT


def refuse_another_checkout(start: Path | None = None) -> None:
    """gpuctl reads stack files and git history from the checkout it is run in, so it must run that checkout's code
    too: a gpuctl installed from one clone and run in another refuses, naming both."""
    checkout = project_root(start)
    if checkout != ROOT:
        raise ConfigError(f"this checkout is {checkout}, but this gpuctl runs the code of {ROOT}; run the checkout's "
                          f"own: cd {checkout} && make setup && .venv/bin/gpuctl ...")


def stack_file(args: argparse.Namespace, root: Path | None = None) -> StackFile:
    if getattr(args, "config_file", None) == "":  # an unset CI variable: not "no file given"
        raise ConfigError("--config-file: empty; pass the Pulumi.<stack>.yaml file")
    if getattr(args, "config_file", None) is not None:
        loaded = load_stack_file(Path(args.config_file), args.stack, config_file=True)
    else:
        loaded = load_stack_file(stack_file_path(root or project_root(), args.stack), args.stack)
    return with_pull_secret(loaded, getattr(args, "registry_pull_secret_file", None))


def with_pull_secret(stack: StackFile, path: str | None) -> StackFile:
    """The stack with the registry pull secret from `path` or $GPU_PLATFORM_REGISTRY_PULL_SECRET, marked secret.

    The value is never printed: errors name the file, not its content.
    """
    if path:
        where, fix = f"--registry-pull-secret-file {path}", "pass the registry's .dockerconfigjson file"
        value = read_input(Path(path), where, fix, limit=MAX_PULL_SECRET_BYTES)
        if not value.strip():  # an explicit file that holds nothing must not deploy without a pull secret
            raise ConfigError(f"{where}: is empty; {fix}")
        try:
            docker_config_json(SecretStr(value.strip()))
        except ValueError:  # its content is never shown: it is a credential
            raise ConfigError(f"{where}: is not a .dockerconfigjson document "
                              '({"auths": {"<registry>": {"auth": "<base64>"}}}); ' + fix) from None
    else:
        value = os.environ.get(PULL_SECRET_ENV, "")
    if not value.strip():
        return stack
    return StackFile(stack.stack, {**stack.config, PULL_SECRET_KEY: value.strip()},
                     sorted({*stack.secret_keys, PULL_SECRET_KEY}))


class _PipeConsole(Console):
    """A closed pipe (`gpuctl diff ... | head`) ends gpuctl as it ends other tools (exit 141), where rich would
    exit 1, the code for a policy violation."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(soft_wrap: bool = True) -> Console:
    """Colour on a terminal, plain text in CI and pipes."""
    return _PipeConsole(highlight=False, soft_wrap=soft_wrap)


def read_json(path: Path, fix: str, label: str | None = None) -> Any:
    """A JSON file's content; a missing, unreadable or malformed file is one ConfigError line ending in `fix`."""
    where = label or str(path)

    def constant(name: str) -> Any:
        raise ConfigError(f"{where}: {name} is not a JSON number; {fix}")

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ConfigError(f"{where}: the number {text[:20]} is out of range; {fix}")
        return value

    text = read_input(path, where, fix)
    try:
        return json.loads(text, parse_constant=constant, parse_float=number)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where}: not JSON ({error.msg} at line {error.lineno}); {fix}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to read; {fix}") from None


class _Shape(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)


class _Options(_Shape):
    protect: bool
    deleteBeforeReplace: bool
    ignoreChanges: list[str]
    replaceOnChanges: list[str]


class _Resource(_Shape):
    urn: str
    type: str
    name: str
    custom: bool
    parent: str | None
    dependencies: list[str]
    inputs: dict[str, Any]
    options: _Options


class RenderedPlan(_Shape):
    """The shape of plan.json that check, diff and preview rely on (further keys are allowed)."""

    project: str
    stack: str
    resources: list[_Resource]
    outputs: dict[str, Any]


def load_plan(directory: str | Path) -> dict[str, Any]:
    """DIR/plan.json as `gpuctl render` wrote it."""
    path = Path(directory) / "plan.json"
    fix = f"render one with `python -m gpuctl render --stack NAME --out {directory}`"
    plan = read_json(path, fix)
    try:
        RenderedPlan.model_validate(plan)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".")
        problem = "is missing" if first["type"] == "missing" else "has the wrong type"
        raise ConfigError(f"{path}: not a rendered plan ({where or 'the document'} {problem}); {fix}") from None
    return plan


def empty_plan(stack: str) -> dict[str, Any]:
    """The plan of a stack that does not exist yet: everything in a diff against it is a create."""
    return {"project": PROJECT, "stack": stack, "resources": [], "outputs": {}}


def observed_nodes(path: str | None) -> list[ObservedNode] | None:
    """Parse a `kubectl get nodes -o json` file, or None when no file was given."""
    if path is None:
        return None
    document = read_json(Path(path), "pass a `kubectl get nodes -o json` file", label=f"--observed-nodes {path}")
    return parse_node_list(document, path)
