"""The NVIDIA driver: its branch and how it is built for the nodes' kernels."""

from __future__ import annotations

from pydantic import Field, StrictBool, model_validator

from components import labels
from fleet.kernels import DriverRelease
from stacks.config.fields import Int, StrictModel


class DriverConfig(StrictModel):
    """The NVIDIA data-center driver: branch and version, where its images live, and how nodes take a new one."""

    branch: str = Field(default="580", pattern=r"^[0-9]{3}$")
    version: str = Field(default="580.95.05", pattern=r"^[0-9]{3}\.[0-9]+(\.[0-9]+)?$")
    repository: str = Field(default=labels.NVIDIA_REGISTRY, pattern=r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$")
    precompiled: StrictBool | None = Field(default=None, description="precompiled images (default on Kubernetes); else "
                                                               "built on the node (OpenShift: Driver Toolkit)")
    max_parallel_upgrades: Int = Field(default=1, ge=1, le=100)
    max_unavailable: str = Field(default="25%", pattern=r"^([1-9][0-9]{0,3}|[1-9][0-9]?%|100%)$")
    drain: StrictBool = Field(default=False, description="drain every pod off a node, not only GPU pods, before its "
                                                   "driver is reloaded")

    @model_validator(mode="after")
    def _check(self) -> DriverConfig:
        if "version" in self.model_fields_set and not self.version.startswith(f"{self.branch}."):
            raise ValueError(f"version {self.version!r} is not on branch {self.branch!r}; set both together")
        return self

    def check_for(self, precompiled: bool) -> None:
        """A precompiled driver is the newest build of its branch NVIDIA publishes for each kernel (the operator's
        tag rule): a version set for one would change nothing, silently. A driver built on the node is one version."""
        if precompiled and "version" in self.model_fields_set:
            raise ValueError("driver.version changes nothing for precompiled drivers, which run the newest build of "
                             "driver.branch published for each kernel; remove version, or set driver.precompiled: "
                             "false to build that version on the nodes")
        if not precompiled and not self.version.startswith(f"{self.branch}."):
            raise ValueError(f"driver.version: a driver built on the node is one version of branch {self.branch!r}; "
                             f"set driver.version to it (e.g. {self.branch}.xx.yy)")

    def release(self, flavor: str) -> DriverRelease:
        """The driver images: precompiled by default on Kubernetes, built on the node (Driver Toolkit) on OpenShift."""
        precompiled = self.precompiled if self.precompiled is not None else flavor == "kubernetes"
        return DriverRelease(self.repository, self.branch, self.version, precompiled)
