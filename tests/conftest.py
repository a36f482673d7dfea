"""Shared fixtures: every test renders the real program through the Pulumi SDK's mock runtime."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.render import render_plan
from gpuctl.stackfile import StackFile, load_stack_file
from stacks.config import PROJECT
from stacks.inventory import ObservedNode

ROOT = Path(__file__).resolve().parent.parent


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of a shipped stack file, as plain data to mutate in a test."""
    return yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]


class Plan:
    """A rendered plan with the look-ups tests need."""

    def __init__(self, document: dict[str, Any]):
        self.document = document
        self.resources = document["resources"]
        self.outputs = document["outputs"]
        self.by_urn = {resource["urn"]: resource for resource in self.resources}

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [resource for resource in self.resources if resource["type"] == type_]

    def kind(self, kind: str) -> list[dict[str, Any]]:
        """Kubernetes objects of a kind, as manifests."""
        return [r["inputs"] for r in self.resources if r["type"].startswith("kubernetes:")
                and r["type"].endswith(f":{kind}")]

    def named(self, name: str) -> dict[str, Any]:
        matches = [resource for resource in self.resources if resource["name"] == name]
        assert len(matches) == 1, f"{len(matches)} resources named {name}"
        return matches[0]

    def depends_on(self, resource: dict[str, Any], name: str) -> bool:
        return any(self.by_urn[urn]["name"] == name for urn in resource["dependencies"])


Render = Callable[..., Plan]


@pytest.fixture
def render() -> Render:
    """render(stack="dev", config=None, observed=None) -> Plan of the real program."""

    def _render(stack: str = "dev", config: dict[str, Any] | None = None,
                observed: list[ObservedNode] | None = None) -> Plan:
        values = copy.deepcopy(config if config is not None else stack_config(stack))
        stack_file = StackFile(stack, {k if ":" in k else f"{PROJECT}:{k}": v for k, v in values.items()}, [])
        return Plan(render_plan(stack_file, observed))

    return _render


@pytest.fixture
def shipped_stack() -> Callable[[str], StackFile]:
    return lambda stack: load_stack_file(ROOT / f"Pulumi.{stack}.yaml", stack)
