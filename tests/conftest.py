"""Shared fixtures: every test renders the real program through the Pulumi SDK's mock runtime."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.render import render_plan
from gpuctl.stackfile import StackFile, load_stack_file, stack_file_from_config
from stacks.config import PROJECT
from fleet.kernels import ObservedNode

ROOT = Path(__file__).resolve().parent.parent


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of a shipped stack file (the project's, else an example's), as plain data to mutate in a
    test."""
    path = ROOT / f"Pulumi.{stack}.yaml"
    return yaml.safe_load((path if path.exists() else ROOT / "examples" / path.name).read_text())["config"]


def config_values(stack: str) -> dict[str, Any]:
    """A shipped stack's config as the program receives it: project-relative keys, secrets as placeholders."""
    config = stack_file_from_config(stack, stack_config(stack)).config
    return {key.removeprefix(f"{PROJECT}:"): value for key, value in config.items()}


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

    def object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The one resource of this Kubernetes kind, metadata.name (and namespace); logical names may be shared."""
        matches = [r for r in self.resources if r["type"].startswith("kubernetes:") and r["type"].endswith(f":{kind}")
                   and r["inputs"].get("metadata", {}).get("name") == name
                   and (namespace is None or r["inputs"]["metadata"].get("namespace") == namespace)]
        assert len(matches) == 1, f"{len(matches)} {kind} objects named {name}"
        return matches[0]

    def manifest(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The manifest of the one Kubernetes object of this kind, metadata.name (and namespace)."""
        return self.object(kind, name, namespace)["inputs"]


Render = Callable[..., Plan]


def render_stack(stack: str = "dev", config: dict[str, Any] | None = None,
                 observed: list[ObservedNode] | None = None) -> Plan:
    """Render the real program for a shipped stack, or for `config` (a stack file's `config:` mapping).

    A plain function, so module-scoped fixtures can share one render; `secure:` values stay secrets.
    """
    values = copy.deepcopy(config if config is not None else stack_config(stack))
    return Plan(render_plan(stack_file_from_config(stack, values), observed))


@pytest.fixture
def render() -> Render:
    """render(stack="dev", config=None, observed=None) -> Plan of the real program."""
    return render_stack


@pytest.fixture
def shipped_stack() -> Callable[[str], StackFile]:
    return lambda stack: load_stack_file(ROOT / f"Pulumi.{stack}.yaml", stack)


@pytest.fixture(scope="session")
def dev_plan() -> Plan:
    """The shipped dev stack, rendered once for the whole session: read it, never mutate it."""
    return render_stack("dev")


@pytest.fixture(scope="session")
def onprem_plan() -> Plan:
    """The shipped onprem stack (bring-your-own pools, tenant networks), rendered once: read it, never mutate it."""
    return render_stack("onprem")


@pytest.fixture(scope="session")
def prod_plan() -> Plan:
    """The shipped prod stack, rendered once for the whole session: read it, never mutate it."""
    return render_stack("prod")


@pytest.fixture(scope="session")
def partitioned_plan() -> Plan:
    """examples/Pulumi.partitioned.yaml (MIG, shared, whole and dedicated pools), rendered once: never mutate it."""
    return render_stack("partitioned")


@pytest.fixture(scope="session")
def karpenter_plan() -> Plan:
    """examples/Pulumi.karpenter.yaml (two Karpenter pools, one dedicated), rendered once: never mutate it."""
    return render_stack("karpenter")
