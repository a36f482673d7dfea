"""Nothing lost when `pulumi up` dies: a first deploy of a fleet, killed midway, converges on the next `up`.

A fleet's tenants deploy with PULUMI_SKIP_CHECKPOINTS=true (docs/deploying.md): the file backend would otherwise
rewrite the whole state after every step. The engine then writes the state once, when the update ends, so a SIGKILL
leaves the objects it created unknown to the state. The next `up` creates them again, and the Kubernetes provider's
create is a server-side apply (pulumi-kubernetes pkg/await/await.go, Creation: "we always send a PATCH request
during creates with SSA enabled. This means that we currently always upsert the object"), which takes over the
object already there under the same name: every object the program makes has a name of its own, none a generated
one (tests/stacks/test_program.py). The apply is forced (PULUMI_K8S_ENABLE_PATCH_FORCE): the provider draws a new
field manager for each create, and unforced, the new one conflicted with the killed update's on a field the API
server keeps whole and defaulted ("Apply failed with 1 conflict: conflict with "pulumi-kubernetes-90ce42c0":
.spec.matchConstraints", a ValidatingAdmissionPolicy's, as this test first found). The platform deploys first, with
the checkpoints: a Helm release's create does not upsert ("cannot re-use a name that is still in use", also found
here).

The fleet's commands run as a fleet's deploy runs them, without the CLI's automatic log (its PULUMI_HOME/logs a
regular file: docs/deploying.md), and the test checks the CLI wrote none.

Here, on onprem with 40 more tenants, against the real engine and API server: the platform's `up`, then the tenants'
`up` killed once a third of their namespaces exist, before every tenant's members are bound, `pulumi cancel` (the dead update's lock), `up` again, then no
change left to make and no object carrying the program's label in the cluster that the state does not hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from components import labels
from e2e.cluster import BIN
from e2e.engine import AUTOMATIC_LOG, FLEET_SETTINGS, PLATFORM_FIRST
from e2e.kube import wait_for
from e2e.test_engine_lifecycle import PROJECT, started

TENANTS = [f"fleet-{n:02d}" for n in range(40)]
MANAGED = ",".join(f"{key}={value}" for key, value in labels.MANAGED_BY.items())


def kill_session(session: int) -> None:
    """SIGKILL every process of a session: the CLI started the language host and provider in it."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ProcessLookupError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) == session:
                os.kill(int(stat.parent.name), signal.SIGKILL)


def tenant_namespaces(admin) -> set[str]:
    return {ns["metadata"]["name"] for ns in admin.list("v1", "Namespace")} & set(TENANTS)


def members_bound(admin) -> set[str]:
    """The tenants whose members' RoleBinding exists: the last of a tenant's objects, after its quotas are enforced."""
    return {binding["metadata"]["namespace"] for binding in admin.list("rbac.authorization.k8s.io/v1", "RoleBinding")
            if binding["metadata"]["name"] == f"{binding['metadata']['namespace']}-members"} & set(TENANTS)


