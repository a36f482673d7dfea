"""gpuctl.upgrade: an OpenShift release change the cluster can take, and what it does to drivers."""

from __future__ import annotations

import re

import pytest

from gpuctl.upgrade import refuse_release_change
from stacks.config import ConfigError


def plan(release: str) -> dict:
    return {"resources": [], "outputs": {"release": release}}


@pytest.mark.parametrize(("before", "after", "problem"), [
    ("4.20.8", "4.19.10", "4.20.8 -> 4.19.10 is a downgrade, which OpenShift does not do"),
    ("4.18.24", "4.18.20", "4.18.24 -> 4.18.20 is a downgrade"),
    ("4.18.24", "4.20.8", "4.18.24 -> 4.20.8 skips 4.19: the cluster (an EUS-to-EUS upgrade included) steps "
                          "through 4.19, and its nodes need 4.19's driver on the way")])
def test_a_release_change_the_cluster_cannot_take_in_one_step_is_refused(before, after, problem) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(f"gpu-platform:cluster.release: {problem}")):
        refuse_release_change(plan(before), plan(after))


@pytest.mark.parametrize(("before", "after"), [("4.18.24", "4.18.30"), ("4.18.24", "4.19.10"), ("4.19.10", "4.19.10")])
def test_a_z_stream_or_the_next_minor_goes_ahead(before, after) -> None:
    refuse_release_change(plan(before), plan(after))
