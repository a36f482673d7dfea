"""The pack's entry point for `pulumi preview --policy-pack policy`: builds the PolicyPack, which serves it.

The CLI runs this directory as a script, so the project root is put on the path first: the policies share
their well-known keys with the components.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import PolicyPack  # noqa: E402

from policy.rules import POLICIES  # noqa: E402

PolicyPack(name="gpu-platform", policies=POLICIES)