def stack_objects(state: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(apiVersion, kind, namespace, name) of every Kubernetes object the state holds (Helm releases aside)."""
    held = set()
    for resource in state["deployment"].get("resources", []):
        outputs = resource.get("outputs") or {}
        if resource.get("custom") and resource["type"].startswith("kubernetes:") and "kind" in outputs \
                and not resource["type"].startswith("kubernetes:helm.sh"):
            meta = outputs.get("metadata", {})
            held.add((outputs["apiVersion"], outputs["kind"], meta.get("namespace", ""), meta["name"]))
    return held


def cluster_objects(admin, kinds: set[tuple[str, str]]) -> set[tuple[str, str, str, str]]:
    """The same for every object of those kinds in the cluster that carries the program's managed-by label."""
    found = set()
    for api_version, kind in kinds:
        for obj in admin.resource(api_version, kind).get(label_selector=MANAGED).to_dict()["items"]:
            meta = obj["metadata"]
            found.add((api_version, kind, meta.get("namespace", ""), meta["name"]))
    return found


def helm_releases(admin) -> set[tuple[str, str]]:
    """(namespace, release) of every Helm release stored in the cluster (Helm's release Secrets)."""
    return {(secret["metadata"]["namespace"], secret["metadata"]["labels"]["name"])
            for secret in admin.resource("v1", "Secret").get(label_selector="owner=helm").to_dict()["items"]}


def test_a_first_deploy_killed_midway_converges_on_the_next_up(tmp_path: Path) -> None:
    with started("onprem", tmp_path) as life:
        engine = replace(life.engine, settings=FLEET_SETTINGS, automatic_log=False)
        logs = engine.folder / "home" / AUTOMATIC_LOG
        life.edit(lambda config: config[f"{PROJECT}:tenants"].extend(
            {"name": name, "gpus": 0, "group": name} for name in TENANTS))
        # The platform first, with the engine's checkpoints: its Helm releases are the one kind of resource whose
        # create does not upsert (Helm's install refuses a release name in use: helm pkg/action/install.go,
        # availableName), so they are in the state before the tenants' update, which may die.
        life.engine.run("up", "--yes", "--skip-preview", *PLATFORM_FIRST, timeout=600)
        assert any(logs.glob("*onprem*.log")), "the CLI writes its automatic log by default"
        platform = stack_objects(engine.export())
        assert platform and not tenant_namespaces(life.admin)
        command = [str(BIN / "pulumi"), "up", "--yes", "--skip-preview", "--non-interactive"]
        output = tmp_path / "killed-up.log"
        with output.open("w") as log, subprocess.Popen(command, cwd=engine.project, env=engine.env, stdout=log,
                                                       stderr=subprocess.STDOUT, start_new_session=True) as update:
            try:
                wait_for(lambda: len(tenant_namespaces(life.admin)) >= len(TENANTS) // 3 or update.poll() is not None,
                         "a third of the tenants' namespaces", timeout=600, interval=0.2)
                assert update.poll() is None, f"`up` ended before it could be killed midway:\n{output.read_text()}"
                update.send_signal(signal.SIGKILL)  # the CLI alone, as a runner's kill would
                update.wait()
                time.sleep(2)  # what its plugins had in flight lands, or not
            finally:
                kill_session(update.pid)  # then its plugins (each in a process group of its own), as a runner would
        # Midway: namespaces made, and not every tenant's members bound. The program registers a tenant's objects
        # faster than this polls, so all 40 namespaces may already be there: they are the first of a tenant's objects,
        # and the bindings, which wait for the quotas to be enforced, the last.
        created, bound = tenant_namespaces(life.admin), members_bound(life.admin)
        assert len(created) >= len(TENANTS) // 3, f"killed after {len(created)} tenants' namespaces"
        assert len(bound) < len(TENANTS), "killed after every tenant's members were bound: not midway"
        assert stack_objects(engine.export()) == platform, "the killed update wrote state: it was not midway"

        # The killed update still holds the stack's lock (a file on this backend), which `pulumi cancel` removes.
        refused = engine.up(check=False)
        assert "currently locked" in refused.stdout + refused.stderr
        engine.run("cancel", "--yes")
        engine.up()

        # The fleet's commands ran without the automatic log (docs/deploying.md): its path stayed an empty file.
        assert logs.is_file() and logs.stat().st_size == 0
        life.nothing_left("after the killed update and the next one")
        state = engine.export()
        held = stack_objects(state)
        assert tenant_namespaces(life.admin) == set(TENANTS) == members_bound(life.admin)
        left = cluster_objects(life.admin, {(api_version, kind) for api_version, kind, _, _ in held}) - held
        assert left == set(), f"objects of the program's the state does not hold: {sorted(left)}"
        releases = {(r["outputs"]["namespace"], r["outputs"]["name"]) for r in state["deployment"]["resources"]
                    if r["type"] == "kubernetes:helm.sh/v3:Release"}
        assert helm_releases(life.admin) == releases
