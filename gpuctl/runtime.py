"""Runs the real program under the Pulumi SDK's mock runtime, recording every registration as a plan."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import inspect
import json
import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pulumi
from google.protobuf import empty_pb2
from pulumi.output import Unknown
from pulumi.runtime import known_types, mocks, rpc, settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from fleet.kernels import KernelTarget, ObservedNode
from gpuctl.stackfile import StackFile
from stacks.config import PROJECT, load_stack_config
from stacks.part import Selection
from stacks.registration import no_debug_lines, no_stack_traces, replace_if_read, unread_outputs
from stacks.settle import settled

SECRET = "[secret]"
# A key for secret fingerprints: with it, each masked value reads `[secret <8 hex>]`, the start of an
# HMAC-SHA256 of the value under this key. `gpuctl preview` sets a new random key per run for both of its renders,
# so a changed secret shows as changed, and the fingerprint means nothing outside that run (no guessing the value
# by hashing candidates, no linking two runs). Unset: plain `[secret]`, and a render stays deterministic.
FINGERPRINT_KEY_ENV = "GPUCTL_SECRET_FINGERPRINT_KEY"
UNKNOWN = "[unknown]"


class _StateFromInputs(mocks.Mocks):
    """Providers are not called offline: a resource's state is its inputs; provider-computed outputs stay unknown."""

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict]:
        return args.name, args.inputs

    def call(self, args: mocks.MockCallArgs) -> tuple[dict, None]:
        return {}, None


class RecordingMonitor(mocks.MockMonitor):
    """A mock resource monitor that keeps what the engine would see: type, parent, dependencies, options."""

    def __init__(self) -> None:
        super().__init__(_StateFromInputs())
        self.records: list[dict[str, Any]] = []
        self.stack_urn = ""
        self.outputs: dict[str, Any] = {}
        self._strings: dict[str, str] = {}

    def _shared(self, value: Any) -> Any:
        """`value` with each string in it replaced by the one equal string this monitor keeps.

        Resources repeat the same keys, types, URNs and labels thousands of times, and each arrives from the protocol
        buffer as a new string: at 11,000 resources the plan and the mock state held 430,000 strings (58 MB) of
        26,000 distinct values (3.5 MB).
        """
        if isinstance(value, str):
            return self._strings.setdefault(value, value)
        if isinstance(value, dict):
            return {self._strings.setdefault(key, key): self._shared(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._shared(item) for item in value]
        return value

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The URN the engine gives (pkg/resource/deploy, generateURN): the parent's whole qualified type chain
        before the type, none under the root stack; the SDK's mocks keep only the parent's own type, so URNs of
        grandchildren would differ from `pulumi preview`'s and could not be passed to `pulumi up --target`."""
        return engine_urn(pulumi.get_stack(), pulumi.get_project(), parent, type_, name)

    def RegisterResource(self, request):  # noqa: N802 (the gRPC method name)
        urn = self._shared(self.make_urn(request.parent, request.type, request.name))
        if request.type == "pulumi:pulumi:Stack":
            self.stack_urn = urn
            return resource_pb2.RegisterResourceResponse(urn=urn)
        _ensure_event_loop()
        inputs = self._shared(rpc.deserialize_properties(request.object, keep_unknowns=True))
        name = request.name
        resource_id = name if request.custom else ""
        self.records.append({
            "urn": urn,
            "type": self._shared(request.type),
            "name": name,
            "custom": bool(request.custom),
            "parent": self._shared(request.parent) or None,
            "dependencies": self._shared(sorted(set(request.dependencies))),
            # The explicit provider ("<provider urn>::<id>"), None for components and default providers.
            "provider": self._shared(request.provider) or None,
            "inputs": plain(inputs),
            "options": {
                "replaceOnChanges": list(request.replaceOnChanges),
                "deleteBeforeReplace": bool(request.deleteBeforeReplace),
                "protect": bool(request.protect),
                "retainOnDelete": bool(request.retainOnDelete),
                "ignoreChanges": list(request.ignoreChanges),
                "customTimeouts": _timeouts(request),
            },
        })
        self.resources[urn] = mocks.MockMonitor.ResourceRegistration(urn, resource_id, inputs)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=resource_id, object=request.object)

    def RegisterResourceOutputs(self, request):  # noqa: N802
        if request.urn == self.stack_urn:
            _ensure_event_loop()
            self.outputs = plain(rpc.deserialize_properties(request.outputs, keep_unknowns=True))
        return empty_pb2.Empty()


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def engine_urn(stack: str, project: str, parent: str | None, type_: str, name: str) -> str:
    """urn:pulumi:<stack>::<project>::<parent's qualified type>$<type>::<name>, as the engine makes it."""
    if parent:
        qualified = parent.split("::")[2]
        if qualified != ROOT_STACK_TYPE:
            type_ = f"{qualified}${type_}"
    return f"urn:pulumi:{stack}::{project}::{type_}::{name}"


