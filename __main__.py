"""gpu-platform: validated stack config -> kernel inventory -> GpuPlatform."""

import pulumi

from stacks.program import run

run()
