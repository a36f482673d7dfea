"""gpu-platform: validated stack config -> kernel inventory -> GpuPlatform."""

from stacks.program import run

run()
