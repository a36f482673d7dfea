"""Every gpuctl option and every field of every shipped stack, given hostile values: each run ends in a render or a
refusal of one line (exit 2), never a traceback or a hang, and writes nothing the user did not name as output."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.render import render_plan
from gpuctl.stackfile import stack_file_from_config
from stacks.config import MAX_ERROR_CHARACTERS, ConfigError, config_from_stack_file
from tests.conftest import ROOT

STACKS = {path.name.removeprefix("Pulumi.").removesuffix(".yaml"): path
          for path in [*ROOT.glob("Pulumi.*.yaml"), *(ROOT / "examples").glob("Pulumi.*.yaml")]}
HOSTILE = (None, "", "x" * 5000, -1, 10**30, 1.5, True, [], {}, "a\nb", "../../etc/passwd", {"secure": "v1:abc"})


def leaves(node: Any, path: tuple = ()):
    """Every path to a value of a nested document."""
    yield path
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from leaves(child, (*path, key))


def mutated(document: Any, path: tuple, value: Any) -> Any:
    document = copy.deepcopy(document)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return document


def fields() -> list[tuple[str, tuple]]:
    """(stack, path) of each field of each shipped stack and example, once per field of a list's items."""
    seen, found = set(), []
    for stack, path in sorted(STACKS.items()):
        config = yaml.safe_load(path.read_text())["config"]
        for where in leaves(config):
            shape = (stack, tuple(0 if isinstance(part, int) else part for part in where))
            if where and shape not in seen:
                seen.add(shape)
                found.append((stack, where))
    return found


def test_every_field_of_every_stack_takes_any_value_or_refuses_it_in_one_line() -> None:
    """Each hostile value in each field of each stack: refused by the config (what `pulumi up` and every gpuctl
    command read first) in one line, or rendered by the program, which may refuse it in one line too."""
    checked, rendered = 0, 0
    for stack, path in fields():
        config = yaml.safe_load(STACKS[stack].read_text())["config"]
        for value in HOSTILE:
            checked += 1
            try:
                stack_file = stack_file_from_config(stack, mutated(config, path, value))
                config_from_stack_file(stack_file.config)
                rendered += 1
                render_plan(stack_file)
            except ConfigError as error:
                message = str(error)
                assert "\n" not in message and len(message) <= MAX_ERROR_CHARACTERS, (stack, path, value, message)
    assert checked > 3000 and rendered > 50


def gpuctl(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=90)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rendered") / "onprem"
    assert gpuctl("render", "--stack", "onprem", "--out", str(out), "--offline").returncode == 0
    return out


@pytest.fixture
def special(tmp_path: Path, request) -> Path:
    """A named pipe (blocks a reader with no writer), a device that never ends, or text that is not UTF-8."""
    if request.param == "device":
        return Path("/dev/zero")
    path = tmp_path / "input"
    if request.param == "named pipe":
        os.mkfifo(path)
    else:
        path.write_bytes(b"\xff\xfe{")
    return path


INPUTS = {
    "render --observed-nodes": lambda f, r, o: ["render", "--stack", "onprem", "--offline", "--out", str(o),
                                                "--observed-nodes", str(f)],
    "check --policy-config": lambda f, r, o: ["check", str(r), "--policy-config", str(f)],
    "diff --observed-nodes": lambda f, r, o: ["diff", str(r), str(r), "--observed-nodes", str(f)],
    "preview --observed-nodes": lambda f, r, o: ["preview", "--stack", "onprem", "--offline", "--observed-nodes",
                                                 str(f)],
    "preview --registry-pull-secret-file": lambda f, r, o: ["preview", "--stack", "onprem", "--offline",
                                                            "--registry-pull-secret-file", str(f)],
    "preview --policy-config": lambda f, r, o: ["preview", "--stack", "onprem", "--offline", "--policy-config",
                                                str(f)],
    "preview --base-state": lambda f, r, o: ["preview", "--stack", "onprem", "--base", "HEAD", "--offline",
                                             "--base-state", str(f)],
}


@pytest.mark.parametrize("special", ["named pipe", "device", "not UTF-8"], indirect=True)
@pytest.mark.parametrize("option", sorted(INPUTS))
def test_every_file_option_refuses_what_is_not_a_readable_file_in_one_line(option, special, rendered, tmp_path):
    result = gpuctl(*INPUTS[option](special, rendered, tmp_path / "out"))

    assert result.returncode == 2 and result.stderr.count("\n") == 1, (option, result.stderr)
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("special", ["named pipe", "device", "not UTF-8"], indirect=True)
@pytest.mark.parametrize("command", ["check", "diff"])
def test_a_plan_that_is_not_a_readable_file_is_refused_in_one_line(command, special, rendered, tmp_path):
    folder = tmp_path / "render"
    folder.mkdir()
    (folder / "plan.json").symlink_to(special)
    result = gpuctl(command, *([str(folder)] if command == "check" else [str(rendered), str(folder)]))

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {folder / 'plan.json'}: ")


@pytest.mark.parametrize("target", ["named pipe", "device", "a stack file", "a user's file"])
def test_render_out_never_writes_into_what_it_did_not_make(target, tmp_path):
    path = {"named pipe": tmp_path / "pipe", "device": Path("/dev/null"), "a stack file": ROOT / "Pulumi.onprem.yaml",
            "a user's file": tmp_path / "notes.txt"}[target]
    if target == "named pipe":
        os.mkfifo(path)
    elif target == "a user's file":
        path.write_text("mine\n")
    before = path.read_bytes() if path.is_file() else None

    result = gpuctl("render", "--stack", "onprem", "--offline", "--out", str(path))

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert (path.read_bytes() if path.is_file() else None) == before


@pytest.mark.parametrize(("args", "problem"), [
    (["preview", "--stack", "onprem", "--offline", "--jobs", "0"], "--jobs"),
    (["preview", "--stack", "onprem", "--offline", "--jobs", "many"], "--jobs"),
    (["preview", "--stack", "onprem", "--offline", "--base", ""], "--base: empty"),
    (["preview", "--stack", "onprem", "--offline", "--base", "no-such-ref"], "--base no-such-ref: not a commit"),
    (["preview", "--stack", "onprem", "--offline", "--base", "HEAD", "--base-state", ""], "--base-state"),
    (["preview", "--stack", "onprem", "--offline", "--format", "yaml"], "--format"),
    (["preview", "--stack", "onprem", "--offline", "--json", "--format", "markdown"], "pick one"),
    (["preview", "--stack", "onprem", "--offline", "--json-file", ""], "--json-file"),
    (["render", "--stack", "onprem", "--offline", "--out", ""], "--out"),
    (["diff", "no-such-folder", "no-such-folder"], "no-such-folder"),
    (["check", ""], "plan.json")])
def test_every_option_given_a_hostile_value_is_refused_in_one_line(args, problem):
    before = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout

    result = gpuctl(*args)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, (args, result.stderr)
    assert problem in result.stderr and "Traceback" not in result.stderr
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout == before
