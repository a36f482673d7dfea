"""Around the shipped stack and node files, gpuctl either renders (exit 0) or refuses in one line, writing nothing."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from gpuctl.__main__ import main
from tests.conftest import ROOT

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

SHIPPED = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())  # OpenShift: the kernel is the cluster's
CLUSTER = SHIPPED["config"]["gpu-platform:cluster"]
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/kernel-version.full": CLUSTER["kernel"],
    "feature.node.kubernetes.io/system-os_release.ID": "rhcos",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID": CLUSTER["release"].rsplit(".", 1)[0]}}}
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**30), st.text(max_size=20),
                   st.sampled_from(["yes", "off", "1e3", "ami-0", "g4dn.xlarg", "5.14.0;id"]),
                   st.lists(st.integers(0, 3), max_size=2),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def leaves(node, path=()):
    """Every path to a value of a nested document."""
    yield path
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from leaves(child, (*path, key))


def mutated(document, path, value):
    document = copy.deepcopy(document)
    if not path:
        return value
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return document


def test_the_unmutated_stack_and_node_list_render(tmp_path, capsys) -> None:
    """The starting point renders: each mutation is one step away from a good input, not from a refused one."""
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(SHIPPED))
    (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [NODE]}))

    code = main(["render", "--config-file", str(tmp_path / "stack.yaml"), "--observed-nodes",
                 str(tmp_path / "nodes.json"), "--offline", "--out", str(tmp_path / "out")])

    assert code == 0, capsys.readouterr().err
    assert not any({"os", "kernel"} & set(pool) for pool in SHIPPED["config"]["gpu-platform:nodePools"])


def test_text_a_node_list_quotes_stays_on_one_line(tmp_path, capsys) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "Node\r\nList", "items": []}))

    code = main(["render", "--stack", "dev", "--observed-nodes", str(tmp_path / "nodes.json"), "--offline",
                 "--out", str(tmp_path / "out")])

    error = capsys.readouterr().err
    assert code == 2 and len(error.splitlines()) == 1 and "not a node list" in error, error


@hypothesis.settings(max_examples=30, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(data=st.data())
def test_every_input_renders_or_is_refused_in_one_line(tmp_path_factory, capsys, data) -> None:
    folder = tmp_path_factory.mktemp("case")
    nodes = {"apiVersion": "v1", "kind": "NodeList", "items": [NODE]}
    if data.draw(st.booleans(), label="mutate nodes"):
        nodes = mutated(nodes, data.draw(st.sampled_from(list(leaves(nodes))), label="node path"),
                        data.draw(VALUES, label="node value"))
        stack = SHIPPED
    else:
        stack = mutated(SHIPPED, data.draw(st.sampled_from(list(leaves(SHIPPED))), label="stack path"),
                        data.draw(VALUES, label="stack value"))
    (folder / "stack.yaml").write_text(yaml.safe_dump(stack))
    (folder / "nodes.json").write_text(json.dumps(nodes))
    out = folder / "out"
    capsys.readouterr()

    code = main(["render", "--config-file", str(folder / "stack.yaml"), "--observed-nodes",
                 str(folder / "nodes.json"), "--offline", "--out", str(out)])

    error = capsys.readouterr().err
    assert code in (0, 2), error
    if code == 2:
        assert len(error.splitlines()) == 1 and error.startswith("error: "), error
        assert not out.exists()