def with_engine_urns(plan: dict[str, Any]) -> dict[str, Any]:
    """A plan rendered before gpuctl made the engine's URNs (its top-level types start "pulumi:pulumi:Stack$"),
    with its URNs, parents, dependencies and provider references rewritten the engine's way; others unchanged."""
    records = plan["resources"]
    if not any(record["urn"].split("::")[2].startswith(f"{ROOT_STACK_TYPE}$") for record in records):
        return plan
    by_urn = {record["urn"]: record for record in records}
    renamed: dict[str, str] = {}

    def rename(urn: str | None) -> str | None:
        if urn is None or urn not in by_urn:
            return urn
        if urn not in renamed:
            record = by_urn[urn]
            stack, project = urn.split("::")[0].removeprefix("urn:pulumi:"), urn.split("::")[1]
            renamed[urn] = engine_urn(stack, project, rename(record["parent"]) or record["parent"], record["type"],
                                      record["name"])
        return renamed[urn]

    def provider(reference: str | None) -> str | None:
        if not reference:
            return reference
        urn, _, resource_id = reference.rpartition("::")
        return f"{rename(urn)}::{resource_id}"

    return {**plan, "resources": [
        {**record, "urn": rename(record["urn"]), "parent": rename(record["parent"]),
         "dependencies": sorted(rename(urn) for urn in record["dependencies"]),
         "provider": provider(record.get("provider"))} for record in records]}


def _timeouts(request) -> dict[str, str]:
    """The resource's customTimeouts (create, update, delete) that are set, as Go durations."""
    timeouts = request.customTimeouts
    return {op: getattr(timeouts, op) for op in ("create", "update", "delete") if getattr(timeouts, op)}


def plain(value: Any) -> Any:
    """JSON-ready copy of deserialized inputs: secrets masked, unknowns marked."""
    if rpc.is_rpc_secret(value):
        return _masked(value["value"])
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, Unknown):
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf carries every number as a double
    return value


