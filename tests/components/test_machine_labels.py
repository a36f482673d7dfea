"""The re-cut roll's script (components/machine_labels.py ROLL_SCRIPT), run by bash against a stand-in `oc` that
keeps machines and nodes in a file: the order of a re-cut, and where a roll stops.

The stand-in plays three parts the way their code does: `oc` itself; the machine API's nodelink (a machine's labels
copied onto its node, overwriting); and NVIDIA's MIG manager, which re-cuts a node when its layout label changes and
reports `failed` while a GPU pod still runs there (mig-parted v0.15.0 reconfigure.go: a GPU instance in use cannot
be destroyed), else `success`. It is a stand-in, not OpenShift."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.machine_labels import ROLL_SCRIPT

STAND_IN = r'''
import json, sys
state_file, log_file = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
state = json.load(open(state_file))
open(log_file, "a").write(" ".join(args) + "\n")
nodes, machines = state["nodes"], state["machines"]

def save():
    json.dump(state, open(state_file, "w"))

if args[:2] == ["get", "machines"]:
    print("\n".join(f"machine.machine.openshift.io/{name}" for name in machines))
elif args[0] == "get" and args[1].startswith("machine.machine.openshift.io/"):
    print(machines[args[1].rsplit("/", 1)[1]].get("node", ""), end="")
elif args[:2] == ["get", "node"]:
    node, path = nodes[args[2]], args[4]
    if "spec.taints" in path:
        print(" ".join(t for t in node["taints"] if t in path), end="")
    elif "config}/{" in path:
        print(f'{node["labels"].get("nvidia.com/mig.config", "")}/{node["labels"].get("nvidia.com/mig.config.state", "")}', end="")
    else:
        print(node["labels"].get("nvidia.com/mig.config", ""), end="")
elif args[:2] == ["adm", "cordon"]:
    nodes[args[2]]["cordoned"] = True
elif args[:2] == ["adm", "uncordon"]:
    nodes[args[2]]["cordoned"] = False
elif args[:2] == ["adm", "drain"]:
    node = nodes[args[2]]
    if node.get("held"):  # a PodDisruptionBudget that allows no eviction
        sys.exit(1)
    node["gpu_pods"] = 0
elif args[:2] == ["adm", "taint"]:
    nodes[args[3]]["taints"].remove(args[4].rstrip("-"))
elif args[:2] == ["label", "node"]:
    key, value = args[4].split("=")
    nodes[args[2]]["labels"][key] = value
elif args[0] == "patch":
    machine = machines[args[1].rsplit("/", 1)[1]]
    spec = json.loads(args[args.index("-p") + 1])["spec"]
    machine["labels"] = spec["metadata"]["labels"]
    node = nodes.get(machine.get("node", ""))
    if node is not None:  # nodelink copies, then the MIG manager acts on a changed layout
        before = node["labels"].get("nvidia.com/mig.config")
        node["labels"].update(spec["metadata"]["labels"])
        node["taints"] = sorted(set(node["taints"]) | {t["key"] for t in spec["taints"]})
        if node["labels"].get("nvidia.com/mig.config") != before:
            node["bound_while_recut"] = node["gpu_pods"]
            failed = node["gpu_pods"] or node.get("broken")
            node["labels"]["nvidia.com/mig.config.state"] = "failed" if failed else "success"
save()
'''


@pytest.fixture
def cluster(tmp_path: Path):
    """A run of the roll against the stand-in: returns (exit code, stderr, state, calls)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    oc = tmp_path / "bin" / "oc"
    oc.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path}/stand_in.py {tmp_path}/state.json {tmp_path}/calls "$@"\n')
    oc.chmod(0o755)

    def run(state: dict, layout: str = "all-3g.40gb", dedicated: str = "") -> tuple[int, str, dict, list[str]]:
        (tmp_path / "state.json").write_text(json.dumps(state))
        (tmp_path / "calls").write_text("")
        taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
        env = {"PATH": f"{tmp_path}/bin:{os.environ['PATH']}", "NAMESPACE": "openshift-machine-api",
               "MACHINESET": "gpu-a100", "LABELS": json.dumps({"nvidia.com/mig.config": layout}),
               "TAINTS": json.dumps(taints), "LAYOUT": layout, "DEDICATED": dedicated,
               "DEDICATED_KEY": "gpu-platform.io/dedicated", "DRAIN_TIMEOUT": "600", "RECUT_TIMEOUT": "30"}
        done = subprocess.run(["bash", "-c", ROLL_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
        return (done.returncode, done.stderr, json.loads((tmp_path / "state.json").read_text()),
                (tmp_path / "calls").read_text().splitlines())
    return run


def node(layout: str, gpu_pods: int = 2, **extra: object) -> dict:
    return {"labels": {"nvidia.com/mig.config": layout, "nvidia.com/mig.config.state": "success"},
            "taints": ["nvidia.com/gpu"], "gpu_pods": gpu_pods, "cordoned": False, **extra}


def fleet(*nodes: dict) -> dict:
    return {"machines": {f"m{i}": {"node": f"n{i}"} for i in range(len(nodes))},
            "nodes": {f"n{i}": each for i, each in enumerate(nodes)}}


def test_each_node_is_drained_before_its_cut_changes_and_uncordoned_after_success(cluster) -> None:
    code, _, state, calls = cluster(fleet(node("all-1g.10gb"), node("all-1g.10gb")))

    assert code == 0
    for name in ("n0", "n1"):
        assert state["nodes"][name]["labels"] == {"nvidia.com/mig.config": "all-3g.40gb",
                                                  "nvidia.com/mig.config.state": "success"}
        assert state["nodes"][name]["bound_while_recut"] == 0 and not state["nodes"][name]["cordoned"]
    steps = [" ".join(call.split()[:3]) for call in calls if call.startswith(("adm", "label", "patch"))]
    assert steps == [step for i in (0, 1) for step in (
        f"adm cordon n{i}", f"adm drain n{i}", f"label node n{i}", f"patch machine.machine.openshift.io/m{i} -n",
        f"adm uncordon n{i}")]
    assert [c for c in calls if c.startswith("label")][0].endswith("nvidia.com/mig.config.state=pending")


def test_a_node_whose_cut_does_not_change_is_not_drained(cluster) -> None:
    code, _, state, calls = cluster(fleet(node("all-3g.40gb"), node("all-1g.10gb")))

    assert code == 0
    assert [c.split()[2] for c in calls if c.startswith("adm drain")] == ["n1"]
    assert state["nodes"]["n0"]["gpu_pods"] == 2  # its jobs ran on


def test_a_pod_disruption_budget_stops_the_roll_at_that_node_named_and_cordoned(cluster) -> None:
    code, stderr, state, calls = cluster(fleet(node("all-1g.10gb", held=True), node("all-1g.10gb")))

    assert code == 1
    assert "node n0: not drained in 600s (a PodDisruptionBudget" in stderr
    assert state["nodes"]["n0"]["cordoned"] and state["nodes"]["n0"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    assert state["nodes"]["n1"] == node("all-1g.10gb")  # the nodes after it are not touched
    assert not [c for c in calls if c.startswith("patch")]


def test_a_node_the_mig_manager_fails_stops_the_roll_named_and_cordoned(cluster) -> None:
    code, stderr, state, _ = cluster(fleet(node("all-1g.10gb", broken=True), node("all-1g.10gb")))

    assert code == 1
    assert "node n0: the MIG manager reports failed for all-3g.40gb; the roll stops here" in stderr
    assert state["nodes"]["n0"]["cordoned"] and state["nodes"]["n1"] == node("all-1g.10gb")


def test_a_node_left_failed_by_an_earlier_roll_stops_the_next_one(cluster) -> None:
    """Its label already names the layout, so the MIG manager would not try again: the roll must not pass it by."""
    left = node("all-3g.40gb", gpu_pods=0, cordoned=True)
    left["labels"]["nvidia.com/mig.config.state"] = "failed"
    code, stderr, state, _ = cluster(fleet(left, node("all-1g.10gb")))

    assert code == 1 and "node n0: carries all-3g.40gb but the MIG manager reports failed" in stderr
    assert state["nodes"]["n1"] == node("all-1g.10gb")


def test_a_dedication_removed_takes_the_taint_off_the_running_node(cluster) -> None:
    dedicated = fleet(node("all-3g.40gb", taints=["nvidia.com/gpu", "gpu-platform.io/dedicated"]))
    code, stderr, state, calls = cluster(dedicated)

    assert code == 0, stderr
    assert state["nodes"]["n0"]["taints"] == ["nvidia.com/gpu"]
    assert not [c for c in calls if c.startswith("adm drain")]
