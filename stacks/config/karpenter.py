"""A pool's Karpenter settings: its limits, zones and node lifetimes."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from stacks.config.fields import StrictModel, field_error


DURATION = r"^(([0-9]+(s|m|h))+|Never)$"  # Karpenter's NillableDuration (pkg/apis/v1/nodepool.go)
_GO_DURATION_NS = 2**63 - 1  # Go's time.ParseDuration: an int64 of nanoseconds, or "invalid duration"
MIN_EXPIRE_AFTER_S = 3600  # a GPU node boots and loads its driver for minutes before it runs a job
AWS_ZONE_LETTERS = "abcdef"  # an availability zone is its region and a letter; none past f (us-east-1 has six)


def _seconds(duration: str) -> int | None:
    """The seconds of a duration of the DURATION format; None for Never."""
    units = {"s": 1, "m": 60, "h": 3600}
    return None if duration == "Never" else sum(int(count) * units[unit]
                                                for count, unit in re.findall(r"([0-9]+)([smh])", duration))


def _go_duration(duration: str) -> str:
    seconds = _seconds(duration)
    if seconds is not None and seconds * 10**9 > _GO_DURATION_NS:
        raise ValueError(f"{duration!r} is longer than Karpenter can read (Go's durations end at about 2562047h); "
                         "write a shorter duration, or Never")
    return duration


class KarpenterPoolConfig(StrictModel):
    """Kubernetes on AWS: the pool is a Karpenter NodePool and EC2NodeClass; Karpenter launches its nodes for pending
    pods, up to maxReplicas, and replaces them by drift when the image changes (components/placements/karpenter.py)."""

    capacity_types: tuple[Literal["on-demand", "spot", "reserved"], ...] = Field(
        default=("on-demand",), min_length=1, description="karpenter.sh/capacity-type values nodes may have")
    zones: tuple[Annotated[str, Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$")], ...] = Field(
        default=(), description="availability zones nodes may launch in; none: every zone of the selected subnets")
    consolidation: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = Field(default="WhenEmpty", description=(
        "WhenEmpty: a node goes only once no pod runs on it; WhenEmptyOrUnderutilized also moves running jobs"))
    consolidate_after: Annotated[str, AfterValidator(_go_duration)] = Field(default="10m", pattern=DURATION,
                                   description="how long a node stays empty (or underused) before it goes")
    disruption_budget: str = Field(default="1", pattern=r"^((100|[0-9]{1,2})%|[0-9]+)$",
                                   description="nodes (or a percentage) disrupted at once, drift replacement included")
    expire_after: Annotated[str, AfterValidator(_go_duration)] = Field(
        default="Never", pattern=DURATION, description="replace every node this long after it launched; Never: keep it")

    @model_validator(mode="after")
    def _check_expiry(self) -> KarpenterPoolConfig:
        seconds = _seconds(self.expire_after)
        if seconds is not None and seconds < MIN_EXPIRE_AFTER_S:
            raise field_error(("expireAfter",), (
                f"{self.expire_after!r} would replace each node about as soon as it has loaded its GPU driver, or "
                f"as it launches; use at least {MIN_EXPIRE_AFTER_S // 3600}h (e.g. 720h), or Never"))
        return self
