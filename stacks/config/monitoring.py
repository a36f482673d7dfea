"""Monitoring: whether the cluster runs the Prometheus Operator and which labels its rules carry."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StrictBool

from stacks.config.fields import LabelKey, LabelValue, StrictModel, rule_label


class MonitoringConfig(StrictModel):
    """Whether the cluster runs the Prometheus Operator (built into OpenShift; optional on Kubernetes)."""

    prometheus_operator: StrictBool | None = Field(default=None, description="create ServiceMonitor and PrometheusRule")
    rule_labels: dict[Annotated[LabelKey, AfterValidator(rule_label)], LabelValue] = Field(
        default_factory=dict, description="labels the Prometheus that should load the alerts and scrape the exporter "
                                          "selects PrometheusRules and ServiceMonitors by (e.g. release: <name>)")

    def enabled(self, flavor: str) -> bool:
        return self.prometheus_operator if self.prometheus_operator is not None else flavor == "openshift"
