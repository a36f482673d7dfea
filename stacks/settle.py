"""The program's last step: wait for every registration and output it started, all at once.

The SDK's own final wait (pulumi/runtime/stack.py, `wait_for_rpcs`) takes the outputs still pending and waits for
the first of them to finish, over and over: each round costs the number still pending, and registrations finish a
few at a time, so a program of thousands of resources pays quadratically. Under the Pulumi CLI, where the engine
answers the registrations at its own pace, that wait took most of the program's CPU time at 1,000 tenants
(docs/performance.md). Once this has returned, the SDK's wait finds each output done and visits it once.
"""

from __future__ import annotations

import asyncio

from pulumi.runtime import settings


async def settled() -> None:
    """Return once every output and registration the program started has finished. Failures stay where the SDK's
    own wait finds and raises them, as before."""
    while pending := [task for task in (*settings.SETTINGS.outputs, *settings._get_rpc_manager().rpcs)
                      if not task.done()]:
        await asyncio.wait(pending)
