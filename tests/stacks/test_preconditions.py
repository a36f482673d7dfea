"""The CRDs a stack uses but does not install, checked against a stand-in API server on 127.0.0.1."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from stacks.config import parse_stack_config
from stacks.preconditions import (
    CERT_MANAGER,
    MACHINE_API,
    NODE_TUNING,
    OLM,
    PROMETHEUS_OPERATOR,
    PreconditionError,
    check_crds,
    required_crds,
)
from tests.conftest import config_values
from tests.loopback import closed_port
from tests.stacks.test_discovery import CRD_PREFIX, StandInApi, api, discovery, kubeconfig  # noqa: F401 (fixture)

ALL = OLM + MACHINE_API + PROMETHEUS_OPERATOR


def config(stack: str, **changes: Any):
    values = config_values(stack)
    for key, value in changes.items():
        values[key] = value
    return parse_stack_config(values)


def names(preconditions) -> set[str]:
    return {precondition.name for precondition in preconditions}


def test_openshift_needs_olm_and_the_machine_api_and_its_built_in_prometheus() -> None:
    assert names(required_crds(config("dev"))) >= names(OLM + MACHINE_API + PROMETHEUS_OPERATOR)


def test_queue_mode_on_openshift_checks_for_cert_manager_only_where_it_uses_the_clusters() -> None:
    assert not names(required_crds(config("dev", tenancy={"mode": "queue"}))) & names(CERT_MANAGER)
    assert names(required_crds(config("dev", tenancy={"mode": "queue", "certManager": "existing"}))) >= names(
        CERT_MANAGER)


def test_prometheus_operator_crds_follow_the_monitoring_switch() -> None:
    assert names(required_crds(config("prod"))) == names(PROMETHEUS_OPERATOR)
    assert required_crds(config("prod", monitoring={"prometheusOperator": False})) == ()
    assert not names(required_crds(config("dev", monitoring={"prometheusOperator": False}))) & names(
        PROMETHEUS_OPERATOR)


def test_every_custom_resource_of_a_shipped_stack_has_its_crd_installed_or_checked(dev_plan, prod_plan) -> None:
    """Custom resources of groups the stack installs (the GPU Operator's, NFD's) wait for their install in the
    graph; every other one's CRD is a precondition the live check names."""
    installed = {"nvidia.com", "nfd.openshift.io"}
    builtin = {"core", "apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "scheduling.k8s.io",
               "admissionregistration.k8s.io", "helm.sh", "policy", "node.k8s.io", "coordination.k8s.io"}
    for stack, plan in (("dev", dev_plan), ("prod", prod_plan)):
        checked = {(p.group, p.kind) for p in required_crds(config(stack))}
        for resource in plan.resources:
            if not resource["type"].startswith("kubernetes:"):
                continue
            _, api_version, kind = resource["type"].split(":")
            group = api_version.split("/")[0]
            if group in builtin or group in installed:
                continue
            assert (group, kind) in checked, f"{stack}: {kind} ({group}) is neither installed nor checked"


def test_present_crds_pass_with_one_get_each(api: StandInApi, tmp_path: Path) -> None:
    api.crds = names(ALL)

    check_crds(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")), ALL)

    assert sorted(urlsplit(path).path for path, _ in api.requests) == sorted(CRD_PREFIX + n for n in names(ALL))


def test_missing_crds_are_named_with_their_fix(api: StandInApi, tmp_path: Path) -> None:
    api.crds = names(OLM + MACHINE_API)

    with pytest.raises(PreconditionError) as raised:
        check_crds(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")), ALL)

    message = str(raised.value)
    assert "prometheusrules.monitoring.coreos.com (PrometheusRule)" in message
    assert "servicemonitors.monitoring.coreos.com (ServiceMonitor)" in message
    assert "subscriptions" not in message
    assert "install the Prometheus Operator" in message and "monitoring.prometheusOperator: false" in message
    assert message.count("install the Prometheus Operator") == 1 and "\n" not in message


def test_tuning_crds_name_their_fix(api: StandInApi, tmp_path: Path) -> None:
    with pytest.raises(PreconditionError, match="tuneds.tuned.openshift.io .*remove profile from the pools"):
        check_crds(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")), NODE_TUNING)


def test_nothing_to_check_reads_nothing(tmp_path: Path) -> None:
    check_crds(discovery(tmp_path / "absent"), ())


@pytest.mark.parametrize(("fault", "problem"), [
    ("401", "401 Unauthorized"),
    ("403", "get on customresourcedefinitions"),
    ("500", "answered 500"),
    ("hang", "did not answer the CRD check within 0.5s"),
])
def test_faults_stop_the_check(api: StandInApi, tmp_path: Path, fault: str, problem: str) -> None:
    api.fault = fault
    started = time.monotonic()

    with pytest.raises(PreconditionError) as raised:
        check_crds(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab"), timeout_seconds=0.5), ALL)

    assert problem in str(raised.value) and api.url in str(raised.value) and "\n" not in str(raised.value)
    assert time.monotonic() - started < 4  # one deadline for all the reads; without one a hung read takes 5 s


def test_unreachable_server(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    with pytest.raises(PreconditionError, match=rf"could not reach the API server at {url}"):
        check_crds(discovery(kubeconfig(tmp_path / "config", {"lab": url}, "lab")), ALL)


def test_a_proxy_page_is_not_taken_for_the_crds(api: StandInApi, tmp_path: Path) -> None:
    """A sign-in page answered with 200 says nothing about the CRDs: only the CRD itself shows it is there."""
    api.crds = names(ALL)
    api.fault = "html"

    with pytest.raises(PreconditionError) as raised:
        check_crds(discovery(kubeconfig(tmp_path / "config", {"lab": api.url}, "lab")), ALL)

    assert "not that CustomResourceDefinition" in str(raised.value) and "server URL" in str(raised.value)
