"""Every preview in these tests caches base plans in a folder of its own, never in the user's cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def base_plan_cache(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.mktemp("base-plans")
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(folder))
    return folder
