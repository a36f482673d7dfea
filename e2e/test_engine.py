"""The real Pulumi engine on a local control plane: the chain the stacks' engine tests stand on, proven end to end.

A throwaway Pulumi Python program (a Namespace and a ConfigMap, written by the test into a temporary folder) runs
under the engine built from Go modules, with the Kubernetes provider built from its module, against a control plane
of its own: preview, up, a preview that must show no changes, an update, a policy pack that must stop a violating
update before anything changes, then destroy. What is read back is read from the API server.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from e2e.cluster import BIN, ControlPlane
from e2e.engine import Engine, EngineError, missing_tools, steps
from e2e.kube import Kube, wait_for

NAMESPACE = "engine-e2e"
PROGRAM = f'''
import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
data = {{"greeting": config.get("greeting") or "hello"}}
if config.get("extraKey"):
    data[config.get("extraKey")] = "set"
labels = {{"team": config.get("team") or "a"}}
namespace = k8s.core.v1.Namespace("team", metadata={{"name": "{NAMESPACE}", "labels": labels}})
k8s.core.v1.ConfigMap("settings", metadata={{"name": "settings", "namespace": namespace.metadata.name}}, data=data)
pulumi.export("namespace", namespace.metadata.name)
'''
POLICY = '''
from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy


def no_forbidden_key(args, report_violation):
    if args.resource_type == "kubernetes:core/v1:ConfigMap" and "forbidden" in (args.props.get("data") or {}):
        report_violation("a ConfigMap may not carry the key `forbidden`")


PolicyPack("engine-e2e", enforcement_level=EnforcementLevel.MANDATORY, policies=[
    ResourceValidationPolicy(name="no-forbidden-key", description="No ConfigMap key named forbidden.",
                             validate=no_forbidden_key)])
'''
CONFIG_MAP = "urn:pulumi:engine::engine-e2e::kubernetes:core/v1:ConfigMap::settings"
NAMESPACE_URN = "urn:pulumi:engine::engine-e2e::kubernetes:core/v1:Namespace::team"


def test_the_engine_is_the_release_of_the_locked_pulumi_sdk() -> None:
    """`pulumi version` of the engine built here, the Python SDK in requirements.lock and the one installed are one
    release: the deploy workflow runs that CLI, so the engine that judges gpuctl here is the one that deploys."""
    if missing_tools():
        pytest.fail(f"{', '.join(missing_tools())} not built in {BIN}: run `make e2e`", pytrace=False)
    [locked] = re.findall(r"(?m)^pulumi==([\d.]+)$", (Path(__file__).parent.parent / "requirements.lock").read_text())
    version = subprocess.run([BIN / "pulumi", "version"], capture_output=True, text=True, timeout=60, check=True)

    assert version.stdout.strip() == f"v{locked}" == f"v{metadata.version('pulumi')}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ControlPlane, Kube]]:
    missing = missing_tools()
    if missing:
        pytest.fail(f"{', '.join(missing)} not built in {BIN}: run `make e2e` (it builds them first)", pytrace=False)
    with ControlPlane.start(tmp_path_factory.mktemp("engine-cluster")) as plane:
        admin = Kube(plane.kubeconfig)
        yield plane, admin
        admin.close()


@pytest.fixture(scope="module")
def engine(cluster, tmp_path_factory) -> Engine:
    plane, _ = cluster
    project = tmp_path_factory.mktemp("engine-program")
    (project / "Pulumi.yaml").write_text("name: engine-e2e\nruntime: python\n")
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine.prepare(project, tmp_path_factory.mktemp("engine-state"), plane.kubeconfig)
    engine.init("engine")
    return engine


@pytest.fixture(scope="module")
def policy_pack(tmp_path_factory) -> Path:
    pack = tmp_path_factory.mktemp("engine-policy")
    (pack / "PulumiPolicy.yaml").write_text("runtime: python\n")
    (pack / "__main__.py").write_text(POLICY)
    return pack


def settings(admin: Kube) -> dict | None:
    return admin.get("v1", "ConfigMap", "settings", NAMESPACE)


def test_lifecycle(engine: Engine, cluster, policy_pack: Path) -> None:
    _, admin = cluster
    preview = steps(engine.preview())
    assert preview[NAMESPACE_URN] == "create" and preview[CONFIG_MAP] == "create"
    assert settings(admin) is None, "a preview changed the cluster"

    engine.up(policy_pack=policy_pack)
    assert settings(admin)["data"] == {"greeting": "hello"}
    assert engine.outputs() == {"namespace": NAMESPACE}
    assert set(steps(engine.preview(expect_no_changes=True)).values()) == {"same"}

    # A label is updated in place; a ConfigMap's data is replaced (pulumi-kubernetes treats ConfigMaps as immutable).
    engine.run("config", "set", "team", "b")
    engine.run("config", "set", "greeting", "hi")
    changed = {urn: op for urn, op in steps(engine.preview()).items() if op != "same"}
    assert changed == {NAMESPACE_URN: "update", CONFIG_MAP: "replace"}
    engine.up(policy_pack=policy_pack)
    assert settings(admin)["data"] == {"greeting": "hi"}
    assert admin.get("v1", "Namespace", NAMESPACE)["metadata"]["labels"]["team"] == "b"

    engine.refresh()
    assert set(steps(engine.preview(expect_no_changes=True)).values()) == {"same"}


def test_policy_violation_stops_before_any_change(engine: Engine, cluster, policy_pack: Path) -> None:
    _, admin = cluster
    before = settings(admin)
    engine.run("config", "set", "extraKey", "forbidden")
    try:
        # The JSON report of a failed preview says only "preview failed": the violation is in the text display.
        with pytest.raises(EngineError, match="preview failed"):
            engine.preview(policy_pack=policy_pack)
        shown = engine.run("preview", "--policy-pack", str(policy_pack), check=False)
        assert shown.returncode != 0 and "may not carry the key `forbidden`" in shown.stdout
        refused = engine.up(policy_pack=policy_pack, check=False)
        assert refused.returncode != 0
        assert "may not carry the key `forbidden`" in refused.stdout
        assert settings(admin)["data"] == before["data"], "the engine changed the ConfigMap despite the violation"
    finally:
        engine.run("config", "rm", "extraKey")


def test_destroy_removes_everything(engine: Engine, cluster) -> None:
    _, admin = cluster
    engine.destroy()
    assert settings(admin) is None
    wait_for(lambda: admin.get("v1", "Namespace", NAMESPACE) is None, f"namespace {NAMESPACE} deleted", 60)
    assert engine.outputs() == {}
