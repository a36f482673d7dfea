"""The real Pulumi engine, built by e2e/tools/build.sh, run on a project folder against a local control plane.

Everything it keeps is in one temporary folder: its PULUMI_HOME (with the built Kubernetes provider installed as
the version the project's `pulumi_kubernetes` asks for), a file backend and passphrase-encrypted secrets. Nothing is
downloaded: automatic plugin acquisition and update checks are off, and only the plugins installed here are used.
Every command is bounded in time; a failure raises EngineError with the command and the end of its output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from e2e.cluster import BIN

BINARIES = ("pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-kubernetes")
PASSPHRASE = "e2e-only-passphrase"
# Bounds of one command: a preview reads the cluster; an update also waits for what it changes to be ready.
PREVIEW_SECONDS = 300
UPDATE_SECONDS = 600
TAIL_LINES = 40


# How a fleet is deployed (docs/deploying.md): the state written once, when the update ends, rather than after every
# step (the file backend rewrites all of it each time: pkg/backend/snapshot.go, NewSnapshotManager, unsafeServiceLoop);
# and after a killed update, the next one's creates take over what the killed one made. The provider's create is a
# server-side apply (pulumi-kubernetes pkg/await/await.go, Creation: "we currently always upsert the object"), under a
# field manager drawn at random per resource (pkg/provider/provider.go, fieldManagerName), so a field the API server
# keeps whole (a ValidatingAdmissionPolicy's spec.matchConstraints, defaulted) conflicts with the killed update's
# manager unless the apply is forced (pkg/await/await.go, patchForce: PULUMI_K8S_ENABLE_PATCH_FORCE).
# And the Go runtime's collector (the CLI's and the provider's) runs at a fifth of its default pace: at 9,000 resources
# it was a fifth of the engine's CPU time in an update of one tenant, and GOGC=400 cut that update's CPU by 12 s of
# 90, for 0.8 GB more peak memory (docs/performance.md). And the engine asks the provider for each resource's diff
# without waiting for the answer (pkg/resource/deploy/step_generator.go, diff: a promise when ParallelDiff is on).
# Otherwise it generates the resources' steps one at a time, each Check and Diff a call it waits for
# (pulumi/pulumi#12351); PULUMI_PARALLEL_DIFF is the engine's own setting for it (pulumi/pulumi#18872).
FLEET_SETTINGS = {"PULUMI_SKIP_CHECKPOINTS": "true", "PULUMI_K8S_ENABLE_PATCH_FORCE": "true", "GOGC": "400",
                  "PULUMI_PARALLEL_DIFF": "true"}
# The CLI writes every verbose log line of every command, with the properties it names, compressed and encrypted, to a
# file of its own under PULUMI_HOME/logs (pulumi pkg/logging/encrypted.go, StartLogging; always on in the 3.260.0
# built here, no setting turns it off): at fleet size a quarter of an update's time. Where that path is a regular
# file, the CLI cannot create the folder and runs without it ("automatic logging unavailable": cmd/pulumi/pulumi.go).
AUTOMATIC_LOG = "logs"
# A new fleet's first update: everything but the tenants (`pulumi up` options), with the engine's checkpoints.
PLATFORM_FIRST = ("--exclude", "**gpu-platform:index:TenantQuota**", "--exclude-dependents")


class EngineError(AssertionError):
    """A pulumi command failed (or outlived its bound): the command and the end of what it printed."""


def missing_tools() -> list[str]:
    return [name for name in BINARIES if not os.access(BIN / name, os.X_OK)]


def kubernetes_plugin_version() -> str:
    """The provider version the installed `pulumi_kubernetes` asks the engine for (its pulumi-plugin.json)."""
    plugin = json.loads(resources.files("pulumi_kubernetes").joinpath("pulumi-plugin.json").read_text())
    return plugin["version"]


def _tail(text: str) -> str:
    """The end of a command's output, or its Diagnostics section (what failed) when it has one."""
    if "Diagnostics:" in text:
        text = text.split("Diagnostics:", 1)[1].split("\nOutputs:", 1)[0].split("\nResources:", 1)[0]
    return "\n".join(text.rstrip().splitlines()[-TAIL_LINES:])


# Commands whose engine events are logged (Engine.event_log): what a failure's summary leaves out, and the order
# of steps.
LOGGED = ("up", "refresh", "destroy")


def _failures(events: Path) -> list[str]:
    """From an engine event log: the failed steps, mandatory policy violations, and every error or warning
    diagnostic, ephemeral ones included (what the summary's Diagnostics section leaves out)."""
    found = []
    for line in events.read_text().splitlines() if events.is_file() else ():
        event = json.loads(line)
        if failed := event.get("resOpFailedEvent"):
            found.append(f"step failed: {failed['metadata'].get('op')} {failed['metadata'].get('urn')} "
                         f"(status {failed.get('status')})")
        elif (policy := event.get("policyEvent")) and policy.get("enforcementLevel") == "mandatory":
            found.append(f"policy {policy.get('policyName')} {policy.get('resourceUrn', '')}: "
                         f"{policy.get('message', '').strip()}")
        elif (diagnostic := event.get("diagnosticEvent")) and diagnostic.get("severity") in ("error", "warning"):
            found.append(f"{diagnostic['severity']} {diagnostic.get('urn', '')}: "
                         f"{diagnostic.get('message', '').strip()}")
    return found