def _masked(value: Any) -> Any:
    """A secret keeps its shape (so manifests still validate) but every value in it is masked."""
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    key = os.environ.get(FINGERPRINT_KEY_ENV)
    if not key:
        return SECRET
    digest = hmac.new(key.encode(), json.dumps(value, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    return f"[secret {digest[:8]}]"


@contextlib.contextmanager
def fingerprinted_secrets() -> Iterator[None]:
    """Renders inside (this process's and its children's) fingerprint secrets under one new random key."""
    previous = os.environ.get(FINGERPRINT_KEY_ENV)
    os.environ[FINGERPRINT_KEY_ENV] = secrets.token_hex(32)
    try:
        yield
    finally:
        if previous is None:
            del os.environ[FINGERPRINT_KEY_ENV]
        else:
            os.environ[FINGERPRINT_KEY_ENV] = previous


_NOT_YET = object()  # stands in for the root stack until run_in_stack registers the real one


def _settled(program: Callable[[], Any]) -> Callable[[], Any]:
    """`program`, then a wait until every registration and output it started has finished, all at once
    (stacks/settle.py: the SDK's own final wait is quadratic)."""
    async def run() -> None:
        result = program()
        if inspect.isawaitable(result):
            await result
        await settled()

    return run


# SHA-256 of the source of the SDK's `rpc.contains_unknowns` that `acyclic_contains_unknowns` replaces.
SDK_CONTAINS_UNKNOWNS = "1f1f335b6f48b96055607dbb5be2e53b1163e35ec88704c89a41271070017cc8"


def _contains_unknowns(value: Any, seen: set[int]) -> bool:
    """The SDK's `contains_unknowns`, answer for answer: an unknown anywhere in nested dicts and lists."""
    if known_types.is_unknown(value):
        return True
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        # value[key], not value.values(): the SDK's input types are dicts whose properties may be named "values"
        return any(_contains_unknowns(value[key], seen) for key in value)
    if isinstance(value, list):
        return any(_contains_unknowns(item, seen) for item in value)
    return False


def _acyclic(value: Any) -> bool:
    return _contains_unknowns(value, set())


def acyclic_contains_unknowns() -> bool:
    """Replace the SDK's `rpc.contains_unknowns` with the same test written without a closure; True if replaced.

    The SDK's defines a recursive inner function on every call, and a function that refers to itself is a
    reference cycle: with the collector off (`one_shot_collector`) every call's function, cell and annotations
    stay until exit. A render calls it about 45 times a resource: at 11,000 resources that was 497,000 cycles and
    about 170 MB of peak memory. The replacement is made only where the SDK's source is the one read here (an
    upgrade keeps the SDK's own until this is looked at again; a test says so).
    """
    return replace_if_read(rpc, "contains_unknowns", SDK_CONTAINS_UNKNOWNS, _acyclic)


def run_program(stack: str, config: dict[str, Any], secret_keys: list[str], program: Callable[[], Any]) -> dict:
    """Run `program` as stack `stack` with this config, under the mock runtime, and return the plan."""
    acyclic_contains_unknowns()
    no_stack_traces()
    no_debug_lines()
    unread_outputs()
    settings.SETTINGS.rpc_manager.clear()  # what a failed earlier run left, cleared as `pulumi.runtime.test` clears it
    settings.SETTINGS.outputs.clear()
    monitor = RecordingMonitor()
    # Without a root resource, set_mocks registers a throwaway root stack and sends its empty outputs
    # asynchronously; that stack has the real one's URN, so its outputs could land last and wipe the program's.
    settings.ROOT.set(_NOT_YET)
    pulumi.runtime.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=True, monitor=monitor)
    settings.ROOT.set(None)  # run_in_stack makes the root stack, exactly as under the Pulumi CLI
    pulumi.runtime.set_all_config(
        {key: value if isinstance(value, str) else json.dumps(value) for key, value in config.items()},
        secret_keys)
    _sync_await(run_in_stack(_settled(program)))
    return {
        "project": PROJECT,
        "stack": stack,
        "resources": sorted(monitor.records, key=lambda record: record["urn"]),
        "outputs": monitor.outputs,
    }


def render_plan(stack_file: StackFile, observed: list[ObservedNode] | None = None, *,
                online: bool = False, previous: list[KernelTarget] | None = None,
                part: Selection | None = None) -> dict[str, Any]:
    """Run the program for this stack; config errors surface as ConfigError before any resource registers.

    Online, a stack that enables discovery reads its GPU nodes live when no node list was given. Kernels of
    `previous` (an earlier revision's) keep their drivers unless a node inventory shows no node on them. With
    `part`, only those tenants register (and everything else). The plan's `tenantInputs` hold, for every tenant,
    the digest of its inputs and the names of its components (`gpuctl preview` reuses a base's tenants by them).
    """
    from stacks.program import build  # the providers load only for commands that run the program

    built = []
    plan = run_program(stack_file.stack, stack_file.config, stack_file.secret_keys,
                       lambda: built.append(build(load_stack_config(), observed, discover=online,
                                                  previous=previous or (), part=part)))
    plan["tenantInputs"] = {inputs.name: {"digest": inputs.digest, "resources": inputs.roots}
                            for inputs in built[0].tenant_inputs}
    return plan
