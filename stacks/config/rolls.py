"""How a pool rolls its nodes onto a new layout or image."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, model_validator

from stacks.config.fields import Int, StrictModel


class RollConfig(StrictModel):
    """Kubernetes: how an Auto Scaling Group replaces its nodes when its launch template changes (an instance refresh).

    Field meanings and AWS bounds: pulumi_aws autoscaling GroupInstanceRefreshPreferencesArgs (StartInstanceRefresh).
    Each node is drained before it terminates: the pool's termination lifecycle hook holds it for at most
    `drainTimeoutSeconds` (its heartbeat timeout, at most 7200 s) while the node termination handler drains it.
    """

    min_healthy_percentage: Int = Field(default=90, ge=0, le=100, description="capacity kept in service")
    max_healthy_percentage: Int = Field(default=100, ge=100, le=200, description="over 100: launch before terminate")
    checkpoints: tuple[Annotated[Int, Field(ge=1, le=100)], ...] = Field(
        default=(25, 50, 100), min_length=1, description="percentages replaced before each pause; ends at 100")
    checkpoint_delay_seconds: Int = Field(default=600, ge=0, le=172_800, description="pause at each checkpoint")
    instance_warmup_seconds: Int = Field(default=300, ge=0, le=3600, description="a new node's time to become ready")
    drain_timeout_seconds: Int = Field(default=1800, ge=60, le=7200, description="longest a node's drain may take")
    auto_rollback: StrictBool = Field(default=False, description="AWS rolls back to the previous template if it fails")

    @model_validator(mode="after")
    def _check(self) -> RollConfig:
        points = self.checkpoints
        if list(points) != sorted(set(points)) or points[-1] != 100:
            raise ValueError(f"checkpoints {list(points)} must rise strictly and end at 100 (every node replaced), "
                             "e.g. [25, 50, 100]")
        if not 0 < self.max_healthy_percentage - self.min_healthy_percentage <= 100:
            raise ValueError(f"maxHealthyPercentage {self.max_healthy_percentage} must exceed minHealthyPercentage "
                             f"{self.min_healthy_percentage} by 1 to 100 (AWS), or no node can be replaced")
        return self