@dataclass
class Engine:
    """The engine on one project folder (Pulumi.yaml), with its own home, state and secrets under `folder`."""

    project: Path
    folder: Path
    kubeconfig: Path
    settings: dict[str, str] = field(default_factory=dict)  # more PULUMI_* settings of every command
    logged: tuple[str, ...] = LOGGED  # the commands run with an event log; () runs them as a user types them
    automatic_log: bool = True  # False: its PULUMI_HOME/logs is a regular file, as a fleet's deploy has it

    @classmethod
    def prepare(cls, project: Path, folder: Path, kubeconfig: Path, settings: dict[str, str] | None = None) -> Engine:
        """Create the home and the state folder and install the built Kubernetes provider into that home."""
        engine = cls(project, folder, kubeconfig, settings or {})
        (folder / "home").mkdir(parents=True, exist_ok=True)
        (folder / "state").mkdir(exist_ok=True)
        engine.run("plugin", "install", "resource", "kubernetes", kubernetes_plugin_version(),
                   "--file", str(BIN / "pulumi-resource-kubernetes"), timeout=120)
        return engine

    @property
    def event_log(self) -> Path:
        """The engine's events of the last up, refresh or destroy, one JSON object a line."""
        return self.folder / "events.jsonl"

    @property
    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")},
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(self.folder / "home"),
            "PULUMI_BACKEND_URL": f"file://{self.folder / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            "PULUMI_DEBUG_COMMANDS": "true",  # for `--event-log` (up.go adds it only then)
            # The project's own environment, for programs whose Pulumi.yaml names no virtualenv.
            "PULUMI_PYTHON_CMD": sys.executable,
            "KUBECONFIG": str(self.kubeconfig),
            # Helm's caches and repository config (the provider's releases), kept in the folder too.
            **{f"HELM_{kind}_HOME": str(self.folder / "helm" / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
            "NO_COLOR": "1",
            **self.settings,
        }

    def run(self, *args: str, timeout: float = PREVIEW_SECONDS, check: bool = True) -> subprocess.CompletedProcess:
        logged = args[0] in self.logged
        logs = self.folder / "home" / AUTOMATIC_LOG
        if self.automatic_log and logs.is_file():
            logs.unlink()
        elif not self.automatic_log and not logs.is_file():
            shutil.rmtree(logs, ignore_errors=True)  # this engine's own home
            logs.touch()
        if logged:
            self.event_log.unlink(missing_ok=True)
        command = [str(BIN / "pulumi"), *args, "--non-interactive",
                   *(["--event-log", str(self.event_log)] if logged else [])]
        # Its own process group, so that a command over its bound is stopped with its plugins.
        with subprocess.Popen(command, cwd=self.project, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                stdout, stderr = process.communicate()
                raise EngineError(f"`pulumi {' '.join(args)}` ran over {timeout} s:\n{_tail(stdout + stderr)}") \
                    from None
        result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        if check and result.returncode != 0:
            errors = "\n".join([line for line in result.stdout.splitlines() if "error" in line.lower()]
                              + (_failures(self.event_log) if logged else []))
            raise EngineError(f"`pulumi {' '.join(args)}` exited {result.returncode}:\n{errors}\n"
                              f"{_tail(result.stdout)}\n{_tail(result.stderr)}")
        return result

    def init(self, stack: str, config: dict[str, str] | None = None, secrets: dict[str, str] | None = None) -> None:
        """A new stack on the file backend, with plain and secret config values."""
        self.run("stack", "init", stack)
        for key, value in (config or {}).items():
            self.run("config", "set", key, value)
        for key, value in (secrets or {}).items():
            self.run("config", "set", "--secret", key, value)

    def preview(self, *, expect_no_changes: bool = False, policy_pack: Path | None = None,
                timeout: float = PREVIEW_SECONDS) -> dict[str, Any]:
        """`pulumi preview --json --diff`: the engine's steps (op and URN per resource), summary and diagnostics."""
        args = ["preview", "--json", "--diff", *self._policy(policy_pack)]
        if expect_no_changes:
            args.append("--expect-no-changes")
        result = self.run(*args, check=False, timeout=timeout)
        try:
            report = json.loads(result.stdout)
        except json.JSONDecodeError:
            raise EngineError(f"`pulumi {' '.join(args)}` exited {result.returncode} without a JSON report:\n"
                              f"{_tail(result.stdout)}\n{_tail(result.stderr)}") from None
        if result.returncode != 0:
            errors = [d.get("message", "").rstrip() for d in report.get("diagnostics", [])
                      if d.get("severity") in ("error", "info#err")]
            raise EngineError(f"`pulumi {' '.join(args)}` exited {result.returncode}:\n" + "\n".join(errors)
                              + f"\n{_tail(result.stderr)}")
        return report

    def up(self, *, policy_pack: Path | None = None, check: bool = True,
           timeout: float = UPDATE_SECONDS) -> subprocess.CompletedProcess:
        return self.run("up", "--yes", "--skip-preview", *self._policy(policy_pack), timeout=timeout, check=check)

    def refresh(self, *, expect_no_changes: bool = False) -> subprocess.CompletedProcess:
        return self.run("refresh", "--yes", "--skip-preview",
                        *(["--expect-no-changes"] if expect_no_changes else []), timeout=UPDATE_SECONDS)

    def destroy(self) -> subprocess.CompletedProcess:
        return self.run("destroy", "--yes", "--skip-preview", timeout=UPDATE_SECONDS)

    def export(self, *, show_secrets: bool = False) -> dict[str, Any]:
        """The stack's state as `pulumi stack export` writes it (secrets encrypted, unless shown)."""
        return json.loads(self.run("stack", "export", *(["--show-secrets"] if show_secrets else [])).stdout)

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.run("stack", "output", "--json", "--show-secrets").stdout)

    @staticmethod
    def _policy(pack: Path | None) -> list[str]:
        return ["--policy-pack", str(pack)] if pack else []


def steps(report: dict[str, Any]) -> dict[str, str]:
    """URN -> operation (create, update, replace, delete, same, ...) of a `pulumi preview --json` report."""
    return {step["urn"]: step["op"] for step in report.get("steps", [])}
