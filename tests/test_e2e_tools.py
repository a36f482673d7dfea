"""The e2e engine's pins (e2e/tools/*/go.mod) are the release of the locked Python SDK: e2e/test_engine.py checks the
built engine's `pulumi version`; this catches a pin that drifts without building anything."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

[LOCKED] = re.findall(r"(?m)^pulumi==([\d.]+)$", (ROOT / "requirements.lock").read_text())


@pytest.mark.parametrize(("tool", "module"), [("pulumi", "github.com/pulumi/pulumi/pkg/v3"),
                                              ("pulumi", "github.com/pulumi/pulumi/sdk/v3"),
                                              ("pulumi-language-python", "github.com/pulumi/pulumi/sdk/v3")])
def test_the_engine_and_its_language_host_are_pinned_to_the_locked_sdk_release(tool: str, module: str) -> None:
    go_mod = (ROOT / "e2e" / "tools" / tool / "go.mod").read_text()
    assert re.findall(rf"(?m)^\s+{re.escape(module)} (\S+)", go_mod) == [f"v{LOCKED}"]
