"""What the Pulumi SDK does at every registration that the program does without: walking the Python stack for a
source position, sending its own debug lines to the engine one call at a time, and turning the engine's answer into
outputs for a resource whose outputs the program never reads.

Each is replaced only where the SDK's source is the one read here (its SHA-256): an SDK upgrade keeps the SDK's own
until the new source is read and the digest updated (tests/stacks/test_registration.py says so).
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from typing import Any

from pulumi import log
from pulumi.runtime import resource, rpc
from pulumi.runtime.proto import source_pb2

# Set to `true` under the Pulumi CLI to keep both (`pulumi up --debug` then shows the SDK's lines again).
SDK_DEBUG_ENV = "GPU_PLATFORM_SDK_DEBUG"


def replace_if_read(module: Any, name: str, digest: str, replacement: Callable) -> bool:
    """Set `module.name` to `replacement` if its source is the one whose SHA-256 is `digest`; True if replaced."""
    current = getattr(module, name)
    if current is not replacement:
        if hashlib.sha256(inspect.getsource(current).encode()).hexdigest() != digest:
            return False
        setattr(module, name, replacement)
    return True


# SHA-256 of the source of the SDK's `resource._get_stack_trace` that `no_stack_traces` replaces.
SDK_GET_STACK_TRACE = "3943b2273016925109e1c3a7bc603db06a44ea09ff3494c29544e44bccf8dd1f"


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


def no_stack_traces() -> bool:
    """Replace the SDK's `resource._get_stack_trace` with an empty stack trace; True if replaced.

    At every registration the SDK extracts the whole Python stack (`traceback.extract_stack`) and turns each frame
    of the program's into a source position, a file URI, which the engine keeps in the state to show where a
    resource was declared. Its cost grows with how deep in the program's calls a resource is declared: a tenant's
    quota, four calls under the platform, costs more than a resource of a flat loop. At 10,000 resources it was a
    tenth of a render. Without it the state names no source position; the URN still names each resource.
    """
    return replace_if_read(resource, "_get_stack_trace", SDK_GET_STACK_TRACE, _no_stack_trace)


# SHA-256 of the source of the SDK's `log.debug` that `no_debug_lines` replaces.
SDK_LOG_DEBUG = "381cd6115cca6ca19ddc9416014d9afb086d7b7a9cb3ca8d80f2be24bdb44d6f"


def _no_debug_line(msg: str, resource: Any = None, stream_id: int | None = None,
                   ephemeral: bool | None = None) -> None:
    """The SDK's `log.debug`, dropping the line."""


def no_debug_lines() -> bool:
    """Replace the SDK's `log.debug` with one that drops the line; True if replaced.

    The SDK logs four or more debug lines at each registration ("resource registration prepared", "... successful",
    each output property it translates), and each is a call to the engine that waits for its answer (pulumi
    `log.py`, `_log`: `engine.Log`), whatever the CLI shows: only `pulumi up --debug` displays them. At 300 tenants
    a preview of one tenant added sent 12,092 of them. The program logs no debug lines of its own.
    """
    return replace_if_read(log, "debug", SDK_LOG_DEBUG, _no_debug_line)


def lean_registrations() -> bool:
    """Under the Pulumi CLI: register without the SDK's stack traces and debug lines, unless SDK_DEBUG_ENV is
    `true`; True if both were replaced."""
    if os.environ.get(SDK_DEBUG_ENV, "").lower() == "true":
        return False
    traces, lines = no_stack_traces(), no_debug_lines()
    return traces and lines


# SHA-256 of the sources of the SDK's `rpc.transfer_properties` and `rpc.resolve_outputs` that `unread_outputs` wraps.
SDK_TRANSFER_PROPERTIES = "0e7c02ffa04ff20b31cd58a4829188d173300ed40eae0cb7bb48435121c233d9"
SDK_RESOLVE_OUTPUTS = "18f65c1be3ad95f4d7f679ac3f75c555e3eef738627e50fd0146440477d387e8"
_sdk_transfer_properties = rpc.transfer_properties
_sdk_resolve_outputs = rpc.resolve_outputs


def _transfer_properties(res: Any, props: Any, custom: bool) -> dict[str, Any]:
    """The SDK's, except that a resource whose class sets `outputs_read = False` gets no output properties."""
    if getattr(type(res), "outputs_read", True):
        return _sdk_transfer_properties(res, props, custom)
    return {}


def _resolve_outputs(res: Any, serialized_props: Any, outputs: Any, deps: Any, resolvers: dict[str, Any],
                     custom: bool, *args: Any, **kwargs: Any) -> None:
    """The SDK's, skipped where there is no output to resolve (it would convert the whole answer and keep none)."""
    if resolvers:
        _sdk_resolve_outputs(res, serialized_props, outputs, deps, resolvers, custom, *args, **kwargs)


def unread_outputs() -> bool:
    """Keep no outputs for a resource whose class sets `outputs_read = False` (components/kinds.py); True if both
    SDK functions were replaced.

    For every registered resource the SDK makes an output property (four futures) per input key, and converts the
    engine's whole answer into Python values to resolve them: under the engine, the live object as the API server
    keeps it, with its `managedFields` and `status`. For a resource whose outputs the program never reads that is all
    waste, at a thousand tenants 8,000 times per update. Its URN and ID, which parents and dependencies wait for,
    resolve as before, and a failed registration still fails through them. Each wrapper is harmless alone: without
    output properties the SDK's `resolve_outputs` resolves nothing, and the other skips only when there is nothing to
    resolve.
    """
    transfer = replace_if_read(rpc, "transfer_properties", SDK_TRANSFER_PROPERTIES, _transfer_properties)
    resolve = replace_if_read(rpc, "resolve_outputs", SDK_RESOLVE_OUTPUTS, _resolve_outputs)
    return transfer and resolve
